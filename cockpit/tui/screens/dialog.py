"""The base of cockpit's dialogs (a box over the dimmed screen), and of its questions: a question
never eats a command typed at it.

A person who does not notice a question and types the next command (`tp4`, `bench`) would
otherwise lose those keys to the dialog. A printable key that answers nothing cancels the
question instead, and the key goes on to the prompt (`TypedPast`), where the app says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from textual import events
from textual.message import Message
from textual.screen import ModalScreen

T = TypeVar("T")


@dataclass
class TypedPast(Message):
    """A dialog was cancelled by typing: `character` is the first key of the next command."""

    title: str
    character: str


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

    def on_key(self, event: events.Key) -> None:
        if (
            event.key in self.answer_keys
            or not event.is_printable
            or not event.character
            or event.character == " "
        ):
            return  # an answer, a move between buttons (Tab, arrows), or Space on a button
        event.stop()
        event.prevent_default()
        self.dismiss(None)
        self.app.post_message(TypedPast(self.title_text, event.character))
