"""Servers cockpit started, kept in the user's state folder so that none is left running unnoticed.

A server outlives the cockpit that started it (an SSH drop, kill -9): the next cockpit reads
this folder, finds which servers still live (same PID *and* same start time, so a reused PID
is not mistaken for ours), and offers to re-attach or stop them.

No server is ever invisible, even when cockpit dies while starting one: the entry is written
*before* the engine is spawned, as a pending entry that holds a random token, and the engine
gets the token in its environment (``COCKPIT_SERVER_TOKEN``). Once spawned, the entry is
rewritten under the engine's PID. A pending entry whose owner died in between is resolved by
finding the process that carries its token.

Choosing GPUs and registering a server happen under one lock (``launch_lock``), an ``flock``
on a file in the state folder that every cockpit on the box shares: two cockpits never pick the
same GPUs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from cockpit.errors import CockpitError
from cockpit.paths import private_dir, state_dir

CREATE_TIME_TOLERANCE_S = 0.5
TOKEN_ENV = "COCKPIT_SERVER_TOKEN"
LOCK_WAIT_S = 60.0
STALE_TMP_S = 60.0  # a half-written entry older than this was left by a killed writer
# Between fork and exec the engine does not carry its token yet: a pending entry whose owner
# died is kept this long before it is taken for a spawn that never happened.
PENDING_GRACE_S = 10.0


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
    gpus: tuple[int, ...] = ()  # the GPUs it was given (CUDA_VISIBLE_DEVICES)
    token: str = ""  # in the engine's environment as COCKPIT_SERVER_TOKEN
    owner: int = 0  # the cockpit that started it (a pending entry's writer)
    simulated: bool = False  # cockpit's simulated engine on the simulated box (older entries: real)

    @property
    def pending(self) -> bool:
        """Written before the spawn; the engine's PID is not known yet."""
        return self.pid <= 0

    def alive(self) -> bool:
        if self.pending:
            return False
        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(proc.create_time() - self.create_time) <= CREATE_TIME_TOLERANCE_S
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def to_json(self) -> dict:
        return {**asdict(self), "argv": list(self.argv), "gpus": list(self.gpus)}

    @classmethod
    def from_json(cls, data: dict) -> ServerEntry:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        entry = cls(**{**known, "argv": tuple(known.get("argv", ())), "gpus": tuple(known.get("gpus", ()))})
        if not isinstance(entry.pid, int) or not isinstance(entry.experiment, int):
            raise TypeError("pid and experiment must be integers")
        return entry

    def __str__(self) -> str:
        gpus = f" GPUs {','.join(map(str, self.gpus))}" if self.gpus else ""
        return (
            f"pid {self.pid}: {self.layout or '?'} on {self.engine or '?'} port {self.port}{gpus} "
            f"(experiment {self.experiment}, log {self.log_path})"
        )


