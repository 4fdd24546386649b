"""The experiment's lifecycle under signals and races: real cockpit and engine processes.

No engine is ever left running that `cockpit servers` does not list; SIGTERM stops what cockpit
started, SIGHUP leaves the server listed; two cockpits never share GPUs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import free_port, wait_for
from test_run import read_until

from cockpit.faces.headless import stop_servers
from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal
from cockpit.store.profile import find_profile

SIM_MARK = "cockpit.sim"


def _profile(folder: Path, port: int, name: str = "minimax-m2.5") -> str:
    data = yaml.safe_load(find_profile(name).read_text())
    data.setdefault("server", {})["port"] = port
    path = folder / f"{name}-{port}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


class Box:
    """One cockpit world: its own state folder, journal and simulated box."""

    def __init__(self, root: Path, scale: float = 20):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.env = {
            **os.environ,
            "COCKPIT_STATE_DIR": str(root / "state"),
            "COCKPIT_JOURNAL": str(root / "journal.sqlite"),
            "COCKPIT_SIM_STATE": str(root / "simbox"),
            "COCKPIT_SIM_TIME_SCALE": str(scale),
            "PYTHONUNBUFFERED": "1",
        }
        self.registry = Registry(root / "state" / "servers")

    def spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "cockpit.faces.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def cockpit(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cockpit.faces.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def engines(self) -> set[int]:
        """Engines running on this box, whatever cockpit knows of them."""
        found = set()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if SIM_MARK not in " ".join(proc.info["cmdline"] or []):
                    continue
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get("COCKPIT_SIM_STATE") == self.env["COCKPIT_SIM_STATE"]:
                    found.add(proc.pid)
            except psutil.Error:
                continue
        return found

    def listed(self) -> set[int]:
        """What `cockpit servers` lists (its own code: Registry.live over this state folder)."""
        with _env(self.env):
            return {entry.pid for entry in Registry().live()}

    def journal(self) -> Journal:
        return Journal(self.env["COCKPIT_JOURNAL"])


class _env:
    """os.environ swapped for a box's while in-process code reads it (one thread at a time)."""

    _lock = threading.Lock()

    def __init__(self, env: dict[str, str]):
        self.env = env

    def __enter__(self):
        self._lock.acquire()
        self.saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)
        self._lock.release()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- interrupts at the engine's first appearance ------------------------------------------------

OFFSETS_MS = (0, 1, 2, 3, 5, 8, 13, 21, 50, 120)  # after the pending entry appears (just before the fork)


def _interrupt_trial(root: Path, sig: signal.Signals, offset_ms: float) -> tuple[set[int], set[int], str]:
    """Start `cockpit run`, signal it `offset_ms` after its pending registry entry appears;
    return (engines left, engines listed, what cockpit printed)."""
    box = Box(root)
    profile = _profile(root, free_port())
    run = box.spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet")
    folder = box.registry.folder
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run.poll() is None:
        try:
            if any(
                name.startswith("pending-") or name.endswith(".json") or name == ".launch.lock"
                for name in os.listdir(folder)
            ):
                break
        except FileNotFoundError:
            pass
        time.sleep(0.0005)
    time.sleep(offset_ms / 1000)
    run.send_signal(sig)
    out, err = run.communicate(timeout=60)
    time.sleep(0.3)  # a child forked but not yet exec'd becomes the engine now
    left, listed = box.engines(), box.listed()
    said: list[str] = []
    with _env(box.env):  # `cockpit stop all`, in this process: every listed engine is stoppable
        assert stop_servers("all", out=said.append) == 0, said
    wait_for(lambda: not box.engines(), timeout=20)
    return left, listed, out + err


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_interrupts_around_the_spawn_leave_no_engine_unlisted(tmp_path, sig):
    with ThreadPoolExecutor(max_workers=3) as pool:
        trials = list(
            pool.map(
                lambda i: _interrupt_trial(tmp_path / f"t{i}", sig, OFFSETS_MS[i]), range(len(OFFSETS_MS))
            )
        )
    unlisted = [
        (offset, left - listed, out)
        for offset, (left, listed, out) in zip(OFFSETS_MS, trials)
        if left - listed
    ]
    assert not unlisted, unlisted
    if sig != signal.SIGKILL:  # Ctrl-C and SIGTERM stop what was started, at any instant
        leftovers = [(offset, left, out) for offset, (left, _, out) in zip(OFFSETS_MS, trials) if left]
        assert not leftovers, leftovers
    assert not any(Path(tmp_path).rglob("servers/.*.tmp"))


