"""`cockpit results`: the comparison as a terminal table, a markdown table, csv or json.

The table and markdown show tok/s per layout and concurrency, the best of each column marked,
one table per workload (request lengths, open-loop rate) and box (simulated or not), each headed
by what it was measured with; a level that is not clean (some requests failed, another client's
load shared the server) is marked `[3/9 err]` or `[contended]`, with a legend under the tables,
and named when a clean one is shown in its place; csv and json hold one record per layout and concurrency with every
metric the client measured, its lengths and whether the box was simulated, so nothing mixes
silently. json also sets each record's measurement beside what was predicted at launch (tok/s of
the level, memory of the launch: cockpit.reports.measured); the others show the predicted tok/s
when asked.
"""

from __future__ import annotations

import csv
import io
import json
import shlex
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from cockpit.core.errors import CockpitError
from cockpit.core.planner import FITS, TIGHT, Setup, Verdict, plan_all, plan_layout
from cockpit.reports.comparison import (
    Comparison,
    ComparisonRow,
    contention,
    is_clean,
    level_mark,
    mark_detail,
)
from cockpit.reports.measured import (
    learned_runs,
    measured_memory,
    peak_gib,
    predicted_memory,
    predicted_tok_s,
    ratio,
)
from cockpit.reports.numbers import format_tok_s
from cockpit.store.journal import BenchPoint
from cockpit.store.profile_setup import DEFAULT_PROFILE, SetupOverrides, build_setup

FORMATS = ("table", "markdown", "csv", "json")
# What a reader compares, in the order csv and json show it.
METRICS = tuple(
    f.name for f in fields(BenchPoint) if f.name not in ("extra", "id", "experiment_id", "created")
)
_RECORD_FIELDS = [
    "layout",
    "engine",
    "experiment",
    "outcome",
    "diagnosis",
    "simulated",
    *METRICS,
    "clean",
    "contended",
    "rate",
    "best",
]
_PREDICTED_FIELDS = ["predicted_tok_s", "predicted_by", "measured_over_predicted"]  # csv, with predicted=True
PREDICTED_NOTE = "In parentheses: the tok/s predicted for that level when the layout was launched."
BEST_NOTE = "* most tok/s at that concurrency"
MARK_NOTE = (
    "[k/n err]: k of the level's n requests failed; [contended]: another client's load shared the "
    "server. A marked level is shown only where no clean run of it exists, and is never the best."
)


def format_comparison(comp: Comparison, fmt: str, predicted: bool = False, hint: str | None = None) -> str:
    """table (terminal), markdown (a GitHub table), csv or json (one record per layout and
    concurrency). `predicted` adds what was predicted at launch beside each measured tok/s
    (json always has it); without it the output is what it always was. `hint`: what to say
    when nothing was benchmarked (`no_results_hint`, which knows the profile's plan)."""
    if fmt not in FORMATS:
        raise CockpitError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}.")
    if fmt == "json":
        return json.dumps(_records(comp), indent=2)
    if fmt == "csv":
        return _csv(comp, predicted)
    if not comp.benched:
        return _not_benched(comp, fmt, hint)
    tables = comp.tables
    render = markdown_table if fmt == "markdown" else _table
    headed = labelled(comp)
    text = "\n\n".join(
        (_heading(table, fmt) + "\n" if headed else "") + render(table, predicted) for table in tables
    )
    if fmt == "table" and any(table.best or table.best_peak for table in tables):
        text += "\n" + BEST_NOTE + (", within its table" if len(tables) > 1 else "")
    if notes := mark_notes(comp):
        text += _notes(notes, fmt)
    if predicted and has_prediction(comp):
        notes = [PREDICTED_NOTE, *prediction_sources(comp)]
        text += "\n\n" + "\n".join(f"_{note}_" if fmt == "markdown" else note for note in notes)
    return text


def labelled(comp: Comparison) -> bool:
    """Whether the tables say what they were measured with: always when there are several, and
    for one when there is something to say (an old journal's points kept no lengths)."""
    tables = comp.tables
    return len(tables) > 1 or any(t.workload.known or t.simulated for t in tables)


def _heading(table: Comparison, fmt: str) -> str:
    return f"**{table.label}**\n" if fmt == "markdown" else table.label


