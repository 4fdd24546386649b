"""One box context per command: simulated or not and why, the engine version in force, the
option table and the calibration key, decided once (cockpit.lab.box) and read by every face."""

from __future__ import annotations

import argparse
import socket

import pytest

import cockpit.core.planner
import cockpit.system.installed
import cockpit.telemetry.nvml
from cockpit.core.hardware import hardware
from cockpit.engines import get_engine
from cockpit.faces.cli import _calibration_key, main
from cockpit.lab.box import box_context
from cockpit.lab.lab import Lab, lab_setup
from cockpit.reports.measured import Box
from cockpit.store.calibration import Key
from cockpit.store.journal import Journal
from cockpit.store.profile import load_profile
from cockpit.store.profile_setup import setup_for

INSTALLED = "0.11.0"  # an older vLLM than the newest table: its own flags


@pytest.fixture
def launcher(monkeypatch) -> list[tuple[str, ...]]:
    """The installed engine, as the one function that asks the launcher answers: vLLM 0.11.0.
    Returns the launchers asked, in order."""
    asked: list[tuple[str, ...]] = []

    def engine_version(engine: str, command) -> tuple[str | None, str]:
        asked.append(tuple(command))
        return INSTALLED, f"{engine} {INSTALLED} installed for /usr/bin/python3"

    monkeypatch.setattr(cockpit.system.installed, "engine_version", engine_version)
    return asked


@pytest.fixture
def driver(monkeypatch):
    monkeypatch.setattr(cockpit.telemetry.nvml, "driver_present", lambda: True)


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(cockpit.telemetry.nvml, "driver_present", lambda: False)


def test_the_context_says_simulated_and_why(driver):
    profile = load_profile("minimax-m2.5")
    assert box_context(profile, sim=True).reason == "--sim given"
    real = box_context(profile, sim=False)
    assert (real.reason, real.simulated) == ("", False)
    assert real.hardware == profile.box and real.engine_name == "vllm" and real.launcher == ("vllm", "serve")


def test_no_driver_means_a_simulated_box(no_driver):
    profile = load_profile("minimax-m2.5")
    box = box_context(profile, sim=False)
    assert box.simulated and box.reason == "no NVIDIA driver found"
    forced = box_context(profile, sim=False, real=True)  # `calibration reset --real`
    assert not forced.simulated and forced.reason == ""


def test_a_cpu_box_is_real_without_a_driver(monkeypatch):
    def no_question() -> bool:
        raise AssertionError("a CPU box asks no driver")

    monkeypatch.setattr(cockpit.telemetry.nvml, "driver_present", no_question)
    profile = load_profile("minimax-m2.5")
    from dataclasses import replace

    box = box_context(replace(profile, gpu="cpu", gpus=1), sim=False)
    assert not box.simulated and box.hardware == hardware("cpu", 1)


def test_a_real_box_speaks_the_version_its_launcher_runs(driver, launcher):
    profile = load_profile("minimax-m2.5")
    box = box_context(profile, sim=False)
    assert launcher == []  # asked when first needed, not when decided
    assert box.version == INSTALLED and box.engine == get_engine("vllm", INSTALLED)
    assert (
        box.options.label == get_engine("vllm", INSTALLED).options.label != get_engine("vllm").options.label
    )
    assert box.note.startswith(f"vllm {INSTALLED} installed for /usr/bin/python3: ")
    assert box.key == Key("rtx-pro-6000", "vllm", INSTALLED, False)
    assert launcher == [("vllm", "serve")]  # once, whatever is read after


@pytest.mark.parametrize("sim", [True, False])
def test_a_simulated_box_never_asks_the_launcher(no_driver, launcher, sim):
    profile = load_profile("minimax-m2.5")
    box = box_context(profile, sim=sim)
    newest = get_engine("vllm")
    assert box.engine == newest and box.version == newest.version and box.note == ""
    assert box.key == Key("rtx-pro-6000", "vllm", newest.version, True)
    with Lab.open(profile, box=box) as lab:
        assert lab.box is box and lab.sim and lab.setup.engine == newest
    with Lab.open(profile, sim=sim) as lab:  # decided by the lab: the same
        assert lab.box == box
    assert launcher == []


