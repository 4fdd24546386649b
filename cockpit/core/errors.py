"""The one exception type people see, and how its message echoes what was given."""

from __future__ import annotations

import reprlib


class CockpitError(Exception):
    """A problem a person can fix: one line that says what was wrong and what to do."""


def cut(text: str, limit: int = 60) -> str:
    """At most ``limit`` characters of what was typed, so an error stays one short line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxlong, short.maxother = (
        2,
        4,
        4,
        60,
        40,
        60,
    )
    return short


_SHORT = _short_repr()


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message echoes it: a bounded repr, on one line, cut to ``limit`` characters.

    Bounded because a YAML alias bomb or a 10**5000 from a file must not blow up the message."""
    if isinstance(value, int) and value.bit_length() > 4000:  # repr() refuses ints this long
        return f"a number of about {int(value.bit_length() * 0.30103):,} digits"
    try:
        text = _SHORT.repr(value)
    except ValueError:  # a huge int inside a list
        text = f"a {type(value).__name__} too long to show"
    return cut(text, limit)
