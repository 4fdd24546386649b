"""Start, follow and stop an engine process.

The engine runs in its own session and process group with its output in a log file that the
supervisor tails: the server outlives an SSH drop of the cockpit and its log is never lost.
Following a server yields events (log lines, phases) and ends with ``Ready`` or ``Failed``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cockpit.core.errors import CockpitError
from cockpit.core.secrets import redact_argv
from cockpit.runner.diagnose import diagnose, diagnose_exit
from cockpit.runner.events import Diagnosis, Event, Failed, LogLine, Ready
from cockpit.runner.launchfacts import FactsReader
from cockpit.runner.phases import PhaseTracker, strip_ansi
from cockpit.runner.registry import TOKEN_ENV, Registry, ServerEntry
from cockpit.runner.signals import held_signals
from cockpit.store.paths import private_dir
from cockpit.system.processes import started_at
from cockpit.telemetry.base import GpuSource

TAIL_LINES = 400
ERROR_GRACE_S = 1.5  # after an error line, how long the engine gets to exit on its own
HEALTH_EVERY_S = 0.5
# Once ready, the server is watched: its process every second, its health less often. A health
# check that fails this many times in a row while the process lives is said once ("not
# answering"): a server busy with a heavy load may be slow to answer, and is not ended.
WATCH_EVERY_S = 1.0
WATCH_HEALTH_EVERY_S = 5.0
WATCH_HEALTH_MISSES = 3
WATCH_TAIL_LINES = 20  # the last lines a server wrote before it ended, shown with its end
_ERRORISH = re.compile(r"Error|error:|Traceback|out of memory|Assertion|failed", re.I)
# Causes certain enough to act on while the engine still runs (it may hang after them);
# weaker signals (an NCCL warning, an unknown exception) wait for the process to exit.
_CERTAIN = {
    "oom",
    "fp8-block",
    "attention-heads",
    "kv-heads",
    "kv-cache",
    "world-size",
    "port-in-use",
    "pp-unsupported",
    "eplb",
    "unrecognized-args",
    "moe-split",
    "ep-needs-experts",
    "max-model-len",
}


@dataclass
class ServerHandle:
    """A running (or finished) engine: ours (``popen``) or re-attached from the registry."""

    entry: ServerEntry
    popen: subprocess.Popen | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.entry.pid

    @property
    def url(self) -> str:
        return self.entry.url

    @property
    def ours(self) -> bool:
        """Cockpit's own child (it learns the exit status), not a server re-attached by PID."""
        return self.popen is not None

    def returncode(self) -> int | None:
        """None while it runs; the exit code (negative: killed by that signal) once it ended.
        Polling our child reaps it: no <defunct> process is left behind."""
        if self.popen is not None:
            return self.popen.poll()
        return None if self.entry.alive() else 0


@dataclass(frozen=True)
class ServerEnded:
    """The watched server's process is gone: its exit status (None when it was not our child)
    and the last lines it wrote."""

    returncode: int | None
    last_lines: tuple[str, ...]


