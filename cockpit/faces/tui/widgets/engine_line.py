"""The engine line: what the ready server says about itself, from its `/metrics`, once a poll.

`engine vLLM  run 32 ▂▅▇█  wait 4 ▁▁▃  KV 63% ▃▅▇  preempt 0`: running and waiting requests,
KV cache usage and preemptions since the server was first watched, each number with a sparkline
of its recent history. It shows why a sweep plateaus: requests waiting with the KV cache full
(KV-bound), or a full batch with the cache half empty (compute-bound). Hidden while no server
answers with figures. Numbers stay whole; the sparklines give way first (format.Field).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from cockpit.engines import surfaces
from cockpit.faces.tui.format import Field, line, number, sparkline
from cockpit.faces.tui.state import EngineView

SPARK_MAX = 20  # cells per sparkline at most (one per scrape until then): the line reads as one phrase


def _label(engine: str) -> str:
    """The engine's name as people write it (vLLM, not vllm), or as the scrape said it."""
    return next((s.label for s in surfaces() if s.name == engine), engine)


def _kv_style(usage: float | None) -> str:
    if usage is None:
        return "dim"
    return "green" if usage < 0.7 else "yellow" if usage < 0.9 else "red"


def _spark(values: Sequence[float | None], rank: int, top: float | None = None) -> Field:
    return Field(
        sparkline(values, 1, top),
        rank,
        "cyan",
        fill=lambda width: sparkline(values, min(width, SPARK_MAX, max(1, len(values))), top),
    )


def kv_text(usage: float | None) -> str:
    """KV 63%; below 10% one decimal, so a large cache that is in use never reads 0%."""
    if usage is None:
        return "KV n/a"
    return f"KV {usage:.0%}" if usage >= 0.1 or usage == 0 else f"KV {usage:.1%}"


class EngineLine(Widget):
    """One line over the main area; `show()` replaces the view and redraws once."""

    DEFAULT_CSS = """
    EngineLine {
        height: 1;
        padding: 0 1;
        display: none;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view = EngineView()

    def show(self, view: EngineView) -> None:
        self.view = view
        self.display = view.last is not None
        self.refresh()

    def text(self, width: int) -> Text:
        view = self.view
        m = view.last
        if m is None:
            return Text()
        running, waiting, kv = list(view.running), list(view.waiting), list(view.kv_usage)
        fields = [
            Field("engine", 5, "bold"),
            Field(_label(m.engine), 6),
            Field(f"run {number(m.running)}", 0),
            _spark(running, 7),
            Field(f"wait {number(m.waiting)}", 1),
            _spark(waiting, 8),
            Field(kv_text(m.kv_usage), 2, _kv_style(m.kv_usage)),
            _spark(kv, 9, top=1.0),
            Field(f"preempt {number(view.preemptions)}", 3),
        ]
        return line(fields, width)

    def render(self) -> Text:
        return self.text(self.content_size.width or 80)
