"""`cockpit run` end to end on the simulated box: real cockpit and engine processes, real journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import listening_socket, wait_for

from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal

GIB = 2**30


@pytest.fixture(autouse=True)
def fast_sim(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


def cockpit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def read_until(proc: subprocess.Popen, marker: str) -> str:
    """Lines of a spawned cockpit up to the one that holds ``marker``."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError("".join(seen) + proc.stderr.read())


def journal_rows():
    with Journal() as journal:
        return journal.experiments()


def test_try_tp4_reaches_ready_and_records_peaks_on_gpus_0_to_3(profile_file):
    profile, port = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "launching pid" in out and "CUDA_VISIBLE_DEVICES=0,1,2,3" in out
    assert "phase     loading 100%" in out
    assert f"ready     http://127.0.0.1:{port}" in out
    assert "stopped   done: stopped with SIGTERM" in out
    [row] = journal_rows()
    assert row.layout == "tp4" and row.outcome == "ready" and row.load_seconds > 0
    assert set(row.peak_memory) == {0, 1, 2, 3}
    assert all(v > 80 * GIB for v in row.peak_memory.values())
    assert row.log_path and os.path.exists(row.log_path)
    assert not Registry().live()


def test_try_tp8_fails_fast_with_the_block_diagnosis(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    start = time.monotonic()
    result = cockpit("run", "tp8", "--profile", profile, "--sim", "--force")
    elapsed = time.monotonic() - start
    assert result.returncode == 1
    out = result.stdout
    assert "failed    FP8 block quantization: gate/up shard width 192 is not a multiple of block_n 128" in out
    assert "`tp8 ep`" in out.split("failed")[-1]
    [row] = journal_rows()
    assert row.outcome == "failed" and row.diagnosis_kind == "fp8-block" and row.log_path
    # The engine printed its error within ~2 s of launch at this time scale; cockpit followed at once.
    log = open(row.log_path).read()
    assert "block_n = 128" in log
    assert elapsed < 15


def test_planned_failure_is_refused_without_force(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp8", "--profile", profile, "--sim")
    assert result.returncode == 1
    assert "not launched: the planner says tp8 fails" in result.stdout
    assert "--force launches it anyway" in result.stdout
    assert "launching" not in result.stdout


def test_kimi_tp4_ep2_ooms_on_a_gpu_during_weight_loading(profile_file):
    profile, _ = profile_file("kimi-k2.6")
    result = cockpit("run", "try tp4 ep2", "--profile", profile, "--sim", "--force")
    assert result.returncode == 1
    failed = result.stdout.split("failed    ")[-1]
    assert failed.startswith("CUDA OOM on GPU ") and "during weight loading" in failed
    next_line = failed.splitlines()[1]
    assert next_line.startswith("next      `") and "`tp8" in next_line or "`tp4 pp2`" in next_line
    [row] = journal_rows()
    assert row.outcome == "failed" and row.diagnosis_kind == "oom"
    assert set(row.peak_memory) == {0, 1, 2, 3}


def test_busy_port_is_refused_before_launch(profile_file):

    with listening_socket() as taken:
        port = taken.getsockname()[1]
        profile, _ = profile_file("minimax-m2.5", port=port)
        result = cockpit("run", "try tp4", "--profile", profile, "--sim")
    assert result.returncode == 1
    assert f"port {port} is already in use" in result.stdout and "nothing launched" in result.stdout
    assert "launching" not in result.stdout


def test_gpus_held_by_another_process_are_reported_before_launch(profile_file, tmp_path):
    from cockpit.core.hardware import parse_box
    from cockpit.sim.box import GpuLoad, SimBox

    box = SimBox(parse_box("8xrtx-pro-6000"), root=tmp_path / "simbox").create()
    with box.publisher(os.getpid(), "other") as other:
        other.publish({i: GpuLoad(used_bytes=70 * GIB) for i in range(6)})
        profile, _ = profile_file("minimax-m2.5")
        result = cockpit("run", "try tp4", "--profile", profile, "--sim")
    assert result.returncode == 1
    assert "needs 4 free GPUs, 2 are free" in result.stdout and f"pid {os.getpid()}" in result.stdout


def test_free_gpus_are_chosen_for_a_smaller_layout(profile_file, tmp_path):
    from cockpit.core.hardware import parse_box
    from cockpit.sim.box import GpuLoad, SimBox

    box = SimBox(parse_box("8xrtx-pro-6000"), root=tmp_path / "simbox").create()
    with box.publisher(os.getpid(), "other") as other:
        other.publish({i: GpuLoad(used_bytes=70 * GIB) for i in range(4)})
        profile, _ = profile_file("minimax-m2.5")
        result = cockpit("run", "try tp4", "--profile", profile, "--sim")
    assert result.returncode == 0, result.stdout
    assert "GPUs 4,5,6,7" in result.stdout and "CUDA_VISIBLE_DEVICES=4,5,6,7" in result.stdout
    [row] = journal_rows()
    assert set(row.peak_memory) == {4, 5, 6, 7}


def test_never_ready_times_out_with_a_clear_message(profile_file, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "0.001")  # loading would take days
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--startup-timeout", "2", "--quiet")
    assert result.returncode == 1
    assert "failed    not ready after 2 s (last phase: loading); the server is stopped" in result.stdout
    [row] = journal_rows()
    assert row.outcome == "failed" and row.diagnosis_kind == "timeout"
    assert not Registry().live()


def test_kill_9_of_cockpit_then_a_new_cockpit_finds_and_stops_the_server(profile_file, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "0.05")  # a slow load: the server is still loading
    profile, _ = profile_file("minimax-m2.5")
    first = spawn("run", "try tp4", "--profile", profile, "--sim")
    entry = wait_for(lambda: next(iter(Registry().live()), None))
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    first.stdout.close()
    assert psutil.pid_exists(entry.pid)  # the server outlived its cockpit

    listed = cockpit("servers")
    assert f"pid {entry.pid}" in listed.stdout
    again = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", "--startup-timeout", "1")
    assert f"running   pid {entry.pid}" in again.stdout and f"cockpit stop {entry.pid}" in again.stdout

    stopped = cockpit("stop", str(entry.pid))
    assert stopped.returncode == 0 and f"stopped   pid {entry.pid}" in stopped.stdout
    assert not psutil.pid_exists(entry.pid) or psutil.Process(entry.pid).status() == psutil.STATUS_ZOMBIE
    assert not Registry().live()
    rows = {r.pid: r for r in journal_rows()}
    assert rows[entry.pid].outcome == "stopped"


def test_server_killed_mid_run_is_reported_failed(profile_file, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "0.05")
    profile, _ = profile_file("minimax-m2.5")
    run = spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet")
    entry = wait_for(lambda: next(iter(Registry().live()), None))
    os.kill(entry.pid, signal.SIGKILL)
    out, _ = run.communicate(timeout=20)
    assert run.returncode == 1
    assert "failed    the server was killed by SIGKILL" in out, out
    [row] = journal_rows()
    assert row.outcome == "failed"


def test_ctrl_c_stops_the_server_and_keep_leaves_it(profile_file, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "0.05")
    profile, _ = profile_file("minimax-m2.5")
    run = spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet")
    read_until(run, "phase     loading")  # Ctrl-C while the weights load
    entry = Registry().live()[0]
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=20)
    assert run.returncode == 130 and "stopped   interrupted" in out, out + err
    wait_for(
        lambda: not psutil.pid_exists(entry.pid) or psutil.Process(entry.pid).status() == psutil.STATUS_ZOMBIE
    )

    kept = spawn("run", "try tp4", "--profile", profile, "--sim", "--quiet", "--keep")
    read_until(kept, "phase     loading")
    entry = Registry().live()[0]
    kept.send_signal(signal.SIGINT)
    out, err = kept.communicate(timeout=20)
    assert kept.returncode == 130, out + err
    assert kept.returncode == 130 and f"kept      pid {entry.pid} still runs" in out
    assert psutil.pid_exists(entry.pid)
    assert cockpit("stop", "all").returncode == 0


def test_results_show_failed_layouts(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    cockpit("run", "tp8", "--profile", profile, "--sim", "--force", "--quiet")
    result = cockpit("results", "--profile", "minimax-m2.5", "--format", "json")
    assert result.returncode == 0
    rows = json.loads(result.stdout)
    assert rows and rows[0]["layout"] == "tp8" and rows[0]["outcome"] == "failed"


def test_run_needs_a_try_command(profile_file):
    result = cockpit("run", "bench c=1")
    assert result.returncode == 2 and "cockpit run takes a layout to try" in result.stderr
    result = cockpit("run", "try tq4")
    assert result.returncode == 2 and "did you mean 'tp4'" in result.stderr


def test_a_launcher_that_does_not_exist_is_one_line(profile_file, tmp_path):
    """On a real box the profile names the engine's launcher; a wrong path fails clearly."""
    from cockpit.core.hardware import parse_box
    from cockpit.core.layout import parse_layout
    from cockpit.runner.events import Failed
    from cockpit.runner.experiment import Launcher
    from cockpit.runner.supervisor import Supervisor
    from cockpit.sim.box import SimBox
    from cockpit.store.profile import load_profile
    from cockpit.store.profile_setup import setup_for
    from cockpit.telemetry.monitor import Monitor
    from cockpit.telemetry.simbox import SimBoxSource

    path, _ = profile_file("minimax-m2.5", command=["/nonexistent/venv/bin/vllm", "serve"])
    profile = load_profile(path)
    source = SimBoxSource(SimBox(parse_box("8xrtx-pro-6000"), root=tmp_path / "simbox").create())
    with Journal() as journal:
        launcher = Launcher(
            profile, setup_for(profile), journal, Supervisor(source=source), Monitor(source), sim=False
        )
        events = list(launcher.run(parse_layout("tp4")))
        failed = events[-1]
        assert isinstance(failed, Failed) and failed.diagnosis.kind == "launch-error"
        assert failed.diagnosis.cause.startswith("cannot start `/nonexistent/venv/bin/vllm`")
        assert journal.experiments()[0].outcome == "failed"


def test_attach_without_a_pid_when_no_server_runs(capsys):
    from cockpit.faces.cli import main

    assert main(["attach"]) == 2
    assert (
        capsys.readouterr().err == "cockpit: no server started by cockpit is running: nothing to attach to\n"
    )


def test_attach_without_a_pid_follows_the_only_server_and_names_them_when_several_run(profile_file, capsys):
    from cockpit.faces.cli import main

    profile, port = profile_file("minimax-m2.5")
    first = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", "--keep")
    assert first.returncode == 0, first.stdout + first.stderr
    [entry] = Registry().live()
    attached = cockpit("attach")
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert attached.stdout.splitlines()[-1] == (
        f"attached  http://127.0.0.1:{port} is ready and still runs; `cockpit stop {entry.pid}` stops it"
    )
    other, _ = profile_file("demo")  # another port, on the free GPUs 4-7
    try:
        second = cockpit("run", "try tp4", "--profile", other, "--sim", "--quiet", "--keep")
        assert second.returncode == 0, second.stdout + second.stderr
        pids = sorted(e.pid for e in Registry().live())
        assert main(["attach"]) == 2
        assert capsys.readouterr().err == (
            f"cockpit: 2 servers of cockpit run (pids {pids[0]}, {pids[1]}): give one, like "
            f"`cockpit attach {pids[0]}`\n"
        )
    finally:
        assert cockpit("stop", "all").returncode == 0


@pytest.mark.parametrize("layout", ["tp4 ep2", "pp4"])
def test_the_simulated_oom_happens_on_the_gpu_the_plan_names_busiest(profile_file, layout):
    """All ranks of a stage load equal shards and the first one reports, by its index in the
    process (torch counts the visible GPUs from 0): the first GPU of the stage that holds the most."""
    profile, _ = profile_file("kimi-k2.6")
    [planned] = json.loads(cockpit("plan", "--profile", profile, "--layout", layout, "--json").stdout)
    busiest = planned["memory"]["busiest_gpu"]
    assert f"GPU {busiest} has a total capacity" in planned["reasons"][0]["message"]
    result = cockpit("run", f"try {layout}", "--profile", profile, "--sim", "--force", "--quiet")
    assert result.returncode == 1
    assert f"failed    CUDA OOM on GPU {busiest} during weight loading" in result.stdout, result.stdout