# -- signals mean what a person expects -----------------------------------------------------------


def test_sigterm_while_loading_stops_the_server_and_journals_the_end(tmp_path):
    box = Box(tmp_path, scale=0.05)  # a slow load: the signal lands while weights load
    run = box.spawn("run", "try tp4", "--profile", _profile(tmp_path, free_port()), "--sim", "--quiet")
    read_until(run, "phase     loading")
    [entry] = box.registry.live()
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 143, out + err
    assert "stopped   terminated (SIGTERM)" in out
    wait_for(lambda: _gone(entry.pid))
    assert not box.listed() and not box.engines()
    with box.journal() as journal:
        [row] = journal.experiments()
    assert row.outcome == "stopped" and row.ended is not None


def test_sigterm_during_a_bench_ends_the_bench_child_and_the_server(tmp_path):
    box = Box(tmp_path, scale=50)
    profile = _profile(tmp_path, free_port())
    run = box.spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet", "--bench", "c=1,4 t=60")
    read_until(run, "ready     ")
    [entry] = box.registry.live()

    def bench_child():
        for child in psutil.Process(run.pid).children():
            try:
                if "--jsonl" in child.cmdline():
                    return child
            except psutil.Error:
                continue
        return None

    child = wait_for(bench_child)
    time.sleep(0.5)  # requests in flight
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 143, out + err
    wait_for(lambda: _gone(child.pid) and _gone(entry.pid))
    assert not box.listed() and not box.engines()


def test_sighup_leaves_the_server_running_listed_and_stoppable(tmp_path):
    box = Box(tmp_path, scale=0.05)  # the terminal goes away while the weights load
    run = box.spawn("run", "try tp4", "--profile", _profile(tmp_path, free_port()), "--sim", "--quiet")
    read_until(run, "phase     loading")
    [entry] = box.registry.live()
    try:
        run.send_signal(signal.SIGHUP)
        run.communicate(timeout=60)
        assert run.returncode == 129
        assert entry.pid in box.listed() and not _gone(entry.pid)
        with box.journal() as journal:
            [row] = journal.experiments()
        assert "SIGHUP" in (row.note or "") and f"cockpit stop {entry.pid}" in row.note
        assert row.outcome == "launching" and row.ended is None
        stopped = box.cockpit("stop", str(entry.pid))
        assert stopped.returncode == 0, stopped.stderr
        wait_for(lambda: _gone(entry.pid))
    finally:  # a failure above must not leave the engine or its cockpit running for other tests
        run.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(entry.pgid, signal.SIGKILL)
    with box.journal() as journal:
        [row] = journal.experiments()
    assert row.ended is not None


# -- two cockpits, one box ------------------------------------------------------------------------


def test_two_simultaneous_launches_get_disjoint_gpus_and_a_third_is_told_who_holds_them(tmp_path):
    box = Box(tmp_path, scale=0.05)  # both still loading when the third asks
    runs = [
        box.spawn("run", "try tp4", "--profile", _profile(tmp_path, free_port()), "--sim", "--quiet")
        for _ in range(2)
    ]
    try:
        entries = wait_for(
            lambda: _both_running(runs) and len(box.registry.live()) == 2 and box.registry.live()
        )
        first, second = (set(e.gpus) for e in entries)
        assert len(first) == len(second) == 4 and not first & second
        third = box.cockpit(
            "run", "try tp4", "--profile", _profile(tmp_path, free_port()), "--sim", "--quiet"
        )
        assert third.returncode == 1
        assert "needs 4 free GPUs, 0 are free" in third.stdout
        assert all(f"pid {e.pid} (tp4 on vllm" in third.stdout for e in entries), third.stdout
    finally:
        for run in runs:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
            run.communicate(timeout=30)
    assert not box.listed()


