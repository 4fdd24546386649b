"""The launch log: the server's output as it comes, phase lines marked, a banner for the outcome.

Lines arrive in batches from the app's flush timer (`write_lines`), already stripped of ANSI
codes. `Log` renders only the visible lines and follows the tail unless the person scrolled up.
"""

from __future__ import annotations

import re
import textwrap

from rich.highlighter import Highlighter
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

from cockpit.faces.tui.control import PHASE_MARK
from cockpit.runner.events import Diagnosis

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
    """Follows the tail while the person has not scrolled up, also when its pane shrinks (a
    banner shown, the view resized): a shrink leaves the scroll where it was, above the end."""

    def __init__(self, **kwargs) -> None:
        super().__init__(highlight=True, max_lines=MAX_LINES, auto_scroll=True, **kwargs)
        self.highlighter = PhaseHighlighter()
        self.following = True

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.following = new_value >= self.max_scroll_y

    def on_resize(self, event: events.Resize) -> None:
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)


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

    def open_profile(self, opened: str, notes: tuple[str, ...]) -> None:
        """A profile opened: the last profile's server lines go (they are in its log file), its
        notes (arguments translated for another engine) come whole, one a line."""
        self.hide_banner()
        log = self.log_view
        log.clear()
        log.write_line(f"── {opened}")
        width = max(40, log.content_size.width - 1)  # the log does not wrap: a note is read whole
        for note in notes:
            log.write_lines(
                textwrap.wrap(
                    note, width, initial_indent="   ", subsequent_indent="     ", break_on_hyphens=False
                )
            )

    def write_lines(self, lines: list[str]) -> None:
        self.log_view.write_lines(lines)

    def note(self, text: str) -> None:
        self.log_view.write_line(f"── {text}")

    def hide_banner(self) -> None:
        self.banner.update("")
        self.banner.set_classes("")
        self.banner.display = False

    def show_ready(self, layout: str, url: str, load_seconds: float, levels: tuple[int, ...] = ()) -> None:
        """`levels`: the profile's concurrency levels, which a bare `bench` runs."""
        bench = f"bench c={','.join(map(str, levels))}" if levels else "bench"
        self._banner(
            f"● READY  {layout} serves {url} (loaded in {load_seconds:.1f}s) · next: `{bench}`",
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
