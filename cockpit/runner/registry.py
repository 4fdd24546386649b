"""Servers cockpit started, kept in the user's state folder so that none is left running unnoticed.

A server outlives the cockpit that started it (an SSH drop, kill -9): the next cockpit reads
this folder, finds which servers still live (same PID *and* same start time, so a reused PID
is not mistaken for ours), and offers to re-attach or stop them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs
import psutil

CREATE_TIME_TOLERANCE_S = 0.5


@dataclass(frozen=True)
class ServerEntry:
    pid: int
    pgid: int
    argv: tuple[str, ...]
    port: int
    log_path: str
    experiment: int
    engine: str = ""
    profile: str = ""  # the profile's file (a bare name in entries of older cockpits)
    layout: str = ""
    url: str = ""
    started: float = 0.0
    create_time: float = 0.0  # psutil's, to tell our process from a reused PID

    def alive(self) -> bool:
        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(proc.create_time() - self.create_time) <= CREATE_TIME_TOLERANCE_S
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.layout or '?'} on {self.engine or '?'} port {self.port} (experiment {self.experiment}, log {self.log_path})"


def state_dir() -> Path:
    """cockpit's state folder (logs, the server registry): COCKPIT_STATE_DIR or the platform's."""
    if os.environ.get("COCKPIT_STATE_DIR"):
        return Path(os.environ["COCKPIT_STATE_DIR"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_state_dir("cockpit"))


class Registry:
    def __init__(self, folder: Path | None = None):
        self.folder = folder or state_dir() / "servers"

    def _path(self, pid: int) -> Path:
        return self.folder / f"{pid}.json"

    def add(self, entry: ServerEntry) -> ServerEntry:
        if not entry.create_time:
            try:
                entry = ServerEntry(**{**asdict(entry), "create_time": psutil.Process(entry.pid).create_time()})
            except psutil.NoSuchProcess:
                pass
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({**asdict(entry), "argv": list(entry.argv)}, f)
        os.replace(tmp, self._path(entry.pid))
        return entry

    def remove(self, pid: int) -> None:
        self._path(pid).unlink(missing_ok=True)

    def entries(self) -> list[ServerEntry]:
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                found.append(ServerEntry(**{**data, "argv": tuple(data.get("argv", ()))}))
            except (OSError, ValueError, TypeError):
                continue  # a half-written or foreign file: not ours to trust
        return found

    def live(self) -> list[ServerEntry]:
        """Servers that still run; entries of dead ones are removed."""
        alive = []
        for entry in self.entries():
            if entry.alive():
                alive.append(entry)
            else:
                self.remove(entry.pid)
        return alive

    def find(self, pid: int) -> ServerEntry | None:
        return next((e for e in self.live() if e.pid == pid), None)


def new_log_path(experiment: int, layout: str) -> Path:
    folder = state_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return folder / f"{stamp}-exp{experiment}-{layout.replace(' ', '_')}.log"
