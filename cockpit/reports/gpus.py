"""`cockpit gpus`: one line per GPU, what each holds and who uses it; on a cluster, grouped by node.

A cluster's samples carry their node's host and a global index (node rank x GPUs per node + the
local index); each node is shown under a heading with its totals and its GPUs by their LOCAL
index, the number that node's own `nvidia-smi` prints. The grouping and the heading are shared
with the screen's GPU panes (cockpit/faces/tui/widgets/gpu_pane.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cockpit.telemetry.base import NA_NAME, GpuSample

GIB = 2**30
NO_SAMPLES = "no samples (agent not answering)"
VENDOR = "NVIDIA "  # "NVIDIA H200" reads as "H200" in a heading that already says what it is


def _na(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _answered(s: GpuSample) -> bool:
    """Whether anything was read from this GPU; an agent that is down gives samples of n/a only."""
    readings = (s.memory_used, s.memory_total, s.power_w, s.power_limit_w, s.utilization, s.temperature_c)
    return bool(s.processes) or any(r is not None for r in readings)


def _total(values: Iterable[float | None]) -> float | None:
    """The sum of the known values; None when none is known (n/a, never a made-up 0)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass(frozen=True)
class NodeGroup:
    """One node's samples, in index order: `number` counts from 1 in index order (node rank + 1)."""

    number: int
    host: str
    samples: tuple[GpuSample, ...]
    per_node: int  # GPUs per node: a global index modulo this is the node's own index

    @property
    def answered(self) -> bool:
        return any(_answered(s) for s in self.samples)

    def local(self, sample: GpuSample) -> int:
        return sample.index % self.per_node

    def gpu_name(self) -> str:
        names = Counter(s.name for s in self.samples if s.name and s.name != NA_NAME)
        if not names:
            return "GPU"
        name = names.most_common(1)[0][0]
        return name.removeprefix(VENDOR) or name

    def heading(self) -> list[str]:
        """node 1, gpu-a, 8 x H200, 312/1128 GiB, 180 W: the parts of its heading, most needed first
        for a narrow screen to keep; a node that gave nothing says so instead of n/a everywhere."""
        title = f"node {self.number}"
        if not self.answered:
            return [title, f"{self.host}: {NO_SAMPLES}"]
        used = _total(s.memory_used for s in self.samples)
        total = _total(s.memory_total for s in self.samples)
        memory = f"{_na(used and used / GIB, '.0f')}/{_na(total and total / GIB, '.0f')} GiB"
        power = f"{_na(_total(s.power_w for s in self.samples), '.0f')} W"
        return [title, self.host, f"{len(self.samples)} x {self.gpu_name()}", memory, power]


def by_node(samples: Sequence[GpuSample]) -> list[NodeGroup]:
    """The samples grouped by node in the order their indexes come; [] for one box (no sample has a node)."""
    if not any(s.node for s in samples):
        return []
    groups: dict[str, list[GpuSample]] = {}
    for s in sorted(samples, key=lambda s: s.index):
        groups.setdefault(s.node, []).append(s)
    per_node = max(len(g) for g in groups.values())
    return [
        NodeGroup(number, host, tuple(group), per_node)
        for number, (host, group) in enumerate(groups.items(), start=1)
    ]


def gpu_line(s: GpuSample, index: int | None = None) -> str:
    """GPU 0  NVIDIA H200  47.2/141.0 GiB  312/700 W ...; `index` the one to print (a node's own)."""
    used = _na(s.memory_used / GIB if s.memory_used is not None else None, ".1f")
    total = _na(s.memory_total / GIB if s.memory_total is not None else None, ".1f")
    power = f"{_na(s.power_w, '.0f')}/{_na(s.power_limit_w, '.0f')} W"
    procs = ", ".join(f"{p.pid} {p.name} {p.used_bytes / GIB:.1f} GiB" for p in s.processes) or "idle"
    shown = s.index if index is None else index
    return (
        f"GPU {shown}  {s.name}  {used}/{total} GiB  {power}  util {_na(s.utilization, '.0f')}%  "
        f"{_na(s.temperature_c, '.0f')} C  {procs}"
    )


def gpu_lines(samples: Iterable[GpuSample]) -> list[str]:
    """One line per GPU; a field the source could not read shows as n/a. On a cluster, a heading per
    node and its GPUs by local index under it; a node whose agent gave nothing is its heading alone."""
    samples = list(samples)
    groups = by_node(samples)
    if not groups:
        return [gpu_line(s) for s in samples]
    lines = []
    for group in groups:
        lines.append("  ".join(group.heading()))
        if group.answered:
            lines += [f"  {gpu_line(s, group.local(s))}" for s in group.samples]
    return lines
