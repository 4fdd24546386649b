"""What a box taught the planner: a few constants fitted from its journaled launches.

Pure: launches come in (what the engine logged, what the benchmark measured), a
``planner.Learned`` comes out; ``cockpit.store.calibration`` reads the journal and keeps the result per
(GPU type, engine, engine version, simulated or not). The fit is made against the setup being
planned, so every launch's prediction is recomputed by today's planner with the default
``Learned`` (never the one journaled at the time, which already held older lessons), and only
launches whose argv that setup would launch again are used: a run under other server arguments
(another memory fraction, another context length) says nothing about these constants.

- Memory (docs/memory.md#what-a-box-teaches): ``weights_factor``, the median of logged over
  modelled weights, only when it is clearly off (more than 1%); then ``reserve_offset_gib``, the
  median of modelled minus logged KV cache memory per GPU once the weights are corrected. Both
  are the model's (its activations, its kernels' layouts), kept per model on the box. The KV
  memory is the logged GiB where the engine gives one: vLLM's "Available KV cache memory: X GiB"
  (vllm/v1/worker/gpu_worker.py), SGLang's "K size: X GB, V size: Y GB" of the pool
  (sglang/srt/mem_cache/memory_pool.py, read into ``kv_memory_gib``); else SGLang's pool
  "#tokens: N" times the model's KV bytes per token. A pool capped by --max-total-tokens says
  nothing of the memory left, whichever way it was logged. One launch with a logged number is
  enough: each is a direct reading. vLLM's pipeline layouts are left out (``fit_memory``).
- Speed (docs/performance.md#what-a-box-teaches): ``eta_bw`` (the achieved share of memory
  bandwidth: the bytes term of every decode step, which shrinks with TP) and ``t_layer_us`` (the
  per-layer floor of kernel launches and syncs: the same on every TP size), from good points of
  at least two layouts (different parallel sizes) and four in all: one layout alone cannot tell
  a faster card from a slower launch. From three layouts measured at four concurrencies or more,
  the parts whose form differs between boxes too (``FORM_PARAMETERS``): the collectives' floor
  and bandwidth, the routed experts' kernels and their batch dependence, the pipeline's
  efficiency, prefill, and a residual by batch; each only where the data has that part (a
  layout with collectives, a MoE model, a pipeline). Where measured kernels predicted a layout,
  their one factor ``kernel_scale`` instead. The fit minimises the mean absolute log error of
  predicted against measured output tok/s (robust: an outlier moves it less than a squared
  error would) plus a pull toward the defaults, by Nelder-Mead in the unit cube of the ranges
  (``search``). Failed and client-limited levels never count: they measure
  the client or a broken run, not the server; nor do levels a simulated engine could not pace
  (``engine_fell_behind``); nor do open-loop levels (Poisson arrivals at a
  rate), whose throughput is the offered rate, not what the server can do at C in flight. A
  constant the profile sets itself is not fitted: the profile's word wins over what was
  learned (``perfmodel.for_verdict``).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cockpit.core.errors import CockpitError
from cockpit.core.perfmodel import PerfModel, calibration_for, for_verdict
from cockpit.core.planner import GiB, Learned, MemoryEstimate, Setup, Verdict, plan_layout
from cockpit.core.records import LaunchFacts
from cockpit.core.secrets import redact_argv


@dataclass(frozen=True)
class Parameter:
    """A speed constant the fit may move: its bounds, and whether it is searched on a log scale
    (a factor: halving and doubling are as far) or a straight one (a time, an exponent)."""

    low: float
    high: float
    log: bool = False

    def at(self, u: float) -> float:
        """The value at ``u`` in [0, 1] of the range."""
        u = min(1.0, max(0.0, u))
        if self.log:
            return self.low * (self.high / self.low) ** u
        return self.low + (self.high - self.low) * u

    def where(self, value: float) -> float:
        """Where ``value`` sits in the range, 0 to 1."""
        value = min(self.high, max(self.low, value))
        if self.log:
            return math.log(value / self.low) / math.log(self.high / self.low)
        return (value - self.low) / (self.high - self.low)


# The speed constants fitted, with the bounds of the search (docs/performance.md#what-a-box-teaches).
# Bytes over bandwidth and the per-layer floor: two layouts of different sizes tell them apart.
SPEED_PARAMETERS: dict[str, Parameter] = {
    "eta_bw": Parameter(0.1, 1.0),
    "t_layer_us": Parameter(0.0, 1000.0),
}
# The parts whose form differs between boxes: the collectives' floor and bandwidth, the routed
# experts' kernels and their batch dependence, prefill, and a residual by batch. Fitted only from
# FORM_LAYOUTS layouts measured at FORM_LEVELS concurrencies or more: fewer cannot tell them apart
# from the two above.
FORM_PARAMETERS: dict[str, Parameter] = {
    "ar_latency_scale": Parameter(0.1, 20.0, log=True),
    "ar_bw_scale": Parameter(0.05, 4.0, log=True),
    "moe_scale": Parameter(0.25, 4.0, log=True),
    "moe_batch_exp": Parameter(-1.0, 1.0),
    "step_batch_exp": Parameter(-0.5, 0.5),
    "prefill_scale": Parameter(0.2, 10.0, log=True),
    "t_prefill_ms": Parameter(0.0, 50.0),
    "eta_pp": Parameter(0.2, 1.0),
}
# Measured kernels' step times are fitted as one factor, whatever the layout.
KERNEL_PARAMETERS: dict[str, Parameter] = {"kernel_scale": Parameter(0.2, 5.0, log=True)}
MIN_SPEED_LAYOUTS = 2  # parallel layouts with good points: one cannot tell bandwidth from launches
MIN_SPEED_POINTS = 4  # good benchmark levels in all
FORM_LAYOUTS = 3
FORM_LEVELS = 4  # distinct concurrencies: a batch dependence needs a few
MIN_KERNEL_POINTS = 2  # one factor: two levels of any layout
WEIGHTS_TOLERANCE = 0.01  # logged weights within 1% of the model: the model stands
# A pull toward the defaults: the squared distance moved (in shares of each range) costs this
# much mean log error, so a constant the data barely speaks for stays near its default.
PRIOR_WEIGHT = 0.02
SEARCH_TOLERANCE = 1e-3  # of each range: where the simplex stops shrinking
SEARCH_ROUNDS = 2  # restarts from the best point: the simplex collapses early on kinks
SEARCH_EVALUATIONS = 60  # per constant and round: a fit of a dozen levels well under a second
MISSING_PREDICTION = 10.0  # the log error of a level the model cannot predict (a layout it says fails)
# What a memory correction can be: a repacked layout changes weights by tens of percent, not 4x,
# and no GPU holds a TiB. A reading outside is a misread log, not a lesson; the store refuses
# such values too (the simulated box's truth takes the same ranges).
WEIGHTS_FACTOR_RANGE = (0.25, 4.0)
RESERVE_OFFSET_RANGE_GIB = (-1024.0, 1024.0)


class Launched(Protocol):
    """A journaled launch as the fit reads it (``cockpit.store.journal.Experiment`` is one)."""

    @property
    def layout(self) -> str: ...

    @property
    def argv(self) -> Sequence[str]: ...

    @property
    def facts(self) -> Mapping[str, Any]:
        """What the engine logged, as journaled: read through ``LaunchFacts.sound``."""
        ...


class Measured(Protocol):
    """A benchmark level as the fit reads it (``cockpit.store.journal.BenchPoint`` is one)."""

    @property
    def concurrency(self) -> int: ...

    @property
    def output_tok_s(self) -> float: ...

    @property
    def input_len(self) -> int | None: ...

    @property
    def output_len(self) -> int | None: ...

    @property
    def failed(self) -> bool: ...

    @property
    def client_limited(self) -> bool: ...

    @property
    def errors(self) -> int: ...

    @property
    def duration_s(self) -> float | None: ...

    @property
    def extra(self) -> Mapping[str, Any]: ...


Run = tuple[Launched, Sequence[Measured]]


@dataclass(frozen=True)
class MemoryFit:
    weights_factor: float | None  # None: no weights logged
    reserve_offset_gib: float | None  # None: no KV cache logged
    used: frozenset[int]  # indices of the runs it read


@dataclass(frozen=True)
class SpeedFit:
    calibration: dict[str, float]
    used: frozenset[int]


@dataclass(frozen=True)
class Fitted:
    """What one fit taught, part by part: the store keeps memory per model and speed per box,
    so it needs to know which part the data spoke for. ``learned``: the whole, ``prior`` filling
    in a part without data."""

    prior: Learned
    memory: MemoryFit | None  # None: no launch logged a memory number
    speed: SpeedFit | None  # None: too little to tell the speed constants apart

    @property
    def weights_factor(self) -> float:
        found = self.memory.weights_factor if self.memory else None
        return self.prior.weights_factor if found is None else found

    @property
    def reserve_offset_gib(self) -> float:
        found = self.memory.reserve_offset_gib if self.memory else None
        return self.prior.reserve_offset_gib if found is None else found

    @property
    def learned(self) -> Learned:
        if self.memory is None and self.speed is None:
            return self.prior
        used = (self.memory.used if self.memory else frozenset()) | (
            self.speed.used if self.speed else frozenset()
        )
        return Learned(
            runs=len(used),
            calibration=self.speed.calibration if self.speed else dict(self.prior.calibration),
            reserve_offset_gib=self.reserve_offset_gib,
            weights_factor=self.weights_factor,
        )


def fit(setup: Setup, runs: Sequence[Run], prior: Learned | None = None) -> Learned:
    """What ``runs`` teach about the box ``setup`` plans for. A part with too little data keeps
    ``prior``'s (what was learned before: for speed perhaps from another model on the same box)."""
    return fit_parts(setup, runs, prior).learned


