"""The journal read as a comparison: tok/s per layout and concurrency, the best of each marked.

Only like is compared with like: levels measured with other request lengths, sent open-loop at a
rate, or on the simulated box rather than GPUs are in a table of their own, each with its own
best (a layout's knobs already make a row of their own). A level whose requests mostly failed is
kept, with its reason, and never wins over a good measurement of the same layout and level. A
level that is not clean (some of its requests failed, or another client's load shared the
server) is flawed: it never replaces a clean one of the same layout and level, is shown only
where no clean one exists, marked (`level_mark`), and is never a column's best or the table's
best peak. A layout that never served shows its latest failure, as long as no later launch of it
went better.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cockpit.core.fitting import open_loop
from cockpit.core.outcome import FAILED
from cockpit.engines import ENGINES
from cockpit.store.journal import BenchPoint, Experiment, Journal


@dataclass(frozen=True)
class Workload:
    """What a level was sent with besides its concurrency: the request lengths and, for a level
    sent open-loop, its arrival rate. Only levels of one workload compare."""

    input_len: int | None = None
    output_len: int | None = None
    rate: float | None = None  # requests/s of an open-loop level; None for closed loop

    @classmethod
    def of(cls, point: BenchPoint) -> Workload:
        rate = point.extra.get("rate") if open_loop(point) else None
        return cls(point.input_len, point.output_len, float(rate) if rate is not None else None)

    @property
    def known(self) -> bool:
        """Whether there is anything to say: journals before lengths were kept have nothing."""
        return self.input_len is not None or self.output_len is not None or self.rate is not None

    @property
    def label(self) -> str:
        """`in=512 out=32`, as `bench` takes it; `at 4 req/s (open loop)` after it for a rate."""
        if self.input_len is None and self.output_len is None:
            text = "lengths not recorded"
        else:
            text = f"in={_tokens(self.input_len)} out={_tokens(self.output_len)}"
        return text + (f" at {self.rate:g} req/s (open loop)" if self.rate is not None else "")


def _tokens(value: int | None) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True)
class ComparisonRow:
    """One layout: the levels its newest benchmarked experiments measured, or its latest failure
    if it never served. A good point always wins over a failed one at the same level."""

    layout: str
    experiment: int
    engine: str
    outcome: str  # as the journal holds it: one of cockpit.core.outcome.OUTCOMES
    cells: dict[int, BenchPoint]  # concurrency -> the good point measured there (clean if any is)
    peak: BenchPoint | None  # the best tok/s of the row, with its concurrency (clean if any level is)
    diagnosis: str = ""  # the one-line cause, for a row without numbers
    # levels with only failed points: .error says why
    failed: dict[int, BenchPoint] = field(default_factory=dict)
    # the journal's records of the experiments the row's points came from (and of the row's own),
    # by id: what was predicted for each and what its engine logged (cockpit.reports.measured)
    sources: dict[int, Experiment] = field(default_factory=dict)
    # levels where a newer flawed point was set aside for an older clean one: the newest of them
    set_aside: dict[int, BenchPoint] = field(default_factory=dict)

    def source(self, point: BenchPoint | None = None) -> Experiment | None:
        """The experiment a point was measured in; without a point, the row's own."""
        wanted = point.experiment_id if point is not None else self.experiment
        return self.sources.get(wanted) if wanted is not None else None

    @property
    def benched(self) -> bool:
        """Whether a benchmark ran on it (good or failed levels), not only a launch."""
        return bool(self.cells or self.failed)

    @property
    def simulated(self) -> bool:
        """Whether its launch ran on the simulated box."""
        exp = self.source()
        return exp is not None and exp.simulated


@dataclass(frozen=True)
class Comparison:
    """The layouts of one profile side by side, for one workload on one kind of box: the table
    of the newest one measured, with the launches that never served; ``earlier`` holds a table
    for each other workload (or box), newest first, so nothing measured is dropped."""

    profile: str | None
    levels: list[int]  # every concurrency measured, sorted
    rows: list[ComparisonRow]  # in the order the layouts were tried
    best: dict[int, str]  # concurrency -> layout with the most tok/s, where two or more compete
    best_peak: str | None = None
    workload: Workload = field(default_factory=Workload)  # what every level of the table was sent with
    simulated: bool = False  # measured on the simulated box: the simulator's numbers
    earlier: tuple[Comparison, ...] = ()  # the other workloads' tables, newest first
    engine: str = ""  # the engine every row ran on
    name_engine: bool = False  # the profile's tables ran on two engines: each label names its own

    @property
    def tables(self) -> list[Comparison]:
        """Every table, newest first, each on its own (its ``earlier`` empty)."""
        return [replace(self, earlier=()), *self.earlier]

    @property
    def benched(self) -> bool:
        """Whether anything was benchmarked; without, the rows are only launches that failed."""
        return any(row.benched for table in self.tables for row in table.rows)

    @property
    def label(self) -> str:
        """What a table compares: `in=512 out=32`, with its engine where the profile ran on two
        (`use P on sglang`) and `simulated box` where it was."""
        engine = (
            f" · {ENGINES[self.engine].label if self.engine in ENGINES else self.engine}"
            if self.name_engine
            else ""
        )
        return self.workload.label + engine + (SIMULATED_SUFFIX if self.simulated else "")


