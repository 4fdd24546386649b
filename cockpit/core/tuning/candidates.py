"""What a tune may launch: every layout x knob combination the planner says can start, each with
its predicted goal. Pure: a setup and a spec in, ranked candidates out.

The prediction is goodput as the performance model sees it: for each level the spec allows, the
closed loop's output tok/s (``PerfModel.closed_loop``), counted only where its mean time to first
token and its decode step are within the bounds (in a closed loop of equal requests every request
sees about the same), then the best level. Per GPU, it is divided by the GPUs the layout uses.
Every level's numbers are kept, so that an optimistic bound can loosen both the speed and the
latencies by the error the model still shows (``Prediction.goal_at``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cockpit.core.errors import CockpitError
from cockpit.core.knobs import Knobs
from cockpit.core.layout import Layout
from cockpit.core.perfmodel import ClosedLoop, PerfModel, for_verdict
from cockpit.core.planner import FAILS, Setup, Verdict, plan_layout
from cockpit.core.tuning.spec import TuneSpec

MAX_CANDIDATES = 2000  # layouts x knob values beyond this are refused: narrow the knobs


@dataclass(frozen=True)
class LevelPrediction:
    """What the model predicts at one level: the server's output tok/s and the latencies a
    request sees there (mean TTFT, queueing included; mean inter-token latency, ``tpot_s``)."""

    level: float  # a concurrency, or a rate with ``TuneSpec.rates``
    tok_s: float  # 0 where an open-loop rate is more than the server can take
    ttft_ms: float
    itl_ms: float


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted goal at each level, and its best: the goal is 0 where no level
    meets the bounds."""

    levels: tuple[LevelPrediction, ...]
    divisor: int  # the GPUs it uses for the per-GPU goal, else 1
    ttft_ms: float | None
    itl_ms: float | None

    def goal_at(self, slack: float = 0.0) -> tuple[float, float]:
        """(goal, level) of the best level, everything ``slack`` in the model's favour: tok/s
        that much higher, bounds that much looser (the optimistic bound of ``search``)."""
        best = (0.0, 0.0)
        for p in self.levels:
            if self.ttft_ms is not None and p.ttft_ms > self.ttft_ms * (1 + slack):
                continue
            if self.itl_ms is not None and p.itl_ms > self.itl_ms * (1 + slack):
                continue
            goal = p.tok_s * (1 + slack) / self.divisor
            if goal > best[0]:
                best = (goal, p.level)
        return best

    @property
    def goal(self) -> float:
        return self.goal_at()[0]

    @property
    def level(self) -> float:
        return self.goal_at()[1]

    def tok_s_at(self, level: float) -> float | None:
        return next((p.tok_s for p in self.levels if p.level == level), None)


NO_PREDICTION = Prediction((), 1, None, None)


@dataclass(frozen=True)
class Candidate:
    """One layout with one combination of knob values, as planned."""

    layout: Layout  # knobs included: its name is the journal's and the results' name
    verdict: Verdict
    gpus: int
    prediction: Prediction

    @property
    def name(self) -> str:
        return str(self.layout)


def knob_combinations(spec: TuneSpec) -> list[tuple[str, ...]]:
    """Every combination of the spec's knob values as server arguments; one empty one without knobs."""
    choices = [[knob.argv(value) for value in knob.values] for knob in spec.knobs]
    return [tuple(itertools.chain.from_iterable(combo)) for combo in itertools.product(*choices)]


def candidate_layouts(setup: Setup, spec: TuneSpec) -> list[Layout]:
    """Every layout the engine can be asked for on the box, with every knob combination."""
    hw = setup.hardware
    layouts = setup.engine.candidate_layouts(hw.count, moe=setup.model.is_moe, nodes=hw.nodes)
    combos = knob_combinations(spec)
    if len(layouts) * len(combos) > MAX_CANDIDATES:
        raise CockpitError(
            f"tune: {len(layouts)} layouts x {len(combos)} knob combinations is more than "
            f"{MAX_CANDIDATES:,} candidates: give fewer knob values"
        )
    return [replace(layout, knobs=Knobs(combo)) for layout in layouts for combo in combos]


def nothing_fits_reason(left_out: Sequence[Verdict], spec: TuneSpec, usable_gpus: int) -> str:
    """Why a tune has no candidate, in one line: the planner's reason for the first layout that
    uses the GPUs the goal asks for, or that none does."""
    whole = [v for v in left_out if v.gpus_used == usable_gpus or spec.per_gpu]
    failing = [v for v in whole if v.verdict == FAILS and v.reasons]
    if failing:
        v = failing[0]
        return f"no layout can start: {v.layout}: {v.reasons[0].message}"
    if not spec.per_gpu:
        return f"no layout uses all {usable_gpus} GPUs the profile allows: try goal=tok/s/gpu"
    return "no layout can start on this box"


