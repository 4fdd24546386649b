"""`cockpit gpus`: one line per GPU, what each holds and who uses it."""

from __future__ import annotations

from collections.abc import Iterable

from cockpit.telemetry.base import GpuSample


def _na(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def gpu_lines(samples: Iterable[GpuSample]) -> list[str]:
    """One line per GPU; a field the source could not read shows as n/a."""
    gib = 2**30
    lines = []
    for s in samples:
        used = _na(s.memory_used / gib if s.memory_used is not None else None, ".1f")
        total = _na(s.memory_total / gib if s.memory_total is not None else None, ".1f")
        power = f"{_na(s.power_w, '.0f')}/{_na(s.power_limit_w, '.0f')} W"
        procs = ", ".join(f"{p.pid} {p.name} {p.used_bytes / gib:.1f} GiB" for p in s.processes) or "idle"
        lines.append(
            f"GPU {s.index}  {s.name}  {used}/{total} GiB  {power}  util {_na(s.utilization, '.0f')}%  "
            f"{_na(s.temperature_c, '.0f')} C  {procs}"
        )
    return lines
