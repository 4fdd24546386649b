"""Predicted against measured: what the planner said before a launch beside what the engine and
the GPUs then showed, for `cockpit results`, `cockpit plan` and the layout picker.

Both sides are put in the planner's terms so they compare figure by figure: weights and KV
cache in GiB on one GPU (the busiest for weights, as vLLM's "Model loading took" is the busiest
rank's), KV tokens over the whole server. The engines log one attention replica's pool (vLLM's
"GPU KV cache size: N tokens" comes from each data-parallel engine core,
vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity; SGLang's "KV Cache is allocated. #tokens"
from each scheduler, sglang/srt/mem_cache/memory_pool.py), so a measured pool counts once per
replica, as the planner counts it (docs/memory.md). tok/s compares per level at the point's own
request lengths, against what was predicted for those lengths when the layout was launched; a
level sent open-loop (Poisson arrivals at a rate) is shown but compared with nothing: its
throughput is about the rate offered, while every prediction is for C requests always in flight.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.errors import CockpitError
from cockpit.core.fitting import open_loop
from cockpit.core.layout import parse_layout
from cockpit.core.planner import GiB, Learned, MemoryEstimate, Setup
from cockpit.store.calibration import Key
from cockpit.store.journal import BenchPoint, Experiment, Journal, default_path


@dataclass(frozen=True)
class Memory:
    """One side of a memory comparison; a figure nobody knows stays None."""

    weights_gib: float | None = None  # on the busiest GPU
    kv_gib: float | None = None  # the KV cache on one GPU
    kv_tokens: int | None = None  # over the whole server (every attention replica)
    graph_gib: float | None = None  # CUDA graphs on one GPU

    @property
    def known(self) -> bool:
        return any(v is not None for v in (self.weights_gib, self.kv_gib, self.kv_tokens, self.graph_gib))

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "weights_gib": _round(self.weights_gib),
            "kv_gib": _round(self.kv_gib),
            "kv_tokens": self.kv_tokens,
            "graph_gib": _round(self.graph_gib),
        }

    def over(self, predicted: Memory) -> dict[str, float | None]:
        """Each figure measured over predicted, where both are known."""
        return {
            "weights_gib": ratio(self.weights_gib, predicted.weights_gib),
            "kv_gib": ratio(self.kv_gib, predicted.kv_gib),
            "kv_tokens": ratio(self.kv_tokens, predicted.kv_tokens),
            "graph_gib": ratio(self.graph_gib, predicted.graph_gib),
        }


def memory_of(estimate: MemoryEstimate | None) -> Memory:
    """The planner's estimate (a verdict's), as one side of the comparison."""
    if estimate is None:
        return Memory()
    return Memory(estimate.weights_gib, estimate.kv_budget_gib, estimate.kv_tokens, estimate.graph_gib)


def predicted_memory(exp: Experiment) -> Memory:
    """What the planner predicted for this launch (its memory estimate, journaled at launch)."""
    memory = exp.prediction.memory
    if memory is None:
        return Memory()
    return Memory(memory.weights_gib, memory.kv_budget_gib, memory.kv_tokens, memory.graph_gib)


def measured_memory(exp: Experiment) -> Memory:
    """What the engine logged for this launch: weights on its busiest rank, KV memory and tokens on
    its smallest (the one that bounds the batch), the pool counted once per attention replica."""
    facts = exp.launch_facts
    tokens = facts.kv_tokens
    return Memory(
        facts.weights_gib,
        facts.kv_memory_gib,
        tokens * replicas(exp.layout) if tokens is not None else None,
        facts.graph_gib,
    )


def replicas(layout: str) -> int:
    """The attention replicas of a journaled layout: its data-parallel size on both engines
    (cockpit.engines vllm/sglang placements); 1 for a layout this cockpit no longer reads."""
    try:
        return parse_layout(layout, stored=True).dp
    except CockpitError:
        return 1


def peak_gib(exp: Experiment) -> dict[int, float]:
    """The most memory NVML saw in use on each GPU while the experiment ran."""
    return {gpu: used / GiB for gpu, used in sorted(exp.peak_memory.items())}


def predicted_tok_s(exp: Experiment, point: BenchPoint) -> float | None:
    """What was predicted at launch for this point's lengths and concurrency; None where nothing
    was predicted for them (another in/out than the profile's, or a launch before predictions
    were journaled) and for an open-loop level, which no closed-loop prediction compares with."""
    if point.input_len is None or point.output_len is None or open_loop(point):
        return None
    return exp.prediction.tok_s_at(point.input_len, point.output_len, point.concurrency)


def learned_runs(exp: Experiment) -> int | None:
    """How many runs the prediction at launch was calibrated from; None when not journaled."""
    return exp.prediction.learned_runs


def ratio(measured: float | None, predicted: float | None) -> float | None:
    """measured / predicted, rounded for reading; None where either is unknown or nothing was predicted."""
    if measured is None or predicted is None or predicted <= 0:
        return None
    return round(measured / predicted, 3)


def calibration_mark(learned: Learned) -> str:
    """How the predictions were made: "calibrated from 3 runs" on this box, or "default"."""
    if learned.runs <= 0:
        return "default"
    return f"calibrated from {learned.runs} run" + ("s" if learned.runs != 1 else "")


def prediction_basis(setup: Setup) -> str:
    """The end of `cockpit plan`'s last line: whether its predictions learned from this box."""
    if setup.learned.runs > 0:
        return (
            f"{calibration_mark(setup.learned)} on this box ({setup.hardware.gpu.key}, {setup.engine.label})"
        )
    return "with its default constants (nothing learned on this box yet)"


