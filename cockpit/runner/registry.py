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

Nothing read back is trusted: an entry is checked field by field (types, ranges, a bounded size)
before it is used, and one that fails is set aside under ``<name>.bad`` with one line that names
it, so it neither blocks a launch nor turns into a signal; cockpit.runner.supervisor checks a
listed server is the one cockpit started before it signals it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from cockpit.core.errors import CockpitError, shown
from cockpit.store.paths import existing_folder, private_dir, state_dir, warn_on_stderr
from cockpit.store.textfile import NotReadable, read_bounded
from cockpit.system.processes import started_at

TOKEN_ENV = "COCKPIT_SERVER_TOKEN"
LOCK_WAIT_S = 60.0
STALE_TMP_S = 60.0  # a half-written entry older than this was left by a killed writer
# Between fork and exec the engine does not carry its token yet: a pending entry whose owner
# died is kept this long before it is taken for a spawn that never happened.
PENDING_GRACE_S = 10.0
# What an entry can hold: cockpit writes a few hundred bytes; a file past these was not written by it.
MAX_ENTRY_BYTES = 64 * 2**10
MAX_TEXT = 16 * 2**10  # one string field (a path, the layout with its knobs, one argument)
PID_MAX = 2**22  # Linux's highest pid_max
MAX_GPUS = 1024
MAX_EXPERIMENT = 2**63 - 1  # SQLite's row ids
FUTURE_TOLERANCE_S = 60.0  # a clock stepped back this far does not make a fresh entry damaged
_TOKEN = re.compile(r"[A-Za-z0-9_-]{0,64}")  # it names the pending entry's file
BAD_SUFFIX = ".bad"


class BadEntry(ValueError):
    """An entry that is not what cockpit writes: the field and what is wrong with it."""


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
        """Whether the entry's process still runs under its PID: it started when the entry
        says, or it carries the entry's token (a wall clock that moved since cannot drop a
        server that still holds its GPUs). A reused PID has neither. Whether it may be
        signalled is ``supervisor.unverified``'s question."""
        if self.pending:
            return False
        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            if started_at(proc, self.create_time):
                return True
            return bool(self.token) and proc.environ().get(TOKEN_ENV) == self.token
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def to_json(self) -> dict:
        return {**asdict(self), "argv": list(self.argv), "gpus": list(self.gpus)}

    @classmethod
    def from_json(cls, data: Any, now: float | None = None) -> ServerEntry:
        """An entry as cockpit wrote it; ``BadEntry`` (naming the field) for anything else: a
        wrong type, a number out of range, a time not finite or in the future (``now``)."""
        if not isinstance(data, dict):
            raise BadEntry(f"it holds {type(data).__name__}, not an object")
        now = time.time() if now is None else now
        values: dict[str, Any] = {}
        for name, check in _FIELDS.items():
            if name in data:
                values[name] = check(name, data[name], now)
            elif name in _REQUIRED:
                raise BadEntry(f"it has no {name}")
        entry = cls(**values)
        if entry.pending and not entry.token:
            raise BadEntry("it is pending (pid 0) without a token")
        return entry

    def __str__(self) -> str:
        gpus = f" GPUs {','.join(map(str, self.gpus))}" if self.gpus else ""
        who = f"pending (being started by cockpit pid {self.owner})" if self.pending else f"pid {self.pid}"
        return (
            f"{who}: {self.layout or '?'} on {self.engine or '?'} port {self.port}{gpus} "
            f"(experiment {self.experiment}, log {self.log_path})"
        )


def _int(low: int, high: int) -> Callable[[str, Any, float], int]:
    def check(name: str, value: Any, now: float) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadEntry(f"its {name} is {shown(value)}, not a whole number from {low} to {high}")
        return value

    return check