class LogTail:
    """Reads new complete lines from a growing log file (tqdm's carriage returns split lines)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = ""

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", errors="replace")
        parts = re.split(r"\r\n|\r|\n", text)
        self.partial = parts.pop()
        return [strip_ansi(p) for p in parts if p.strip()]

    def flush(self) -> list[str]:
        lines = self.read()
        if self.partial.strip():
            lines.append(strip_ansi(self.partial))
        self.partial = ""
        return lines


class Supervisor:
    def __init__(self, registry: Registry | None = None, source: GpuSource | None = None):
        self.registry = registry or Registry()
        self.source = source

    # -- start ------------------------------------------------------------------------------

    def start(
        self,
        *,
        experiment: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        port: int,
        log_path: Path,
        host: str = "127.0.0.1",
        engine: str = "",
        profile: str = "",
        layout: str = "",
        gpus: Sequence[int] = (),
        simulated: bool = False,
        on_started: Callable[[ServerHandle], None] | None = None,
    ) -> ServerHandle:
        """Start the engine from an argv list in its own session; output goes to ``log_path``.

        The registry entry is written before the spawn and the engine carries its token, so no
        instant exists at which the engine runs unlisted; interrupts wait until ``on_started``
        has the handle, so the caller always learns of the server it must stop.
        """
        token = secrets.token_hex(8)
        pending = ServerEntry(
            pid=0,
            pgid=0,
            argv=redact_argv(argv),
            port=port,
            log_path=str(log_path),
            experiment=experiment,
            engine=engine,
            profile=profile,
            layout=layout,
            url=f"http://{host}:{port}",
            started=time.time(),
            gpus=tuple(gpus),
            token=token,
            simulated=simulated,
        )
        try:
            log = open(log_path, "ab", opener=_private_opener)
        except OSError as err:
            raise CockpitError(
                f"cannot write the server's log {log_path}: {err.strerror}; check the state folder"
            ) from None
        with log, held_signals():
            pending = self.registry.add_pending(pending)
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **env, TOKEN_ENV: token},
                    start_new_session=True,  # own session and process group: survives our exit
                )
            except BaseException:  # no such launcher, not executable: nothing runs
                self.registry.drop_pending(pending)
                raise
            try:
                entry = self.registry.confirm(pending, popen.pid)
            except (
                BaseException
            ) as exc:  # the registry cannot be written: a server we cannot list must not run
                signal_group(popen.pid, signal.SIGKILL)
                popen.wait()
                self.registry.drop_pending(pending)
                raise CockpitError(
                    f"cannot register the server in {self.registry.folder} ({exc}); it was stopped"
                ) from None
            handle = ServerHandle(entry, popen)
            if on_started is not None:
                on_started(handle)
        return handle

    def attach(self, entry: ServerEntry) -> ServerHandle:
        return ServerHandle(entry, None, started=time.monotonic() - max(0.0, time.time() - entry.started))

    # -- follow -----------------------------------------------------------------------------

    def follow(
        self,
        handle: ServerHandle,
        *,
        timeout: float,
        ready_paths: Sequence[str] = ("/health", "/v1/models"),
        poll: float = 0.05,
        api_key: str | None = None,
        nodes: int = 1,
    ) -> Iterator[Event]:
        """Log lines and phases as they come; the last event is ``Ready`` or ``Failed``, with
        the numbers the engine logged about its launch (``facts``). Across ``nodes``, ready
        also waits for the engine's word that every rank joined."""
        experiment = handle.entry.experiment
        tracker = PhaseTracker(experiment, nodes=nodes)
        facts = FactsReader()
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        reader = LogTail(Path(handle.entry.log_path))
        error_at: float | None = None
        next_health = 0.0
        foreign = False  # the port answered, but from another process group (_answered_by_another)
        import httpx  # here, not at the top: the screen's first frame does not wait for it

        def take(line: str, phases: bool = True) -> Iterator[Event]:
            """One log line: kept for the diagnosis, shown, read for facts and (while the engine
            runs) for phases."""
            tail.append(line)
            yield LogLine(experiment, line)
            facts.feed(line)
            phase = tracker.feed(line) if phases else None
            if phase is not None:
                yield phase

        headers = _auth(api_key)
        with httpx.Client(timeout=1.0, headers=headers) as http:
            while True:
                for line in reader.read():
                    yield from take(line)
                    if error_at is None and _ERRORISH.search(line):
                        early = diagnose([line], phase=tracker.phase)
                        if early is not None and early.kind in _CERTAIN:
                            error_at = time.monotonic()
                code = handle.returncode()
                if code is not None:
                    for line in reader.flush():
                        yield from take(line, phases=False)
                    yield Failed(experiment, diagnose_exit(list(tail), code, tracker.phase), facts.facts())
                    return
                now = time.monotonic()
                if error_at is not None and now - error_at > ERROR_GRACE_S:
                    found = diagnose(list(tail), phase=tracker.phase)
                    if found is not None and found.kind in _CERTAIN:
                        yield Failed(experiment, found, facts.facts())
                        return
                    error_at = None  # a scary line that was not an error after all
                if now >= next_health:
                    next_health = now + HEALTH_EVERY_S
                    answered = self._ready(http, handle.url, ready_paths)
                    foreign = answered and _answered_by_another(handle)
                    if answered and not foreign and (nodes == 1 or tracker.all_joined):
                        for line in reader.read():  # what it wrote just before it answered
                            yield from take(line)
                        yield Ready(
                            experiment,
                            handle.url,
                            now - handle.started,
                            handle.entry.started or None,
                            facts.facts(),
                        )
                        return
                if now - handle.started > timeout:
                    where = tracker.phase or "startup"
                    other = (
                        f"; port {handle.entry.port} answered from another process group "
                        f"({busy_port('127.0.0.1', handle.entry.port) or 'unknown'}), not this server's"
                        if foreign
                        else ""
                    )
                    yield Failed(
                        experiment,
                        Diagnosis(
                            kind="timeout",
                            cause=f"not ready after {timeout:.0f} s (last phase: {where}){other}; the server is stopped",
                            next_step=f"read the log {handle.entry.log_path}; if loading is just slow, raise --startup-timeout",
                            phase=where,
                        ),
                        facts.facts(),
                    )
                    return
                time.sleep(poll)

    # -- watch ------------------------------------------------------------------------------

    def watch(
        self,
        handle: ServerHandle,
        *,
        quit: threading.Event,
        health_paths: Sequence[str] = ("/health",),
        api_key: str | None = None,
        every: float = WATCH_EVERY_S,
        health_every: float = WATCH_HEALTH_EVERY_S,
    ) -> Iterator[LogLine | ServerEnded]:
        """Watch a ready server until its process ends (the last item is ``ServerEnded``) or
        ``quit`` is set (nothing more). Health checks that keep failing while the process lives
        come as one log line, and one more when it answers again."""
        import httpx

        experiment = handle.entry.experiment
        reader = LogTail(Path(handle.entry.log_path))
        reader.offset = _size(reader.path)  # what follow() showed is not shown again
        last: collections.deque[str] = collections.deque(maxlen=WATCH_TAIL_LINES)
        misses, next_health = 0, time.monotonic() + health_every
        headers = _auth(api_key)
        with httpx.Client(timeout=1.0, headers=headers) as http:
            while not quit.wait(every):
                last.extend(reader.read())
                code = handle.returncode()
                if code is not None:
                    last.extend(reader.flush())
                    yield ServerEnded(code if handle.ours else None, tuple(last))
                    return
                if time.monotonic() < next_health:
                    continue
                next_health = time.monotonic() + health_every
                answered = self._ready(http, handle.url, health_paths)
                if answered and misses >= WATCH_HEALTH_MISSES:
                    yield LogLine(experiment, f"cockpit: {handle.url} answers {health_paths[0]} again")
                misses = 0 if answered else misses + 1
                if misses == WATCH_HEALTH_MISSES:
                    yield LogLine(experiment, _not_answering(handle, health_paths[0], misses * health_every))

    def answers(self, handle: ServerHandle, paths: Sequence[str], api_key: str | None = None) -> bool:
        """Whether the server answers ``paths`` now, once."""
        import httpx

        headers = _auth(api_key)
        with httpx.Client(timeout=1.0, headers=headers) as http:
            return self._ready(http, handle.url, paths)

    @staticmethod
    def _ready(http, url: str, paths: Sequence[str]) -> bool:
        import httpx

        try:
            return all(http.get(url + path).status_code == 200 for path in paths)
        except httpx.HTTPError:
            return False

    # -- stop -------------------------------------------------------------------------------

    def stop(self, handle: ServerHandle, *, grace: float = 10.0, memory_timeout: float = 30.0) -> str:
        """SIGTERM to the group, SIGKILL after ``grace``, then wait until every process of the
        group is gone and their GPU memory is free.

        The group, not the leader: vLLM's engine core and workers hold the GPUs (and on CPU the
        KV cache) and end a moment after the API server that leads them; a launch that came
        before they were gone would find the box still busy (seen with the real engine)."""
        pgid = handle.entry.pgid
        if keeps_nodes(handle.entry):
            grace = max(grace, NODE_KEEPER_GRACE_S)
        if not handle.ours:  # re-attached from the registry: signalled only once verified
            problem = unverified(handle.entry)
            if problem == ENDED:
                self.registry.remove(handle.pid)
                return "exited"
            if problem is not None:
                raise CockpitError(
                    f"left pid {handle.pid} alone: {problem}, so it may not be the server cockpit "
                    f"started; see what it is (ps -o pid,pgid,args -p {handle.pid}), then remove "
                    f"{self.registry.path_of(handle.entry)}"
                )
        elif pgid != handle.pid:  # our child leads its own group (start_new_session): never another
            pgid = handle.pid
        members = set(group_members(pgid)) | {handle.pid}
        how = "exited"
        if handle.returncode() is None:
            how = "stopped with SIGTERM"
            signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace  # one grace for the leader and its group
            exited = self.wait_exit(handle, grace)
            if not exited or not wait_group_gone(pgid, max(0.0, deadline - time.monotonic())):
                how = f"killed with SIGKILL after {grace:.0f} s"
                signal_group(pgid, signal.SIGKILL)
                self.wait_exit(handle, 5.0)
                wait_group_gone(pgid, 5.0)
        else:
            signal_group(pgid, signal.SIGKILL)  # children the engine left behind
            wait_group_gone(pgid, 5.0)
        self.registry.remove(handle.pid)
        if not self._wait_memory_released(members, memory_timeout):
            how += f"; its GPU memory was still held after {memory_timeout:.0f} s"
        return how

    @staticmethod
    def wait_exit(handle: ServerHandle, seconds: float) -> bool:
        """Whether the server exited within ``seconds`` (our child is reaped as it does)."""
        if handle.popen is not None:
            try:
                handle.popen.wait(timeout=seconds)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not handle.entry.alive():
                return True
            time.sleep(0.05)
        return not handle.entry.alive()

    def _wait_memory_released(self, pids: set[int], seconds: float) -> bool:
        if self.source is None:
            return True
        deadline = time.monotonic() + seconds
        while True:
            held = any(p.pid in pids for s in self.source.sample() for p in s.processes)
            if not held:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def _private_opener(path: str, flags: int) -> int:
    """Logs are the user's alone (0600 in a 0700 folder): an engine may print its arguments."""
    private_dir(Path(path).parent)
    return os.open(path, flags, 0o600)