def _both_running(runs: list[subprocess.Popen]) -> bool:
    """True while every run still runs; one that ended fails the test with what it said."""
    for run in runs:
        if run.poll() is not None:
            out, err = run.communicate()
            raise AssertionError(f"a launch ended with {run.returncode}:\n{out}{err}")
    return True


def test_a_second_launch_on_a_registered_port_is_refused_before_it_binds(tmp_path):
    box = Box(tmp_path, scale=0.05)
    port = free_port()
    profile = _profile(tmp_path, port)
    first = box.spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet")
    [entry] = wait_for(box.registry.live)
    second = box.cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet")  # GPUs 4-7 are free
    assert second.returncode == 1 and f"port {port} is already in use" in second.stdout, second.stdout
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    assert _gone(entry.pid)


# -- the simulated box is as strict as a real GPU -------------------------------------------------


def test_the_simulated_box_refuses_an_allocation_above_capacity_with_the_cuda_oom_text(tmp_path):
    from simproc import SimProcess

    state = tmp_path / "simbox"
    serve = ["serve", "MiniMaxAI/MiniMax-M2.5", "--tensor-parallel-size", "4", "--max-model-len", "32768"]
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    first_port = free_port()
    first = SimProcess("vllm", [*serve, "--port", str(first_port)], state, env=env)
    try:
        first.wait_ready(f"http://127.0.0.1:{first_port}")
        second = SimProcess("vllm", [*serve, "--port", str(free_port())], state, env=env)  # the same GPUs
        assert second.wait_exit() == 1
        out = second.output()
        assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in out
        assert "GiB. GPU 0 has a total capacity of 94.97 GiB of which" in out
        assert (
            f"Process {first.proc.pid} has 87.87 GiB memory in use. Including non-PyTorch memory" in out
        )  # 0.92 x 94.97 + 0.5
        second.stop()
    finally:
        first.stop()


# -- a journal that fails never orphans a server ---------------------------------------------------


class InProcess:
    """A Launcher in this process over a box of its own (a slow load: the server stays up)."""

    def __init__(self, tmp_path: Path, monkeypatch):
        from cockpit.lab.box import box_context
        from cockpit.lab.lab import lab_setup
        from cockpit.store.profile_setup import SetupOverrides, resolve_profile

        self.box = Box(tmp_path, scale=0.05)
        for name in ("COCKPIT_STATE_DIR", "COCKPIT_JOURNAL", "COCKPIT_SIM_STATE", "COCKPIT_SIM_TIME_SCALE"):
            monkeypatch.setenv(name, self.box.env[name])
        self.profile = resolve_profile(SetupOverrides(profile=_profile(tmp_path, free_port())))
        self.setup = lab_setup(self.profile, box_context(self.profile, sim=True))

    def launcher(self, journal: Journal, registry: Registry | None = None):
        from cockpit.lab.lab import gpu_source
        from cockpit.runner.experiment import Launcher
        from cockpit.runner.supervisor import Supervisor

        supervisor = Supervisor(registry or self.box.registry, gpu_source(self.setup.hardware, True))
        return Launcher(self.profile, self.setup, journal, supervisor, sim=True)


@pytest.fixture
def in_process(tmp_path, monkeypatch) -> InProcess:
    return InProcess(tmp_path, monkeypatch)


DISK_FULL = "cannot use the journal (database or disk is full)"


