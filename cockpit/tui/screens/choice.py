"""A question with a few answers, each on a key: quitting with a server up, servers found at start."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from cockpit.tui.screens.dialog import Dialog


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
            if event.key == key:
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