def test_plan_sim_and_the_lab_use_the_same_option_table(capsys, driver, launcher, monkeypatch):
    """An engine installed here is not what the simulator speaks: `cockpit plan --sim`, bare
    `cockpit --sim` and the simulated lab all plan with the newest table, and ask no launcher."""
    planned = []
    plan_all = cockpit.core.planner.plan_all

    def spy(setup, layouts=None):
        planned.append(setup)
        return plan_all(setup, layouts)

    monkeypatch.setattr(cockpit.core.planner, "plan_all", spy)
    assert main(["--sim", "plan", "--profile", "minimax-m2.5", "--layout", "tp4", "--json"]) == 0
    assert main(["--sim", "--profile", "minimax-m2.5"]) == 0  # no terminal: the plan
    assert INSTALLED not in capsys.readouterr().err
    with Lab.open("minimax-m2.5", sim=True) as lab:
        tables = {setup.engine.options.label for setup in planned}
        assert tables == {lab.setup.engine.options.label} and len(planned) == 2
        assert all(setup.engine == lab.setup.engine for setup in planned)
    assert launcher == []


def test_plan_on_a_real_box_plans_with_the_installed_version(capsys, driver, launcher):
    assert main(["plan", "--profile", "minimax-m2.5", "--layout", "tp4", "--json"]) == 0
    assert f"note: vllm {INSTALLED} installed for" in capsys.readouterr().err
    assert launcher == [("vllm", "serve")]  # once


def test_the_calibration_key_is_the_contexts(driver, launcher):
    profile = load_profile("minimax-m2.5")
    for sim in (True, False):
        box = box_context(profile, sim=sim)
        setup = lab_setup(profile, box)
        assert box.key == Key.of(setup, box.simulated)
        args = argparse.Namespace(
            profile="minimax-m2.5", engine=None, gpu=None, engine_version=None, sim=sim, real=not sim
        )
        assert _calibration_key(args) == box.key
    with Lab.open(profile, sim=True) as lab:
        assert Key.of(lab.setup, lab.sim) == lab.box.key


def test_reset_with_a_version_asks_no_launcher(driver, launcher):
    args = argparse.Namespace(
        profile="minimax-m2.5", engine=None, gpu="h200", engine_version="v0.9.2", sim=False, real=True
    )
    assert _calibration_key(args) == Key("h200", "vllm", "0.9.2", False)
    assert launcher == []


def test_a_measured_box_is_a_calibration_key_on_a_host_for_a_model(tmp_path):
    """`Box` is the key plus host and model; its launches are those of any engine version (the
    last measured column outlives an upgrade), while the key's fit takes its own version only."""
    setup = setup_for(load_profile("minimax-m2.5"))
    host = socket.gethostname()
    box = Box.of(setup, host, simulated=True)
    assert box.key == Key.of(setup, True) and (box.host, box.model) == (host, setup.model_path)
    with Journal(tmp_path / "journal.sqlite") as journal:

        def launch(**changes) -> int:
            fields = dict(
                profile="minimax-m2.5", model=setup.model_path, engine="vllm", layout="tp4", argv=[],
                host=host, gpu_type="rtx-pro-6000", engine_version=setup.engine.version, simulated=True,
            )  # fmt: skip
            return journal.start_experiment(**{**fields, **changes})

        same = launch()
        older = launch(engine_version="0.9.2")
        others = [
            launch(simulated=False),
            launch(gpu_type="h200"),
            launch(engine="sglang"),
            launch(host="elsewhere"),
            launch(model="another/model"),
            launch(gpu_type=None, engine_version=None),  # journaled before cockpit kept them
        ]
        experiments = {e.id: e for e in journal.experiments()}
    assert box.holds(experiments[same]) and box.holds(experiments[older])
    assert not any(box.holds(experiments[i]) for i in others)
    assert box.key.holds(experiments[same]) and not box.key.holds(experiments[older])
    assert box.key.holds(experiments[older], any_version=True)
