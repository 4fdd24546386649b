"""Which measured levels are worth their latency: the Pareto front of goal against p99 latency.

A point is on the front when no other point gives at least its goal at no more latency while
being better in one of the two. The tune view draws the goal against the latency the spec bounds,
as the bound checks it (``slo.Slo.is_good``: per request): each request's mean inter-token latency
at p99 when it bounds ITL (or bounds nothing), else TTFT at p99. A level left of the bound's line
had 99% of its requests or more within that bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cockpit.core.tuning.events import Point

Axis = Literal["itl", "ttft"]
AXIS_LABELS: dict[Axis, str] = {"itl": "per-request mean ITL p99 (ms)", "ttft": "TTFT p99 (ms)"}


def latency_axis(ttft_ms: float | None, itl_ms: float | None) -> Axis:
    """The latency the chart's x axis shows: the bound the spec sets, ITL when it sets both or none."""
    return "ttft" if ttft_ms and not itl_ms else "itl"


def latency(point: Point, axis: Axis) -> float | None:
    """The point's latency on the axis: what the bound on that latency checks, at p99."""
    return point.tpot_p99_ms if axis == "itl" else point.ttft_p99_ms


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """(latency, goal) ``a`` is at least as good as ``b`` in both and better in one."""
    return a[0] <= b[0] and a[1] >= b[1] and (a[0] < b[0] or a[1] > b[1])


def pareto_front(points: Sequence[Point], axis: Axis) -> list[Point]:
    """The points with a latency on ``axis`` that no other point dominates, by latency (then goal
    falling). Equal points stay together: neither beats the other."""
    placed = [(p, (lat, p.goal)) for p in points if (lat := latency(p, axis)) is not None]
    front = [p for p, xy in placed if not any(dominates(other, xy) for _, other in placed)]
    return sorted(front, key=lambda p: (latency(p, axis) or 0.0, -p.goal))
