"""Where cockpit keeps its files, how it makes their folders (private to the user), and how it
reads its own small files back (bounded: a file someone replaced is never read whole).

Logs and the journal hold argv, hosts and paths (and an engine may print its own arguments),
so every folder cockpit creates is 0700; folders that already exist are used as they are.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import warnings
from pathlib import Path

import platformdirs

from cockpit.errors import CockpitError


def state_dir() -> Path:
    """cockpit's state folder (logs, the server registry): COCKPIT_STATE_DIR or the platform's."""
    if os.environ.get("COCKPIT_STATE_DIR"):
        return Path(os.environ["COCKPIT_STATE_DIR"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_state_dir("cockpit"))


def private_dir(folder: Path, fix: str = "set COCKPIT_STATE_DIR to a writable folder") -> Path:
    """Create ``folder`` and its missing parents 0700 (the umask cannot widen them); one line if
    it cannot be, ending with ``fix``. A file where a folder should be is named as such."""
    try:
        if folder.is_dir():  # the common case, in one call
            return folder
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        nearest = folder.parents[len(missing) - 1] if missing else folder
        if not nearest.is_dir():
            raise CockpitError(f"{nearest} is a file, not a folder: remove it or {fix}")
        for path in reversed(missing):
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                if not path.is_dir():
                    raise CockpitError(f"{path} is a file, not a folder: remove it or {fix}") from None
                continue  # made by another cockpit just now: used as it is
            os.chmod(path, 0o700)
    except OSError as err:
        raise CockpitError(f"cannot create {folder}: {err.strerror}; {fix}") from None
    return folder


def existing_folder(folder: Path, fix: str = "set COCKPIT_STATE_DIR to another folder") -> bool:
    """Whether ``folder`` exists (a reader finds nothing in one that does not); a file in its
    place is one line, ending with ``fix``."""
    if not folder.exists():
        return False
    if not folder.is_dir():
        raise CockpitError(f"{folder} is a file, not a folder: remove it or {fix}")
    return True


class NotReadable(ValueError):
    """A file of cockpit's that is not what cockpit writes there: a folder, a device, too big."""


def read_small(path: Path, limit: int) -> bytes:
    """The bytes of a plain file of at most ``limit`` bytes. Never blocks on a FIFO nor reads a
    device or a huge file whole: ``NotReadable`` says what it is instead; ``OSError`` when it
    cannot be opened (FileNotFoundError when it is gone)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable(f"{_kind(info.st_mode)}, not a file")
        if info.st_size > limit:
            raise NotReadable(f"{_size(info.st_size)}, more than the {_size(limit)} it can be")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while read
            raise NotReadable(f"more than the {_size(limit)} it can be")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    """What stands where a file should be."""
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


def warn_on_stderr(line: str) -> None:
    """A problem with a file read back, said on stderr as one line (a screen captures its own
    stderr; a terminal that is gone is not written to)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"warning: {line}", file=sys.stderr, flush=True)
