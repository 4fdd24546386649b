"""The layout picker: every layout the engine can run on this box, and the selected one in full.

The table gives the verdict mark (✓ fits, ~ tight, ✗ fails), GPUs used, weights per GPU and
the predicted tok/s; below it, the selected layout's placement, every reason in the engine's
words, its predictions (marked calibrated from n runs, or default) beside what this box last
measured of it, and the exact argv. Enter asks the app to launch it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from cockpit.core.layout import Layout
from cockpit.core.planner import FAILS, FITS, Verdict
from cockpit.faces.tui.format import memory_line
from cockpit.faces.tui.messages import LaunchRequested
from cockpit.reports.measured import Against, LastMeasured, memory_of
from cockpit.reports.plan import verdict_mark

MARK_STYLES = {FITS: "green", FAILS: "red"}
Describer = Callable[[Verdict], Text]  # a verdict's detail under the table
Replanner = Callable[[Layout], Verdict]  # a layout planned with the setup of the list given with it
Cell = str | Text


def verdict_text(v: Verdict) -> Text:
    return Text(verdict_mark(v.verdict), style=MARK_STYLES.get(v.verdict, "yellow"))


def peak_prediction(v: Verdict) -> str:
    return f"{max(v.predicted_tok_s.values()):,.0f}" if v.predicted_tok_s else "-"


def describe(v: Verdict, argv: str, suggestion: str = "", against: Against | None = None) -> Text:
    """The selected layout: placement, memory, every reason, predicted speed, the exact command.
    With `against`, the predictions are marked (calibrated from n runs, or default) and what this
    box last measured of the layout stands under each, with how far it landed from it."""
    last = against.last if against is not None else None
    out = Text()
    out.append(f"{v.layout}", style="bold")
    out.append("  ")
    out.append_text(verdict_text(v))
    if v.placement is not None:
        out.append(f"  {v.placement}")
    out.append("\n")
    if v.memory is not None:
        m = v.memory
        out.append(memory_line(m) + "\n")
    if last is not None and (last.memory.known or last.peak_gib):
        out.append(measured_memory(v, last) + "\n", style=MEASURED_STYLE)
    for reason in v.reasons:
        mark = "~ " if reason.rule == "kv-thin" else "✗ "
        out.append(mark + reason.message.strip(), style="yellow" if mark == "~ " else "red")
        if reason.detail and reason.detail not in reason.message:
            out.append(f" ({reason.detail})")
        out.append("\n")
    for warning in v.warnings:
        out.append(f"⚠ {warning}\n", style="yellow")
    if suggestion:
        out.append(f"→ {suggestion}\n")
    if v.predicted_tok_s:
        levels = " · ".join(f"C={c} {tok:,.0f}" for c, tok in v.predicted_tok_s.items())
        said = [against.basis, against.speed] if against is not None else []
        basis = f" ({', '.join(s for s in said if s)})" if any(said) else ""
        out.append(f"predicted tok/s{basis}: {levels}\n")
    if against is not None and last is not None and last.points:
        out.append(measured_speed(v, against, last) + "\n", style=MEASURED_STYLE)
    if argv:
        out.append("$ " + argv, style="dim")
    return out


MEASURED_STYLE = "cyan"


def measured_memory(v: Verdict, last: LastMeasured) -> str:
    """`measured #3: weights 53.1 GiB (−1%) · KV 28.4 GiB (−5%), 212,992 tokens (−3%) · peak 86.0 GiB`:
    what the engine logged and NVML saw, each figure with how far it is from the prediction above."""
    memory, predicted = last.memory, memory_of(v.memory)
    figures = []
    if memory.weights_gib is not None:
        figures.append(
            f"weights {memory.weights_gib:.1f} GiB{_off(memory.weights_gib, predicted.weights_gib)}"
        )
    kv = []
    if memory.kv_gib is not None:
        kv.append(f"{memory.kv_gib:.1f} GiB{_off(memory.kv_gib, predicted.kv_gib)}")
    if memory.kv_tokens is not None:
        kv.append(f"{memory.kv_tokens:,} tokens{_off(memory.kv_tokens, predicted.kv_tokens)}")
    if kv:
        figures.append("KV " + ", ".join(kv))
    if last.peak_gib:
        figures.append(f"peak {max(last.peak_gib.values()):.1f} GiB")
    if last.load_seconds is not None:
        figures.append(f"load {last.load_seconds:.0f} s")
    return f"measured #{last.memory_experiment}: " + " · ".join(figures)


def measured_speed(v: Verdict, against: Against, last: LastMeasured) -> str:
    """`measured tok/s #3: C=1 90 (+2%) · C=32 655 (−6%)`: the newest benchmark's levels; one at
    other request lengths than the predictions' says so and is not compared."""
    levels = []
    for c, point in sorted(last.points.items()):
        if against.comparable(point):
            levels.append(
                f"C={c} {point.output_tok_s:,.0f}{_off(point.output_tok_s, v.predicted_tok_s.get(c))}"
            )
        else:
            levels.append(f"C={c} {point.output_tok_s:,.0f} (in={point.input_len} out={point.output_len})")
    return f"measured tok/s #{last.points_experiment}: " + " · ".join(levels)