SIMULATED_SUFFIX = " · simulated box"
Key = tuple[Workload, bool, str]  # a table: the workload, whether on the simulated box, the engine
Runs = list[tuple[Experiment, list[BenchPoint]]]  # one layout's benchmarked experiments, newest first


def comparison(journal: Journal, profile: str | None = None) -> Comparison:
    """The layouts of one profile side by side; no profile means the newest experiment's."""
    if profile is None:
        newest = journal.experiments(limit=1)
        profile = newest[0].profile if newest else None
    history: dict[str, Runs] = {}  # layout -> newest first
    failed: dict[str, Experiment] = {}
    seen: set[str] = set()
    for exp in journal.experiments(profile) if profile is not None else []:  # newest first
        if points := journal.points(exp.id):
            history.setdefault(exp.layout, []).append((exp, points))
        elif exp.outcome == FAILED and exp.layout not in seen:
            failed[exp.layout] = exp  # only while no later launch of the layout went better
        seen.add(exp.layout)

    tables = sorted(
        (_table(profile, key, by_layout) for key, by_layout in _by_table(history).items()),
        key=_newest_point,
        reverse=True,
    )
    if len({table.engine for table in tables}) > 1:
        tables = [replace(table, name_engine=True) for table in tables]
    if not tables:
        tables = [Comparison(profile, [], [], {})]
    # A launch that never served goes, once, in the newest table of its own box and engine (a
    # failed SGLang launch is not a row of vLLM's table), else the newest table.
    homes: dict[int, list[ComparisonRow]] = {}
    for layout, exp in failed.items():
        if layout not in history:
            home = next(
                (i for i, t in enumerate(tables) if (t.simulated, t.engine) == (exp.simulated, exp.engine)), 0
            )
            homes.setdefault(home, []).append(_failed_launch(exp))
    for i, rows in homes.items():
        ordered = sorted([*tables[i].rows, *rows], key=lambda row: _started(row.source()))
        tables[i] = replace(tables[i], rows=ordered)
    return replace(tables[0], earlier=tuple(tables[1:]))


def _failed_launch(exp: Experiment) -> ComparisonRow:
    """A layout that never served: its latest launch, which failed, and why."""
    return ComparisonRow(
        exp.layout, exp.id, exp.engine, exp.outcome, {}, None, exp.diagnosis or "", sources={exp.id: exp}
    )


def _by_table(history: Mapping[str, Runs]) -> dict[Key, dict[str, Runs]]:
    """Each layout's runs split by workload, box and engine (the same layout on vLLM and on
    SGLang is two rows to compare, not one): a table's layouts with only its points."""
    tables: dict[Key, dict[str, Runs]] = {}
    for layout, runs in history.items():
        for exp, points in runs:
            split: dict[Key, list[BenchPoint]] = {}
            for point in points:
                split.setdefault((Workload.of(point), exp.simulated, exp.engine), []).append(point)
            for key, own in split.items():
                tables.setdefault(key, {}).setdefault(layout, []).append((exp, own))
    return tables


def _table(profile: str | None, key: Key, by_layout: Mapping[str, Runs]) -> Comparison:
    """One workload's table: a row per layout in the order they were tried, the best of each
    level and the best peak among the layouts measured there."""
    rows = [_layout_row(runs) for runs in by_layout.values()]
    ordered = [row for _, row in sorted(rows, key=lambda pair: _started(pair[0]))]
    levels = sorted({c for row in ordered for c in (*row.cells, *row.failed)})
    best = {}
    for level in levels:
        measured = [row for row in ordered if level in row.cells]
        clean = [row for row in measured if is_clean(row.cells[level])]
        if len(measured) > 1 and clean:  # a flawed level competes, but is never crowned
            best[level] = max(clean, key=lambda row: row.cells[level].output_tok_s).layout
    peaked = [row for row in ordered if row.peak is not None]
    peaks = {
        row.layout: row.peak.output_tok_s for row in peaked if row.peak is not None and is_clean(row.peak)
    }
    best_peak = max(peaks, key=peaks.__getitem__) if len(peaked) > 1 and peaks else None  # in row order
    workload, simulated, engine = key
    return Comparison(profile, levels, ordered, best, best_peak, workload, simulated, engine=engine)


def _started(exp: Experiment | None) -> tuple[float, int]:
    return (exp.started, exp.id) if exp is not None else (0.0, 0)


