"""A question with a few answers, each on a key: quitting with a server up, servers found at start."""

from __future__ import annotations

import re
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from cockpit.faces.tui.screens.dialog import Dialog
from cockpit.runner.registry import ServerEntry


class ChoiceScreen(Dialog[str]):
    """choices: (key, label, value); Esc answers `cancel`; any other printable key cancels it
    (None) and goes to the prompt: see `Dialog`."""

    BINDINGS = [Binding("escape", "choose('cancel')", "Cancel")]

    def __init__(self, title: str, body: str, choices: list[tuple[str, str, str]]) -> None:
        super().__init__(title, answer_keys=[key for key, _, _ in choices])
        self.body, self.choices = body, choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title", markup=False)
            yield Static(self.body, classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                for key, label, value in self.choices:
                    yield Button(f"{label} ({key})", id=f"choice-{value}")

    def on_mount(self) -> None:
        self.query(Button).last().focus()

    def on_key(self, event: events.Key) -> None:
        for key, _, value in self.choices:
            if event.key == key and not self.typed_past:
                event.stop()
                self.dismiss(value)
                return
        super().on_key(event)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(str(event.button.id).removeprefix("choice-"))

    def action_choose(self, value: str) -> None:
        self.dismiss(value)


def quit_screen(server: str) -> ChoiceScreen:
    return ChoiceScreen(
        "Quit cockpit?",
        f"{server} is still running.",
        [("s", "Stop it and quit", "stop"), ("d", "Leave it running", "detach"), ("c", "Cancel", "cancel")],
    )


def servers_screen(lines: list[str]) -> ChoiceScreen:
    return ChoiceScreen(
        "Servers from an earlier cockpit are still running",
        "\n".join(lines),
        [("a", "Re-attach", "attach"), ("s", "Stop them", "stop"), ("l", "Leave them", "cancel")],
    )


BODY_WIDTH = 68  # the dialog's text at 80 columns (76 wide, less its border and padding)


def profile_name(profile: str) -> str:
    """A registry entry's profile (a YAML file, or a name in older entries) as a person names it."""
    path = Path(profile)
    return path.stem if path.suffix in (".yaml", ".yml") else profile


def server_lines(entry: ServerEntry, state: str) -> str:
    """One server left running, for the re-attach question: what it is (layout, profile, engine),
    what it does now, and its log, broken between folders, never inside a name."""
    gpus = f", GPUs {','.join(map(str, entry.gpus))}" if entry.gpus else ""
    profile = f" of profile {profile_name(entry.profile)}" if entry.profile else ""
    head = (
        f"pid {entry.pid}: {entry.layout or '?'}{profile} on {entry.engine or '?'}, port {entry.port}{gpus}"
    )
    log = wrap_path(home_short(entry.log_path), BODY_WIDTH - 6)
    return "\n".join([head, f"  {state}", "  log " + "\n      ".join(log)])


def home_short(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home) :] if home != "/" and path.startswith(home + "/") else path


def wrap_path(path: str, width: int) -> list[str]:
    """A path in lines of at most `width`, broken after a `/` (a longer name stands alone)."""
    lines = [""]
    for piece in re.findall(r"[^/]*/|[^/]+$", path):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return lines
