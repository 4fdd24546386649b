"""The tune view: the candidates with their predicted, best-case and measured goals, the stopping
rule, a chart of goal against p99 latency with the Pareto front, and after the end the winner's
command.

`TuneBoard` folds the tune's events (no Textual, as `tui.state` does for the server and the bench);
`TuneView` draws it. The events are few (one per launch and level), so each redraws the whole view.
The table keeps the columns that fit its width, the candidate and its state always; the line under
it says the highlighted candidate in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from cockpit.core.tuning.events import (
    Margin,
    Point,
    Row,
    TuneEvent,
    TuneLevel,
    TuneMeasured,
    TuneRanked,
    TuneResult,
    TuneStarted,
    TuneStep,
    goal_text,
    margin_text,
    table_rows,
)
from cockpit.core.tuning.margin import UNMEASURED
from cockpit.core.tuning.pareto import AXIS_LABELS, Axis, latency, latency_axis, pareto_front
from cockpit.core.tuning.search import DROPPED, NOT_REACHED, OUT_OF_BOUNDS, OUTRANKED
from cockpit.core.tuning.spec import TuneSpec
from cockpit.reports.tune import level_text

RUNNING, BEST, FAILED_MARK = "▶", "★", "✗"
MIN_WIDTH, MIN_HEIGHT = 30, 8  # smaller, the chart cannot be read
EMPTY = (
    "no tune yet: `tune itl<50ms n=4` launches the most promising layouts, measures each one's "
    "goodput under the bounds, and stops when nothing left can beat the best"
)
# A candidate's state in the table, in a word or two (the line under the table has the whole note).
STATE_WORDS = {
    "untried": "untried",
    "running": "running",
    "measured": "measured",
    "failed": "failed",
    DROPPED: "dropped",
    OUTRANKED: "can't win",
    OUT_OF_BOUNDS: "misses bounds",
    NOT_REACHED: "not reached",
}


@dataclass(frozen=True)
class Column:
    """A table column; when the table is too narrow, the lowest ``keep`` goes first (0: never)."""

    label: str
    key: str
    keep: int = 0


COLUMNS = (
    Column("", "mark"),
    Column("candidate", "candidate"),
    Column("GPUs", "gpus", keep=1),
    Column("predicted", "predicted", keep=4),
    Column("best case", "best", keep=2),
    Column("measured", "measured"),
    Column("level", "level", keep=3),
    Column("state", "state"),
)
NAME_COLUMN = 1
CELL_PADDING = 1  # DataTable's own, each side of a cell


@dataclass
class TuneBoard:
    """What the screen knows of the current (or last) tune, folded from its events."""

    tune: int | None = None
    spec: TuneSpec | None = None
    fitting: int = 0
    left_out: int = 0
    resumed: int = 0
    rows: tuple[Row, ...] = ()
    best: str | None = None
    best_goal: float | None = None
    margin: Margin = UNMEASURED
    bound: float = 0.0  # the highest best case (optimistic bound) among the candidates left
    per_gpu: bool = False
    step: TuneStep | None = None  # the candidate launched and not yet measured
    points: list[Point] = field(default_factory=list)
    result: TuneResult | None = None

    @classmethod
    def of_result(cls, result: TuneResult | None) -> TuneBoard:
        """A journaled tune's end, as the view showed it when it ended."""
        board = cls()
        if result is not None:
            board.tune, board.spec = result.tune, result.spec
            board.apply(result)
        return board

    @property
    def axis(self) -> Axis:
        spec = self.spec
        return latency_axis(spec.ttft_ms, spec.itl_ms) if spec else "itl"

    @property
    def running(self) -> str | None:
        return self.step.name if self.step is not None else None

    @property
    def front(self) -> list[Point]:
        return pareto_front(self.points, self.axis)

    def apply(self, event: TuneEvent) -> None:
        match event:
            case TuneStarted():  # a new tune, or one resumed with the levels it measured
                vars(self).update(vars(TuneBoard()))
                self.tune, self.spec = event.tune, event.spec
                self.fitting, self.left_out, self.resumed = event.fitting, event.left_out, event.resumed
                self.points = list(event.points)
            case TuneRanked():
                self.rows, self.best, self.best_goal = event.rows, event.best, event.best_goal
                self.margin, self.bound, self.per_gpu = event.margin, event.bound, event.per_gpu
            case TuneStep():
                self.step, self.per_gpu = event, event.per_gpu
            case TuneLevel():
                self.points.append(event.point)
            case TuneMeasured():
                self.step = None
            case TuneResult():
                self.result, self.step = event, None
                self.rows, self.points, self.per_gpu = event.rows, list(event.points), event.per_gpu
                self.best, self.best_goal, self.fitting = event.winner, event.winner_goal, event.fitting

    # -- lines ------------------------------------------------------------------------------

    def goal(self, value: float | None) -> str:
        return goal_text(value, self.per_gpu)

    def status_lines(self) -> list[str]:
        """The spec, the best so far against the best case left (the stopping rule), the running one."""
        if self.tune is None:
            return [EMPTY]
        left_out = f", {self.left_out} left out" if self.left_out else ""  # a journaled result has no count
        lines = [
            f"tune {self.tune} · {self.spec.describe().removeprefix('tune ') if self.spec else ''} · {self.fitting} candidates fit{left_out}"
        ]
        best = f"best so far {self.best} {self.goal(self.best_goal)}" if self.best else "nothing measured yet"
        if self.result is None:
            lines.append(
                f"{best} · best case left {self.goal(self.bound)} ({margin_text(self.margin)})"
                " · stops when the best so far ≥ the best case left"
            )
        if self.step is not None:
            s = self.step
            lines.append(
                f"{RUNNING} candidate {s.number}: {s.name}, predicted {self.goal(s.predicted)}, best case {self.goal(s.bound)}"
            )
        return lines

    def result_lines(self) -> list[str]:
        """After the end: the winner and its command, whole (it is there to be copied)."""
        result = self.result
        if result is None:
            return []
        if result.interrupted:
            return [
                f"■ {result.ending.partition(': ')[2]}"
                + (f"; best so far {result.winner} {self.goal(result.winner_goal)}" if result.winner else "")
            ]
        saved = f"{result.saved} launch(es) saved against trying all {result.fitting}"
        if result.winner is None:
            return [f"no winner ({result.reason}); {saved}"]
        level = level_text(result.winner_level, self._rates)
        lines = [
            f"✓ winner {result.winner}: {self.goal(result.winner_goal)} at {level} after "
            f"{result.launches} launch(es), {saved} ({result.reason})"
        ]
        if result.argv:
            lines.append(f"command: {result.command}")
        return lines

    @property
    def _rates(self) -> bool:
        spec = self.spec
        return bool(spec and spec.rates)

    def table(self) -> list[tuple[str, list]]:
        """(key, cells) per candidate, a cell per column of ``COLUMNS``: tried first, best first;
        the running and best marked. The goals go without their unit, which the spec's goal names."""
        out = []
        number = self._number
        for row in table_rows(self.rows):
            mark = (
                RUNNING
                if row.name == self.running
                else BEST
                if row.name == self.best
                else FAILED_MARK
                if row.state == "failed"
                else ""
            )
            note = state_text(row, self.running)
            style = "bold green" if mark == BEST else "bold" if mark == RUNNING else ""
            cells = [
                mark,
                Text(row.name, style=style),
                str(row.gpus),
                number(row.predicted),
                number(row.bound),
                Text(number(row.measured), style=style),
                level_text(row.level, self._rates),
                Text(note, style="red" if row.state == "failed" else "dim" if row.state == DROPPED else ""),
            ]
            out.append((row.name, cells))
        return out

    def _number(self, value: float | None) -> str:
        """A goal without its unit, for the table's cells."""
        return goal_text(value, self.per_gpu).partition(" ")[0]

    def note(self, name: str) -> str:
        """One candidate's row in full, for the line under the table."""
        row = next((r for r in self.rows if r.name == name), None)
        if row is None:
            return ""
        what = (
            f"measured {self.goal(row.measured)}"
            if row.measured is not None
            else STATE_WORDS.get(row.state, row.state)
        )
        return (
            f"{row.name}: predicted {self.goal(row.predicted)}, best case {self.goal(row.bound)}, {what}"
            + (f" · {row.note}" if row.note else "")
        )

    def front_line(self) -> str:
        front = self.front
        if not front:
            return ""
        unit = AXIS_LABELS[self.axis].split(" (")[0]
        parts = [
            f"{p.name} {level_text(p.level, self._rates)} {self.goal(p.goal)} @ {latency(p, self.axis):,.0f} ms"
            for p in front
        ]
        return f"* Pareto front ({unit}): " + " · ".join(parts)


