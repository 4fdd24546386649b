"""The launch log: the server's output as it comes, phase lines marked, a banner for the outcome.

Lines arrive in batches from the app's flush timer (`write_lines`), already stripped of ANSI
codes. `Log` renders only the visible lines and follows the tail unless the person scrolled up.
"""

from __future__ import annotations

import re

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

from cockpit.runner.events import Diagnosis
from cockpit.tui.control import PHASE_MARK

MAX_LINES = 20_000
_ERROR = re.compile(r"\b(?:error|exception|traceback|out of memory|oom|failed|fatal)\b", re.IGNORECASE)
_WARNING = re.compile(r"\bwarn(?:ing)?\b", re.IGNORECASE)


class PhaseHighlighter(Highlighter):
    """Phase lines (marked `» `) bold, errors red, warnings yellow; the marks carry the meaning."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if plain.startswith(PHASE_MARK):
            text.stylize("bold cyan")
        elif _ERROR.search(plain):
            text.stylize("red")
        elif _WARNING.search(plain):
            text.stylize("yellow")


class ServerLog(Log):
    def __init__(self, **kwargs) -> None:
        super().__init__(highlight=True, max_lines=MAX_LINES, auto_scroll=True, **kwargs)
        self.highlighter = PhaseHighlighter()


class LaunchLog(Vertical):
    """A banner (ready, failed with the next step) over the log."""

    DEFAULT_CSS = """
    LaunchLog {
        #log-banner {
            display: none;
            padding: 0 1;
        }
        #log-banner.-failed {
            background: $error 30%;
            text-style: bold;
        }
        #log-banner.-ready {
            background: $success 25%;
        }
        #log-banner.-stopped {
            background: $panel;
        }
        #log {
            height: 1fr;
        }
    }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="log-banner", markup=False)
        yield ServerLog(id="log")

    @property
    def log_view(self) -> ServerLog:
        return self.query_one(ServerLog)

    @property
    def banner(self) -> Static:
        return self.query_one("#log-banner", Static)

    def begin(self, layout: str, command: str) -> None:
        """A separator for a new experiment, brought into view: the log follows the newest launch
        even if the person had scrolled up in the last one's lines."""
        self.hide_banner()
        log = self.log_view
        log.write_line(f"── {layout} ── {command}")
        log.scroll_to(x=0, y=log.max_scroll_y, animate=False, immediate=True)

    def write_lines(self, lines: list[str]) -> None:
        self.log_view.write_lines(lines)

    def note(self, text: str) -> None:
        self.log_view.write_line(f"── {text}")

    def hide_banner(self) -> None:
        self.banner.update("")
        self.banner.set_classes("")
        self.banner.display = False

    def show_ready(self, layout: str, url: str, load_seconds: float) -> None:
        self._banner(
            f"● READY  {layout} serves {url} (loaded in {load_seconds:.1f}s) · next: `bench c=1,32,64`",
            "-ready",
        )

    def show_failure(self, layout: str, diagnosis: Diagnosis) -> None:
        text = f"✗ FAILED  {layout}: {diagnosis.cause}"
        if diagnosis.next_step:
            text += f"\n→ next: {diagnosis.next_step}"
        self._banner(text, "-failed")

    def show_stopped(self, layout: str, reason: str) -> None:
        self._banner(f"■ STOPPED  {layout}: {reason}", "-stopped")

    def _banner(self, text: str, kind: str) -> None:
        log = self.log_view
        following = log.is_vertical_scroll_end
        self.banner.update(text)
        self.banner.set_classes(kind)
        self.banner.display = True
        if following:  # the banner takes rows from the log: keep its last lines in view
            self.call_after_refresh(log.scroll_end, animate=False, x_axis=False)

    @property
    def banner_text(self) -> str:
        return str(self.banner.content)
