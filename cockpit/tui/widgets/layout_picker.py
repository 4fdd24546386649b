"""The layout picker: every layout the engine can run on this box, and the selected one in full.

The table gives the verdict mark (✓ fits, ~ tight, ✗ fails), GPUs used, weights per GPU and
the predicted tok/s; below it, the selected layout's placement, every reason in the engine's
words and the exact argv. Enter asks the app to launch it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from cockpit.planner import FAILS, FITS, Verdict
from cockpit.reports.plan import verdict_mark
from cockpit.tui.messages import LaunchRequested

MARK_STYLES = {FITS: "green", FAILS: "red"}
Describer = Callable[[Verdict], Text]  # a verdict's detail under the table
Cell = str | Text


def verdict_text(v: Verdict) -> Text:
    return Text(verdict_mark(v.verdict), style=MARK_STYLES.get(v.verdict, "yellow"))


def peak_prediction(v: Verdict) -> str:
    return f"{max(v.predicted_tok_s.values()):,.0f}" if v.predicted_tok_s else "-"


def describe(v: Verdict, argv: str, suggestion: str = "") -> Text:
    """The selected layout: placement, memory, every reason, predicted speed, the exact command."""
    out = Text()
    out.append(f"{v.layout}", style="bold")
    out.append("  ")
    out.append_text(verdict_text(v))
    if v.placement is not None:
        out.append(f"  {v.placement}")
    out.append("\n")
    if v.memory is not None:
        m = v.memory
        out.append(
            f"weights {m.weights_gib:.1f} GiB per GPU (busiest GPU {m.busiest_gpu}) · KV cache {m.kv_budget_gib:.1f} GiB, "
            f"{m.kv_tokens:,} tokens, room for ~{m.max_concurrency:,.0f} requests\n"
        )
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
        out.append(f"predicted tok/s: {levels}\n")
    if argv:
        out.append("$ " + argv, style="dim")
    return out


NAME_WIDTH = 24  # the layout column: room for `tp8 dp8 dpa ep8` and a short knob


class LayoutPicker(Vertical):
    """A DataTable of verdicts over a scrolling detail of the highlighted one."""

    DEFAULT_CSS = """
    LayoutPicker {
        #layout-table {
            height: 1fr;
        }
        #layout-detail-box {
            height: 12;
            padding: 0 1;
            border-top: solid $panel-lighten-2;
        }
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.verdicts: dict[str, Verdict] = {}
        self._describe: Describer = lambda v: describe(v, "")

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
        self.query_one("#layout-detail", Static).update(self._describe(verdict))

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