def fit_parts(setup: Setup, runs: Sequence[Run], prior: Learned | None = None) -> Fitted:
    """``fit``, part by part."""
    prior = prior or Learned()
    verdicts: dict[str, Verdict | None] = {}  # runs repeat layouts: each planned once
    comparable = [(i, run) for i, run in enumerate(runs) if replanned(setup, run[0], verdicts)]
    memory = fit_memory(setup, comparable, prior.weights_factor)
    fitted = Fitted(prior, memory, None)
    learned_memory = Learned(
        reserve_offset_gib=fitted.reserve_offset_gib, weights_factor=fitted.weights_factor
    )
    return replace(fitted, speed=fit_speed(replace(setup, learned=learned_memory), comparable))


def _plans(setup: Setup) -> Callable[[str], Verdict]:
    """``plan_layout`` for one setup, each layout planned once: runs repeat layouts."""
    planned: dict[str, Verdict] = {}

    def plan(layout: str) -> Verdict:
        if layout not in planned:
            planned[layout] = plan_layout(setup, layout)
        return planned[layout]

    return plan


# -- which runs speak for this setup ----------------------------------------------------------


def replanned(setup: Setup, launched: Launched, verdicts: dict[str, Verdict | None] | None = None) -> bool:
    """Whether ``setup`` would launch this run's layout with the argv it was launched with
    (launcher words and port aside); a layout that no longer parses would not be. ``verdicts``:
    the layouts planned so far, kept across calls (many launches share a layout)."""
    verdicts = {} if verdicts is None else verdicts
    if launched.layout not in verdicts:
        try:
            verdicts[launched.layout] = plan_layout(setup, launched.layout)
        except CockpitError:
            verdicts[launched.layout] = None
    verdict = verdicts[launched.layout]
    return verdict is not None and launched_as_planned(setup, verdict, launched.argv)