def _not_benched(comp: Comparison, fmt: str, hint: str | None) -> str:
    """Nothing benchmarked: what to run first, then the launches that failed (forced ones too),
    so the user sees what was tried and why it did not serve."""
    scope = f" for profile {comp.profile}" if comp.profile else ""
    text = hint or f'no benchmark results yet{scope}: run `cockpit run "tp8" --bench c=1,32,64`'
    if not comp.rows:
        return text
    return text + "\n\n" + failed_launches(comp.rows, fmt)


def failed_launches(rows: Sequence[ComparisonRow], fmt: str) -> str:
    """The launches that never served, each with why: a markdown table or terminal lines."""
    why = [(row.layout, row.diagnosis or "no cause recorded") for row in rows]
    if fmt == "markdown":
        lines = ["| Layout | Why it failed |", "|---|---|"]
        return "\n".join(lines + [f"| {_cell(layout)} | {_cell(cause)} |" for layout, cause in why])
    width = max(len(layout) for layout, _ in why)
    return "\n".join(["launches that failed:", *(f"{layout.ljust(width)}  failed: {c}" for layout, c in why)])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def mark_notes(comp: Comparison) -> list[str]:
    """The lines under the tables about levels that are not clean: the legend of the marks, when a
    cell has one, and each level where a newer flawed run was set aside for a clean one (it is
    still in the journal: nothing measured is lost)."""
    rows = [row for table in comp.tables for row in table.rows]
    notes = [MARK_NOTE] if any(not is_clean(p) for row in rows for p in row.cells.values()) else []
    for row in rows:
        for level, point in sorted(row.set_aside.items()):
            notes.append(
                f"{row.layout} C={level}: a newer run ({mark_detail(point)}) is set aside for the clean one shown"
            )
    return notes


def _notes(notes: Sequence[str], fmt: str) -> str:
    """Lines under the tables; in markdown each its own paragraph (lines in a row run together)."""
    if fmt == "markdown":
        return "\n\n" + "\n\n".join(f"_{note}_" for note in notes)
    return "\n" + "\n".join(notes)


def _csv(comp: Comparison, predicted: bool) -> str:
    fieldnames = (
        _RECORD_FIELDS[:-1] + _PREDICTED_FIELDS + _RECORD_FIELDS[-1:] if predicted else _RECORD_FIELDS
    )
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fieldnames, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for record in _records(comp):  # 0/1 for yes/no, as spreadsheets and SQLite read them
        if predicted:
            record |= {
                "predicted_tok_s": record["predicted"]["tok_s"],
                "predicted_by": record["predicted"]["speed"]
                if record["predicted"]["tok_s"] is not None
                else None,
                "measured_over_predicted": record["measured_over_predicted"]["tok_s"],
            }
        if record.get("contended") is not None:  # one cell: the engine's peaks and the level, as JSON
            record["contended"] = json.dumps(record["contended"], sort_keys=True)
        writer.writerow({k: int(v) if isinstance(v, bool) else v for k, v in record.items()})
    return out.getvalue().rstrip("\n")


def has_prediction(comp: Comparison) -> bool:
    """Whether any good level of any table has a tok/s predicted at launch to show beside it."""
    return any(_prediction(row, c) is not None for t in comp.tables for row in t.rows for c in row.cells)


def prediction_sources(comp: Comparison) -> list[str]:
    """Which source predicted the tok/s shown in parentheses, per layout: "Predicted by measured
    kernels (AIConfigurator 0.12.0, h200_sxm, vllm 0.24.0): tp8, tp8 ep." (docs/speed.md)."""
    layouts: dict[str, list[str]] = {}
    for table in comp.tables:
        for row in table.rows:
            exp = row.source()
            for point in row.cells.values():
                source = row.source(point)
                if source is not None and predicted_tok_s(source, point) is not None:
                    exp = source
                    break
            label = exp.prediction.speed if exp is not None else ""
            if label and row.layout not in layouts.setdefault(label, []):
                layouts[label].append(row.layout)
    return [f"Predicted by {label}: {', '.join(names)}." for label, names in layouts.items()]


def _prediction(row: ComparisonRow, level: int) -> float | None:
    """What was predicted at launch for the level's good point, at its lengths."""
    point = row.cells.get(level)
    exp = row.source(point) if point is not None else None
    return predicted_tok_s(exp, point) if exp is not None and point is not None else None


