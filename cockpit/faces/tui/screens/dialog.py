"""The base of cockpit's dialogs (a box over the dimmed screen), and of its questions: a question
never eats a command typed at it.

A person who does not notice a question and types the next command (`tp4`, `bench`) would
otherwise lose those keys to the dialog. A printable key that answers nothing cancels the
question instead, and the key goes on to the prompt (`TypedPast`), where the app says so.

A paste (`try tp8 ep` sent at once, as tmux and terminals without bracketed paste do) queues
every key at the dialog before the first is handled: once cancelled, the dialog hands each later
key to the screen below as text, `y` and `n` included, so the command arrives whole and in order
and nothing answers a question that is already gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from textual import events
from textual.message import Message
from textual.screen import ModalScreen

T = TypeVar("T")


@dataclass
class TypedPast(Message):
    """A dialog was cancelled by typing: `character` is the first key of the next command."""

    title: str
    character: str


@runtime_checkable
class TakesTyping(Protocol):
    """The screen under a question that takes what was typed at it (the main screen's prompt)."""

    def take_typed(self, text: str) -> None: ...

    def take_enter(self) -> None: ...


class DialogScreen(ModalScreen[T]):
    """A box in the middle of the dimmed screen: a bold title, a body, the buttons on the right."""

    DEFAULT_CSS = """
    DialogScreen {
        align: center middle;
        background: $background 60%;
        .dialog {
            width: 76;
            max-width: 95%;
            height: auto;
            max-height: 90%;
            border: thick $accent;
            background: $surface;
            padding: 1 2;
        }
        .dialog-title {
            text-style: bold;
            margin-bottom: 1;
        }
        .dialog-body {
            margin-bottom: 1;
        }
        .dialog-buttons {
            height: auto;
            align-horizontal: right;
        }
        .dialog-buttons Button {
            margin-left: 1;
        }
    }
    """


class Dialog(DialogScreen[T]):
    """A question: the keys in `answer_keys` answer it, any other printable key cancels it."""

    def __init__(self, title: str, answer_keys: Iterable[str]) -> None:
        super().__init__()
        self.title_text = title
        self.answer_keys = frozenset(answer_keys)  # the keys that answer it; the rest cancel it
        self.typed_past = False  # cancelled by typing: every later key is the next command's

    def on_key(self, event: events.Key) -> None:
        if self.typed_past:
            self._pass_on(event)
            return
        if (
            event.key in self.answer_keys
            or not event.is_printable
            or not event.character
            or event.character == " "
        ):
            return  # an answer, a move between buttons (Tab, arrows), or Space on a button
        self._pass_on(event)

    def on_paste(self, event: events.Paste) -> None:
        event.stop()
        if event.text:
            self._cancel_by_typing(event.text)

    def _pass_on(self, event: events.Key) -> None:
        """The key is the next command's: the first cancels the question, each goes below as typed."""
        event.stop()
        event.prevent_default()
        if event.key == "enter" and self.typed_past:
            below = self._below()
            if below is not None:
                below.take_enter()
        elif event.is_printable and event.character:
            self._cancel_by_typing(event.character)

    def _cancel_by_typing(self, text: str) -> None:
        below = self._below()
        if below is not None:  # synchronously: the keys still queued here must land after this one
            below.take_typed(text)
        if not self.typed_past:
            self.typed_past = True
            self.dismiss(None)
            self.app.post_message(TypedPast(self.title_text, text[:1]))

    def _below(self) -> TakesTyping | None:
        stack = self.app.screen_stack
        for screen in reversed(stack):
            if screen is not self and isinstance(screen, TakesTyping):
                return screen
        return None