def launched_as_planned(setup: Setup, verdict: Verdict, argv: Sequence[str]) -> bool:
    """The journaled argv ends with the words the planner gives this layout today: the model,
    the parallel flags and the server arguments. The launcher (a venv's path, the simulator's
    wrapper) and the port may differ: they change where it ran, not how it served."""
    if not verdict.argv or not argv:
        return False
    launcher = len(setup.command or setup.engine.default_command)
    ours = _server_words(redact_argv(verdict.argv)[launcher:])
    theirs = list(argv)
    return len(theirs) >= len(ours) and _server_words(theirs[len(theirs) - len(ours) :]) == ours


def _server_words(words: Sequence[str]) -> list[str]:
    masked = list(words)
    for i, word in enumerate(masked[:-1]):
        if word == "--port":
            masked[i + 1] = "*"
    return masked


# -- memory -------------------------------------------------------------------------------------


def fit_memory(
    setup: Setup, runs: Sequence[tuple[int, Run]], weights_factor: float = 1.0
) -> MemoryFit | None:
    """Weights factor and reserve offset from what the engine logged; None without any number.
    ``weights_factor``: the one learned before, which corrects the weights when none was logged.
    A reading outside WEIGHTS_FACTOR_RANGE or RESERVE_OFFSET_RANGE_GIB is a misread log: left out."""
    plan = _plans(replace(setup, learned=Learned()))
    ratios: list[tuple[int, float]] = []  # (run, logged / modelled weights)
    kv: list[tuple[int, MemoryEstimate, float]] = []  # (run, the model's memory, logged KV GiB per GPU)
    for index, (launched, _) in runs:
        verdict = plan(launched.layout)
        memory = verdict.memory
        if memory is None or _one_stage_logged(setup, verdict):
            continue
        facts = LaunchFacts.sound(launched.facts)
        if facts.weights_gib is not None and memory.weights_gib > 0:
            ratio = facts.weights_gib / memory.weights_gib
            if _within(ratio, WEIGHTS_FACTOR_RANGE):
                ratios.append((index, ratio))
        measured = logged_kv_gib(facts, verdict)
        if measured is not None:
            kv.append((index, memory, measured))
    factor = statistics.median(r for _, r in ratios) if ratios else None
    if factor is not None and abs(factor - 1.0) <= WEIGHTS_TOLERANCE:
        factor = 1.0
    # The KV budget is what weights and reserve leave: corrected weights first, the rest is reserve.
    scale = (weights_factor if factor is None else factor) - 1.0
    offsets = [(i, m.kv_budget_gib - m.weights_gib * scale - measured) for i, m, measured in kv]
    offsets = [(i, o) for i, o in offsets if _within(o, RESERVE_OFFSET_RANGE_GIB)]
    if not ratios and not offsets:
        return None
    offset = round(statistics.median(o for _, o in offsets), 3) if offsets else None
    used = frozenset(i for i, _ in ratios) | frozenset(i for i, _ in offsets)
    return MemoryFit(None if factor is None else round(factor, 4), offset, used)


