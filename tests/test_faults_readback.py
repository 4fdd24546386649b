"""Everything cockpit reads back from disk is checked before it is used: faults injected into the
server registry, the journal, the calibration file and the folders cockpit makes.

Each case is a row of a fault table: the fault, the one line cockpit says about it, and what must
not be lost (the good entry beside the bad one still listed and stopped, the other process group
alive, the good journal row still in `cockpit results`). User-facing cases run the real CLI: its
`main()` in this process (its exit code, stdout and stderr as a terminal would see them), and at
least one case of each test as the real console process, end to end. A case stays a process of its
own where a regression could reach the test itself: a signal to a process group of 0 or less (the
caller's own group) or to the test's group, a FIFO that could block, a device or a 10 GiB file read
whole. A live "server" is a real child process in its own session carrying a token.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from cockpit.faces.cli import main
from cockpit.faces.headless import list_servers, stop_servers
from cockpit.runner.registry import PENDING_GRACE_S, TOKEN_ENV, Registry, ServerEntry
from cockpit.store.journal import BenchPoint, Journal

CLI = [sys.executable, "-m", "cockpit"]  # the console script's path: entry.main, then cli.main


def in_its_own_process(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI as its own process, in the test's private folders (conftest points every
    COCKPIT_* there). Its own session: a regressed `killpg(0)` ends it, never the test's group."""
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, start_new_session=True
    )


