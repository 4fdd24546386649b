"""Help, written from the command registry and the app's key bindings."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit.faces.prompt import COMMANDS
from cockpit.faces.tui.screens.dialog import DialogScreen


def help_table(bindings: list[tuple[str, str]]) -> Group:
    """Each command's usage on its own line with what it does below it, the keys and marks in a
    narrow column beside their words: at 80 columns a long usage (`tune`'s) wraps instead of
    taking the width its words needed."""
    parts: list[RenderableType] = [
        Text("Commands", style="bold"),
        Padding(
            Text(
                "typed into the prompt (Esc leaves it for the keys below, `:` or `/` return),"
                " Tab completes, ↑/↓ history"
            ),
            (0, 0, 0, 2),
        ),
        Text(""),
    ]
    for spec in COMMANDS:  # Text, not str: `[c=1,32,64]` is not markup
        parts.append(Padding(Text(spec.usage, style="bold"), (0, 0, 0, 2)))
        parts.append(Padding(Text(spec.summary), (0, 0, 0, 6)))
    parts += [Text(""), Text("Keys", style="bold"), _pairs(bindings)]
    parts += [Text(""), Text("Marks", style="bold"), _pairs(MARKS)]
    parts += [Text(""), Text("Tune (t)", style="bold"), _pairs(TUNE_MARKS)]
    return Group(*parts)


MARKS = [
    ("✓ ~ ✗", "the layout fits, is tight, fails (the planner's verdict)"),
    ("▶", "a GPU of the running layout"),
    ("·", "an idle GPU"),
    ("★", "the best of a column in the results"),
    ("»", "a log line that starts a phase (loading, compiling, warming up, ready)"),
    ("○ ◐ ● ■", "no server · loading · ready · stopped"),
]

TUNE_MARKS = [
    ("▶", "the candidate running"),
    ("★", "the best measured"),
    ("✗", "failed to start"),
    (
        "stops",
        "when the best so far ≥ the best case left (each untried candidate's prediction with the"
        " model's observed error in its favour: faster, and latency bounds looser)",
    ),
    (
        "chart",
        "the goal against the latency the bounds check (each request's mean ITL, p99); * the Pareto front",
    ),
]


def _pairs(rows: list[tuple[str, str]]) -> Table:
    """A key (or mark) and its words; the words take the width that is left and wrap."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True, min_width=8)
    table.add_column(ratio=1)
    for key, words in rows:
        table.add_row(Text(f"  {key}"), Text(words))
    return table


class HelpScreen(DialogScreen[None]):
    """A dialog, not a question: the keys that close it close it, the others scroll or do nothing."""

    DEFAULT_CSS = """
    HelpScreen .dialog {
        width: 100;
        height: 90%;
    }
    """

    BINDINGS = [Binding("escape,q,f1,question_mark", "close", "Close")]

    def __init__(self, bindings: list[tuple[str, str]]) -> None:
        super().__init__()
        self.bindings_help = bindings

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static("cockpit help  (Esc closes)", classes="dialog-title")
            yield Static(help_table(self.bindings_help))

    def action_close(self) -> None:
        self.dismiss(None)
