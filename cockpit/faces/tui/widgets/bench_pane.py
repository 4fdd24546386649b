"""The benchmark pane: the running level, live tok/s, TTFT and ITL, the comparison table and chart.

The live part folds `BenchView`; the table and the chart come from `reports.comparison` and
are redrawn only when the journal changed (a level finished, `results`), never per tick.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Sparkline, Static

from cockpit.faces.tui.chart import render_chart
from cockpit.faces.tui.state import BenchView
from cockpit.reports.comparison import (
    BenchPoint,
    Comparison,
    ComparisonRow,
    is_clean,
    level_mark,
    mark_detail,
)
from cockpit.reports.numbers import format_ms, format_tok_s

BEST = " ★"  # the best of a column: a mark, not only a colour
FLAWED = "yellow"  # a level that is not clean: its mark says why (`[3/9 err]`), the colour too
CAUSE_WIDTH = 18


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ResultsChart(Static):
    """plotext's text chart of tok/s against concurrency; empty when the pane is too small."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: list = []

    def plot(self, series: list) -> None:
        self.series = series
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def on_show(self) -> None:
        """Drawn while hidden (a re-attach fills the results before the pane is shown), it had
        no size to draw at: draw now that it has."""
        self._draw()

    def _draw(self) -> None:
        text = render_chart(self.series, self.content_size.width, self.content_size.height)
        self.update(Text.from_ansi(text) if text else "")


class BenchPane(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._details: dict[str, str] = {}  # layout -> its row in full
        self._results = 0  # rows in the comparison: "no benchmark yet" must not deny them
        self._view: BenchView | None = None  # the live view last shown, re-read when results land

    def compose(self) -> ComposeResult:
        yield Static(id="bench-status", markup=False)
        yield Sparkline([], id="bench-spark")
        yield Static(id="bench-latency", markup=False)
        yield Static(id="results-label", markup=False)
        yield DataTable(id="results-table", cursor_type="row")
        yield Static(id="results-detail", markup=False)
        yield ResultsChart(id="bench-chart")

    @property
    def sparkline(self) -> Sparkline:
        return self.query_one("#bench-spark", Sparkline)

    @property
    def results_table(self) -> DataTable:
        return self.query_one("#results-table", DataTable)

    def show_live(self, view: BenchView) -> None:
        self._view = view
        self.query_one("#bench-status", Static).update(self._status(view))
        self.sparkline.data = list(view.ticks)  # a new list: Sparkline redraws on assignment only
        self.sparkline.display = bool(view.ticks)
        latency = view.latency()
        self.query_one("#bench-latency", Static).update(latency)
        self.query_one("#bench-latency", Static).display = bool(latency)

    def _status(self, view: BenchView) -> str:
        if view.experiment is None and self._results:
            return (
                f"no benchmark of this server yet: `bench` measures it · {self._results} result row(s) below"
            )
        return view.status()

    def show_comparison(self, comp: Comparison) -> None:
        """Columns as wide as their widest cell, set here: the table's own sizing lagged behind
        a refill in quick succession (levels landing) and cut numbers to the header's width."""
        table = self.results_table
        table.clear(columns=True)
        self._details = {row.layout: row_detail(row) for row in comp.rows}
        self._results = len(comp.rows)
        self.query_one("#results-label", Static).update(workload_line(comp))
        if self._view is not None:
            self.query_one("#bench-status", Static).update(self._status(self._view))
        self.query_one("#results-detail", Static).update("")
        labels = ["layout", *(f"C={c}" for c in comp.levels), "peak"]
        rows = [(row.layout, result_cells(row, comp)) for row in comp.rows]
        if not comp.rows:
            rows = [("", ["no results yet", *([""] * len(comp.levels)), ""])]
        for i, label in enumerate(labels):
            width = max([len(label), *(Text(str(cells[i])).cell_len for _, cells in rows)])
            table.add_column(label, width=width)
        for key, cells in rows:
            table.add_row(*cells, key=key or None)
        series = [
            (row.layout, sorted(row.cells), [row.cells[c].output_tok_s for c in sorted(row.cells)])
            for row in comp.rows
            if row.cells
        ]
        self.query_one(ResultsChart).plot(series)

    @on(DataTable.RowHighlighted, "#results-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        detail = self._details.get(str(event.row_key.value), "") if event.row_key is not None else ""
        self.query_one("#results-detail", Static).update(detail)


def result_cells(row: ComparisonRow, comp: Comparison) -> list:
    """One layout's cells: tok/s per level (the best marked ★ as well as coloured; a level that is
    not clean marked `[3/9 err]` or `[contended]`, in yellow) and its peak; a layout that never
    served shows its cause, cut by rule (the detail line has it whole)."""
    if row.peak is None:
        cause = _clip(row.diagnosis or "no cause recorded", CAUSE_WIDTH)
        failed = [Text("✗ failed", style="red"), *([""] * (len(comp.levels) - 1))] if comp.levels else []
        return [row.layout, *failed, Text(cause if comp.levels else f"✗ failed: {cause}", style="red")]
    cells: list = [row.layout]
    for level in comp.levels:
        point = row.cells.get(level)
        if point is None:
            cells.append("-")
            continue
        best = comp.best.get(level) == row.layout
        cells.append(Text(_tok_s(point) + (BEST if best else ""), style=_style(point, best)))
    best_peak = comp.best_peak == row.layout
    peak = f"{_tok_s(row.peak)} @C={row.peak.concurrency}" + (BEST if best_peak else "")
    cells.append(Text(peak, style=_style(row.peak, best_peak)))
    return cells


def _tok_s(point: BenchPoint) -> str:
    """`118.6`, or `118.6 [3/9 err]` for a level that is not clean."""
    mark = level_mark(point)
    return format_tok_s(point.output_tok_s) + (f" [{mark}]" if mark else "")


def _style(point: BenchPoint, best: bool) -> str:
    if best:
        return "bold green"
    return "" if is_clean(point) else FLAWED


def row_detail(row: ComparisonRow) -> str:
    """One row in full: what the table cuts to fit (a failure's cause) and the latencies it leaves out."""
    if row.peak is None:
        return f"{row.layout} (experiment {row.experiment}) failed: {row.diagnosis or 'no cause recorded'}"
    point = row.peak
    latency = ""
    if point.ttft_ms_p50 is not None or point.itl_ms_p50 is not None:
        latency = f" · TTFT p50 {format_ms(point.ttft_ms_p50)} p99 {format_ms(point.ttft_ms_p99)} ms · ITL p50 {format_ms(point.itl_ms_p50)} p99 {format_ms(point.itl_ms_p99)} ms"
    flawed = [f"C={c}: {mark_detail(p)}" for c, p in sorted(row.cells.items()) if not is_clean(p)]
    aside = [f"C={c}: a newer run ({mark_detail(p)}) set aside" for c, p in sorted(row.set_aside.items())]
    notes = "".join(f" · {note}" for note in (*flawed, *aside))
    return f"{row.layout} (experiment {row.experiment}): peak {format_tok_s(point.output_tok_s)} tok/s at C={point.concurrency}{latency}{notes}"


def workload_line(comp: Comparison) -> str:
    """Which requests the table compares (levels of other lengths are in tables of their own):
    the table must not pass for every result there is."""
    if not comp.benched:
        return ""
    older = (
        f" · {len(comp.earlier)} other workload(s): `export md` and `cockpit results` show them"
        if comp.earlier
        else ""
    )
    return f"results at {comp.label}{older}" if comp.label else ""