def _time(name: str, value: Any, now: float) -> float:
    """Seconds since the epoch: finite, not before it, not (beyond a clock's step) after ``now``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise BadEntry(f"its {name} is {shown(value)}, not a time")
    if not 0 <= value <= now + FUTURE_TOLERANCE_S:
        raise BadEntry(f"its {name} {value:.0f} is {'in the future' if value > now else 'before 1970'}")
    return float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int of hundreds of digits
        return False


def _text(name: str, value: Any, now: float) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise BadEntry(f"its {name} is {shown(value)}, not a text of at most {MAX_TEXT} characters")
    return value


def _token(name: str, value: Any, now: float) -> str:
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise BadEntry(f"its {name} is {shown(value)}, not letters and digits")
    return value


def _argv(name: str, value: Any, now: float) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) and len(a) <= MAX_TEXT for a in value):
        raise BadEntry(f"its {name} is {shown(value)}, not a list of texts")
    return tuple(value)


def _gpus(name: str, value: Any, now: float) -> tuple[int, ...]:
    check = _int(0, MAX_GPUS - 1)
    if not isinstance(value, list) or len(value) > MAX_GPUS:
        raise BadEntry(f"its {name} is {shown(value)}, not a list of GPU indices")
    return tuple(check(name, gpu, now) for gpu in value)


def _flag(name: str, value: Any, now: float) -> bool:
    if not isinstance(value, bool):
        raise BadEntry(f"its {name} is {shown(value)}, not true or false")
    return value


# Each field of an entry and how it is checked on read; the first six every entry has.
_FIELDS: dict[str, Callable[[str, Any, float], Any]] = {
    "pid": _int(0, PID_MAX),
    "pgid": _int(0, PID_MAX),
    "argv": _argv,
    "port": _int(1, 65535),
    "log_path": _text,
    "experiment": _int(0, MAX_EXPERIMENT),
    "engine": _text,
    "profile": _text,
    "layout": _text,
    "url": _text,
    "started": _time,
    "create_time": _time,
    "gpus": _gpus,
    "token": _token,
    "owner": _int(0, PID_MAX),
    "simulated": _flag,
}
_REQUIRED = ("pid", "pgid", "argv", "port", "log_path", "experiment")


class Registry:
    def __init__(self, folder: Path | None = None, warn: Callable[[str], None] | None = None):
        self.folder = folder or state_dir() / "servers"
        self.warn = warn or warn_on_stderr  # one line per damaged entry, set aside
        self._told: set[str] = set()

    def path_of(self, entry: ServerEntry) -> Path:
        """The file that holds ``entry``."""
        return self._pending_path(entry.token) if entry.pending else self._path(entry.pid)

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
        """Atomically, 0600: a reader sees the old file or the new one, never half of one. An
        entry that would not be read back (too big: a layout of huge knobs) is refused here,
        before the spawn, rather than leave a server its registry does not list."""
        text = json.dumps(entry.to_json())
        try:
            if len(text.encode()) > MAX_ENTRY_BYTES:
                raise BadEntry(
                    f"{len(text.encode()) // 1024} KiB, more than the {MAX_ENTRY_BYTES // 1024} KiB"
                )
            ServerEntry.from_json(entry.to_json())
        except BadEntry as bad:
            raise CockpitError(
                f"the server's registry entry would not read back ({bad}): shorten the layout's knobs"
            ) from None
        private_dir(self.folder)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{os.getpid()}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- reading ----------------------------------------------------------------------------

    def entries(self) -> list[ServerEntry]:
        """Every entry that reads as cockpit wrote it; a damaged one is set aside and said once."""
        if not existing_folder(self.folder):
            return []
        found = []
        now = time.time()
        for path in sorted(self.folder.glob("*.json")):
            try:
                entry = self._read(path, now)
            except FileNotFoundError:
                continue  # removed by another cockpit since the listing
            except OSError as err:
                self._tell(
                    path, f"the server entry {path} cannot be read ({err.strerror}): skipped; remove it"
                )
                continue
            except BadEntry as bad:
                self._set_aside(path, str(bad))
                continue
            found.append(entry)
        return found

    def _read(self, path: Path, now: float) -> ServerEntry:
        """One entry file, checked: its size, its JSON, its fields, its name (``<pid>.json`` or
        ``pending-<token>.json``, so that removing it by its PID or token removes this file)."""
        try:
            data = json.loads(read_bounded(path, MAX_ENTRY_BYTES))
        except NotReadable as exc:
            raise BadEntry(f"it is {exc}") from None
        except (ValueError, RecursionError):
            raise BadEntry("it is not JSON") from None
        entry = ServerEntry.from_json(data, now)
        if path.name != self.path_of(entry).name:
            raise BadEntry(
                f"it names {'a pending server' if entry.pending else f'pid {entry.pid}'}, not its file's"
            )
        return entry

    def _set_aside(self, path: Path, why: str) -> None:
        """Move a damaged entry to ``<name>.bad`` (said once, then never read again); where it
        cannot be moved, it is skipped and said once per registry."""
        aside = path.with_name(path.name + BAD_SUFFIX)
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return  # another cockpit set it aside just now, and said so
        except OSError as err:
            self._tell(
                path, f"the server entry {path} is damaged ({why}): skipped; remove it ({err.strerror} here)"
            )
            return
        self._tell(
            path,
            f"the server entry {path} is damaged ({why}): moved to {aside.name}; "
            "if a server of it still runs, stop it by hand",
        )

    def _tell(self, path: Path, line: str) -> None:
        if str(path) not in self._told:
            self._told.add(str(path))
            self.warn(line)

    def live(self) -> list[ServerEntry]:
        """Servers that still run (pending entries resolved); entries of dead ones are removed.
        A folder that cannot be read (a file in its place) is a warning and no servers: a screen
        that opens must not fail on it; a launch (``claims``) and `cockpit servers` still refuse."""
        try:
            return self._scan()[0]
        except CockpitError as err:
            self._tell(self.folder, str(err))
            return []

    def claims(self) -> list[ServerEntry]:
        """Everything that holds GPUs and a port: servers that run and spawns not yet resolved
        (a loading engine is not in NVML's view yet, and one being forked has no PID yet)."""
        running, unresolved = self._scan()
        return running + unresolved

    def listing(self) -> tuple[list[ServerEntry], list[ServerEntry]]:
        """What `cockpit servers` shows: the servers that run, and the spawns still pending
        (each holds its port and GPUs until it is resolved or its grace ends)."""
        return self._scan()

    def settled(self, poll: float = 0.1) -> tuple[list[ServerEntry], list[ServerEntry]]:
        """``listing()``, once every pending entry whose cockpit died has settled: it became the
        engine that carries its token, or its grace ended and it was dropped (at most
        ``PENDING_GRACE_S``). What is still pending then has a live cockpit starting it."""
        deadline = time.monotonic() + PENDING_GRACE_S + 1.0
        while True:
            live, pending = self._scan()
            if all(_process_alive(e.owner) for e in pending) or time.monotonic() > deadline:
                return live, pending
            time.sleep(poll)

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
        if not existing_folder(self.folder):
            return
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
        fd = _open_lock(path)
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


def _open_lock(path: Path) -> int:
    """The launch lock's descriptor; what stands in its place (a folder, a link, a device) is one line."""
    fix = "set COCKPIT_STATE_DIR to another folder"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except IsADirectoryError:
        raise CockpitError(f"{path} is a folder, not a file: remove it (rmdir) or {fix}") from None
    except OSError as err:
        what = "a link, not a file: remove it" if err.errno == errno.ELOOP else err.strerror
        raise CockpitError(f"cannot open the launch lock {path} ({what}); {fix}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CockpitError(f"{path} is not a plain file: remove it or {fix}")
    return fd


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
