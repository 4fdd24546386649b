"""Where cockpit keeps its files, and how it makes their folders: private to the user.

Logs and the journal hold argv, hosts and paths (and an engine may print its own arguments),
so every folder cockpit creates is 0700; folders that already exist are used as they are.
"""

from __future__ import annotations

import os
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
    it cannot be, ending with ``fix``."""
    try:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        for path in reversed(missing):
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue  # made by another cockpit just now: used as it is
            os.chmod(path, 0o700)
    except OSError as err:
        raise CockpitError(f"cannot create {folder}: {err.strerror}; {fix}") from None
    return folder
