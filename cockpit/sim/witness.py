"""The simulated box's own speed: a witness the planner does not share (docs/simulator.md#a-box-with-its-own-truth).

Tests that compare cockpit's predictions with the simulator prove little when the simulator paces
itself by the planner's own model: the planner is then right by construction. The witness is a
second step-time model, written apart from ``cockpit.core.perfmodel`` and differing from it in
form, not only in constants: every part is a separate term with its own numbers, and a truth file
can bend each one (collective floors and bandwidth, MoE kernel efficiency by batch, per-step,
per-layer and per-layout overheads, prefill). Where measured kernels cover the layout
(``cockpit.kernels``, AIConfigurator's tables), the engine paces from them instead, bent the same
way. It reads only placement facts (the planned memory, ``stage_weights``, the model's shapes, the
hardware catalog); it never calls the planner's step or prefill, and neither the planner nor the
calibration ever read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from cockpit.core.errors import CockpitError, shown
from cockpit.core.fitting import RESERVE_OFFSET_RANGE_GIB, WEIGHTS_FACTOR_RANGE
from cockpit.core.layout import parse_layout
from cockpit.core.perfmodel import Calibration, PerfModel, for_verdict
from cockpit.core.planner import Learned, Setup, Verdict, plan_layout, stage_weights
from cockpit.core.speed import KernelTimes, SpeedSource

from .pacers import PaceChoice, PerfPacer, PoolCapacity

PACES = ("kernels", "witness", "planner")

# The witness's own defaults: a plausible box, near the planner's defaults but its own numbers.
BANDWIDTH_SHARE = {"rtx-pro-6000": 0.64, "cpu": 0.5}  # achieved share of peak memory bandwidth
DEFAULT_BANDWIDTH_SHARE = 0.78
LAYER_OVERHEAD_US = {"rtx-pro-6000": 55.0, "b200": 22.0, "cpu": 900.0}  # launches per layer, with graphs
DEFAULT_LAYER_OVERHEAD_US = 25.0
STEP_OVERHEAD_MS = {"cpu": 7.0}  # scheduling, sampling, detokenising: once a step, whatever the depth
DEFAULT_STEP_OVERHEAD_MS = 2.5
EAGER_FACTOR = 2.5  # launches from the CPU without a CUDA graph, against the graph's replay
DECODE_FLOPS_SHARE = 0.55  # dense GEMMs at a large decode batch
PREFILL_FLOPS_SHARE = 0.45
PREFILL_OVERHEAD_MS = 1.0  # per chunk: the prefill's own scheduling and its extra launches
ROUTING_SPREAD = 2.0  # the busiest EP rank's experts sit this many binomial deviations above the mean


@dataclass(frozen=True)
class Bend:
    """How a truth bends the witness. ``None``: the witness's own default for the box."""

    collective_floor_us: float = 0.0  # added to every collective call
    collective_latency_scale: float = 1.0  # multiplies the link's small-message latency
    collective_bw_scale: float = 1.0  # multiplies the link's bus bandwidth
    moe_efficiency: Mapping[int, float] = field(default_factory=dict)  # by batch; empty: 1.0
    bandwidth_share: float | None = None
    step_overhead_ms: float | None = None
    layer_overhead_us: float | None = None
    eager_factor: float | None = None
    layout_overhead_ms: Mapping[str, float] = field(default_factory=dict)  # canonical layout -> ms
    prefill_flops_share: float | None = None
    prefill_overhead_ms: float | None = None

    def moe_efficiency_at(self, batch: int) -> float:
        """The MoE kernels' efficiency at ``batch``, interpolated in log batch between the table's
        points and flat beyond its ends."""
        table = sorted(self.moe_efficiency.items())
        if not table:
            return 1.0
        if batch <= table[0][0]:
            return table[0][1]
        for (b0, e0), (b1, e1) in zip(table, table[1:], strict=False):
            if batch <= b1:
                t = (math.log(batch) - math.log(b0)) / (math.log(b1) - math.log(b0))
                return e0 + t * (e1 - e0)
        return table[-1][1]

    def to_json(self) -> dict[str, Any]:
        """The bends a truth set (the defaults left out), for /cockpit/truth."""
        out: dict[str, Any] = {}
        for name, default in _BEND_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value
        return out


