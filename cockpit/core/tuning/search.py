"""The tune's decisions, pure: which candidate to launch next, which level to measure next, and
when to stop.

- **Next candidate**: the best predicted one not yet tried among those whose bound is above the
  best measured (predictions are re-made after every measurement, with what the box taught).
- **Stop** when the best measured goal beats every remaining candidate's optimistic bound: its
  prediction with the model's error in its favour (tok/s that much higher, latencies that much
  looser; the error is measured out of sample, ``cockpit.core.tuning.margin``: a model calibrated
  on what it is judged against would let the tune stop on a bound it has just fitted), or when
  the budget (launches, time) is spent.
- **A candidate's sweep** climbs the spec's levels from the one predicted best: up while goodput
  rises, then down from the start while it rises; a level is never measured twice. It ends when the
  best measured level's neighbours are both measured (or off the ladder): that level is the
  candidate's goodput.
- **A failed launch** the planner said fits drops its similar candidates: the same parallel layout
  with any knobs, except after a memory failure (an OOM, a KV cache too small), which drops only
  those that would fail the same way (as much held besides the KV cache, or no more KV tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cockpit.core.layout import Layout
from cockpit.core.tuning.candidates import Candidate
from cockpit.core.tuning.events import Margin, margin_text

MEMORY_FAILURES = ("oom", "kv-cache")  # diagnosis kinds that say the layout ran out of memory
# Why a candidate was not tried (``Row.state``): the tune view says each in a word or two.
DROPPED, OUTRANKED, OUT_OF_BOUNDS, NOT_REACHED = "dropped", "outranked", "out-of-bounds", "not-reached"


@dataclass(frozen=True)
class Tried:
    """What one candidate's launch gave: its measured goal, or why it could not be measured."""

    name: str
    experiment: int | None
    goal: float | None  # None: it failed or was stopped before it was measured
    level: float | None = None
    predicted: float = 0.0  # the prediction it was launched with
    failure_kind: str = ""  # the diagnosis kind when it failed to start
    failure: str = ""  # one line

    @property
    def measured(self) -> bool:
        return self.goal is not None


@dataclass(frozen=True)
class Decision:
    """The next candidate, or None with the reason to stop."""

    candidate: Candidate | None
    reason: str
    margin: Margin  # the error allowance of the bounds at this decision
    bound: float  # the highest optimistic bound among the candidates left (0: none left)


def optimistic_bound(candidate: Candidate, margin: float) -> float:
    """The most the candidate could give if the model erred by ``margin`` in its favour."""
    return candidate.prediction.goal_at(margin)[0]


def best_tried(tried: Mapping[str, Tried]) -> Tried | None:
    measured = [t for t in tried.values() if t.goal]
    return max(measured, key=lambda t: t.goal or 0.0) if measured else None


def dropped_as_similar(candidate: Candidate, failures: Sequence[tuple[Candidate, Tried]]) -> Tried | None:
    """The failed launch that makes ``candidate`` not worth launching, if any (module docstring)."""
    for failed, how in failures:
        if _parallel(failed.layout) != _parallel(candidate.layout):
            continue
        if how.failure_kind not in MEMORY_FAILURES or _no_roomier(candidate, failed, how.failure_kind):
            return how
    return None


