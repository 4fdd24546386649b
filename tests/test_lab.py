"""One lab, one argv: what the planner builds is what is shown, journaled and launched."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace

import psutil
import pytest

from cockpit.core.layout import parse_layout
from cockpit.core.planner import Learned, plan_layout
from cockpit.core.secrets import shell_line
from cockpit.faces.cli import main
from cockpit.faces.tui.session import Session
from cockpit.lab.box import box_context
from cockpit.lab.lab import Lab, lab_setup
from cockpit.runner.registry import Registry, ServerEntry
from cockpit.store.journal import Journal
from cockpit.store.profile import load_profile
from cockpit.store.profile_setup import setup_for
from cockpit.system.children import simulated_engine

SIM = simulated_engine("vllm", ())  # python -P -m cockpit.sim vllm --: then the real engine's argv


@pytest.fixture(autouse=True)
def fast_sim(monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")


def cockpit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args], capture_output=True, text=True, timeout=timeout
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
        assert lab.sim and lab.box.reason == "--sim given" and lab.launcher.sim
        verdict = plan_layout(lab.setup, "tp8 ep")
    real = plan_layout(setup_for(profile), "tp8 ep").argv
    assert real[:2] == ("vllm", "serve") and "--enable-expert-parallel" in real
    assert verdict.argv == (*SIM, *real)
    assert verdict.argv[-len(profile.args) :] == profile.args


def test_no_driver_means_a_simulated_lab(monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)
    with Lab.open("minimax-m2.5", sim=False) as lab:
        assert lab.box.reason == "no NVIDIA driver found" and lab.launcher.sim
        assert lab.setup.command == (*SIM, "vllm", "serve")


def test_the_lab_setup_is_the_profile_setup_with_the_simulator_in_front():
    profile = load_profile("minimax-m2.5")
    assert lab_setup(profile, box_context(profile, sim=False, real=True)) == setup_for(profile)
    simulated = box_context(profile, sim=True)
    assert lab_setup(profile, simulated) == replace(setup_for(profile), command=(*SIM, "vllm", "serve"))


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
    from cockpit.core.commands import Use
    from cockpit.engines import check_args, option_table
    from cockpit.faces.prompt import parse_command
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


# -- learning from launches: when, with what, and what went wrong -----------------------------------

# What a box might teach: speed constants and memory reserves off the defaults.
TAUGHT = Learned(
    runs=5, calibration={"eta_bw": 0.42, "t_layer_us": 96.0}, reserve_offset_gib=6.0, weights_factor=1.04
)


def test_the_refit_waits_for_ready_and_a_bench_is_predicted_as_at_launch(profile_file):
    """The hook runs once Ready was handed on (the banner does not wait for the refit), and the
    tok/s journaled for the bench are those of the setup the layout was launched with, not of
    what this very launch taught."""
    from cockpit.core.benchrequest import BenchRequest
    from cockpit.core.perfmodel import predict_tok_s

    profile, _ = profile_file("minimax-m2.5")
    with Lab.open(profile, sim=True, interval=0.5) as lab:
        at_launch = lab.setup
        taught = replace(at_launch, learned=TAUGHT)
        seen: list[str] = []
        hooked: list[tuple[int, list[str]]] = []

        def learn(exp: int) -> None:  # what Lab.learn does when the box taught something
            hooked.append((exp, list(seen)))
            lab.launcher.replan(taught)

        lab.launcher.after_measure = learn
        for event in lab.launcher.run(parse_layout("tp4")):
            seen.append(type(event).__name__)
        exp = lab.launcher.experiment
        try:
            assert seen[-1] == "Ready" and hooked == [(exp, seen)]  # after Ready was consumed
            list(lab.launcher.bench(BenchRequest((1,), input_len=64, output_len=16, requests=2)))
        finally:
            lab.launcher.stop()
        assert [e for e, _ in hooked] == [exp, exp]  # and after the bench
        assert lab.launcher.setup is taught
    with Journal() as journal:
        record = journal.experiment(exp)
    assert record is not None
    expected = predict_tok_s(at_launch, plan_layout(at_launch, "tp4"), (1,), 64, 16)
    assert record.predicted["tok_s"]["64/16"] == {"1": round(expected[1], 2)}
    assert record.predicted["learned_runs"] == 0  # the launch's own setup: nothing learned yet
    later = predict_tok_s(taught, plan_layout(taught, "tp4"), (1,), 64, 16)
    assert round(later[1], 2) != round(expected[1], 2)  # the test tells the two apart


def test_a_refused_launch_keeps_no_launch_time_setup():
    """The launcher keeps each running experiment's launch-time setup; a launch refused before
    anything ran (a layout the planner says fails) leaves none behind."""
    from cockpit.runner.events import Failed

    with Lab.open(load_profile("minimax-m2.5"), sim=True) as lab:
        events = list(lab.launcher.run(parse_layout("tp8")))  # the FP8 block error: refused
        assert isinstance(events[-1], Failed) and lab.launcher.handle is None
        assert lab.launcher._launched == {}


def test_the_launchers_plan_is_kept_per_setup():
    profile = load_profile("minimax-m2.5")
    with Lab.open(profile, sim=True) as lab:
        first = lab.launcher.verdicts()
        assert lab.launcher.verdicts() is first
        taught = replace(lab.setup, learned=TAUGHT)
        other = lab.launcher.verdicts(taught)  # planned with another setup: never the cached list
        assert other is not first and lab.launcher.verdicts(taught) is other
        lab.launcher.replan(taught)
        assert lab.launcher.verdicts() is other


def test_learning_problems_are_notices_once_each(monkeypatch):
    """A fit that fails and a calibration file that cannot be written: one line each, once."""
    import cockpit.lab.lab
    from cockpit.core.errors import CockpitError

    unwritable = "cannot write the calibration file /x/calibration.json (Not a directory): what was learned holds for this session only"

    def relearn(journal, setup, simulated, store):  # the store's write failed; what was fitted holds
        store.warning = unwritable
        return TAUGHT

    monkeypatch.setattr(cockpit.lab.lab, "relearn", relearn)
    with Lab.open("minimax-m2.5", sim=True) as lab:
        assert lab.learning_notices() == []
        lab.learn(1)
        assert lab.setup.learned == TAUGHT and lab.launcher.setup is lab.setup
        assert lab.learning_notices() == [unwritable]
        lab.learn(2)  # the same trouble again: already said
        assert lab.learning_notices() == []

        def fails(journal, setup, simulated, store):
            raise CockpitError("the journal cannot be read")

        monkeypatch.setattr(cockpit.lab.lab, "relearn", fails)
        lab.learn(3)
        assert lab.learning_notices() == [
            "calibration not updated after experiment 3: the journal cannot be read"
        ]
        assert lab.learning_notices() == [] and lab.setup.learned == TAUGHT


def test_cockpit_run_prints_a_calibration_file_it_cannot_write_once(profile_file, tmp_path, monkeypatch):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("COCKPIT_CALIBRATION", str(not_a_folder / "calibration.json"))
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("run", "try tp4", "--profile", profile, "--sim", "--quiet", "--bench", "c=1 n=2 out=16")
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, result.stdout
    assert "cannot write the calibration file" in warnings[0]
    lines = result.stdout.splitlines()
    assert lines.index(warnings[0]) > next(i for i, x in enumerate(lines) if x.startswith("ready "))
