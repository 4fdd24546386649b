"""The header line: host, profile, model and quantization, engine, GPUs, and the server's state."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from cockpit.tui.state import ServerView

SHORT_BELOW = 110  # columns under which model, quantization and GPU type take their short forms
STATE_STYLES = {"starting": "bold yellow", "loading": "bold yellow", "ready": "bold green", "failed": "bold red", "stopped": "bold"}


class StatusHeader(Static):
    """One line; the server's state stays whole on the right, the rest is cut with … when narrow."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def show(self, host: str, info: dict[str, str], server: ServerView, now: float) -> None:
        self._shown = (host, info, server, now)
        short = "_short" if self.size.width < SHORT_BELOW else ""
        left = Text.assemble(
            (host, "bold"),
            f" · {info['profile']} · {info['model' + short]} · {info['engine']} · {info['gpus' + short]}",
        )
        right = Text(server.label(now), style=STATE_STYLES.get(server.state, ""))
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        grid.add_column(no_wrap=True, justify="right")
        grid.add_row(left, Text.assemble("  ", right))
        self.update(grid)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)
