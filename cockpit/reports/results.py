"""`cockpit results`: the comparison as a terminal table, a markdown table, csv or json.

The table and markdown show tok/s per layout and concurrency, the best of each column marked;
csv and json hold one record per layout and concurrency with every metric the client measured.
json also sets each record's measurement beside what was predicted at launch (tok/s of the level,
memory of the launch: cockpit.reports.measured); the others show the predicted tok/s when asked.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from cockpit.errors import CockpitError
from cockpit.journal import BenchPoint
from cockpit.reports.comparison import Comparison, ComparisonRow
from cockpit.reports.measured import (
    learned_runs,
    measured_memory,
    peak_gib,
    predicted_memory,
    predicted_tok_s,
    ratio,
)
from cockpit.reports.numbers import format_tok_s

FORMATS = ("table", "markdown", "csv", "json")
# What a reader compares, in the order csv and json show it.
METRICS = tuple(
    f.name for f in fields(BenchPoint) if f.name not in ("extra", "id", "experiment_id", "created")
)
_RECORD_FIELDS = ["layout", "engine", "experiment", "outcome", "diagnosis", *METRICS, "best"]
_PREDICTED_FIELDS = ["predicted_tok_s", "measured_over_predicted"]  # csv, with predicted=True
PREDICTED_NOTE = "In parentheses: the tok/s predicted for that level when the layout was launched."


def format_comparison(comp: Comparison, fmt: str, predicted: bool = False) -> str:
    """table (terminal), markdown (a GitHub table), csv or json (one record per layout and
    concurrency). `predicted` adds what was predicted at launch beside each measured tok/s
    (json always has it); without it the output is what it always was."""
    if fmt not in FORMATS:
        raise CockpitError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}.")
    if fmt == "json":
        return json.dumps(_records(comp), indent=2)
    if fmt == "csv":
        return _csv(comp, predicted)
    if not comp.rows:
        scope = f" for profile {comp.profile}" if comp.profile else ""
        return f'no benchmark results yet{scope}: run `cockpit run "tp8" --bench c=1,32,64`'
    text = _markdown(comp, predicted) if fmt == "markdown" else _table(comp, predicted)
    if predicted and any(_prediction(row, c) is not None for row in comp.rows for c in row.cells):
        text += "\n\n" + (f"_{PREDICTED_NOTE}_" if fmt == "markdown" else PREDICTED_NOTE)
    return text


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
                "measured_over_predicted": record["measured_over_predicted"]["tok_s"],
            }
        writer.writerow({k: int(v) if isinstance(v, bool) else v for k, v in record.items()})
    return out.getvalue().rstrip("\n")


def _prediction(row: ComparisonRow, level: int) -> float | None:
    """What was predicted at launch for the level's good point, at its lengths."""
    point = row.cells.get(level)
    exp = row.source(point) if point is not None else None
    return predicted_tok_s(exp, point) if exp is not None and point is not None else None


def _measured_text(row: ComparisonRow, level: int, predicted: bool) -> str:
    """A good level's tok/s; with `predicted`, the prediction after it in parentheses."""
    text = format_tok_s(row.cells[level].output_tok_s)
    guess = _prediction(row, level) if predicted else None
    return f"{text} ({format_tok_s(guess)})" if guess is not None else text


def _headers(comp: Comparison) -> list[str]:
    return [f"C={c}" + (" tok/s" if i == 0 else "") for i, c in enumerate(comp.levels)]


def _peak_text(peak: BenchPoint) -> str:
    return f"{format_tok_s(peak.output_tok_s)} (C={peak.concurrency})"


def _missing(row: ComparisonRow, level: int) -> str:
    """A level without a good number: failed (its reason is in csv and json), or not measured."""
    return "failed" if level in row.failed else "-"


def _markdown(comp: Comparison, predicted: bool = False) -> str:
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
                mark(format_tok_s(row.peak.output_tok_s), comp.best_peak == row.layout),
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
    if comp.best or comp.best_peak:
        lines.append("* most tok/s at that concurrency")
    return "\n".join(lines)


def _records(comp: Comparison) -> list[dict[str, Any]]:
    """One record per (layout, concurrency); a layout that never served has one, without numbers.
    Each sets its measurement beside the prediction (`_against`)."""
    records = []
    for row in comp.rows:
        head = {
            "layout": row.layout,
            "engine": row.engine,
            "experiment": row.experiment,
            "outcome": row.outcome,
            "diagnosis": row.diagnosis or None,
        }
        if row.peak is None and not row.failed:
            records.append(head | {name: None for name in METRICS} | {"best": False} | _against(row, None))
            continue
        for level, point in sorted({**row.failed, **row.cells}.items()):
            metrics = {name: getattr(point, name) for name in METRICS}
            best = comp.best.get(level) == row.layout and level in row.cells
            records.append(head | metrics | {"best": best, "extra": point.extra} | _against(row, point))
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
        "predicted": {"tok_s": guess, **guessed.to_json(), "learned_runs": learned_runs(exp)},
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