def _one_stage_logged(setup: Setup, verdict: Verdict) -> bool:
    """An engine that logs its memory from the first pipeline stage only (vLLM: its surface says
    why) gives, with pp > 1, stage 0's numbers, while the planner's are the busiest stage's: they
    do not compare.
    Such launches are left out of the memory fit rather than compared with stage 0's own
    prediction, which would repeat here the planner's per-stage arithmetic (embeddings on the
    first stage, the LM head on the last, each stage's reserve); the layouts without a pipeline
    on the same box teach the same corrections. Their benchmark levels still teach speed."""
    return setup.engine.surface.memory_logged_by_first_stage and verdict.layout.pp > 1


def _within(value: float, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= value <= bounds[1]


def logged_kv_gib(facts: LaunchFacts, verdict: Verdict) -> float | None:
    """KV cache memory per GPU as the engine logged it: the GiB where it gives them (vLLM's
    "Available KV cache memory", SGLang's K and V sizes), else SGLang's pool tokens (one attention
    replica's, smallest rank) times the model's KV bytes per token per GPU. A pool cut by SGLang's
    --max-total-tokens says nothing about the memory left, in tokens or in GiB: the pool is sized
    by the cap (sglang/srt/mem_cache/kv_cache_configurator.py, _apply_token_constraints), so it
    is no reading."""
    memory = verdict.memory
    server = verdict.server
    if memory is None or (server is not None and server.max_total_tokens):
        return None
    if facts.kv_memory_gib is not None:
        return float(facts.kv_memory_gib)
    tokens = facts.kv_tokens
    return None if tokens is None else tokens * memory.kv_bytes_per_token / GiB


# -- speed --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """The good levels of one run at one request shape."""

    verdict: Verdict
    model: PerfModel  # the layout's model under the setup's calibration: the fit varies its constants
    input_len: int
    output_len: int
    levels: tuple[int, ...]
    measured: tuple[float, ...]


def usable_level(point: Measured) -> bool:
    """A level that measured the server: not failed, not held back by the client nor by the CPU
    under a simulated engine, closed-loop (C requests always in flight, as the model predicts),
    with lengths; every request answered and no other client's load on the engine (a level
    with either measured less than C in flight)."""
    return (
        not point.failed
        and not point.errors
        and not point.extra.get("contended")
        and not point.client_limited
        and not engine_fell_behind(point.extra.get("engine"), point.duration_s)
        and not open_loop(point)
        and point.output_tok_s > 0
        and math.isfinite(point.output_tok_s)
        and bool(point.input_len)
        and bool(point.output_len)
    )


# cockpit's simulated engine reports the schedule time it gave up when its CPU was short
# (``sim_dropped_s`` in a level's engine figures; docs/simulator.md#keeping-the-clock). Above this
# share of a level's time, the level measured the machine running the simulator, not the model.
ENGINE_BEHIND_SHARE = 0.02


def engine_fell_behind(engine: object, duration_s: float | None) -> float:
    """The share of a level's time its (simulated) engine gave up, when above
    ``ENGINE_BEHIND_SHARE``; 0 otherwise, and always for a real engine, which reports nothing."""
    dropped = engine.get("sim_dropped_s") if isinstance(engine, Mapping) else None
    if not isinstance(dropped, (int, float)) or not duration_s or duration_s <= 0:
        return 0.0
    share = float(dropped) / duration_s
    return share if share > ENGINE_BEHIND_SHARE else 0.0


def open_loop(point: Measured) -> bool:
    """A level sent at a Poisson rate (cockpit's load generator journals ``rate`` in the point's
    extra: ``LevelResult.to_bench_point``; None for closed loop). Its throughput is about the
    offered rate, whatever the server could do: no closed-loop prediction compares with it."""
    rate = point.extra.get("rate")
    return isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0


def fit_speed(setup: Setup, runs: Sequence[tuple[int, Run]]) -> SpeedFit | None:
    """The speed constants the data can tell (those the profile leaves free) from the good levels;
    None when it can tell none (fewer than two layouts or four levels, and no measured kernels).
    ``free_parameters`` says which; the fit minimises the mean absolute log error of predicted
    against measured tok/s, with a pull toward the defaults (``search``)."""
    groups, used = _speed_groups(setup, runs)
    space = free_parameters(setup, groups)
    if not space:
        return None
    defaults = calibration_for(setup.hardware, setup.engine.name, setup.calibration)
    start = {name: float(getattr(defaults, name)) for name in space}
    points = sum(len(g.levels) for g in groups)

    def objective(values: Mapping[str, float]) -> float:
        """Mean absolute log error over every good level."""
        total = 0.0
        changes: dict[str, Any] = dict(values)
        for group in groups:
            model = replace(group.model, calibration=replace(group.model.calibration, **changes))
            for level, measured in zip(group.levels, group.measured):
                tok_s = model.workload_tok_s(level, group.input_len, group.output_len)
                total += abs(math.log(tok_s / measured)) if tok_s > 0 else MISSING_PREDICTION
        return total / points

    best = search(objective, space, start)
    rounded = {name: round(value, 2 if name == "t_layer_us" else 4) for name, value in best.items()}
    return SpeedFit(rounded, frozenset(used))


def free_parameters(setup: Setup, groups: Sequence[_Group]) -> dict[str, Parameter]:
    """The constants the good levels can tell apart, less those the profile sets: measured
    kernels' factor where kernels predicted, and of the analytic model's, eta_bw and t_layer_us
    from MIN_SPEED_LAYOUTS layouts and MIN_SPEED_POINTS levels, the parts of FORM_PARAMETERS from
    FORM_LAYOUTS layouts and FORM_LEVELS concurrencies (the collectives' only where a layout has
    collectives, the experts' only for a MoE model, the pipeline's only where one ran)."""
    kernel = [g for g in groups if g.model.kernels is not None]
    analytic = [g for g in groups if g.model.kernels is None]
    space: dict[str, Parameter] = {}
    if sum(len(g.levels) for g in kernel) >= MIN_KERNEL_POINTS:
        space.update(KERNEL_PARAMETERS)
    layouts = {g.verdict.layout.parallel for g in analytic}
    points = sum(len(g.levels) for g in analytic)
    if len(layouts) >= MIN_SPEED_LAYOUTS and points >= MIN_SPEED_POINTS:
        space.update(SPEED_PARAMETERS)
    levels = {level for g in analytic for level in g.levels}
    if len(layouts) >= FORM_LAYOUTS and len(levels) >= FORM_LEVELS:
        collectives = any(_has_collectives(g.model) for g in analytic)
        for name, parameter in FORM_PARAMETERS.items():
            if name.startswith("ar_") and not collectives:
                continue
            if name.startswith("moe_") and setup.model.moe is None:
                continue
            if name == "eta_pp" and not any(g.model.placement.pp > 1 for g in analytic):
                continue
            space[name] = parameter
    return {name: parameter for name, parameter in space.items() if name not in setup.calibration}


def _has_collectives(model: PerfModel) -> bool:
    p = model.placement
    return p.attn_tp > 1 or (model.model.moe is not None and p.moe_ep * p.moe_tp > p.attn_tp)


def _speed_groups(setup: Setup, runs: Sequence[tuple[int, Run]]) -> tuple[list[_Group], set[int]]:
    groups: list[_Group] = []
    used: set[int] = set()
    plan = _plans(setup)
    for index, (launched, points) in runs:
        good = [p for p in points if usable_level(p)]
        if not good:
            continue
        verdict = plan(launched.layout)
        model = for_verdict(setup, verdict)
        if model is None:
            continue  # the model says it cannot run: no prediction to fit against
        for (input_len, output_len), same in itertools.groupby(sorted(good, key=_shape), key=_shape):
            level_points = list(same)
            groups.append(
                _Group(
                    verdict,
                    model,
                    input_len,
                    output_len,
                    tuple(p.concurrency for p in level_points),
                    tuple(p.output_tok_s for p in level_points),
                )
            )
        used.add(index)
    return groups, used


def _shape(point: Measured) -> tuple[int, int]:
    return int(point.input_len or 0), int(point.output_len or 0)


def search(
    objective: Callable[[Mapping[str, float]], float],
    space: Mapping[str, Parameter],
    start: Mapping[str, float],
) -> dict[str, float]:
    """The values within ``space`` that minimise ``objective`` plus PRIOR_WEIGHT times the squared
    distance from ``start`` (each constant measured in shares of its range): Nelder-Mead
    (Nelder and Mead, "A simplex method for function minimization", Computer Journal 7(4), 1965)
    in the unit cube of the ranges, restarted SEARCH_ROUNDS times from the best point found. It
    needs no gradient (the mean absolute error has kinks), follows the narrow diagonal valleys
    some pairs make (a little more bandwidth offsets a little less per-layer floor), and takes a
    few hundred evaluations for a dozen constants."""
    names = list(space)
    origin = [space[n].where(start[n]) for n in names]

    def values(u: Sequence[float]) -> dict[str, float]:
        return {n: space[n].at(x) for n, x in zip(names, u)}

    def cost(u: Sequence[float]) -> float:
        clipped = [min(1.0, max(0.0, x)) for x in u]
        moved = sum((x - o) ** 2 for x, o in zip(clipped, origin))
        return objective(values(clipped)) + PRIOR_WEIGHT * moved

    best = list(origin)
    for _ in range(SEARCH_ROUNDS):
        best = nelder_mead(cost, best)
    return values([min(1.0, max(0.0, x)) for x in best])


def nelder_mead(
    cost: Callable[[Sequence[float]], float], start: Sequence[float], step: float = 0.1
) -> list[float]:
    """The point of lowest ``cost`` the simplex finds from ``start`` (standard coefficients:
    reflect 1, expand 2, contract and shrink 1/2), stopped when the simplex is smaller than
    SEARCH_TOLERANCE on every axis or after SEARCH_EVALUATIONS per dimension."""
    n = len(start)
    simplex = [list(start)]
    for i in range(n):
        vertex = list(start)
        vertex[i] += step if vertex[i] + step <= 1.0 else -step
        simplex.append(vertex)
    scored = sorted(((cost(v), v) for v in simplex), key=lambda item: item[0])
    evaluations = n + 1
    while evaluations < SEARCH_EVALUATIONS * max(1, n):
        spread = max(max(v[i] for _, v in scored) - min(v[i] for _, v in scored) for i in range(n))
        if spread < SEARCH_TOLERANCE:
            break
        worst_cost, worst = scored[-1]
        centre = [sum(v[i] for _, v in scored[:-1]) / n for i in range(n)]

        reflected = _along(centre, worst, -1.0)
        r = cost(reflected)
        evaluations += 1
        if r < scored[0][0]:
            expanded = _along(centre, worst, -2.0)
            e = cost(expanded)
            evaluations += 1
            scored[-1] = (e, expanded) if e < r else (r, reflected)
        elif r < scored[-2][0]:
            scored[-1] = (r, reflected)
        else:
            contracted = _along(centre, worst, -0.5 if r < worst_cost else 0.5)
            c = cost(contracted)
            evaluations += 1
            if c < min(r, worst_cost):
                scored[-1] = (c, contracted)
            else:
                best = scored[0][1]
                shrunk = [[b + 0.5 * (x - b) for b, x in zip(best, v)] for _, v in scored[1:]]
                scored = [scored[0], *((cost(v), v) for v in shrunk)]
                evaluations += n
        scored.sort(key=lambda item: item[0])
    return scored[0][1]


def _along(centre: Sequence[float], vertex: Sequence[float], t: float) -> list[float]:
    """The point ``t`` of the way from ``centre`` to ``vertex`` (below 0: beyond the centre)."""
    return [c + t * (v - c) for c, v in zip(centre, vertex)]