def _answered_by_another(handle: ServerHandle) -> bool:
    """Whether the port's listener is another process group's than the server's own.

    An engine may hold its port without listening while it loads (vLLM binds its socket at
    start, vllm/entrypoints/launchers/launcher.py: create_server_socket, and uvicorn listens on
    it only once the engine is up), so another program can listen there meanwhile and answer
    /health: that is not this server getting ready. Unknown (no permission to see the sockets'
    owners): not another's."""
    port = handle.entry.port
    try:
        listeners = [
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
        ]
        groups = {os.getpgid(pid) for pid in listeners}
    except (psutil.Error, OSError):
        return False
    return bool(groups) and handle.entry.pgid not in groups


def _auth(api_key: str | None) -> dict[str, str]:
    """The headers of a client of a server started with an API key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _not_answering(handle: ServerHandle, path: str, seconds: float) -> str:
    return (
        f"⚠ cockpit: {handle.url} has not answered {path} for {seconds:.0f} s, yet its process "
        f"(pid {handle.pid}) runs: it may be stuck or overloaded; `stop` ends it"
    )


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (an ended one not yet reaped is not live)."""
    if pgid <= 0:
        return []
    try:
        os.killpg(pgid, 0)  # no such group: nothing to scan for
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) == pgid:
                members.append(proc.info["pid"])
        except (psutil.Error, OSError):
            continue
    return members


