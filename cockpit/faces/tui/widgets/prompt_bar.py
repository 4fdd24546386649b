"""The prompt bar, k9s style: Tab completes commands, layouts and profiles; Up/Down walk the history.

The candidates come from `cockpit.core.commands.completions` (the same registry that parses and
that the help screen lists); the ghost text shows the first one, → or Tab accepts it.
Under the bar, one line says what went wrong (✗) or what was done (✓).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from textual import events
from textual.binding import Binding
from textual.suggester import Suggester
from textual.widgets import Input, Static

from cockpit.faces.prompt import NAMES, completions
from cockpit.faces.tui.history import PromptHistory

Candidates = Callable[[str], list[str]]
NEEDS_ARGUMENT = {"try", "plan", "sweep", "use", "export", "bench"}


def complete(
    text: str, layouts: tuple[str, ...], profiles: tuple[str, ...], flags: tuple[str, ...] = ()
) -> list[str]:
    """completions(), plus the last layout of a `sweep a, b` list."""
    word, space, rest = text.partition(" ")
    if space and word in ("try", "plan", "sweep") and text.rpartition(" ")[2].startswith("-"):
        return completions(text, layouts, profiles, flags)
    if space and word == "sweep" and "," in rest:
        head, _, last = rest.rpartition(",")
        last = last.lstrip()
        return [f"sweep {head}, {x}" for x in layouts if x.startswith(last)]
    return completions(text, layouts, profiles)


class PromptSuggester(Suggester):
    def __init__(self, candidates: Candidates) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.candidates = candidates

    async def get_suggestion(self, value: str) -> str | None:
        if not value.strip():
            return None
        for candidate in self.candidates(value):
            if candidate.startswith(value) and candidate != value:
                return candidate
        return None


class PromptBar(Input):
    BINDINGS = [
        Binding("tab", "complete", "Complete", show=False),
        Binding("up", "history(-1)", "Previous", show=False),
        Binding("down", "history(1)", "Next", show=False),
    ]

    def __init__(
        self, history: PromptHistory, candidates: Candidates, status: Callable[[str, bool], None], **kwargs
    ) -> None:
        super().__init__(
            placeholder=":  try tp4 ep2 · bench c=1,32 · sweep tp4, tp8 ep · help   (Tab completes, ↑ history)",
            suggester=PromptSuggester(candidates),
            **kwargs,
        )
        self.history = history
        self.candidates = candidates
        self.status = status

    async def _on_key(self, event: events.Key) -> None:
        if event.character in (":", "/") and not self.value:
            event.prevent_default()  # the key that opened the prompt is not part of the command
            event.stop()
            return
        await super()._on_key(event)

    def action_complete(self) -> None:
        value = self.value
        found = [c for c in self.candidates(value) if c.startswith(value)] if value else list(NAMES)
        if not found:
            self.status(f"no completion for '{value}'", True)
            return
        if len(found) == 1:
            only = found[0]
            self.value = only + (" " if only in NEEDS_ARGUMENT else "")
        else:
            common = os.path.commonprefix(found)
            if len(common) > len(value):
                self.value = common
            shown = [c.split(" ", 1)[-1] if " " in value else c for c in found]
            more = f" … (+{len(shown) - 12})" if len(shown) > 12 else ""
            self.status("Tab: " + " · ".join(shown[:12]) + more, False)
        self.cursor_position = len(self.value)

    def action_history(self, step: int) -> None:
        text = self.history.previous(self.value) if step < 0 else self.history.next()
        if text is not None:
            self.value = text
            self.cursor_position = len(text)


class StatusLine(Static):
    """The line under the bar: `✗ ...` for an error, `✓ ...` for what was done, or a hint."""

    DEFAULT_CSS = """
    StatusLine {
        height: auto;
        max-height: 3;
        padding: 0 1;
        color: $text-muted;
    }
    StatusLine.-error {
        color: $error;
        text-style: bold;
    }
    """

    def say(self, text: str, error: bool = False) -> None:
        self.set_class(error, "-error")
        self.update(("✗ " if error else "") + text if text else "")
