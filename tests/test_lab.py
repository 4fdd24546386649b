"""One lab, one argv: what the planner builds is what is shown, journaled and launched."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace

import psutil
import pytest

from cockpit.children import simulated_engine
from cockpit.cli import main
from cockpit.journal import Journal
from cockpit.lab import Lab, lab_setup
from cockpit.layout import parse_layout
from cockpit.planner import plan_layout
from cockpit.profile import load_profile
from cockpit.resolve import setup_for
from cockpit.runner.registry import Registry, ServerEntry
from cockpit.secrets import shell_line
from cockpit.tui.session import Session

SIM = simulated_engine("vllm", ())  # python -P -m cockpit.sim vllm --: then the real engine's argv


@pytest.fixture(autouse=True)
def fast_sim(monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")


def cockpit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_the_argv_journaled_is_the_argv_of_the_process_that_ran(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--keep", "--quiet")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        with Journal() as journal:
            [row] = journal.experiments()
        [entry] = Registry().live()
        assert row.pid == entry.pid and row.outcome == "ready"
        running = psutil.Process(row.pid).cmdline()
        assert running == list(row.argv)  # element by element: launcher, model, flags, port, args
        assert list(entry.argv) == running and entry.simulated
        real = plan_layout(setup_for(load_profile(profile)), "tp4").argv  # what `cockpit plan` shows
        assert row.argv == (*SIM, *real) and real[-1] == "--trust-remote-code"
        launching = next(line for line in result.stdout.splitlines() if line.startswith("launching pid"))
        assert launching.endswith(" " + shlex.join(row.argv))  # the line shown is that argv too
    finally:
        cockpit("stop", "all")
    assert not Registry().live()


def test_a_simulated_lab_plans_the_simulator_launcher_then_the_engine_flags():
    profile = load_profile("minimax-m2.5")
    with Lab.open(profile, sim=True) as lab:
        assert lab.sim and lab.sim_reason == "--sim given" and lab.launcher.sim
        verdict = plan_layout(lab.setup, "tp8 ep")
    real = plan_layout(setup_for(profile), "tp8 ep").argv
    assert real[:2] == ("vllm", "serve") and "--enable-expert-parallel" in real
    assert verdict.argv == (*SIM, *real)
    assert verdict.argv[-len(profile.args) :] == profile.args


def test_no_driver_means_a_simulated_lab(monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)
    with Lab.open("minimax-m2.5", sim=False) as lab:
        assert lab.sim_reason == "no NVIDIA driver found" and lab.launcher.sim
        assert lab.setup.command == (*SIM, "vllm", "serve")


def test_the_lab_setup_is_the_profile_setup_with_the_simulator_in_front():
    profile = load_profile("minimax-m2.5")
    assert lab_setup(profile, sim=False) == setup_for(profile)
    assert lab_setup(profile, sim=True) == replace(setup_for(profile), command=(*SIM, "vllm", "serve"))


def test_cockpit_plan_prints_the_real_engine_argv(capsys, monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)  # even where a lab would be simulated
    assert main(["plan", "--profile", "minimax-m2.5", "--layout", "tp4", "--json"]) == 0
    [verdict] = json.loads(capsys.readouterr().out)
    assert verdict["argv"][:3] == ["vllm", "serve", "MiniMaxAI/MiniMax-M2.5"]


def test_the_screen_shows_the_verdicts_argv():
    session = Session.open("minimax-m2.5", sim=True)
    try:
        verdict = session.verdict(parse_layout("tp4"))
        shown = session.argv_text(verdict)
        assert shown == shell_line(verdict.argv) and shlex.split(shown) == list(verdict.argv)
        assert verdict.argv[: len(SIM)] == SIM
        assert isinstance(session, Lab) and session.launcher.setup is session.setup  # one lab, one setup
    finally:
        session.close()


def test_attach_reads_simulated_from_the_registry_entry():
    base = {"pid": 1, "pgid": 1, "argv": [*SIM, "vllm"], "port": 8000, "log_path": "x", "experiment": 1}
    assert not ServerEntry.from_json(base).simulated  # an older entry: real, whatever its argv says
    entry = ServerEntry.from_json({**base, "simulated": True})
    assert entry.simulated and ServerEntry.from_json(entry.to_json()) == entry


def test_a_profile_opened_on_another_engine_launches_that_engines_argv(profile_file, tmp_path, monkeypatch):
    """`use kimi-k2.6 on vllm` / `cockpit run --engine vllm`: vLLM's launcher, the args translated, notes said."""
    from cockpit.commands import Use, parse_command
    from cockpit.engines import check_args, option_table
    from cockpit.sim.flags import strip_launcher

    assert parse_command("use kimi-k2.6 on vllm") == Use("kimi-k2.6", "vllm")
    assert parse_command("use kimi-k2.6") == Use("kimi-k2.6")
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    profile, _ = profile_file("kimi-k2.6")
    with Lab.open(profile, sim=True, engine="vllm") as lab:
        assert lab.setup.engine.name == "vllm" and lab.profile.engine == "vllm"
        assert lab.setup.command == simulated_engine("vllm", ("vllm", "serve"))
        assert any("--context-length" in note or "said for vLLM" in note for note in lab.notes)
        argv = plan_layout(lab.setup, "tp8 ep").argv
    flags = strip_launcher("vllm", argv[len(SIM) :])
    assert (
        flags[0] == "moonshotai/Kimi-K2.6" and "--max-model-len" in flags and "--context-length" not in flags
    )
    check_args(option_table("vllm"), flags[1:])  # every word a vLLM flag or its value
    result = cockpit("run", "try tp8 ep", "--profile", profile, "--engine", "vllm", "--sim", "--quiet")
    assert "note: " in result.stdout, result.stdout + result.stderr