def decide(
    candidates: Sequence[Candidate],
    tried: Mapping[str, Tried],
    failures: Sequence[tuple[Candidate, Tried]],
    margin: Margin,
    *,
    launches_left: int | None = None,
    time_left_s: float | None = None,
) -> Decision:
    """The next candidate to launch: the best predicted among those not tried that could still
    beat the best measured, or why the tune is done. ``margin``: the model's error out of sample
    (``margin.out_of_sample_margin``), which every bound allows in the candidate's favour."""
    left = [c for c in candidates if c.name not in tried and dropped_as_similar(c, failures) is None]
    left = [c for c in left if optimistic_bound(c, margin.value) > 0]
    bound = max((optimistic_bound(c, margin.value) for c in left), default=0.0)
    best = best_tried(tried)
    if not left:
        why = (
            "every candidate that can meet the bounds was tried"
            if tried
            else "no candidate can meet the bounds"
        )
        return Decision(None, why, margin, 0.0)
    if best is not None and best.goal is not None and best.goal >= bound:
        return Decision(
            None,
            f"nothing left can beat {best.name}'s {best.goal:,.0f}: the best case left, "
            f"{margin_text(margin)}, is {bound:,.0f}",
            margin,
            bound,
        )
    if launches_left is not None and launches_left <= 0:
        return Decision(None, "the launch budget is spent", margin, bound)
    if time_left_s is not None and time_left_s <= 0:
        return Decision(None, "the time budget is spent", margin, bound)
    # The best-ranked of those that could still win: by the calibrated prediction, then the bound
    # (a candidate the model puts just over a latency bound comes after those it puts within).
    worth = [
        c for c in left if best is None or best.goal is None or optimistic_bound(c, margin.value) > best.goal
    ]
    chosen = max(worth, key=lambda c: (c.prediction.goal, optimistic_bound(c, margin.value)))
    return Decision(chosen, f"best predicted, {chosen.prediction.goal:,.0f}", margin, bound)


def why_not_tried(
    candidate: Candidate,
    best: Tried | None,
    margin: Margin,
    failures: Sequence[tuple[Candidate, Tried]],
    stop_reason: str,
) -> tuple[str, str]:
    """(state, one line) for a candidate the tune left: dropped after a similar failure, cannot
    meet the bounds, its best case below the best measured (outranked), or the budget ran out
    first. The best case is not the prediction plus the margin: the margin loosens the latency
    bounds too, so a level the prediction puts over a bound may count in the best case."""
    similar = dropped_as_similar(candidate, failures)
    if similar is not None:
        if similar.name == candidate.name:
            return DROPPED, f"dropped: it failed to start on this box: {similar.failure}"
        return DROPPED, f"dropped: {similar.name} failed to start ({similar.failure_kind or 'failed'})"
    bound = optimistic_bound(candidate, margin.value)
    if bound <= 0:
        return (
            OUT_OF_BOUNDS,
            f"predicted to miss the latency bounds at every level, even with the {margin_text(margin)}",
        )
    if best is not None and best.goal is not None and best.goal >= bound:
        return (
            OUTRANKED,
            f"cannot beat {best.name}'s {best.goal:,.0f}: {bound:,.0f} at best ({margin_text(margin)})",
        )
    return NOT_REACHED, f"not reached: {stop_reason}"


@dataclass(frozen=True)
class LevelClimb:
    """A candidate's sweep over the spec's levels (module docstring), as far as it has gone."""

    ladder: tuple[float, ...]  # ascending
    start: float
    measured: Mapping[float, float]  # level -> goal measured there

    def next_level(self) -> float | None:
        if not self.measured:
            return self.start
        index = {level: i for i, level in enumerate(self.ladder)}
        best = max(self.measured, key=lambda level: (self.measured[level], -level))
        i = index[best]
        for neighbour in (i + 1, i - 1):
            if 0 <= neighbour < len(self.ladder) and self.ladder[neighbour] not in self.measured:
                return self.ladder[neighbour]
        return None

    @property
    def best(self) -> tuple[float, float] | None:
        """(level, goal) of the best level measured."""
        if not self.measured:
            return None
        level = max(self.measured, key=lambda x: (self.measured[x], -x))
        return level, self.measured[level]


def start_level(ladder: Sequence[float], predicted_level: float) -> float:
    """The ladder's level nearest the one predicted best (the lowest when nothing meets the bounds)."""
    if predicted_level <= 0:
        return ladder[0]
    return min(ladder, key=lambda level: (abs(level - predicted_level), level))


def _parallel(layout: Layout) -> str:
    return str(layout.parallel)


def _no_roomier(candidate: Candidate, failed: Candidate, kind: str) -> bool:
    """After an OOM: ``candidate`` holds at least as much besides its KV cache per GPU. After a KV
    cache too small: it has no more KV cache tokens. Either way it would fail the same way."""
    mine, theirs = candidate.verdict.memory, failed.verdict.memory
    if mine is None or theirs is None:
        return True
    if kind == "oom":
        return mine.weights_gib + mine.reserve_gib >= theirs.weights_gib + theirs.reserve_gib - 1e-6
    return mine.kv_tokens <= theirs.kv_tokens