@pytest.mark.parametrize("failing", ["pid", "outcome"], ids=["right-after-spawn", "at-ready-or-failure"])
def test_a_journal_write_that_fails_after_launch_stops_the_server(in_process, failing, monkeypatch):
    from cockpit.core.errors import CockpitError
    from cockpit.core.layout import parse_layout

    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")  # ready soon: the outcome write is reached

    class FullDisk(Journal):
        """The disk fills up after the launch: the journal's next write of ``failing`` fails."""

        def update_experiment(self, id, /, **changes):
            if failing in changes:
                raise CockpitError(DISK_FULL)
            super().update_experiment(id, **changes)

    with FullDisk() as journal:
        launcher = in_process.launcher(journal)
        with pytest.raises(CockpitError, match="disk is full"):
            list(launcher.run(parse_layout("tp4")))
    assert launcher.handle is None
    assert not in_process.box.listed()
    wait_for(lambda: not in_process.box.engines(), timeout=15)


def test_a_journal_that_fails_during_a_stop_does_not_keep_the_server_up(in_process):
    from cockpit.core.errors import CockpitError
    from cockpit.core.layout import parse_layout
    from cockpit.runner.events import Launching

    class FullDisk(Journal):
        def record_peak(self, id, peaks):
            raise CockpitError(DISK_FULL)

    with FullDisk() as journal:
        launcher = in_process.launcher(journal)
        next(e for e in launcher.run(parse_layout("tp4")) if isinstance(e, Launching))
        pid = launcher.handle.pid
        assert launcher.stop("done") is not None
    assert _gone(pid) and not in_process.box.listed()


def test_a_stop_cancels_a_launch_still_waiting_for_the_launch_lock(in_process):
    from cockpit.core.layout import parse_layout

    with Journal() as journal:
        launcher = in_process.launcher(journal)
        since = launcher.cancels
        events: list = []
        with in_process.box.registry.launch_lock():  # another cockpit is launching
            waiting = threading.Thread(
                target=lambda: events.extend(launcher.run(parse_layout("tp4"), since=since))
            )
            waiting.start()
            time.sleep(0.3)
            launcher.cancel_launches()  # the person pressed stop meanwhile
        waiting.join(timeout=30)
        assert not waiting.is_alive() and events == [] and launcher.handle is None
        assert journal.experiments() == []  # nothing was started, nothing journaled
    assert not in_process.box.engines() and not in_process.box.listed()


def test_a_registry_that_cannot_be_written_after_the_spawn_kills_the_engine(in_process):
    from cockpit.core.errors import CockpitError
    from cockpit.core.layout import parse_layout

    class FullRegistry(Registry):
        def confirm(self, pending, pid):
            self.spawned = pid
            raise OSError(28, "No space left on device")

    registry = FullRegistry(in_process.box.registry.folder)
    with Journal() as journal:
        launcher = in_process.launcher(journal, registry)
        with pytest.raises(CockpitError, match="cannot register the server .* it was stopped"):
            list(launcher.run(parse_layout("tp4")))
        [row] = journal.experiments()
    assert _gone(registry.spawned) and launcher.handle is None
    assert row.outcome == "failed" and row.ended is not None
    assert not list(registry.folder.glob("*.json"))  # no pending entry left either


def test_a_hang_up_already_ignored_stays_ignored(tmp_path):
    """Under nohup the run goes on to its end: the server is stopped as usual, exit 0."""
    box = Box(tmp_path, scale=50)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cockpit.faces.cli",
            "run",
            "try tp4",
            "--profile",
            _profile(tmp_path, free_port()),
            "--sim",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=box.env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    read_until(run, "launching")
    run.send_signal(signal.SIGHUP)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, out + err
    assert "stopped   done" in out and not box.listed()