def plan_candidates(
    setup: Setup, spec: TuneSpec, usable_gpus: int, layouts: Sequence[Layout] | None = None
) -> tuple[list[Candidate], list[Verdict]]:
    """The candidates that can start, best predicted first, and the verdicts left out (those that
    fail, and for the tok/s goal those that leave usable GPUs idle). ``setup`` carries what the
    box taught (``Learned``): re-plan after every measurement to re-rank."""
    setup = _with_request_len(setup, spec)
    fitting: list[Candidate] = []
    left: list[Verdict] = []
    for layout in layouts if layouts is not None else candidate_layouts(setup, spec):
        verdict = plan_layout(setup, layout)
        if verdict.verdict == FAILS or verdict.placement is None:
            left.append(verdict)
            continue
        gpus = verdict.gpus_used
        if gpus > usable_gpus or (not spec.per_gpu and gpus < usable_gpus):
            left.append(verdict)
            continue
        fitting.append(Candidate(layout, verdict, gpus, predict(setup, verdict, spec, gpus)))
    fitting.sort(key=lambda c: (-c.prediction.goal, c.gpus, c.name))
    return fitting, left


def repredict(setup: Setup, spec: TuneSpec, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The same candidates predicted again with ``setup`` (what the box taught since), best first.
    Memory corrections can turn a candidate into one that fails: it then predicts 0."""
    setup = _with_request_len(setup, spec)
    again = []
    for candidate in candidates:
        verdict = plan_layout(setup, candidate.layout)
        prediction = (
            predict(setup, verdict, spec, candidate.gpus) if verdict.verdict != FAILS else NO_PREDICTION
        )
        again.append(replace(candidate, verdict=verdict, prediction=prediction))
    again.sort(key=lambda c: (-c.prediction.goal, c.gpus, c.name))
    return again


def predict(setup: Setup, verdict: Verdict, spec: TuneSpec, gpus: int) -> Prediction:
    model = for_verdict(setup, verdict)
    if model is None:
        return NO_PREDICTION
    input_len, output_len = lengths(spec)
    levels = tuple(level_prediction(model, spec, level, input_len, output_len) for level in spec.levels)
    return Prediction(levels, gpus if spec.per_gpu else 1, spec.ttft_ms, spec.itl_ms)


def level_prediction(
    model: PerfModel, spec: TuneSpec, level: float, input_len: int, output_len: int
) -> LevelPrediction:
    """The closed loop at a concurrency; for an open-loop rate, the offered tokens at the
    latencies of the fewest requests in flight that serve them, or nothing when the rate is more
    than the server can take (its queue grows without end)."""
    if spec.rates:
        capacity = model.closed_loop(max(1, model.max_running), input_len, output_len)
        offered = level * output_len
        loop = model.closed_loop(_in_flight(model, offered, input_len, output_len), input_len, output_len)
        tok_s = offered if offered < capacity.tok_s else 0.0
    else:
        loop = model.closed_loop(int(level), input_len, output_len)
        tok_s = loop.tok_s
    return LevelPrediction(level, tok_s, loop.ttft_s * 1000, tpot_s(loop) * 1000)


def _in_flight(model: PerfModel, tok_s: float, input_len: int, output_len: int) -> int:
    """The fewest requests in flight whose closed loop serves ``tok_s`` (Little's law, read off
    the model): the latencies an open-loop rate sees once its queue is steady."""
    low, high = 1, max(1, model.max_running)
    while low < high:
        middle = (low + high) // 2
        if model.closed_loop(middle, input_len, output_len).tok_s >= tok_s:
            high = middle
        else:
            low = middle + 1
    return low


def tpot_s(loop: ClosedLoop) -> float:
    """A request's mean inter-token latency in that closed loop: the rest of its round after its
    first token, over its other tokens. It counts the prompt chunks other requests' prefills put
    between its decode steps, which a bare decode step would not (goodput bounds this mean)."""
    if loop.output_len <= 1:
        return 0.0
    queueing = (
        (loop.concurrency - loop.running) / loop.running * loop.round_s
        if loop.concurrency > loop.running
        else 0.0
    )
    first_token = max(0.0, loop.ttft_s - queueing)
    return max(0.0, loop.round_s - first_token) / (loop.output_len - 1)


def lengths(spec: TuneSpec) -> tuple[int, int]:
    """The request lengths the tune measures with; a spec reaches the planner with them resolved
    (``tuner.resolved`` gives the profile's where the words gave none)."""
    if spec.input_len is None or spec.output_len is None:
        raise ValueError("plan a tune with its request lengths resolved (tuner.resolved)")
    return spec.input_len, spec.output_len


def _with_request_len(setup: Setup, spec: TuneSpec) -> Setup:
    input_len, output_len = lengths(spec)
    return replace(setup, request_len=input_len + output_len)
