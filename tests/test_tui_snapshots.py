"""Snapshots of the main screen in a fixed state: idle simulated box, two journaled layouts, no process.

Update them with `pytest tests/test_tui_snapshots.py --snapshot-update` and look at the SVGs
(tests/__snapshots__/test_tui_snapshots/) before committing.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from cockpit.journal import BenchPoint, Journal
from cockpit.runner.events import Diagnosis
from cockpit.tui.app import CockpitApp
from cockpit.tui.messages import GpuSamples

FIXED_CLOCK = 1_800_000_000.0
RESULTS = {  # layout -> {concurrency: tok/s}, numbers of the seed's shape
    "tp4": {1: 94.2, 32: 655.0, 64: 905.3},
    "tp8 ep": {1: 77.1, 32: 830.4, 64: 1512.9},
}


@pytest.fixture
def fixed_app(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")  # the argv shown under the picker
    from cockpit.profile import find_profile

    data = yaml.safe_load(find_profile("minimax-m2.5").read_text())
    data["bench"]["concurrency"] = [1, 32, 64]
    profile = tmp_path / "minimax-m2.5.yaml"
    profile.write_text(yaml.safe_dump(data))  # port 8000: shown, never bound
    with Journal() as journal:
        for layout, levels in RESULTS.items():
            exp = journal.start_experiment(
                profile="minimax-m2.5", model="MiniMaxAI/MiniMax-M2.5", engine="vllm", layout=layout, argv=[], host="testbox"
            )
            journal.set_outcome(exp, "ready", load_seconds=42.0)
            for concurrency, tok_s in levels.items():
                journal.add_point(exp, BenchPoint(concurrency, tok_s, requests=8, created=FIXED_CLOCK))
        failed = journal.start_experiment(profile="minimax-m2.5", model="MiniMaxAI/MiniMax-M2.5", engine="vllm", layout="tp8", argv=[])
        journal.set_outcome(failed, "failed", diagnosis=Diagnosis("fp8-block", "FP8 block quantization: 192 is not a multiple of block_n 128"))
    return CockpitApp(
        profile=str(profile),
        sim=True,
        host="testbox",
        clock=lambda: FIXED_CLOCK,
        poll=False,
        look_for_servers=False,
        cursor_blink=False,
    )


async def idle_box(pilot) -> None:
    """One sample of the idle simulated box, as the monitor would post it."""
    app = pilot.app
    app.post_message(GpuSamples(app.session.monitor.sample_now()))
    await pilot.pause(0.1)


def test_main_screen_120x40(snap_compare, fixed_app):
    assert snap_compare(fixed_app, terminal_size=(120, 40), run_before=idle_box)


def test_main_screen_80x24(snap_compare, fixed_app):
    assert snap_compare(fixed_app, terminal_size=(80, 24), run_before=idle_box)


def test_results_view_80x24(snap_compare, fixed_app):
    async def results(pilot) -> None:
        await idle_box(pilot)
        await pilot.press("r")

    assert snap_compare(fixed_app, terminal_size=(80, 24), run_before=results)