def _newest_point(table: Comparison) -> tuple[float, int]:
    """When the table was last measured: its newest point's time (and id, for a tie)."""
    points = _all_points(table.rows)
    return max(((p.created or 0.0, p.id or 0) for p in points), default=(0.0, 0))


def _all_points(rows: Iterable[ComparisonRow]) -> list[BenchPoint]:
    return [p for row in rows for p in (*row.cells.values(), *row.failed.values())]


def _layout_row(runs: Sequence[tuple[Experiment, list[BenchPoint]]]) -> tuple[Experiment, ComparisonRow]:
    """One layout's row from its benchmarked experiments, newest first.

    The row is the newest experiment with a clean point (else with a good one, else the newest).
    It shows the levels that experiment and any newer one measured; each level takes the newest
    clean point of the layout (an older experiment's, if the newer ones were flawed or failed
    there), else the newest good one, marked, else stays failed. The peak is the best clean level,
    or the best flawed one of a row that has no clean level.
    """
    base = next((i for i, (_, points) in enumerate(runs) if any(is_clean(p) for p in points)), None)
    if base is None:
        base = next((i for i, (_, points) in enumerate(runs) if any(not p.failed for p in points)), 0)
    exp = runs[base][0]
    levels = {p.concurrency for _, points in runs[: base + 1] for p in points}
    newest_first = [p for _, points in runs for p in reversed(points)]  # points() is oldest first per level
    cells: dict[int, BenchPoint] = {}
    failed: dict[int, BenchPoint] = {}
    set_aside: dict[int, BenchPoint] = {}
    for level in sorted(levels):
        at_level = [p for p in newest_first if p.concurrency == level]
        good = next((p for p in at_level if is_clean(p)), None) or next(
            (p for p in at_level if not p.failed), None
        )
        if good is None:
            failed[level] = at_level[0]
            continue
        cells[level] = good
        newer = at_level[: at_level.index(good)]
        if flawed := next((p for p in newer if not p.failed), None):
            set_aside[level] = flawed
    clean = [p for p in cells.values() if is_clean(p)]
    peak = max(clean or cells.values(), key=lambda p: p.output_tok_s) if cells else None
    diagnosis = "" if cells else _bench_failure(failed)
    sources = {run.id: run for run, _ in runs}
    return exp, ComparisonRow(
        exp.layout, exp.id, exp.engine, exp.outcome, cells, peak, diagnosis, failed, sources, set_aside
    )


def _bench_failure(failed: Mapping[int, BenchPoint]) -> str:
    """A row whose every level failed: which ones, and the first reason."""
    levels = ", ".join(f"C={c}" for c in sorted(failed))
    reason = next((p.error for _, p in sorted(failed.items()) if p.error), None) or "no cause recorded"
    return f"benchmark at {levels}: {reason}"


# -- flawed levels ---------------------------------------------------------------------------------


def _count(value: Any) -> int:
    """A whole count from ``extra["contended"]`` (JSON the bench wrote, not a checked column);
    anything else counts as none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def contention(point: BenchPoint) -> dict[str, int] | None:
    """What the bench saw of another client's load at this level (``extra["contended"]``: the
    engine's running and waiting peak over the level's concurrency), None when it saw none."""
    seen = point.extra.get("contended")
    if not seen:
        return None
    if not isinstance(seen, dict):
        return {}
    return {str(k): _count(v) for k, v in seen.items() if not isinstance(v, (dict, list, str))}


def is_clean(point: BenchPoint) -> bool:
    """A level to compare as it stands: not failed, no request failed, no other load seen."""
    return not point.failed and point.errors == 0 and contention(point) is None


def error_share(point: BenchPoint) -> str:
    """`3/9`: failed requests of those that ended in the level's window; "" when none failed."""
    errors = point.errors  # the journal reads it back checked: a whole number of at least 0
    return f"{errors}/{errors + point.requests}" if errors else ""


def level_mark(point: BenchPoint) -> str:
    """What keeps a good level from being clean, in a few words for a table cell: `3/9 err`,
    `contended`, or both; "" for a clean one."""
    marks = [f"{share} err"] if (share := error_share(point)) else []
    if contention(point) is not None:
        marks.append("contended")
    return ", ".join(marks)


def mark_detail(point: BenchPoint) -> str:
    """The same in words, for a legend or a detail line: `3 of 9 requests failed`, `the engine
    held 16 requests at C=8: another client's load`."""
    parts = []
    if errors := point.errors:
        parts.append(f"{errors} of {errors + point.requests} requests failed")
    seen = contention(point)
    if seen is not None:
        peak = seen.get("requests_peak") or seen.get("running_peak")
        if peak:
            parts.append(f"the engine held {peak} requests at C={point.concurrency}: another client's load")
        elif seen.get("busy_before"):
            parts.append(f"the server already ran {seen['busy_before']} requests not from this bench")
        else:
            parts.append("another client's load shared the server")
    return "; ".join(parts)
