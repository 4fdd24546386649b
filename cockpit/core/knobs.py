"""A layout's knobs: the server arguments typed after its words (`tp8 ep --max-num-seqs 512`).

One typed record writes them and reads them back: the argv words the engine gets, and the text
they are shown and stored as (inside the layout's), with secret values blanked.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from cockpit.core.errors import CockpitError, cut
from cockpit.core.secrets import blanked_options, redact_argv, shown_words


class Knobs(tuple[str, ...]):
    """The knob words in order, as the engine gets them (a tuple, so argv building, equality and
    hashing are a tuple's); their text forms blank a secret's value."""

    def __new__(cls, words: Iterable[str] = ()) -> Knobs:
        return super().__new__(cls, (str(word) for word in words))

    @classmethod
    def parse(cls, text: str) -> Knobs:
        """The words of ``--max-num-seqs 512 --served-model-name "a b"``, split as a shell would."""
        try:
            return cls(shlex.split(text))
        except ValueError as exc:
            raise CockpitError(f"server arguments in '{cut(text.strip())}': {exc}; close the quote") from None

    def blanked(self) -> tuple[str, ...]:
        """The secret options whose value is the mask (`--api-key ***`): read back, never typed."""
        return blanked_options(self)

    def unredacted(self) -> str:
        """The words quoted for the prompt, secrets included: only to be parsed again into a
        launch, never shown or stored."""
        return " ".join(map(shlex.quote, self))

    def __str__(self) -> str:
        return shown_words(self)

    def __repr__(self) -> str:
        return f"Knobs({list(redact_argv(self))!r})"
