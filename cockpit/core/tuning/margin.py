"""How far the calibrated model may still be off on a candidate it has not seen: the margin of the
tune's optimistic bounds, measured out of sample. Pure: a setup, the measured levels and the
box's runs in, a ``Margin`` out.

The model is calibrated on the measured candidates, so its error on those same candidates says
little about an untried one: with two constants fitted to three layouts the in-sample error can
be near zero while the next layout is 60% off. So each measured candidate is predicted by the
calibration fitted without its launches (leave one candidate out: ``fitting.fit_parts`` on the
other runs, the planner's defaults as the prior, so no lesson of its own comes back through the
store), and the margin is the largest relative error of those predictions at its measured
levels, never under ``MIN_MARGIN``.

A leave-one-out needs a calibration on what is left: two parallel layouts with good levels besides
the candidate left out (``fitting.MIN_SPEED_LAYOUTS``). Until some candidate can be left out so,
every prediction made without it is the uncalibrated model's, and the margin is the larger of its
errors and ``DEFAULT_MARGIN``: the analytic model is meant to land within about 30% of measured
numbers (docs/performance.md); on public runs it is 20-27% off at the median (docs/measured.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from cockpit.core.fitting import Run, fit_parts
from cockpit.core.planner import Learned, Setup
from cockpit.core.tuning.candidates import Candidate, repredict
from cockpit.core.tuning.events import Margin, Point
from cockpit.core.tuning.spec import TuneSpec

MIN_MARGIN = 0.05  # a bound is never closer than 5% above the prediction: measurement noise
DEFAULT_MARGIN = 0.30  # too few measured to leave one out: the analytic model's stated accuracy
UNMEASURED = Margin(DEFAULT_MARGIN, held_out=False)  # the margin before anything is measured


def out_of_sample_margin(
    setup: Setup,
    spec: TuneSpec,
    candidates: Sequence[Candidate],
    points: Sequence[Point],
    runs: Sequence[Run],
) -> Margin:
    """The margin of the bounds (module docstring). ``setup``: the lab's, its ``learned`` aside
    (each prediction here is fitted afresh); ``runs``: the box's journaled launches of the model
    with their levels, those of the measured candidates among them (``calibration.journal_runs``)."""
    by_name = {c.name: c for c in candidates}
    measured: dict[str, list[Point]] = defaultdict(list)
    for point in points:
        if point.name in by_name and point.tok_s > 0:
            measured[point.name].append(point)
    errors: list[float] = []
    held_out = False
    for name, its_points in measured.items():
        without = [run for run in runs if run[0].layout != name]
        fitted = fit_parts(replace(setup, learned=Learned()), without, Learned())
        held_out = held_out or fitted.speed is not None
        [again] = repredict(replace(setup, learned=fitted.learned), spec, [by_name[name]])
        errors += relative_errors(again, its_points)
    if held_out:
        return Margin(max([MIN_MARGIN, *errors]), held_out=True)
    return Margin(max([DEFAULT_MARGIN, *errors]), held_out=False)


def relative_errors(candidate: Candidate, points: Sequence[Point]) -> list[float]:
    """|measured / predicted - 1| of the output tok/s at each measured level the candidate's
    prediction covers. Raw tok/s, not goodput: goodput jumps where a latency crosses its bound,
    and the bound loosens the latencies by the same margin (``Prediction.goal_at``)."""
    errors = []
    for point in points:
        expected = candidate.prediction.tok_s_at(point.level)
        if expected:
            errors.append(abs(point.tok_s / expected - 1.0))
    return errors
