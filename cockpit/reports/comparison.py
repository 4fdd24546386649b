"""The journal read as a comparison: tok/s per layout and concurrency, the best of each marked.

A level whose requests mostly failed is kept, with its reason, and never wins over a good
measurement of the same layout and level. A layout that never served shows its latest failure,
as long as no later launch of it went better.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cockpit.journal import BenchPoint, Experiment, Journal
from cockpit.outcome import FAILED


@dataclass(frozen=True)
class ComparisonRow:
    """One layout: the levels its newest benchmarked experiments measured, or its latest failure
    if it never served. A good point always wins over a failed one at the same level."""

    layout: str
    experiment: int
    engine: str
    outcome: str  # as the journal holds it: one of cockpit.outcome.OUTCOMES
    cells: dict[int, BenchPoint]  # concurrency -> the good point measured there
    peak: BenchPoint | None  # the best tok/s of the row, with its concurrency
    diagnosis: str = ""  # the one-line cause, for a row without numbers
    # levels with only failed points: .error says why
    failed: dict[int, BenchPoint] = field(default_factory=dict)
    # the journal's records of the experiments the row's points came from (and of the row's own),
    # by id: what was predicted for each and what its engine logged (cockpit.reports.measured)
    sources: dict[int, Experiment] = field(default_factory=dict)

    def source(self, point: BenchPoint | None = None) -> Experiment | None:
        """The experiment a point was measured in; without a point, the row's own."""
        wanted = point.experiment_id if point is not None else self.experiment
        return self.sources.get(wanted) if wanted is not None else None


@dataclass(frozen=True)
class Comparison:
    profile: str | None
    levels: list[int]  # every concurrency measured, sorted
    rows: list[ComparisonRow]  # in the order the layouts were tried
    best: dict[int, str]  # concurrency -> layout with the most tok/s, where two or more compete
    best_peak: str | None = None


def comparison(journal: Journal, profile: str | None = None) -> Comparison:
    """The layouts of one profile side by side; no profile means the newest experiment's."""
    if profile is None:
        newest = journal.experiments(limit=1)
        profile = newest[0].profile if newest else None
    history: dict[str, list[tuple[Experiment, list[BenchPoint]]]] = {}  # layout -> newest first
    failed: dict[str, Experiment] = {}
    seen: set[str] = set()
    for exp in journal.experiments(profile) if profile is not None else []:  # newest first
        if points := journal.points(exp.id):
            history.setdefault(exp.layout, []).append((exp, points))
        elif exp.outcome == FAILED and exp.layout not in seen:
            failed[exp.layout] = exp  # only while no later launch of the layout went better
        seen.add(exp.layout)

    rows = [_layout_row(runs) for runs in history.values()]
    for layout, exp in failed.items():
        if layout not in history:
            row = ComparisonRow(
                layout, exp.id, exp.engine, exp.outcome, {}, None, exp.diagnosis or "", sources={exp.id: exp}
            )
            rows.append((exp, row))
    ordered = [row for _, row in sorted(rows, key=lambda pair: (pair[0].started, pair[0].id))]

    levels = sorted({c for row in ordered for c in (*row.cells, *row.failed)})
    best = {}
    for level in levels:
        measured = [row for row in ordered if level in row.cells]
        if len(measured) > 1:
            best[level] = max(measured, key=lambda row: row.cells[level].output_tok_s).layout
    peaks = {row.layout: row.peak.output_tok_s for row in ordered if row.peak is not None}  # in row order
    best_peak = max(peaks, key=peaks.__getitem__) if len(peaks) > 1 else None
    return Comparison(profile, levels, ordered, best, best_peak)


def _layout_row(runs: list[tuple[Experiment, list[BenchPoint]]]) -> tuple[Experiment, ComparisonRow]:
    """One layout's row from its benchmarked experiments, newest first.

    The row is the newest experiment with a good point (else the newest one). It shows the
    levels that experiment and any newer one measured; each level takes the newest good point
    of the layout (an older experiment's, if the newer ones failed there), else stays failed.
    """
    base = next((i for i, (_, points) in enumerate(runs) if any(not p.failed for p in points)), 0)
    exp = runs[base][0]
    levels = {p.concurrency for _, points in runs[: base + 1] for p in points}
    newest_first = [p for _, points in runs for p in reversed(points)]  # points() is oldest first per level
    cells: dict[int, BenchPoint] = {}
    failed: dict[int, BenchPoint] = {}
    for level in sorted(levels):
        at_level = [p for p in newest_first if p.concurrency == level]
        good = next((p for p in at_level if not p.failed), None)
        if good is not None:
            cells[level] = good
        else:
            failed[level] = at_level[0]
    peak = max(cells.values(), key=lambda p: p.output_tok_s) if cells else None
    diagnosis = "" if cells else _bench_failure(failed)
    sources = {run.id: run for run, _ in runs}
    return exp, ComparisonRow(
        exp.layout, exp.id, exp.engine, exp.outcome, cells, peak, diagnosis, failed, sources
    )


def _bench_failure(failed: Mapping[int, BenchPoint]) -> str:
    """A row whose every level failed: which ones, and the first reason."""
    levels = ", ".join(f"C={c}" for c in sorted(failed))
    reason = next((p.error for _, p in sorted(failed.items()) if p.error), None) or "no cause recorded"
    return f"benchmark at {levels}: {reason}"
