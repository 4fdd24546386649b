"""Snapshots of the main screen in fixed states: the idle simulated box with two journaled layouts,
and a busy one (a server of 7-digit PID ready on GPUs 0-3, a benchmark level done).

Update them with `pytest tests/test_tui_snapshots.py --snapshot-update` and look at the SVGs
(tests/__snapshots__/test_tui_snapshots/) before committing.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import pytest
import yaml
from tuipilot import run, screen_text

from cockpit.bench.metrics import Summary
from cockpit.bench.result import LevelSummary
from cockpit.faces.tui.app import CockpitApp
from cockpit.faces.tui.messages import GpuSamples, RunnerEventPosted
from cockpit.runner.events import BenchLevel, BenchTick, Diagnosis, Launching, Planned, Ready
from cockpit.store.journal import BenchPoint, Journal
from cockpit.telemetry.base import GpuProcess

FIXED_CLOCK = 1_800_000_000.0
RESULTS = {  # layout -> {concurrency: tok/s}, shaped like docs/performance.md#reference-measurements
    "tp4": {1: 94.2, 32: 655.0, 64: 905.3},
    "tp8 ep": {1: 77.1, 32: 830.4, 64: 1512.9},
}


@pytest.fixture
def fixed_app(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")  # the argv shown under the picker
    from cockpit.store.profile import find_profile

    data = yaml.safe_load(find_profile("minimax-m2.5").read_text())
    data["bench"]["concurrency"] = [1, 32, 64]
    # The analytic model alone: the same screen with or without the kernels extra, and no
    # second planning thread to race the snapshot.
    data["speed"] = "analytic"
    profile = tmp_path / "minimax-m2.5.yaml"
    profile.write_text(yaml.safe_dump(data))  # port 8000: shown, never bound
    with Journal() as journal:
        for layout, levels in RESULTS.items():
            exp = journal.start_experiment(
                profile="minimax-m2.5",
                model="MiniMaxAI/MiniMax-M2.5",
                engine="vllm",
                layout=layout,
                argv=[],
                host="testbox",
            )
            journal.set_outcome(exp, "ready", load_seconds=42.0)
            for concurrency, tok_s in levels.items():
                journal.add_point(exp, BenchPoint(concurrency, tok_s, requests=8, created=FIXED_CLOCK))
        failed = journal.start_experiment(
            profile="minimax-m2.5", model="MiniMaxAI/MiniMax-M2.5", engine="vllm", layout="tp8", argv=[]
        )
        journal.set_outcome(
            failed,
            "failed",
            diagnosis=Diagnosis("fp8-block", "FP8 block quantization: 192 is not a multiple of block_n 128"),
        )
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


GIB = 2**30
PID = 4194301  # Linux's PIDs reach 7 digits (pid_max 4194304)
LEVEL = LevelSummary(
    concurrency=64,
    output_tok_s=1512.94,
    ttft_ms=Summary(p50=104.25, p99=7712.5),
    itl_ms=Summary(p50=11.25, p99=38.5),
)


async def busy_box(pilot) -> None:
    """tp4 ready on GPUs 0-3 (a 7-digit PID holding 86 GiB on each), C=64 measured, C=256 running."""
    app = pilot.app
    samples = []
    for s in app.session.monitor.sample_now():
        if s.index < 4:
            s = replace(s, memory_used=86 * GIB, processes=(GpuProcess(PID, "vllm", 86 * GIB),))
        samples.append(s)
    exp = 99
    for event in (
        Planned(exp, "tp4", "fits", "4 of 8 GPUs", (0, 1, 2, 3)),
        Launching(exp, ("vllm", "serve"), PID, "/tmp/tp4.log"),
        Ready(exp, "http://127.0.0.1:8000", 42.0, FIXED_CLOCK - 100.0),
    ):
        app.post_message(RunnerEventPosted(event))
    app.bench_view.start(exp, "tp4", (1, 64, 256))
    for event in (BenchLevel(exp, 64, LEVEL, "C=64"), BenchTick(exp, 256, 3.0, 3982.4)):
        app.post_message(RunnerEventPosted(event))
    app.post_message(GpuSamples(samples))
    await pilot.pause(0.2)
    app.main.show_view("bench")
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


def test_busy_screen_120x40(snap_compare, fixed_app):
    assert snap_compare(fixed_app, terminal_size=(120, 40), run_before=busy_box)


def test_busy_screen_80x24(snap_compare, fixed_app):
    assert snap_compare(fixed_app, terminal_size=(80, 24), run_before=busy_box)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_pids_and_numbers_are_never_cut(fixed_app, size):
    """Every PID on the screen is the whole PID; the bench summary's numbers keep their units."""

    async def scenario():
        async with fixed_app.run_test(size=size) as pilot:
            await busy_box(pilot)
            text = screen_text(fixed_app)
            pids = re.findall(r"pid (\d+)", text)
            assert pids and set(pids) == {str(PID)}, text
            status = str(fixed_app.main.query_one("#bench-status").content)
            latency = fixed_app.main.query_one("#bench-latency")
            assert "C=256 running" in status and "3,982 tok/s now" in status
            for number in ("1,512.9 tok/s", "TTFT p50 104.2 p99 7,712 ms", "ITL p50 11.2 p99 38.5 ms"):
                assert number in str(latency.content), number
            for widget in (fixed_app.main.query_one("#bench-status"), latency):  # wrapped whole, never cut
                lines = widget.content_size.height
                assert lines >= 1 and len(str(widget.content)) <= lines * widget.content_size.width, (
                    lines,
                    widget.content,
                )
            for word in re.findall(r"\S+", status + " " + str(latency.content)):
                if re.search(r"\d", word):
                    assert word in text, (word, text)  # each number stands whole on one line

    run(scenario())