def _measured_text(row: ComparisonRow, level: int, predicted: bool) -> str:
    """A good level's tok/s, marked if it is not clean (`118.6 [3/9 err]`); with `predicted`, the
    prediction after it in parentheses."""
    text = _marked(row.cells[level])
    guess = _prediction(row, level) if predicted else None
    return f"{text} ({format_tok_s(guess)})" if guess is not None else text


def _headers(comp: Comparison) -> list[str]:
    return [f"C={c}" + (" tok/s" if i == 0 else "") for i, c in enumerate(comp.levels)]


def _marked(point: BenchPoint) -> str:
    """A good level's tok/s with what keeps it from being clean: `118.6 [3/9 err]`, `458.0`."""
    mark = level_mark(point)
    return format_tok_s(point.output_tok_s) + (f" [{mark}]" if mark else "")


def _peak_text(peak: BenchPoint) -> str:
    return f"{_marked(peak)} (C={peak.concurrency})"


def _missing(row: ComparisonRow, level: int) -> str:
    """A level without a good number: failed (its reason is in csv and json), or not measured."""
    return "failed" if level in row.failed else "-"


def markdown_table(comp: Comparison, predicted: bool = False) -> str:
    """One table as GitHub markdown: the best of each column and the best peak in bold."""

    def bold(text: str, best: bool) -> str:
        return f"**{text}**" if best else text

    lines = [
        "| " + " | ".join(["Layout", *_headers(comp), "Peak"]) + " |",
        "|" + "|".join(["---", *["---:"] * (len(comp.levels) + 1)]) + "|",
    ]
    for row in comp.rows:
        if row.peak is None:
            cause = f"failed: {row.diagnosis or 'no cause recorded'}".replace("|", "\\|")
            cells = [cause, *[""] * len(comp.levels)]
        else:
            cells = [
                bold(_measured_text(row, c, predicted), comp.best.get(c) == row.layout)
                if c in row.cells
                else _missing(row, c)
                for c in comp.levels
            ]
            cells.append(bold(_peak_text(row.peak), comp.best_peak == row.layout))
        lines.append("| " + " | ".join([row.layout.replace("|", "\\|"), *cells]) + " |")
    return "\n".join(lines)


def _table(comp: Comparison, predicted: bool = False) -> str:
    """Numbers right-aligned; `*` after the best of each column, a space after the others."""

    def mark(text: str, best: bool) -> str:
        return text + ("*" if best else " ")

    headers = [mark(h, False) for h in [*_headers(comp), "peak"]]
    grid = {}  # layout -> its number cells; layouts that never served are not in it
    for row in comp.rows:
        if row.peak is not None:
            cells = [
                mark(_measured_text(row, c, predicted), comp.best.get(c) == row.layout)
                if c in row.cells
                else _missing(row, c) + " "
                for c in comp.levels
            ]
            grid[row.layout] = [
                *cells,
                mark(_marked(row.peak), comp.best_peak == row.layout),
            ]
    first = max(len(text) for text in ["layout", *(row.layout for row in comp.rows)])
    widths = [max([len(h), *(len(cells[i]) for cells in grid.values())]) for i, h in enumerate(headers)]

    def line(layout: str, cells: Sequence[str], tail: str = "") -> str:
        columns = [layout.ljust(first), *(c.rjust(w) for c, w in zip(cells, widths))]
        return ("  ".join(columns) + tail).rstrip()

    lines = [line("layout", headers), "  ".join("-" * w for w in [first, *widths])]
    for row in comp.rows:
        if row.peak is not None:
            lines.append(line(row.layout, grid[row.layout], f" at C={row.peak.concurrency}"))
        else:
            lines.append(f"{row.layout.ljust(first)}  failed: {row.diagnosis or 'no cause recorded'}")
    return "\n".join(lines)


