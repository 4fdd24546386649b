"""Where cockpit keeps its files, how it makes their folders (private to the user), and how it
reads its own small files back (bounded: a file someone replaced is never read whole).

Logs and the journal hold argv, hosts and paths (and an engine may print its own arguments),
so every folder cockpit creates is 0700; folders that already exist are used as they are.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path

import platformdirs

from cockpit.core.errors import CockpitError


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


def warn_on_stderr(line: str) -> None:
    """A problem with a file read back, said on stderr as one line (a screen captures its own
    stderr; a terminal that is gone is not written to)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"warning: {line}", file=sys.stderr, flush=True)