def _off(measured: float, predicted: float | None) -> str:
    """` (+4%)`: how far a measurement is from its prediction; nothing where none was made."""
    if not predicted:
        return ""
    percent = round((measured / predicted - 1) * 100)
    return f" ({percent:+d}%)".replace("-", "−")


NAME_WIDTH = 24  # the layout column: room for `tp8 dp8 dpa ep8` and a short knob


class LayoutPicker(Vertical):
    """A DataTable of verdicts over a scrolling detail of the highlighted one."""

    # Unscoped, for the compact screen's rule: the detail grows (12 rows, up to 18) to keep the
    # argv in sight under what was measured; a compact screen sets its own height.
    SCOPED_CSS = False
    DEFAULT_CSS = """
    LayoutPicker #layout-table {
        height: 1fr;
    }
    LayoutPicker #layout-detail-box {
        height: auto;
        min-height: 12;
        max-height: 18;
        padding: 0 1;
        border-top: solid $panel-lighten-2;
    }
    Screen.-compact LayoutPicker #layout-detail-box {
        min-height: 0;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.verdicts: dict[str, Verdict] = {}
        self._describe: Describer = lambda v: describe(v, "")
        self._shown: Verdict | None = None
        self._planned: list[Verdict] = []  # the list `load` or `reload` was given

    def compose(self) -> ComposeResult:
        table: DataTable[Cell] = DataTable(id="layout-table", cursor_type="row", zebra_stripes=False)
        table.add_columns("layout", "verdict", "GPUs", "GiB/GPU", "tok/s")
        yield table
        with VerticalScroll(id="layout-detail-box"):
            yield Static(id="layout-detail")

    @property
    def table(self) -> DataTable[Cell]:
        return self.query_one("#layout-table", DataTable)

    def load(self, verdicts: list[Verdict], describer: Describer) -> None:
        """Fill the table; `describer(verdict) -> Text` writes the detail (it knows the argv)."""
        self._describe = describer
        self._planned = verdicts
        self.verdicts = {str(v.layout): v for v in verdicts}
        self.table.clear()
        for v in verdicts:
            self._add_row(v)
        if verdicts:
            self.show(verdicts[0])

    def add(self, verdict: Verdict) -> None:
        """A layout typed with knobs (`try tp8 ep --max-num-seqs 512`) gets its own row."""
        if str(verdict.layout) not in self.verdicts:
            self.verdicts[str(verdict.layout)] = verdict
            self._add_row(verdict)
        self.select(str(verdict.layout))

    def _add_row(self, v: Verdict) -> None:
        weights = f"{v.memory.weights_gib:.1f}" if v.memory else "-"
        gpus = str(v.gpus_used) if v.placement else "-"
        name = str(v.layout)  # long knobs are cut in the table; the detail below shows them whole
        shown = name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
        self.table.add_row(shown, verdict_text(v), gpus, weights, peak_prediction(v), key=name)

    def select(self, name: str) -> bool:
        """Move the cursor to a layout; False when it is not in the table."""
        if name not in self.verdicts:
            return False
        self.table.move_cursor(row=self.table.get_row_index(name))
        self.show(self.verdicts[name])
        return True

    def show(self, verdict: Verdict) -> None:
        self._shown = verdict
        self.query_one("#layout-detail", Static).update(self._describe(verdict))

    def refresh_detail(self) -> None:
        """Describe the shown layout again: what the journal measured of it may have changed."""
        if self._shown is not None:
            self.show(self._shown)

    def reload(self, verdicts: list[Verdict], replan: Replanner | None = None) -> None:
        """After a refresh: a list planned again (what the box taught changed the predictions)
        replaces the rows, the same layout staying highlighted; rows typed with knobs stay,
        planned again by ``replan`` so their predictions agree with the list's mark. The shown
        layout is described again either way, its measurements perhaps new."""
        if verdicts is not self._planned:
            self._planned = verdicts
            shown = str(self._shown.layout) if self._shown is not None else None
            planned = {str(v.layout): v for v in verdicts}
            typed = {
                name: replan(v.layout) if replan is not None else v
                for name, v in self.verdicts.items()
                if name not in planned
            }
            self.verdicts = planned | typed
            self.table.clear()
            for verdict in self.verdicts.values():
                self._add_row(verdict)
            if shown is not None and shown in self.verdicts:
                self._shown = self.verdicts[shown]
                self.table.move_cursor(row=self.table.get_row_index(shown))
        self.refresh_detail()

    @on(DataTable.RowHighlighted, "#layout-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        verdict = self.verdicts.get(str(event.row_key.value))
        if verdict is not None:
            self.show(verdict)

    @on(DataTable.RowSelected, "#layout-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        verdict = self.verdicts.get(str(event.row_key.value))
        if verdict is not None:
            self.post_message(LaunchRequested(verdict.layout))