MEASURED_NOTE = (
    "last measured: the newest launch of each layout on this host with this GPU type, engine and model "
    "(weights per GPU and KV tokens as the engine logged them, the best tok/s benchmarked)"
)


# -- the newest measurements of each layout on this box ----------------------------------------


@dataclass(frozen=True)
class Box:
    """Which journaled launches are this box's: the same host and model on the calibration box
    (GPU type, engine, simulated or real alike: a simulated run on this host measured the
    simulator, not the GPUs), whichever version of the engine ran them."""

    key: Key
    host: str
    model: str

    @classmethod
    def of(cls, setup: Setup, host: str, simulated: bool = False) -> Box:
        return cls(Key.of(setup, simulated), host, setup.model_path)

    def holds(self, exp: Experiment) -> bool:
        return (exp.host, exp.model) == (self.host, self.model) and self.key.holds(exp, any_version=True)


@dataclass(frozen=True)
class LastMeasured:
    """A layout's newest numbers on this box: memory from the newest launch whose engine logged it,
    tok/s from the newest one benchmarked (often the same launch)."""

    layout: str
    memory: Memory = field(default_factory=Memory)
    memory_experiment: int | None = None
    peak_gib: dict[int, float] = field(default_factory=dict)
    load_seconds: float | None = None
    points: dict[int, BenchPoint] = field(default_factory=dict)  # concurrency -> the good point
    points_experiment: int | None = None

    @property
    def best(self) -> BenchPoint | None:
        return max(self.points.values(), key=lambda p: p.output_tok_s, default=None)

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "memory": self.memory.to_json(),
            "memory_experiment": self.memory_experiment,
            "peak_gib": {str(gpu): _round(used) for gpu, used in self.peak_gib.items()},
            "load_seconds": _round(self.load_seconds),
            "tok_s": {str(c): _round(p.output_tok_s) for c, p in sorted(self.points.items())},
            "best_tok_s": _round(best.output_tok_s) if best else None,
            "best_concurrency": best.concurrency if best else None,
            "tok_s_experiment": self.points_experiment,
        }


@dataclass(frozen=True)
class Against:
    """What the picker sets beside a layout's predictions: how they were made (`calibration_mark`)
    and the layout's newest numbers on this box, if any. Predicted tok/s are for the profile's
    request lengths, so only levels measured at those lengths compare with them."""

    basis: str  # "calibrated from 3 runs" or "default"
    last: LastMeasured | None = None
    lengths: tuple[int, int] | None = None  # (input, output) tokens the predictions are for
    speed: str = ""  # which source predicted them, in a few words (cockpit.core.speed.SpeedSource.short)

    def comparable(self, point: BenchPoint) -> bool:
        """Measured at the predictions' lengths and closed-loop, as they are made."""
        return (
            self.lengths is not None
            and (point.input_len, point.output_len) == self.lengths
            and not open_loop(point)
        )


def last_measured(journal: Journal, box: Box) -> dict[str, LastMeasured]:
    """Each layout this box measured, newest first: one pass over the journal, so a caller reads it
    once per refresh and keeps the answer."""
    memory: dict[str, Experiment] = {}
    benched: dict[str, tuple[int, dict[int, BenchPoint]]] = {}
    for exp in journal.experiments():  # newest first
        if not box.holds(exp) or (exp.layout in memory and exp.layout in benched):
            continue
        if exp.layout not in memory and measured_memory(exp).known:
            memory[exp.layout] = exp
        if exp.layout not in benched:
            good = _last_per_level(journal.points(exp.id))
            if good:
                benched[exp.layout] = (exp.id, good)
    out = {}
    for layout in dict.fromkeys([*memory, *benched]):
        source = memory.get(layout)
        points_experiment, points = benched.get(layout, (None, {}))
        out[layout] = LastMeasured(
            layout,
            measured_memory(source) if source else Memory(),
            source.id if source else None,
            peak_gib(source) if source else {},
            source.load_seconds if source else None,
            points,
            points_experiment,
        )
    return out


def measured_here(
    setup: Setup, host: str | None = None, simulated: bool = False
) -> tuple[dict[str, LastMeasured], str]:
    """`last_measured` from the user's journal for this box (its simulated launches with
    ``simulated``), and a note when it could not be read. Without a journal there is nothing
    measured, and none is made for asking."""
    path = default_path()
    if not path.exists():
        return {}, ""
    try:
        with Journal(path) as journal:
            return last_measured(journal, Box.of(setup, host or socket.gethostname(), simulated)), ""
    except CockpitError as err:
        return {}, f"no last-measured column: {err}"


def _round(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


def _last_per_level(points: list[BenchPoint]) -> dict[int, BenchPoint]:
    """Each level's last point that did not fail; one with failed requests or another client's
    load only where the level has no clean one."""
    kept: dict[int, BenchPoint] = {}
    for point in points:  # oldest first
        if point.failed:
            continue
        old = kept.get(point.concurrency)
        if old is None or not _flawed(point) or _flawed(old):
            kept[point.concurrency] = point
    return kept


def _flawed(point: BenchPoint) -> bool:
    return bool(point.errors) or bool(point.extra.get("contended"))