_BEND_DEFAULTS: dict[str, Any] = {
    f.name: f.default_factory() if f.default is MISSING else f.default  # type: ignore[operator]
    for f in fields(Bend)
}
# (least, most, whether the least is allowed): overheads may be 0, shares at most 1, factors above 0.
_BEND_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "collective_floor_us": (0.0, 1e6, True),
    "collective_latency_scale": (0.0, 1e3, False),
    "collective_bw_scale": (0.0, 1e3, False),
    "bandwidth_share": (0.0, 1.0, False),
    "step_overhead_ms": (0.0, 1e5, True),
    "layer_overhead_us": (0.0, 1e6, True),
    "eager_factor": (1.0, 1e3, True),
    "prefill_flops_share": (0.0, 1.0, False),
    "prefill_overhead_ms": (0.0, 1e5, True),
}
TRUTH_KEYS = ("pace", "bend", "calibration", "reserve_offset_gib", "weights_factor")
EXAMPLE = "{pace: witness, bend: {collective_floor_us: 20}, reserve_offset_gib: 4, weights_factor: 1.05}"


@dataclass(frozen=True)
class Truth:
    """A simulated box's own truth (``COCKPIT_SIM_TRUTH``): which truth paces the engine and how it
    is bent, and the memory facts the engine plans by (the planner's ``Learned`` seam)."""

    pace: str | None = None  # PACES; None: measured kernels where they cover the box, else the witness
    bend: Bend = field(default_factory=Bend)
    calibration: Mapping[str, Any] = field(default_factory=dict)  # the planner's constants (pace: planner)
    reserve_offset_gib: float = 0.0
    weights_factor: float = 1.0

    @property
    def learned(self) -> Learned:
        """What the engine plans with: its memory, and under ``pace: planner`` its speed."""
        return Learned(
            runs=0,
            calibration=dict(self.calibration),
            reserve_offset_gib=self.reserve_offset_gib,
            weights_factor=self.weights_factor,
        )

    @classmethod
    def parse(cls, data: Any, source: str) -> Truth:
        """A truth from its mapping (a YAML file's contents, or a test's dict); ``source`` names
        where it came from. Anything unknown or out of range is one line (CockpitError)."""
        fix = f"fix {source} or unset COCKPIT_SIM_TRUTH"
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise CockpitError(f"COCKPIT_SIM_TRUTH: {source} must be a mapping like {EXAMPLE}: {fix}")
        if unknown := sorted(str(k) for k in data if k not in TRUTH_KEYS):
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: unknown key {shown(unknown[0])} in {source}: "
                f"known are {', '.join(TRUTH_KEYS)}; {fix}"
            )
        pace = data.get("pace")
        if pace is not None and pace not in PACES:
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: pace in {source} is one of {', '.join(PACES)}, got {shown(pace)}: {fix}"
            )
        calibration = data.get("calibration") or {}
        if not isinstance(calibration, Mapping):
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: calibration in {source} maps constants to numbers, like {{eta_bw: 0.5}}: {fix}"
            )
        Calibration().overridden(calibration, f"COCKPIT_SIM_TRUTH {source}", fix)  # known names, sane ranges
        return cls(
            pace=pace,
            bend=_parse_bend(data.get("bend"), source, fix),
            calibration=dict(calibration),
            reserve_offset_gib=_number(data, "reserve_offset_gib", 0.0, RESERVE_OFFSET_RANGE_GIB, fix),
            weights_factor=_number(data, "weights_factor", 1.0, WEIGHTS_FACTOR_RANGE, fix),
        )


