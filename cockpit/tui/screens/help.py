"""Help, written from the command registry and the app's key bindings."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit.commands import COMMANDS
from cockpit.tui.screens.dialog import DialogScreen


def help_table(bindings: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row(
        "Commands",
        "typed into the prompt (Esc leaves it for the keys below, `:` or `/` return), Tab completes, ↑/↓ history",
    )
    for spec in COMMANDS:  # Text, not str: `[c=1,32,64]` is not markup
        table.add_row(Text(f"  {spec.usage}"), Text(spec.summary))
    table.add_row("", "")
    table.add_row("Keys", "")
    for key, description in bindings:
        table.add_row(Text(f"  {key}"), Text(description))
    table.add_row("", "")
    table.add_row(
        "Marks", "✓ fits  ~ tight  ✗ fails · ▶ GPU of the running layout  · idle  ★ best of a column"
    )
    table.add_row("", "» a log line that starts a phase · ○ no server ◐ loading ● ready ■ stopped")
    table.add_row(
        "Tune (t)",
        "▶ the candidate running · ★ the best measured · ✗ failed to start · the tune stops when the best"
        " measured ≥ the highest bound left (a prediction plus the model's observed error) · the chart:"
        " goal against p99 latency, * the Pareto front",
    )
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
