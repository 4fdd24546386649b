"""Reading a file cockpit did not write or cannot trust: bounded, and never blocking.

A person's config.json or profile, a prompts file, and what cockpit reads back of its own
(registry entries, the calibration file, the prompt history) all go through ``read_bounded``:
a FIFO is never waited on, a device like /dev/zero never read until memory runs out, a huge or
growing file never read whole. ``read_text`` makes of that, and of UTF-16 or binary bytes, one
line that names the file and says what to do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cockpit.core.errors import CockpitError


class NotReadable(ValueError):
    """What stands where a plain file within its bound should be: `a FIFO, not a file`,
    `10.0 MiB, more than the 4.0 MiB it can be`."""


def read_bounded(path: Path | str, limit: int, *, tail: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; with ``tail``, the last ``limit``
    bytes of one of any size. Checked on the open file (opened without blocking, so a FIFO put
    there is refused, not waited on) and read up to the bound, so a file that grows or lies about
    its size is cut. ``NotReadable`` says what it is instead; ``OSError`` when it cannot be opened
    (FileNotFoundError when it is gone)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        kind = file_kind(info.st_mode)
        if kind is not None:
            raise NotReadable(f"{kind}, not a file")
        if tail:
            os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        elif info.st_size > limit:
            raise NotReadable(f"{_size(info.st_size)}, more than the {_size(limit)} it can be")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        if tail:  # it grew while read: its end is what was asked for
            return data[-limit:]
        raise NotReadable(f"more than the {_size(limit)} it can be")
    return data


def file_kind(mode: int) -> str | None:
    """What stands where a file should be ("a FIFO"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _size(count: int) -> str:
    """A byte count in the unit a person reads it in."""
    if count < 2**20:
        return f"{count / 2**10:,.0f} KiB"
    return f"{count / 2**20:,.1f} MiB"


def read_text(path: Path, *, limit: int, what: str, fix: str) -> str:
    """The file's text. ``what`` is how the message names it ("profile x.yaml", "x/config.json");
    ``fix`` is what to do, ending every message."""
    try:
        data = read_bounded(path, limit)
    except NotReadable as exc:
        raise CockpitError(f"{what} is {exc}: {fix}") from None
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
