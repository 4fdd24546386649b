"""A layout's knobs: the server arguments typed after its words (`tp8 ep --max-num-seqs 512`).

One typed record writes them and reads them back: the argv words the engine gets, the option
names they set, and the text they are shown and stored as, with secret values blanked.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from cockpit.core.errors import CockpitError, cut
from cockpit.core.secrets import blanked_options, redact_argv, shown_words

MAX_WORDS = 256  # more server arguments than any engine has, on one experiment


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

    @classmethod
    def from_json(cls, data: object) -> Knobs:
        """Knobs as ``to_json`` wrote them: a list of strings, bounded; anything else one line."""
        if not isinstance(data, list) or not all(isinstance(word, str) for word in data):
            raise CockpitError(f"knobs must be a list of words, got {cut(repr(data))}")
        if len(data) > MAX_WORDS:
            raise CockpitError(f"knobs hold at most {MAX_WORDS} words, got {len(data)}")
        return cls(data)

    def to_json(self) -> list[str]:
        """The words as stored: secret values blanked, so they never reach a file."""
        return list(redact_argv(self))

    def names(self) -> tuple[str, ...]:
        """The options the knobs set, in order (`--max-num-seqs` of `--max-num-seqs=512` too)."""
        return tuple(word.partition("=")[0] for word in self if word.startswith("-"))

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
