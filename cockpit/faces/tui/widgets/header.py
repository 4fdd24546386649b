"""The header line: host, profile, model and quantization, engine, GPUs, and the server's state."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from cockpit.faces.tui.state import FAILED, LOADING, READY, STARTING, STOPPED, ServerView

STATE_STYLES = {
    STARTING: "bold yellow",
    LOADING: "bold yellow",
    READY: "bold green",
    FAILED: "bold red",
    STOPPED: "bold",
}


class StatusHeader(Static):
    """One line; the server's state stays whole on the right, the rest is cut with … when narrow."""

    DEFAULT_CSS = """
    StatusHeader {
        height: 1;
        padding: 0 1;
        background: $panel;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None
        self.plain = ""

    def show(self, host: str, info: dict[str, str], server: ServerView, now: float) -> None:
        self._shown = (host, info, server, now)
        right = Text(server.label(now), style=STATE_STYLES.get(server.state, ""))
        room = (self.content_size.width or self.size.width or 120) - len(right) - 2
        left = Text.assemble((host, "bold"), " · " + _fitting(info, room - len(host) - 3))
        self.plain = f"{left.plain}  {right.plain}"  # what it says, for tests and screen readers
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        grid.add_column(no_wrap=True, justify="right")
        grid.add_row(left, Text.assemble("  ", right))
        self.update(grid)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)


def _fitting(info: dict[str, str], room: int) -> str:
    """The header's words, dropped whole by rule rather than cut: short forms first, then the
    profile's name, then the engine (the picker and the argv still say both)."""
    tries = [
        [info["profile"], info["model"], info["engine"], info["gpus"]],
        [info["profile"], info["model_short"], info["engine"], info["gpus"]],
        [info["profile"], info["model"], info["engine"], info["gpus_short"]],
        [info["profile"], info["model_short"], info["engine"], info["gpus_short"]],
        [info["model_short"], info["engine"], info["gpus_short"]],
        [info["model_short"], info["gpus_short"]],
    ]
    for parts in tries:
        text = " · ".join(parts)
        if len(text) <= room:
            return text
    return text  # the last resort: the grid's ellipsis cuts it