def _records(comp: Comparison) -> list[dict[str, Any]]:
    """One record per (layout, concurrency), table by table, newest first; a layout that never
    served has one, without numbers. Each says whether the box was simulated and its open-loop
    rate (lengths are columns of every point), and sets its measurement beside the prediction
    (`_against`); `best` is within its table."""
    records = []
    for table in comp.tables:
        for row in table.rows:
            head = {
                "layout": row.layout,
                "engine": row.engine,
                "experiment": row.experiment,
                "outcome": row.outcome,
                "diagnosis": row.diagnosis or None,
                "simulated": row.simulated,
            }
            if not row.benched:
                records.append(
                    head
                    | {name: None for name in METRICS}
                    | {"clean": None, "contended": None, "rate": None, "best": False}
                    | _against(row, None)
                )
                continue
            for level, point in sorted({**row.failed, **row.cells}.items()):
                metrics = {name: getattr(point, name) for name in METRICS}
                best = table.best.get(level) == row.layout and level in row.cells
                flaws = {"clean": is_clean(point), "contended": contention(point)}
                tail = {"rate": table.workload.rate, "best": best, "extra": point.extra}
                records.append(head | metrics | flaws | tail | _against(row, point))
    return records


def _against(row: ComparisonRow, point: BenchPoint | None) -> dict[str, Any]:
    """Predicted and measured side by side, with measured over predicted: tok/s of the level (a
    failed level measured none), memory, NVML peaks and load time of the launch that measured it,
    and the engine's own figures for the level (running, waiting, KV usage) where it served them."""
    exp = row.source(point)
    if exp is None:
        return {"predicted": None, "measured": None, "measured_over_predicted": None}
    guess = predicted_tok_s(exp, point) if point is not None else None
    tok_s = point.output_tok_s if point is not None and not point.failed else None
    guessed, logged = predicted_memory(exp), measured_memory(exp)
    engine = point.extra.get("engine") if point is not None else None
    return {
        "predicted": {
            "tok_s": guess,
            **guessed.to_json(),
            "learned_runs": learned_runs(exp),
            "speed": exp.prediction.speed or None,
        },
        "measured": {
            "experiment": exp.id,
            "tok_s": tok_s,
            **logged.to_json(),
            "peak_gib": {str(gpu): round(used, 2) for gpu, used in peak_gib(exp).items()},
            "load_seconds": exp.load_seconds,
            "engine": engine if isinstance(engine, dict) else None,
        },
        "measured_over_predicted": {"tok_s": ratio(tok_s, guess), **logged.over(guessed)},
    }


# -- before anything was benchmarked -----------------------------------------------------------

FIRST_LEVELS = "c=1,32,64"  # a first sweep that ends in minutes


def no_results_hint(profile: str | None) -> str:
    """What `cockpit results` says before anything was benchmarked: the command that launches and
    benches a layout the planner says fits the profile's box, or that none fits. `profile`: as the
    user gave it (a name or a YAML file); None for the default one."""
    try:
        setup, loaded = build_setup(SetupOverrides(profile=profile))
    except CockpitError as err:
        return f"no benchmark results yet for profile {profile}, and it does not load: {err}"
    return try_hint(loaded.name, profile, layout_to_try(setup, loaded.layouts), str(setup.hardware))


def layout_to_try(setup: Setup, preferred: Sequence[str] = ()) -> Verdict | None:
    """The first layout that fits (else the first that fits tightly): the profile's own layouts
    first, then the plan's, most GPUs first; None when the planner says every layout fails."""
    own = []
    for text in preferred:
        try:
            own.append(plan_layout(setup, text))
        except CockpitError:  # a profile's odd layout is not what to suggest
            continue
    return _runnable(own) or _runnable(plan_all(setup))  # the whole plan only when needed


def _runnable(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The first that fits, else the first that fits tightly."""
    for mark in (FITS, TIGHT):
        if found := next((v for v in verdicts if v.verdict == mark), None):
            return found
    return None


def try_hint(name: str, given: str | None, verdict: Verdict | None, box: str) -> str:
    """One line: nothing benchmarked for the profile yet, and what to run first. `given`: the
    profile as the user named it, repeated in the command unless it is the default."""
    option = "" if given in (None, DEFAULT_PROFILE) else f" --profile {shlex.quote(str(given))}"
    if verdict is None:
        return (
            f"no benchmark results yet for profile {name}, and the planner says no layout fits its box "
            f"({box}): `cockpit plan{option}` says why"
        )
    fits = "fits" if verdict.verdict == FITS else "fits, tightly"
    return (
        f"no benchmark results yet for profile {name}: the planner says {verdict.layout} {fits}; "
        f'run `cockpit run "{verdict.layout}"{option} --bench {FIRST_LEVELS}`'
    )