@pytest.fixture
def cockpit(capsys):
    """The CLI's ``main()`` in this process, or with ``console=True`` the real console process.

    In this process, "no traceback" is ``main()`` returning its exit code with no exception
    escaping; a warning logged on the way is on stderr, as Python prints it where logging is not
    set up (the console process), so a stray line still counts against "one line"."""

    def run(*args: str, console: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        if console:
            return in_its_own_process(*args, timeout=timeout)
        capsys.readouterr()  # what the test printed before is not the command's
        last_resort = logging.StreamHandler(sys.stderr)  # capsys's stderr, as the call starts
        last_resort.setLevel(logging.WARNING)
        logging.getLogger().addHandler(last_resort)
        try:
            code = main(list(args))
        finally:
            logging.getLogger().removeHandler(last_resort)
        out, err = capsys.readouterr()
        assert type(code) is int, f"main() returned {code!r}"
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


def one_line(text: str, fragment: str) -> str:
    """The one line of ``text`` that holds ``fragment`` (exactly one)."""
    lines = [line for line in text.splitlines() if fragment in line]
    assert len(lines) == 1, f"{fragment!r} in {len(lines)} lines of:\n{text}"
    return lines[0]


def clean(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr


@pytest.fixture
def children():
    """Real processes started for a test, each in its own session unless asked; killed after."""
    started: list[subprocess.Popen] = []

    def start(token: str = "", own_session: bool = True) -> subprocess.Popen:
        env = {**os.environ, TOKEN_ENV: token} if token else dict(os.environ)
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            start_new_session=own_session,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        _wait(lambda: _carries(proc.pid, token) if token else True)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _carries(pid: int, token: str) -> bool:
    try:
        return psutil.Process(pid).environ().get(TOKEN_ENV) == token
    except psutil.Error:
        return False


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def running(proc: subprocess.Popen) -> bool:
    """Alive and not a zombie (a killed child stays one until the test reaps it)."""
    try:
        return psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def server_entry(proc: subprocess.Popen, token: str, port: int = 45001, **fields) -> ServerEntry:
    """The entry cockpit writes for a server it started as ``proc``."""
    values = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "argv": ("vllm", "serve", "m"),
        "port": port,
        "log_path": "/tmp/x.log",
        "experiment": 1,
        "engine": "vllm",
        "layout": "tp1",
        "url": f"http://127.0.0.1:{port}",
        "started": time.time(),
        "create_time": psutil.Process(proc.pid).create_time(),
        "gpus": (0,),
        "token": token,
        "owner": os.getpid(),
    }
    return ServerEntry(**{**values, **fields})


@pytest.fixture
def registry() -> Registry:
    return Registry()  # the state folder conftest gives the test


@pytest.fixture
def good(registry, children):
    """A live server cockpit started, listed in the registry: it must survive every fault beside it."""
    proc = children("a" * 16)
    entry = registry.add(server_entry(proc, "a" * 16))
    return proc, entry


# -- damaged registry entries: said once, set aside, never blocking the good one -------------------

PENDING = {"pid": 0, "pgid": 0, "argv": [], "port": 45002, "log_path": "", "experiment": 2, "token": "bb"}
LIVE = {"pid": 4000000, "pgid": 4000000, "argv": [], "port": 45003, "log_path": "", "experiment": 3}
FUTURE = time.time() + 86400

DAMAGED = [
    ("owner-abc", "pending-bb.json", {**PENDING, "owner": "abc", "started": 1.0}, "its owner is 'abc'"),
    (
        "started-x",
        "pending-bb.json",
        {**PENDING, "owner": 1, "started": "x"},
        "its started is 'x', not a time",
    ),
    (
        "create-time-abc",
        "4000000.json",
        {**LIVE, "create_time": "abc"},
        "its create_time is 'abc', not a time",
    ),
    (
        "started-nan",
        "pending-bb.json",
        {**PENDING, "owner": 1, "started": float("nan")},
        "its started is nan",
    ),
    (
        "started-inf",
        "pending-bb.json",
        {**PENDING, "owner": 1, "started": float("inf")},
        "its started is inf",
    ),
    ("started-future", "pending-bb.json", {**PENDING, "owner": 1, "started": FUTURE}, "is in the future"),
    (
        "argv-not-a-list",
        "4000000.json",
        {**LIVE, "argv": "vllm serve"},
        "its argv is 'vllm serve', not a list",
    ),
    ("pgid-negative", "4000000.json", {**LIVE, "pgid": -1}, "its pgid is -1, not a whole number"),
    ("pid-bool", "4000000.json", {**LIVE, "pid": True}, "its pid is True"),
    ("gpus-text", "4000000.json", {**LIVE, "gpus": ["0"]}, "its gpus is '0'"),
    ("token-path", "pending-bb.json", {**PENDING, "token": "../x"}, "its token is '../x'"),
    ("not-an-object", "4000000.json", [1, 2], "it holds list, not an object"),
    ("wrong-file-name", "123.json", LIVE, "it names pid 4000000, not its file's"),
    ("non-json", "4000000.json", "{oops", "it is not JSON"),
    ("10-mb", "4000000.json", b"{" + b" " * (10 * 2**20) + b"}", "it is 10.0 MiB, more than the 64 KiB"),
    ("fifo", "4000000.json", "fifo", "it is a FIFO, not a file"),
    ("folder", "4000000.json", "folder", "it is a folder, not a file"),
]


def _plant(folder: Path, name: str, content) -> Path:
    """Write the fault: JSON data, raw text or bytes, a FIFO or a folder under ``name``."""
    path = folder / name
    if content == "fifo":
        os.mkfifo(path)
    elif content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def _risky(command: str, content) -> bool:
    """A fault the console process takes: a FIFO (a regression would block on it), and `stop all`
    beside an entry whose pgid is 0 or less (a regression would signal the caller's own group)."""
    no_group = isinstance(content, dict) and content["pgid"] <= 0
    return content == "fifo" or (command == "stop all" and no_group)


@pytest.mark.parametrize("command", ["servers", "stop all"])
@pytest.mark.parametrize("name, content, said", [case[1:] for case in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_entry_is_said_once_and_set_aside_beside_a_good_one(
    cockpit, registry, good, command, name, content, said
):
    proc, entry = good
    bad = _plant(registry.folder, name, content)
    result = cockpit(*command.split(), console=_risky(command, content))
    clean(result)
    line = one_line(result.stderr, said)
    assert line.startswith(f"warning: the server entry {bad} is damaged") and "moved to" in line
    assert not bad.exists() and bad.with_name(bad.name + ".bad").exists()  # never read again
    if command == "servers":
        assert result.returncode == 0 and str(entry) in result.stdout  # the good one still listed
        assert running(proc)
    else:
        assert result.returncode == 0 and f"stopped   {entry}" in result.stdout  # and still stopped
        proc.wait(timeout=10)
    again = cockpit("servers")
    assert "warning" not in again.stderr  # said once


def test_a_damaged_entry_blocks_no_launch(cockpit, registry, good, profile_file, monkeypatch):
    """`cockpit run` with a pending entry whose owner is "abc": one line, and the launch goes on."""
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    proc, entry = good
    bad = _plant(registry.folder, "pending-bb.json", {**PENDING, "owner": "abc", "started": 1.0})
    profile, port = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", console=True)
    clean(result)
    assert result.returncode == 0, result.stdout + result.stderr
    one_line(result.stderr, f"the server entry {bad} is damaged (its owner is 'abc'")
    assert f"ready     http://127.0.0.1:{port}" in result.stdout
    assert f"running   {entry}" in result.stdout  # the good one announced, and left running
    assert [e.pid for e in Registry().live()] == [proc.pid]


# -- signals go only to a server cockpit verifies it started ---------------------------------------


def _the_tests_own_group(children) -> tuple[int, subprocess.Popen]:
    """The test's own process group (a killpg there would end this test) and a child in it."""
    return os.getpgid(0), children(own_session=False)


def _another_session(children) -> tuple[int, subprocess.Popen]:
    other = children("c" * 16)
    return other.pid, other


# console: a regression would signal the caller's own group (0) or the test's: never this process's
UNVERIFIED = [
    ("pgid-0", lambda children: (0, None), True, "its process group 0 is not its own"),
    ("pgid-of-the-tests-own-group", _the_tests_own_group, True, "is not its own"),
    ("pgid-of-another-session", _another_session, False, "is not its own"),
    ("token-mismatch", lambda children: (None, None), False, "does not carry the server's token"),
]


@pytest.mark.parametrize("victim, console, said", [c[1:] for c in UNVERIFIED], ids=[c[0] for c in UNVERIFIED])
def test_a_server_cockpit_cannot_verify_is_never_signalled(
    cockpit, registry, good, children, victim, console, said
):
    """The entry of a live process, its pgid or token changed: `stop all` leaves it, and the
    group its pgid names, alone; the good server beside it is stopped."""
    good_proc, good_entry = good
    proc = children("b" * 16)
    pgid, bystander = victim(children)
    fields = {"pgid": pgid} if pgid is not None else {"token": "d" * 16}
    entry = registry.add(replace(server_entry(proc, "b" * 16, port=45010, experiment=2), **fields))
    result = cockpit("stop", "all", console=console)
    clean(result)
    assert result.returncode == 1, result.stdout + result.stderr  # not everything was stopped
    line = one_line(result.stdout, said)
    assert line.startswith(f"skipped   left pid {proc.pid} alone") and str(registry.path_of(entry)) in line
    assert running(proc) and (bystander is None or running(bystander))  # nothing of it signalled
    assert [e.pid for e in Registry().live()] == [proc.pid]  # still listed, for the user to look at
    assert f"stopped   {good_entry}" in result.stdout  # the good one beside it still stopped
    good_proc.wait(timeout=10)


def test_a_pid_that_leads_no_group_of_its_own_is_left_alone(cockpit, registry, children):
    """pid == pgid in the entry, but the process is in the test's group (not started by cockpit)."""
    proc = children("e" * 16, own_session=False)
    entry = registry.add(server_entry(proc, "e" * 16))
    result = cockpit("stop", str(entry.pid), console=True)  # a regression would signal the test's group
    clean(result)
    line = one_line(result.stdout, f"pid {proc.pid} is in process group {os.getpgid(0)}, not {proc.pid}")
    assert line.startswith("skipped") and result.returncode == 1 and running(proc)


@pytest.mark.parametrize(
    "carried, entry_token, create_time_shift",
    [
        ("0" * 16, "f" * 16, -3600.0),  # a reused PID: another process, started later
        ("", "", -3600.0),  # an entry from before tokens: matched by its start time alone
    ],
    ids=["another-token", "no-token-other-start"],
)
def test_a_reused_pid_is_not_signalled(cockpit, registry, children, carried, entry_token, create_time_shift):
    """The pid runs, but it is not the entry's server any more: the entry is dropped, the process left alone."""
    proc = children(carried)
    entry = server_entry(proc, entry_token)
    registry.add(replace(entry, create_time=entry.create_time + create_time_shift))
    result = cockpit("stop", "all", console=True)
    clean(result)
    assert result.returncode == 0 and "no servers started by cockpit are running" in result.stdout
    assert running(proc) and not Registry().live()


@pytest.mark.parametrize(
    "shift", [1.0, -1.0, -90.0], ids=["btime-a-second-on", "a-second-back", "clock-stepped"]
)
def test_a_server_whose_start_time_reads_off_is_still_cockpits(cockpit, registry, children, shift):
    """psutil adds /proc/stat's btime (whole seconds, moved by every wall-clock step) to a
    process's start: another process can read the server's start a second off, or more after a
    step. It still runs and carries its token: listed, never dropped (a dropped entry frees its
    GPUs to the next launch while the server still holds them), and stopped whole."""
    proc = children("d" * 16)
    entry = server_entry(proc, "d" * 16)
    registry.add(replace(entry, create_time=entry.create_time + shift))
    assert [e.pid for e in Registry().live()] == [proc.pid]
    result = cockpit("stop", str(proc.pid), console=True)
    clean(result)
    assert result.returncode == 0 and "stopped with SIGTERM" in result.stdout, result.stdout
    assert proc.wait(timeout=10) == -signal.SIGTERM and not Registry().live()


def test_a_group_cockpit_verifies_is_still_stopped_whole(cockpit, registry, good):
    """The check lets cockpit's own server through: SIGTERM to its group, entry removed."""
    proc, entry = good
    result = cockpit("stop", str(proc.pid), console=True)
    clean(result)
    assert result.returncode == 0 and f"stopped   {entry}: stopped with SIGTERM" in result.stdout
    assert proc.wait(timeout=10) == -signal.SIGTERM and not Registry().live()


# -- pending entries that hold a port are shown ------------------------------------------------------


def test_a_pending_entry_that_holds_a_port_is_shown_by_servers_and_stop_all(cockpit, registry, good):
    proc, entry = good
    pending = registry.add_pending(
        ServerEntry(
            0, 0, ("vllm",), 45020, "/tmp/p.log", 5, layout="tp2", started=time.time(), token="p" * 16
        )
    )
    lines: list[str] = []
    assert list_servers(lines.append) == 0
    assert str(entry) in lines
    one_line("\n".join(lines), f"pending (being started by cockpit pid {os.getpid()}): tp2")
    result = cockpit("stop", "all", console=True)  # beside a pending entry of pgid 0
    clean(result)
    line = one_line(result.stdout, "pending   pending (being started by cockpit pid")
    assert "port 45020" in line and "not stopped" in line
    assert result.returncode == 1 and f"stopped   {entry}" in result.stdout
    assert registry.path_of(pending).exists()  # left for its cockpit to resolve


def test_stop_all_waits_out_a_spawn_whose_cockpit_was_killed(registry):
    """A cockpit killed between writing its pending entry and the engine's exec leaves an entry
    that may still become an engine for a moment: `stop all` waits it out (the grace), so that
    it stops that engine or finds it never started, instead of leaving it for a second stop."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pending = registry.add_pending(
        ServerEntry(
            0,
            0,
            ("vllm",),
            45021,
            "/tmp/p.log",
            6,
            layout="tp2",
            started=time.time() - PENDING_GRACE_S + 0.5,  # its grace ends in half a second
            token="q" * 16,
            owner=dead.pid,
        )
    )
    said: list[str] = []
    assert stop_servers("all", out=said.append) == 0
    assert said == ["no servers started by cockpit are running"]
    assert not registry.path_of(pending).exists()


# -- what stands where a folder or the lock should be ------------------------------------------------


@pytest.mark.parametrize("command", ["servers", "stop all", "run"])
def test_a_servers_path_that_is_a_file_is_one_line(cockpit, registry, command, profile_file):
    registry.folder.parent.mkdir(parents=True, exist_ok=True)
    registry.folder.write_text("not a folder")
    profile, _ = profile_file("minimax-m2.5")
    args = ["run", "try tp4", "--profile", profile, "--sim"] if command == "run" else command.split()
    result = cockpit(*args, console=command == "run")  # `run` takes signals: a process of its own
    clean(result)
    said = f"{registry.folder} is a file, not a folder: remove it or set COCKPIT_STATE_DIR to another folder"
    line = one_line(result.stderr, said)
    if command != "servers":  # `servers` lists what it can: no servers, and the line as a warning
        assert result.returncode == 2 and line == f"cockpit: {said}"
    assert registry.folder.read_text() == "not a folder"  # left as it was


def test_a_screen_opens_beside_a_servers_path_that_is_a_file(registry):
    """What a screen asks at start (the servers left running) is a warning, not a failure."""
    registry.folder.parent.mkdir(parents=True, exist_ok=True)
    registry.folder.write_text("not a folder")
    told: list[str] = []
    assert Registry(warn=told.append).live() == []
    assert told == [
        f"{registry.folder} is a file, not a folder: remove it or set COCKPIT_STATE_DIR to another folder"
    ]


@pytest.mark.parametrize("command", ["servers", "stop all", "run"])
def test_a_launch_lock_that_is_a_folder_is_one_line(cockpit, registry, good, command, profile_file):
    proc, entry = good
    lock = registry.folder / ".launch.lock"
    lock.mkdir()
    profile, _ = profile_file("minimax-m2.5")
    args = ["run", "try tp4", "--profile", profile, "--sim"] if command == "run" else command.split()
    result = cockpit(*args, console=command == "run")  # `run` takes signals: a process of its own
    clean(result)
    if command == "run":  # only a launch takes the lock
        assert result.returncode == 2
        one_line(result.stderr, f"cockpit: {lock} is a folder, not a file: remove it (rmdir)")
        assert running(proc) and lock.is_dir()
    elif command == "servers":
        assert result.returncode == 0 and str(entry) in result.stdout
    else:
        assert result.returncode == 0 and f"stopped   {entry}" in result.stdout


# -- journal rows of the wrong type --------------------------------------------------------------------

PROFILE = "p"


def _journal_with_a_good_and_a_bad_row() -> tuple[Path, int, int]:
    """tp4 measured 82.3 tok/s at C=1 and tp8 at C=1: the fault goes into tp8's rows."""
    with Journal() as journal:
        ids = []
        for layout, tok_s in (("tp4", 82.3), ("tp8", 99.9)):
            exp = journal.start_experiment(
                profile=PROFILE, model="m", engine="vllm", layout=layout, argv=["x"]
            )
            journal.set_outcome(exp, "ready", load_seconds=1.0)
            journal.add_point(exp, BenchPoint(1, tok_s, requests=8, input_len=32, output_len=8))
            ids.append(exp)
        return journal.path, ids[1], journal.points(ids[1])[0].id or 0


JOURNAL_FAULTS = [
    ("output-tok-s-abc", "bench_points", "output_tok_s = 'abc'", "bench point", "its output_tok_s is 'abc'"),
    ("output-tok-s-inf", "bench_points", "output_tok_s = 1e999", "bench point", "its output_tok_s is inf"),
    ("concurrency-x", "bench_points", "concurrency = 'x'", "bench point", "its concurrency is 'x'"),
    ("requests-x", "bench_points", "requests = 'x'", "bench point", "its requests is 'x'"),
    ("failed-x", "bench_points", "failed = 'x'", "bench point", "its failed is 'x', not 0 or 1"),
    ("started-x", "experiments", "started = 'x'", "experiment", "its started is 'x', not a number"),
    ("outcome-x", "experiments", "outcome = 'x'", "experiment", "its outcome is 'x'"),
]


ON_THE_CONSOLE = "output-tok-s-abc"  # this case also as the console process, end to end


@pytest.mark.parametrize(
    "case, table, change, what, said", JOURNAL_FAULTS, ids=[c[0] for c in JOURNAL_FAULTS]
)
def test_a_journal_row_of_the_wrong_type_is_skipped_with_one_line(cockpit, case, table, change, what, said):
    path, exp, point = _journal_with_a_good_and_a_bad_row()
    row = point if table == "bench_points" else exp
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute(f"UPDATE {table} SET {change} WHERE id = ?", (row,))
    for fmt in ("table", "json", "markdown"):
        result = cockpit("results", "--profile", PROFILE, "--format", fmt, console=case == ON_THE_CONSOLE)
        clean(result)
        assert result.returncode == 0
        line = one_line(result.stderr, said)
        assert line.startswith(f"warning: skipped {what} {row} of the journal {path}")
        assert "82.3" in result.stdout  # the good row is still there


def test_optional_columns_of_the_wrong_type_read_as_not_measured():
    """A metric or a length that is not a number is made sound (None), the row kept, nothing said."""
    path, exp, point = _journal_with_a_good_and_a_bad_row()
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute(
            "UPDATE bench_points SET ttft_ms_p50 = 'x', input_len = 'y', error = 5 WHERE id = ?", (point,)
        )
        db.execute("UPDATE experiments SET pid = 'x', ended = 'y', host = 7 WHERE id = ?", (exp,))
    told: list[str] = []
    with Journal(warn=told.append) as journal:
        [got] = journal.points(exp)
        record = journal.experiment(exp)
    assert (got.ttft_ms_p50, got.input_len, got.error, got.output_tok_s) == (None, None, "5", 99.9)
    assert record is not None and (record.pid, record.ended, record.host) == (None, None, "7")
    assert told == []


def test_a_damaged_tune_row_is_skipped_and_the_others_read():
    with Journal() as journal:
        good = journal.start_tune(PROFILE, {"goal": "x"})
        bad = journal.start_tune(PROFILE, {"goal": "y"})
        journal.tune_step(good, "tp4", experiment=None, state="running")
        journal.tune_step(bad, "tp8", experiment=None, state="running")
        path = journal.path
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("UPDATE tunes SET started = 'x' WHERE id = ?", (bad,))
        db.execute("UPDATE tune_steps SET state = X'00' WHERE tune_id = ?", (good,))
    told: list[str] = []
    with Journal(warn=told.append) as journal:
        [record] = journal.tunes(PROFILE)
        assert journal.open_tune(PROFILE) == record
    assert record.id == good and record.steps == ()
    assert [line.split(":")[0] for line in told] == [
        f"skipped tune step of tune {good} of the journal {path}",
        f"skipped tune {bad} of the journal {path}",
    ]


def test_a_run_after_its_server_stopped_reads_a_damaged_journal_without_a_traceback(
    cockpit, profile_file, monkeypatch
):
    """The refit after the bench reads every launch of the box: a bad row of an earlier one is a
    warning; the run exits 0 with its level journaled."""
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    profile, port = profile_file("minimax-m2.5")
    bench = ["--bench", "c=1 n=4 in=32 out=8"]
    first = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", *bench, console=True)
    assert first.returncode == 0, first.stdout + first.stderr
    with Journal() as journal:
        [exp] = journal.experiments()
        [point] = journal.points(exp.id)
        path = journal.path
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("UPDATE bench_points SET output_tok_s = 'abc' WHERE id = ?", (point.id,))
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", *bench, console=True)
    clean(result)
    assert result.returncode == 0, result.stdout + result.stderr
    one_line(
        result.stderr, f"warning: skipped bench point {point.id} of the journal {path}: its output_tok_s"
    )
    assert "stopped   done: stopped with SIGTERM" in result.stdout
    assert "internal error" not in result.stdout
    with Journal() as journal:
        newest = journal.experiments()[0]
        assert [p.concurrency for p in journal.points(newest.id)] == [1]  # the new level is kept


# -- the calibration file: bounded, checked --------------------------------------------------------------


def _calibration_fault(tmp_path: Path, kind: str) -> Path:
    if kind == "dev-zero":
        path = tmp_path / "calibration.json"  # a link, so a write replaces the link, never /dev/zero
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        path = tmp_path / "calibration.json"
        with open(path, "wb") as f:
            f.truncate(10 * 2**30)  # 10 GiB, sparse
    elif kind == "fifo":
        path = tmp_path / "calibration.json"
        os.mkfifo(path)
    else:
        path = tmp_path / "calibration.json"
        path.write_text("{oops")
    return path


# console: a regression would read the device or 10 GiB whole, or block on the FIFO
CALIBRATION_FAULTS = [
    ("dev-zero", True, "(it is a device, not a file)"),
    ("huge", True, "(it is 10,240.0 MiB, more than the 4.0 MiB it can be)"),
    ("fifo", True, "(it is a FIFO, not a file)"),
    ("non-json", False, "(Expecting property name enclosed in double quotes"),
]


@pytest.mark.parametrize("command", ["calibration show", "plan"])
@pytest.mark.parametrize("kind, console, said", CALIBRATION_FAULTS, ids=[c[0] for c in CALIBRATION_FAULTS])
def test_a_calibration_file_that_is_not_one_is_one_line(
    cockpit, tmp_path, monkeypatch, command, kind, console, said
):
    path = _calibration_fault(tmp_path, kind)
    monkeypatch.setenv("COCKPIT_CALIBRATION", str(path))
    args = ["--sim", "plan"] if command == "plan" else ["calibration", "show", "--json"]
    result = cockpit(*args, console=console, timeout=30)
    clean(result)
    assert result.returncode == 0, result.stderr
    line = one_line(result.stderr, f"the calibration file {path} cannot be read {said}")
    assert "planning with the defaults" in line and "cockpit calibration reset" in line
    if command == "plan":
        assert "tp4" in result.stdout  # the plan is still made, with the defaults
    else:
        assert json.loads(result.stdout) == []


def test_a_run_with_a_calibration_file_that_is_a_device_runs(cockpit, tmp_path, monkeypatch, profile_file):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    path = _calibration_fault(tmp_path, "dev-zero")
    monkeypatch.setenv("COCKPIT_CALIBRATION", str(path))
    profile, port = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", console=True, timeout=60)
    clean(result)
    assert result.returncode == 0, result.stdout + result.stderr
    one_line(result.stdout + result.stderr, f"the calibration file {path} cannot be read (it is a device")
    assert f"ready     http://127.0.0.1:{port}" in result.stdout


# -- folders cockpit makes are private whatever the umask -------------------------------------------------


def test_every_folder_cockpit_makes_is_private_under_umask_000(tmp_path, monkeypatch, profile_file):
    """A launch and its bench, then an export from the screen's session, all under umask 000."""
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    root = tmp_path / "new"
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(root / "data" / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_CALIBRATION", str(root / "calibration" / "calibration.json"))
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(root / "simbox"))
    profile, _ = profile_file("minimax-m2.5")
    result = subprocess.run(
        [*CLI, "run", "try tp4", "--profile", profile, "--sim", "--quiet", "--bench", "c=1 n=2 in=16 out=4"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.umask(0),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    old = os.umask(0)
    try:
        from cockpit.faces.tui.session import Session

        session = Session.open(profile, sim=True)
        try:
            session.export("csv", folder=root / "exports" / "deeper")
        finally:
            session.close()
    finally:
        os.umask(old)
    folders = [p for p in root.rglob("*") if p.is_dir()]
    assert {p.relative_to(root).parts[0] for p in folders} >= {
        "state",
        "data",
        "calibration",
        "simbox",
        "exports",
    }
    modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *folders]}
    assert set(modes.values()) == {0o700}, modes


def test_an_error_the_experiment_logs_during_a_run_makes_it_no_success():
    """`after_measure` failing logs its traceback and the run goes on: the run counts it (and
    exits 1, `cockpit.faces.headless._drive`); a GPU source failing is the box's, shown as n/a."""
    import logging

    from cockpit.faces.headless import LoggedErrors

    errors = LoggedErrors()
    with errors.watching():
        logging.getLogger("cockpit.runner.experiment").error("after_measure failed for experiment 1")
        logging.getLogger("cockpit.telemetry.monitor").error("GPU source nvml failed; showing n/a")
    logging.getLogger("cockpit.runner.experiment").error("after the run: not counted")
    assert errors.count == 1