def state_text(row: Row, running: str | None) -> str:
    """What became of a candidate in a word or two: running, measured, failed, or why not tried
    (the line under the table says why in full)."""
    if row.name == running:
        return "running"
    if row.state == "untried" and row.note:  # journaled by an older cockpit, the why in the note
        return "not tried"
    return STATE_WORDS.get(row.state, row.state)


@dataclass(frozen=True)
class TableFit:
    """What of the table fits a width: the indexes of ``COLUMNS`` shown and each one's width
    (a candidate's name may be cut to keep the state in view). Given, not measured by the table:
    a table measures its cells when idle, and a row drawn before that keeps a cell cut short."""

    columns: tuple[int, ...]
    widths: tuple[int, ...]


NAME_ROOM = 30  # `tp2 dp4 ep --max-num-seqs 128` (a layout and one knob) keeps this much before a column goes
MIN_NAME_WIDTH = 10  # `tp2 dp4 ep` whole; the line under the table has a name that is cut


def fit_table(cells: Sequence[Sequence[object]], width: int, per_gpu: bool) -> TableFit:
    """The columns of ``COLUMNS`` that fit ``width`` cells: a long candidate name (knobs) is cut to
    ``NAME_ROOM`` before the lowest ``keep`` column is left out, and further when nothing is left
    to leave out; the candidate, its measured goal and its state stay. GPUs only for the per-GPU
    goal (for tok/s every candidate uses all the GPUs the profile allows)."""
    shown = [i for i, column in enumerate(COLUMNS) if per_gpu or column.key != "gpus"]
    needed = [
        max([cell_len(c.label), *(cell_len(str(row[i])) for row in cells)]) for i, c in enumerate(COLUMNS)
    ]

    def room_for_name() -> int:
        return width - sum(needed[i] + 2 * CELL_PADDING for i in shown) + needed[NAME_COLUMN]

    droppable = sorted((i for i in shown if COLUMNS[i].keep), key=lambda i: COLUMNS[i].keep)
    while droppable and room_for_name() < min(needed[NAME_COLUMN], NAME_ROOM):
        shown.remove(droppable.pop(0))
    needed[NAME_COLUMN] = max(MIN_NAME_WIDTH, min(needed[NAME_COLUMN], room_for_name()))
    return TableFit(tuple(shown), tuple(needed[i] for i in shown))