def _number(
    data: Mapping[str, Any], key: str, default: float, bounds: tuple[float, float], fix: str
) -> float:
    value = data.get(key, default)
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise CockpitError(
            f"COCKPIT_SIM_TRUTH: {key} must be a number from {low:g} to {high:g}, got {shown(value)}: {fix}"
        )
    return float(value)


def _parse_bend(raw: Any, source: str, fix: str) -> Bend:
    if raw is None:
        return Bend()
    if not isinstance(raw, Mapping):
        raise CockpitError(
            f"COCKPIT_SIM_TRUTH: bend in {source} maps parts to numbers, like {{collective_floor_us: 20}}: {fix}"
        )
    if unknown := sorted(str(k) for k in raw if k not in _BEND_DEFAULTS):
        raise CockpitError(
            f"COCKPIT_SIM_TRUTH: unknown bend {shown(unknown[0])} in {source}: "
            f"known are {', '.join(_BEND_DEFAULTS)}; {fix}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "moe_efficiency":
            values[key] = _moe_table(value, fix)
        elif key == "layout_overhead_ms":
            values[key] = _layout_table(value, fix)
        else:
            values[key] = _bend_number(key, value, fix)
    return Bend(**values)


def _bend_number(key: str, value: Any, fix: str) -> float:
    low, high, low_ok = _BEND_BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CockpitError(f"COCKPIT_SIM_TRUTH: bend {key} needs a number, got {shown(value)}: {fix}")
    if not ((value >= low if low_ok else value > low) and value <= high):  # refuses nan and inf too
        least = f"{low:g} or more" if low_ok else f"above {low:g}"
        raise CockpitError(
            f"COCKPIT_SIM_TRUTH: bend {key} must be {least} and at most {high:g}, got {shown(value)}: {fix}"
        )
    return float(value)


def _moe_table(value: Any, fix: str) -> dict[int, float]:
    example = "{1: 0.5, 32: 0.8, 256: 1.0}"
    if not isinstance(value, Mapping) or not value:
        raise CockpitError(
            f"COCKPIT_SIM_TRUTH: bend moe_efficiency maps batch sizes to efficiencies, like {example}: {fix}"
        )
    table: dict[int, float] = {}
    for batch, eff in value.items():
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: bend moe_efficiency's batch sizes are whole numbers from 1, got {shown(batch)}: {fix}"
            )
        if isinstance(eff, bool) or not isinstance(eff, (int, float)) or not 0 < eff <= 1:
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: bend moe_efficiency at {batch} must be above 0 and at most 1, got {shown(eff)}: {fix}"
            )
        table[batch] = float(eff)
    return table


def _layout_table(value: Any, fix: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise CockpitError(
            f'COCKPIT_SIM_TRUTH: bend layout_overhead_ms maps layouts to milliseconds, like {{"tp8 ep": 3}}: {fix}'
        )
    table: dict[str, float] = {}
    for text, ms in value.items():
        try:
            layout = str(parse_layout(str(text)))
        except (CockpitError, ValueError):
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: bend layout_overhead_ms: {shown(text)} is not a layout like 'tp8 ep': {fix}"
            ) from None
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= 1e5:
            raise CockpitError(
                f"COCKPIT_SIM_TRUTH: bend layout_overhead_ms for {layout} must be 0 or more milliseconds, got {shown(ms)}: {fix}"
            )
        table[layout] = float(ms)
    return table


# -- the witness's step -------------------------------------------------------------------------