def wait_group_gone(pgid: int, seconds: float) -> bool:
    """Wait until no live process is left in the group; False if some still run after ``seconds``."""
    deadline = time.monotonic() + seconds
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


ENDED = "its server ended"  # unverified(): nothing of it left to signal


def unverified(entry: ServerEntry) -> str | None:
    """Why a signal to the entry's process group could reach a process cockpit did not start
    (``ENDED`` when the server is gone and left nothing); None when it is cockpit's server.

    Cockpit starts every engine as the leader of its own session and process group, with the
    entry's token in its environment: so the entry's pid must be its pgid and lead that group,
    started when the entry says, carrying the token. A leader that exited leaves its group
    verified only by a member that carries the token (the workers it left behind)."""
    pid, pgid = entry.pid, entry.pgid
    if pid <= 0 or pgid != pid:
        return f"its process group {pgid} is not its own"
    try:
        proc = psutil.Process(pid)
        leads = proc.status() != psutil.STATUS_ZOMBIE and started_at(proc, entry.create_time)
    except psutil.NoSuchProcess:
        leads = False
    except psutil.AccessDenied:
        return f"pid {pid} cannot be inspected (permission denied)"
    if not leads:
        return None if entry.token and group_carries(pgid, entry.token) else ENDED
    try:
        if os.getpgid(pid) != pgid:
            return f"pid {pid} is in process group {os.getpgid(pid)}, not {pgid}"
        if entry.token and proc.environ().get(TOKEN_ENV) != entry.token:
            return f"pid {pid} does not carry the server's token in its environment"
    except (ProcessLookupError, psutil.NoSuchProcess):
        return ENDED
    except (psutil.AccessDenied, PermissionError):
        return f"pid {pid}'s environment cannot be read (permission denied)"
    return None


def group_carries(pgid: int, token: str) -> bool:
    """Whether a live member of the group carries ``token`` (what a server left behind)."""
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error, OSError):
            if psutil.Process(pid).environ().get(TOKEN_ENV) == token:
                return True
    return False


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """``sig`` to a server's group; 0 (cockpit's own group) and negative numbers never reach killpg."""
    if isinstance(pgid, bool) or not isinstance(pgid, int) or pgid <= 0:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def free_local_port() -> int:
    """A port free on this machine's 127.0.0.1 now (the kernel's choice)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A launch across nodes is one local process (cockpit.runner.nodekeeper) that stops every node's
# engine over SSH when asked: it gets this long before SIGKILL, which would leave the nodes running.
NODE_KEEPER_GRACE_S = 90.0  # a spawn in flight (60 s at most), then every node's stop (15 s)


def keeps_nodes(entry: ServerEntry) -> bool:
    """Whether a server entry is a launch across nodes (its process is the node keeper)."""
    return "cockpit.runner.nodekeeper" in entry.argv[:3]


def busy_port(host: str, port: int) -> str | None:
    """Who holds ``port`` (a one-line description), or None when it is free to bind."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return None
        except OSError:
            pass
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                try:
                    return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
                except psutil.NoSuchProcess:
                    return f"pid {conn.pid}"
    except (psutil.AccessDenied, OSError):
        pass
    return "another process"