def fitted(cell: object, width: int) -> object:
    """A cell cut to its column's width with an ellipsis, so a cut name reads as cut."""
    if cell_len(str(cell)) <= width:
        return cell
    text = cell.copy() if isinstance(cell, Text) else Text(str(cell))
    text.truncate(width, overflow="ellipsis")
    return text


# -- the chart ------------------------------------------------------------------------------


def render_goal_chart(
    points: Sequence[Point],
    axis: Axis,
    per_gpu: bool,
    width: int,
    height: int,
    bound_ms: float | None = None,
) -> str:
    """Goal against p99 latency, each measured level a point (o), the Pareto front a line of *;
    ``bound_ms`` (the spec's bound on the axis' latency, which the points measure as the bound
    checks it) is drawn as a vertical line. "" when it does not fit or there is nothing to draw.
    plotext keeps its figure in module state: call from the screen's thread only."""
    placed = [p for p in points if latency(p, axis) is not None]
    if width < MIN_WIDTH or height < MIN_HEIGHT or not placed:
        return ""
    try:
        import plotext
    except ImportError:
        return ""
    front = pareto_front(placed, axis)
    others = [p for p in placed if p not in front]
    xs = [latency(p, axis) or 0.0 for p in placed]
    top = max(p.goal for p in placed) or 1.0
    legend = "* Pareto front · o dominated" + (f" · | {axis}<{bound_ms:g}ms" if bound_ms else "")
    y_label = "tok/s/GPU" if per_gpu else "tok/s"
    try:
        if not (hasattr(plotext, "figure") and hasattr(plotext.figure, "signal")):
            return ""  # plotext 5 draws this chart badly; the front's line under it says the same
        fig = plotext.figure
        fig.clear()
        fig.plot_size(width, height - 1)  # the legend's line goes under it
        fig.theme("colorless")
        if bound_ms and bound_ms <= max(xs) * 2:
            _draw_line(fig, [bound_ms, bound_ms], [0.0, top], "|")
        if len(front) > 1:
            _draw_line(fig, [latency(p, axis) or 0.0 for p in front], [p.goal for p in front], "·")
        if others:
            fig.draw(
                fig.signal([latency(p, axis) or 0.0 for p in others], [p.goal for p in others], marker="o")
            )
        fig.draw(fig.signal([latency(p, axis) or 0.0 for p in front], [p.goal for p in front], marker="*"))
        fig.ruler("y").ticks([0, top / 2, top], [_tick(v) for v in (0, top / 2, top)])
        fig.label(AXIS_LABELS[axis], "x")
        fig.label(y_label, "y")
        return str(fig.build()).rstrip("\n") + "\n" + legend[:width]
    except Exception:  # a chart is a nicety: a plotext quirk must not take the pane down
        return ""


