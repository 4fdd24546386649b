"""Reading a small text file a person pointed cockpit at (a config.json, a profile).

Bounded and strict, so a wrong path never turns into a traceback or a long hang: a file too
big, unreadable, UTF-16 or binary is one line that names it and says what to do.
"""

from __future__ import annotations

from pathlib import Path

from cockpit.errors import CockpitError


def read_text(path: Path, *, limit: int, what: str, fix: str) -> str:
    """The file's text. ``what`` is how the message names it ("profile x.yaml", "x/config.json");
    ``fix`` is what to do, ending every message."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise CockpitError(f"{what} is {size / 2**20:,.1f} MiB, too big to be one: {fix}")
        data = path.read_bytes()
    except OSError as exc:
        raise CockpitError(f"cannot read {what}: {exc.strerror}: {fix}") from exc
    return decode_text(data, what=what, fix=fix)


def decode_text(data: bytes, *, what: str, fix: str) -> str:
    """UTF-8 (a byte-order mark allowed); UTF-16 and binary bytes are refused with the fix."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise CockpitError(f"{what} is UTF-16 text: save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CockpitError(
            f"{what} is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}; a binary file?): {fix}"
        ) from None