class Witness(PoolCapacity):
    """The simulated engine's own step times (the batcher's Pacer). Its capacity is the planned
    layout's (``PoolCapacity``); its speed is its own, bent by ``bend``; with ``kernels`` its
    decode steps and prefill come from measured kernels, times what the bends change of its own."""

    def __init__(
        self,
        perf: PerfModel,
        bend: Bend | None = None,
        kernels: KernelTimes | None = None,
        pace: PaceChoice | None = None,
    ) -> None:
        super().__init__(perf, pace or PaceChoice("witness", "the simulator's own step model"))
        self.perf = perf  # its placement facts and capacity; never its step or prefill
        self.bend = bend or Bend()
        self.kernels = kernels
        self.model, self.hardware, self.placement = perf.model, perf.hardware, perf.placement
        self.memory = perf.memory
        self.graph_max_bs = perf.graph_max_bs
        gpu = self.hardware.gpu.key
        b = self.bend
        self._bandwidth = (
            self.hardware.gpu.mem_bw_gbs
            * 1e9
            * _given(b.bandwidth_share, BANDWIDTH_SHARE.get(gpu, DEFAULT_BANDWIDTH_SHARE))
        )
        self._layer_s = (
            _given(b.layer_overhead_us, LAYER_OVERHEAD_US.get(gpu, DEFAULT_LAYER_OVERHEAD_US)) * 1e-6
        )
        self._step_s = _given(b.step_overhead_ms, STEP_OVERHEAD_MS.get(gpu, DEFAULT_STEP_OVERHEAD_MS)) * 1e-3
        self._eager = _given(b.eager_factor, EAGER_FACTOR)
        self._layout_s = b.layout_overhead_ms.get(str(self.placement.layout), 0.0) * 1e-3
        self._prefill_share = _given(b.prefill_flops_share, PREFILL_FLOPS_SHARE)
        self._prefill_chunk_s = _given(b.prefill_overhead_ms, PREFILL_OVERHEAD_MS) * 1e-3

    # -- the pacer --------------------------------------------------------------------------

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        per_replica = math.ceil(batch / self._independent)
        if self.kernels is not None:
            own = self.kernels.decode_step_s(per_replica, context_tokens) * self._decode_bent(
                per_replica, context_tokens
            )
        else:
            own = self._decode_s(per_replica, context_tokens)
        return own + self._layout_s

    def prefill_time_s(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        tokens = self.replica_share(tokens)  # each replica computes its share, side by side
        if self.kernels is not None:
            return self.kernels.prefill_s(tokens) * self._prefill_bent(tokens)
        return self._prefill_s(tokens)

    # -- decode -----------------------------------------------------------------------------

    def _decode_s(self, batch: int, context: float) -> float:
        """One replica's decode step: the stages in a pipeline, and the per-step overhead once."""
        pp = max(1, self.placement.pp)
        if pp == 1:
            return self._stage_s(batch, context) + self._head_s + self._step_s
        # A pipeline fills and drains: m microbatches take m + pp - 1 stage times, each hop a send.
        micro_count = min(batch, pp)
        micro = math.ceil(batch / micro_count)
        stages = (micro_count + pp - 1) * self._stage_s(micro, context)
        hops = (pp - 1) * micro_count * self._call(2, micro * self.model.hidden * 2)
        return stages + micro_count * self._head_s + hops + self._step_s

    def _stage_s(self, batch: int, context: float) -> float:
        """One stage's decode work on its busiest GPU: separate terms, added."""
        stage = self._stage
        layers = int(stage["_stage_layers"])
        local = math.ceil(batch / self._replica_count)  # sequences on one attention replica
        dense_bytes = stage["attention"] + stage["dense+shared"] + stage["other"]
        flops = 2 * self.model.active_params / self.placement.attn_tp * local * layers / self.model.layers
        dense = max(dense_bytes / self._bandwidth, flops / (self._peak * DECODE_FLOPS_SHARE))
        moe = 0.0
        if stage["experts"]:
            read = stage["experts"] * self._experts_touched(batch)
            moe = read / (self._bandwidth * self.bend.moe_efficiency_at(batch))
        kv = local * context * self.memory.kv_bytes_per_token / self._bandwidth
        collectives = layers * self._layer_calls(batch, local)
        eager = self.graph_max_bs == 0 or local > self.graph_max_bs
        launches = layers * self._layer_s * (self._eager if eager else 1.0)
        return dense + moe + kv + collectives + launches

    def _experts_touched(self, batch: int) -> float:
        """Share of the busiest GPU's experts a step of ``batch`` reads: each local expert is hit
        with probability 1 - (1 - k/E)^batch, and the busiest rank sits ROUTING_SPREAD binomial
        deviations above the mean of its EP group."""
        moe = self.model.moe
        if moe is None:
            return 0.0
        ep = max(1, self.placement.moe_ep)
        local = moe.experts / ep
        hit = 1 - (1 - moe.experts_per_token / moe.experts) ** batch
        mean = local * hit
        spread = ROUTING_SPREAD * math.sqrt(local * hit * (1 - hit)) if ep > 1 else 0.0
        return min(1.0, (mean + spread) / local)

    def _layer_calls(self, batch: int, local: int) -> float:
        """Collectives of one layer: the attention's two all-reduces over its TP group, and with
        DP attention the MoE's dispatch and combine over the expert group."""
        p, hidden = self.placement, self.model.hidden
        seconds = 0.0
        if p.attn_tp > 1:
            seconds += 2 * self._call(p.attn_tp, local * hidden * 2)
        group = p.moe_ep * p.moe_tp
        if self.model.moe is not None and group > p.attn_tp:
            seconds += 2 * self._call(group, batch * hidden * 2)
        return seconds

    def _call(self, n: int, nbytes: float) -> float:
        """One collective call: a latency floor, then the bytes over the bus bandwidth."""
        if n <= 1:
            return 0.0
        link, b = self.hardware.link, self.bend
        floor = link.allreduce_latency(n) * b.collective_latency_scale + b.collective_floor_us
        return floor * 1e-6 + nbytes / (link.allreduce_busbw(n) * 1e9 * b.collective_bw_scale)

    # -- prefill ----------------------------------------------------------------------------

    def _prefill_s(self, tokens: int) -> float:
        """A chunk of ``tokens`` prompt tokens: compute-bound at its own efficiency (the weights
        read once as its floor), the layers' collectives on the chunk, the launches, and a fixed
        cost per chunk."""
        flops = 2 * self.model.active_params * tokens / self.placement.attn_tp
        compute = flops / (self._peak * self._prefill_share)
        weights = self._weights_read / self._bandwidth
        p, hidden = self.placement, self.model.hidden
        calls = 2 * self._call(p.attn_tp, tokens * hidden * 2) if p.attn_tp > 1 else 0.0
        return max(compute, weights) + self.model.layers * (calls + self._layer_s) + self._prefill_chunk_s

    # -- measured kernels, bent ---------------------------------------------------------------

    @cached_property
    def _unbent(self) -> Witness:
        return Witness(self.perf, Bend())

    @cached_property
    def _bent(self) -> bool:
        """Whether any bend is set: unbent, kernel times stand as they are (every step asks)."""
        return self.bend != Bend()

    def _decode_bent(self, batch: int, context: float) -> float:
        """What the bends (but the per-layout overhead, added apart) change of the witness's own step."""
        if not self._bent:
            return 1.0
        plain = self._unbent._decode_s(batch, context)
        return self._decode_s(batch, context) / plain if plain > 0 else 1.0

    def _prefill_bent(self, tokens: int) -> float:
        if not self._bent:
            return 1.0
        plain = self._unbent._prefill_s(tokens)
        return self._prefill_s(tokens) / plain if plain > 0 else 1.0

    # -- facts of the placement -----------------------------------------------------------------

    @cached_property
    def _stage(self) -> dict[str, float]:
        """One GPU of the heaviest pipeline stage, by byte group."""
        return max(
            stage_weights(self.model, self.placement),
            key=lambda s: sum(v for k, v in s.items() if not k.startswith("_")),
        )

    @cached_property
    def _weights_read(self) -> float:
        """Bytes one GPU of each stage holds, over all stages: a prefill reads every stage in turn."""
        return sum(
            sum(v for k, v in s.items() if not k.startswith("_"))
            for s in stage_weights(self.model, self.placement)
        )

    @cached_property
    def _head_s(self) -> float:
        return self.model.class_bytes("lm_head") / self.placement.lm_head_tp / self._bandwidth

    @cached_property
    def _independent(self) -> int:
        """Replicas that share nothing: plain data parallel, or DP of a dense model."""
        p = self.placement
        if p.attn_replicas <= 1:
            return 1
        if self.model.moe is None or p.moe_ep * p.moe_tp < p.attn_tp * p.attn_replicas:
            return p.attn_replicas
        return 1

    @property
    def _replica_count(self) -> int:
        """Attention replicas inside one independent replica (DP attention): they split a step."""
        return max(1, self.placement.attn_replicas // self._independent)

    @cached_property
    def _peak(self) -> float:
        flops = self.hardware.gpu.flops_tflops
        method = self.model.quant.method
        dtype = "fp8" if method.startswith("fp8") else ("fp4" if method in ("nvfp4", "mxfp4") else "bf16")
        return (flops.get(dtype) or flops.get("bf16", 100.0)) * 1e12


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


# -- which truth paces ------------------------------------------------------------------------


def measured_kernels(setup: Setup, verdict: Verdict, box_version: str) -> KernelTimes | SpeedSource:
    """Measured kernel times for the layout (``cockpit.kernels``), or a source that says why not.
    Imported only here, when an engine starts: the library is an extra and loads its tables."""
    try:
        from cockpit.kernels import measured_kernels as kernels_for
    except ImportError as exc:
        return SpeedSource(
            "analytic", note=f"measured kernels are not installed ({exc.name or 'cockpit.kernels'})"
        )
    assert verdict.placement is not None
    server = verdict.server or setup.server
    return kernels_for(
        setup.model,
        setup.hardware,
        setup.engine.name,
        verdict.placement,
        box_version,
        kv_cache_dtype=server.kv_cache_dtype,
    )


def pace_for(setup: Setup, verdict: Verdict, truth: Truth, box_version: str = "") -> PerfPacer | Witness:
    """The pacer of a layout the engine has planned (``setup`` already carries the truth's
    ``learned``): the planner's model, measured kernels bent by the witness, or the witness.
    Its ``pace`` says which, and ``token_budget`` is the step's token budget."""
    perf = for_verdict(replace(setup, speed=None), verdict)
    if perf is None:
        raise CockpitError(
            f"the layout {verdict.layout} does not start ({verdict.headline}): nothing to pace"
        )
    if truth.pace == "planner":
        return PerfPacer(perf)
    note = "pace: witness in the truth file"
    if truth.pace in (None, "kernels"):
        found = measured_kernels(setup, verdict, box_version or setup.engine.version)
        if not isinstance(found, SpeedSource):
            return Witness(
                perf,
                truth.bend,
                kernels=found,
                pace=PaceChoice("kernels", f"{found.source.label}{_bent(truth.bend)}"),
            )
        note = f"measured kernels cannot pace it: {found.note or found.label}"
    detail = f"the simulator's own step model{_bent(truth.bend)}; {note}"
    return Witness(perf, truth.bend, pace=PaceChoice("witness", detail))


def _bent(bend: Bend) -> str:
    bends = bend.to_json()
    return f", bent by {', '.join(f'{k}={v}' for k, v in bends.items())}" if bends else ""


def witness_for(setup: Setup, verdict: Verdict, truth: Truth, box_version: str = "") -> PerfPacer | Witness:
    """The pacer the simulated engine would serve ``verdict``'s layout with under ``truth``, with no
    process: the layout planned again with the truth's memory facts (as the engine plans), its
    ``token_budget`` for ``cockpit.sim.measure.closed_loop``. For calibration tests that need
    "measurements" from a truth."""
    truth_setup = replace(
        setup, learned=truth.learned, calibration={**setup.calibration, **truth.calibration}
    )
    return pace_for(truth_setup, plan_layout(truth_setup, verdict.layout), truth, box_version)