# -- a server with an API key ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "server",
    [{"args": ["--max-model-len", "32768", "--api-key", "k3y-one"]}, {"env": {"VLLM_API_KEY": "k3y-two"}}],
    ids=["--api-key", "VLLM_API_KEY"],
)
def test_a_server_with_an_api_key_becomes_ready_and_is_benchmarked_with_it(tmp_path, server):
    box = Box(tmp_path, scale=50)
    data = yaml.safe_load(Path(_profile(tmp_path, free_port())).read_text())
    data["server"].update(server)
    profile = tmp_path / "keyed.yaml"
    profile.write_text(yaml.safe_dump(data))
    run = box.cockpit(
        "run",
        "try tp4",
        "--profile",
        str(profile),
        "--sim",
        "--quiet",
        "--bench",
        "c=2 n=4 in=64 out=16",
        "--startup-timeout",
        "60",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ready     http://127.0.0.1:" in run.stdout
    assert "C=2" in run.stdout and "errors 0" in run.stdout, run.stdout
    assert "k3y" not in run.stdout + run.stderr


# -- a server that ends after ready is noticed ------------------------------------------------------


class Watching:
    """``Launcher.watch`` on a thread of its own, its events collected."""

    def __init__(self, launcher, handle):
        self.quit = threading.Event()
        self.events: list = []
        self.thread = threading.Thread(target=lambda: self.events.extend(launcher.watch(handle, self.quit)))
        self.thread.start()

    def stopped(self):
        from cockpit.runner.events import Stopped

        return next((e for e in self.events if isinstance(e, Stopped)), None)


def _ready(launcher, events) -> None:
    from cockpit.runner.events import Ready

    assert isinstance(events[-1], Ready), events[-1]
    assert launcher.handle is not None


def _zombies() -> list[int]:
    """This process's children that ended and were never reaped (`<defunct>` in ps)."""
    return [c.pid for c in psutil.Process().children() if _status(c) == psutil.STATUS_ZOMBIE]


def _status(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return ""


def test_a_server_killed_after_ready_is_reaped_unlisted_and_journaled_once(in_process, monkeypatch):
    from cockpit.core.layout import parse_layout

    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    with Journal() as journal:
        launcher = in_process.launcher(journal)
        _ready(launcher, list(launcher.run(parse_layout("tp4"))))
        handle = launcher.handle
        watching = Watching(launcher, handle)
        os.killpg(handle.pid, signal.SIGKILL)  # `kill -9` from another shell, or the OOM killer
        stopped = wait_for(watching.stopped)
        watching.thread.join(10)
        assert not watching.thread.is_alive()
        assert stopped.ended == "killed (SIGKILL)" and "killed (SIGKILL)" in stopped.reason
        assert "`try tp4` launches it again" in stopped.reason
        assert launcher.handle is None and launcher.ended(stopped.experiment)
        assert handle.pid not in _zombies()  # reaped: no <defunct> child of cockpit
        assert launcher.stop("user") is None  # the end was said once, by the watch
        [row] = journal.experiments()
    assert row.outcome == "ready" and row.ended is not None
    assert "killed (SIGKILL)" in (row.note or "")
    assert not in_process.box.listed()


def test_a_server_cockpit_stops_itself_ends_its_watch_quietly(in_process, monkeypatch):
    from cockpit.core.layout import parse_layout

    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    with Journal() as journal:
        launcher = in_process.launcher(journal)
        _ready(launcher, list(launcher.run(parse_layout("tp4"))))
        watching = Watching(launcher, launcher.handle)
        stopped = launcher.stop("stopped by the user")
        assert stopped is not None and not stopped.ended
        wait_for(lambda: not watching.thread.is_alive(), timeout=10)
        assert watching.events == []  # no second word on the end: `stop` said it
        [row] = journal.experiments()
    assert not row.note


def test_a_re_attached_server_is_watched_by_its_pid(tmp_path, monkeypatch):
    """A server another cockpit started (not this one's child) that ends is noticed all the same."""
    in_process = InProcess(tmp_path, monkeypatch)
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    in_process.box.env["COCKPIT_SIM_TIME_SCALE"] = "50"
    kept = in_process.box.cockpit(
        "run", "try tp4", "--profile", str(in_process.profile.path), "--sim", "--quiet", "--keep"
    )
    assert kept.returncode == 0, kept.stdout + kept.stderr
    [entry] = in_process.box.registry.live()
    with Journal() as journal:
        launcher = in_process.launcher(journal)
        handle = launcher.supervisor.attach(entry)
        _ready(launcher, list(launcher.follow(handle)))
        watching = Watching(launcher, handle)
        os.killpg(entry.pgid, signal.SIGTERM)  # `cockpit stop` of another cockpit would do the same
        stopped = wait_for(watching.stopped)
        assert stopped.ended == "ended" and "re-attached" in stopped.reason
        assert launcher.handle is None
        [row] = journal.experiments()
    assert row.ended is not None and "ended" in (row.note or "")
    assert not in_process.box.listed()


def test_a_server_that_stops_answering_is_said_once_and_not_taken_for_ended(in_process, monkeypatch):
    from cockpit.core.layout import parse_layout

    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    with Journal() as journal:
        launcher = in_process.launcher(journal)
        _ready(launcher, list(launcher.run(parse_layout("tp4"))))
        handle, quit, lines = launcher.handle, threading.Event(), []
        watch = launcher.supervisor.watch(handle, quit=quit, every=0.05, health_every=0.1)
        thread = threading.Thread(target=lambda: lines.extend(item.text for item in watch))
        thread.start()
        os.killpg(handle.pid, signal.SIGSTOP)  # alive, but answers nothing
        try:
            wait_for(lambda: any("has not answered /health" in line for line in lines))
        finally:
            os.killpg(handle.pid, signal.SIGCONT)
        wait_for(lambda: any("answers /health again" in line for line in lines))
        quit.set()
        thread.join(10)
        assert f"its process (pid {handle.pid}) runs" in lines[0]
        # said once a silence, not every check (a loaded machine may see a second, later silence)
        silent = ["has not answered /health" in line for line in lines]
        assert not any(a and b for a, b in zip(silent, silent[1:])), lines
        assert handle.returncode() is None and launcher.stop("done") is not None


@pytest.mark.parametrize(
    ("code", "lines", "words", "reason"),
    [
        (-signal.SIGKILL, (), "killed (SIGKILL)", "OOM killer"),
        (-signal.SIGTERM, (), "ended (SIGTERM)", "stopped from outside cockpit (SIGTERM)"),
        (143, (), "ended (SIGTERM)", "stopped from outside cockpit (SIGTERM)"),
        (0, (), "ended (exit code 0)", "as on `cockpit stop`"),
        (1, ("RuntimeError: CUDA error: an illegal memory access",), "ended (exit code 1)", "illegal memory"),
        (-signal.SIGSEGV, (), "crashed (SIGSEGV)", "crashed (SIGSEGV)"),
        (None, (), "ended", "re-attached"),
    ],
)
def test_how_a_ready_server_ended_is_said_in_a_line_and_a_few_words(code, lines, words, reason):
    from cockpit.runner.diagnose import describe_end

    ending = describe_end(code, lines)
    assert ending.words == words and reason in ending.reason


def test_stopping_a_server_whose_cockpit_died_before_journaling_its_pid_journals_it():
    """kill -9 of cockpit between the spawn (listed at once) and journaling the pid: the stop
    that finds the server in the registry journals its pid, log and end."""
    from cockpit.runner.registry import ServerEntry

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        journal = Journal()
        exp = journal.start_experiment(
            profile="p", model="m", engine="vllm", layout="tp4", argv=["vllm", "serve", "m"]
        )
        entry = Registry().add(
            ServerEntry(server.pid, server.pid, ("vllm", "serve", "m"), 8000, "/tmp/x.log", exp, layout="tp4")
        )
        lines: list[str] = []
        assert stop_servers(str(entry.pid), out=lines.append) == 0
        server.wait(timeout=10)
        record = Journal().experiment(exp)
        assert record is not None and record.pid == server.pid and record.outcome == "stopped"
        assert record.log_path == "/tmp/x.log" and record.ended is not None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