class Registry:
    def __init__(self, folder: Path | None = None):
        self.folder = folder or state_dir() / "servers"

    def _path(self, pid: int) -> Path:
        return self.folder / f"{pid}.json"

    def _pending_path(self, token: str) -> Path:
        return self.folder / f"pending-{token}.json"

    # -- writing ----------------------------------------------------------------------------

    def add(self, entry: ServerEntry) -> ServerEntry:
        """Write a live server's entry (its create time read now if not given)."""
        if not entry.create_time:
            try:
                entry = replace(entry, create_time=psutil.Process(entry.pid).create_time())
            except psutil.NoSuchProcess:
                pass
        self._write(self._path(entry.pid), entry)
        return entry

    def add_pending(self, entry: ServerEntry) -> ServerEntry:
        """Write the entry of a server about to be spawned (pid 0, a token, its owner)."""
        assert entry.token, "a pending entry needs the token the engine will carry"
        entry = replace(entry, pid=0, pgid=0, owner=entry.owner or os.getpid())
        self._write(self._pending_path(entry.token), entry)
        return entry

    def confirm(self, pending: ServerEntry, pid: int) -> ServerEntry:
        """The engine was spawned as ``pid`` (its own process group): its entry replaces the pending one."""
        entry = self.add(replace(pending, pid=pid, pgid=pid))
        self._pending_path(pending.token).unlink(missing_ok=True)
        return entry

    def drop_pending(self, pending: ServerEntry) -> None:
        self._pending_path(pending.token).unlink(missing_ok=True)

    def remove(self, pid: int) -> None:
        self._path(pid).unlink(missing_ok=True)

    def _write(self, path: Path, entry: ServerEntry) -> None:
        """Atomically, 0600: a reader sees the old file or the new one, never half of one."""
        private_dir(self.folder)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{os.getpid()}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry.to_json(), f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- reading ----------------------------------------------------------------------------

    def entries(self) -> list[ServerEntry]:
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                found.append(ServerEntry.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, TypeError, AttributeError):
                continue  # a foreign or damaged file: not ours to trust
        return found

    def live(self) -> list[ServerEntry]:
        """Servers that still run (pending entries resolved); entries of dead ones are removed."""
        return self._scan()[0]

    def claims(self) -> list[ServerEntry]:
        """Everything that holds GPUs and a port: servers that run and spawns not yet resolved
        (a loading engine is not in NVML's view yet, and one being forked has no PID yet)."""
        running, unresolved = self._scan()
        return running + unresolved

    def _scan(self) -> tuple[list[ServerEntry], list[ServerEntry]]:
        """One read of the folder: (servers that run, by PID; pending entries still unresolved)."""
        self._sweep_tmp()
        entries = self.entries()
        pending = [e for e in entries if e.pending]
        found = find_tokens({e.token for e in pending}) if pending else {}
        alive: dict[int, ServerEntry] = {}
        unresolved = []
        for entry in entries:
            if entry.pending:
                resolved = self._resolve(entry, found.get(entry.token))
                if resolved is not None:
                    alive[resolved.pid] = resolved
                elif self._pending_path(entry.token).exists():
                    unresolved.append(entry)
            elif entry.alive():
                alive.setdefault(entry.pid, entry)  # a confirm under way: its pending twin is the same server
            else:
                self.remove(entry.pid)
        return [alive[pid] for pid in sorted(alive)], unresolved

    def find(self, pid: int) -> ServerEntry | None:
        return next((e for e in self.live() if e.pid == pid), None)

    def _resolve(self, pending: ServerEntry, pid: int | None) -> ServerEntry | None:
        """The engine that carries the pending entry's token (``pid``), now under its PID; None
        (and the entry gone) when there is no such engine and its owner is gone too."""
        if pid is not None:
            return self.confirm(pending, pid)
        if not _process_alive(pending.owner) and time.time() - pending.started > PENDING_GRACE_S:
            self.drop_pending(pending)
        return None

    def _sweep_tmp(self) -> None:
        """Remove half-written entries whose writer was killed (kill -9 between write and rename)."""
        now = time.time()
        for tmp in self.folder.glob(".*.tmp"):
            writer = tmp.name[1:].split("-", 1)[0]
            try:
                stale = (
                    not (writer.isdigit() and _process_alive(int(writer)))
                    or now - tmp.stat().st_mtime > STALE_TMP_S
                )
                if stale:
                    tmp.unlink()
            except OSError:
                continue

    # -- the lock every cockpit on the box shares ---------------------------------------------

    @contextlib.contextmanager
    def launch_lock(self, wait: float = LOCK_WAIT_S) -> Iterator[None]:
        """Hold the box-wide launch lock: choose GPUs and register a server as one step."""
        path = private_dir(self.folder) / ".launch.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another cockpit"
                        raise CockpitError(
                            f"another cockpit (pid {holder}) has held the launch lock {path} for {wait:.0f} s: "
                            "wait for its launch to start, or stop it"
                        ) from None
                    time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def find_tokens(tokens: set[str]) -> dict[str, int]:
    """token -> the PID of the process group leader whose environment carries it (one pass
    over the user's processes, however many tokens)."""
    tokens = {t for t in tokens if t}
    found: dict[str, int] = {}
    if not tokens:
        return found
    me = os.getuid()
    for proc in psutil.process_iter(["pid", "uids"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != me:
                continue
            token = proc.environ().get(TOKEN_ENV)
            if token in tokens and os.getpgid(proc.pid) == proc.pid:
                found[token] = proc.pid
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return found


def _process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def new_log_path(experiment: int, layout: str) -> Path:
    folder = private_dir(state_dir() / "logs")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # Knobs may carry quotes, slashes or JSON: the name keeps letters, digits and a few marks.
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", layout).strip("_")[:80] or "layout"
    return folder / f"{stamp}-exp{experiment}-{name}.log"