def _draw_line(fig, xs: list[float], ys: list[float], marker: str) -> None:
    signal = fig.signal(xs, ys, marker=marker)
    signal.lines()
    fig.draw(signal)


def _tick(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 10_000 else f"{value:,.0f}"


class GoalChart(Static):
    """The chart, redrawn when the points change or the pane is resized."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.board = TuneBoard()
        self.text = ""

    def plot(self, board: TuneBoard) -> None:
        self.board = board
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        board = self.board
        spec = board.spec
        bound = (spec.itl_ms if board.axis == "itl" else spec.ttft_ms) if spec else None
        self.text = render_goal_chart(
            board.points, board.axis, board.per_gpu, self.content_size.width, self.content_size.height, bound
        )
        self.update(Text.from_ansi(self.text) if self.text else "")


# -- the view -------------------------------------------------------------------------------


class TuneView(Vertical):
    DEFAULT_CSS = """
    TuneView {
        #tune-status, #tune-result, #tune-detail, #tune-front {
            height: auto;
            padding: 0 1;
        }
        #tune-result {
            background: $success 20%;
        }
        #tune-result.-empty {
            display: none;
        }
        #tune-table {
            height: auto;
            max-height: 8;
        }
        #tune-detail {
            max-height: 2;
        }
        #tune-chart {
            height: 1fr;
            min-height: 0;
        }
    }
    """  # the compact screen's changes are in app.tcss (a widget's own CSS is scoped to it)

    SCROLLBAR = 2  # the table's vertical scrollbar, there once the rows outgrow it

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.board = TuneBoard()
        self.fit = TableFit((), ())  # the columns the table shows now

    def compose(self) -> ComposeResult:
        yield Static(EMPTY, id="tune-status", markup=False)
        yield DataTable(id="tune-table", cursor_type="row")
        yield Static(id="tune-detail", markup=False)
        yield Static(id="tune-result", markup=False, classes="-empty")
        yield GoalChart(id="tune-chart")
        yield Static(id="tune-front", markup=False)

    def on_mount(self) -> None:
        self._set_columns(fit_table([], self.content_size.width - self.SCROLLBAR, per_gpu=False))

    def on_resize(self) -> None:
        self.show(self.board)

    def _set_columns(self, fit: TableFit) -> None:
        """Show these columns (the rows are added again after)."""
        if fit == self.fit:
            return
        self.fit = fit
        self.table.clear(columns=True)
        for i, width in zip(fit.columns, fit.widths):
            self.table.add_column(COLUMNS[i].label, key=COLUMNS[i].key, width=width)

    @property
    def table(self) -> DataTable:
        return self.query_one("#tune-table", DataTable)

    @property
    def chart(self) -> GoalChart:
        return self.query_one(GoalChart)

    def show(self, board: TuneBoard) -> None:
        """Draw the board whole: the rows keep the cursor on the candidate it was on."""
        self.board = board
        self.query_one("#tune-status", Static).update("\n".join(board.status_lines()))
        result = board.result_lines()
        result_line = self.query_one("#tune-result", Static)
        result_line.update("\n".join(result))
        result_line.set_class(not result, "-empty")
        table = self.table
        highlighted = self._highlighted_key()
        rows = board.table()
        width = self.content_size.width - self.SCROLLBAR
        fit = fit_table([cells for _, cells in rows], width, board.per_gpu)
        table.clear()
        self._set_columns(fit)
        for key, cells in rows:
            table.add_row(*(fitted(cells[i], w) for i, w in zip(fit.columns, fit.widths)), key=key)
        if highlighted is not None and highlighted in {key for key, _ in rows}:
            table.move_cursor(row=table.get_row_index(highlighted), animate=False)
        self.query_one("#tune-detail", Static).update(board.note(self._highlighted_key() or ""))
        self.chart.plot(board)
        self.query_one("#tune-front", Static).update(board.front_line())

    def _highlighted_key(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except CellDoesNotExist:  # the cursor past the rows after a clear
            return None
        return str(key) if key is not None else None

    @on(DataTable.RowHighlighted, "#tune-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = str(event.row_key.value) if event.row_key is not None else ""
        self.query_one("#tune-detail", Static).update(self.board.note(key))
