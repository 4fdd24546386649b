"""The jobs below the faces (cockpit.runner.jobs): the one-line refusals, the sweep's steps, and
stopping the servers a cockpit left running, each said once for the screen and the command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.commands import Export, Plan, Stop, Sweep, Try, Tune, Use
from cockpit.core.errors import CockpitError
from cockpit.core.layout import parse_layout
from cockpit.core.outcome import Diagnosis
from cockpit.faces.prompt import parse_command
from cockpit.runner.events import BenchDone, Failed, Ready
from cockpit.runner.jobs import (
    Running,
    SweepDone,
    SweepJob,
    SweepStep,
    refusal,
    stop_left_running,
    unlaunchable,
)
from cockpit.runner.registry import ServerEntry
from cockpit.store.journal import Journal

TP8, TP4 = parse_layout("tp8"), parse_layout("tp4")
READY_SERVER = Running(server=True, ready=True, profile="demo")


@pytest.mark.parametrize(
    ("command", "running", "said"),
    [
        (Try(TP8), Running(sweeping=True), "a sweep is running: `stop` ends it first"),
        (
            BenchRequest(),
            Running(benching=True, ready=True),
            "a benchmark is running: wait for it, or `stop`",
        ),
        (BenchRequest(), Running(sweeping=True), "a sweep is running: it benches each layout itself"),
        (BenchRequest(), Running(tuning=True), "a tune is running: it benches each candidate itself"),
        (BenchRequest(), Running(server=True), "no server is ready: `try <layout>` first, then `bench`"),
        (Stop(), Running(), "no server is running"),
        (Sweep((TP8,)), Running(benching=True), "a sweep or benchmark is running: `stop` ends it first"),
        (
            Tune(None, resume=True),
            Running(sweeping=True),
            "a sweep or benchmark is running: `stop` ends it first",
        ),
        (Use("other"), READY_SERVER, "a server of profile demo is running: `stop` it before `use`"),
        (
            Use("other"),
            Running(tuning=True, profile="demo"),
            "a server of profile demo is running: `stop` it before `use`",
        ),
    ],
)
def test_a_command_that_cannot_run_now_says_why_in_one_line(command, running, said):
    assert refusal(command, running) == said


@pytest.mark.parametrize(
    ("command", "running"),
    [
        (Try(TP8), READY_SERVER),  # a launch replaces the running server
        (BenchRequest(), READY_SERVER),
        (Stop(), Running(tuning=True)),
        (Sweep((TP8,)), Running(tuning=True)),  # the tune ends first
        (Tune(None, resume=True), READY_SERVER),
        (Use("other"), Running()),
        (Plan(), Running(sweeping=True, benching=True, tuning=True)),
        (Export(), READY_SERVER),
    ],
)
def test_a_command_that_can_run_is_not_refused(command, running):
    assert refusal(command, running) is None


def test_the_prompt_s_words_reach_the_same_refusal():
    assert (
        refusal(parse_command("bench c=1"), Running())
        == "no server is ready: `try <layout>` first, then `bench`"
    )
    assert Running(benching=True).busy and not Running(ready=True).busy


def test_a_layout_with_nothing_to_launch_is_one_line():
    nowhere = SimpleNamespace(placement=None, reasons=("tp3 does not divide 8 heads",), gpus_used=0)
    assert unlaunchable(TP8, nowhere, 8, "try tp4") == "tp3 does not divide 8 heads; try tp4"
    nearest = SimpleNamespace(placement=None, reasons=("no such layout: nearest is tp4",), gpus_used=0)
    assert unlaunchable(TP8, nearest, 8, "try tp4") == "no such layout: nearest is tp4"
    too_big = SimpleNamespace(placement=object(), reasons=(), gpus_used=16)
    assert unlaunchable(TP8, too_big, 8, "try tp4") == "tp8 needs 16 GPUs and this box has 8: try tp4"
    fits = SimpleNamespace(placement=object(), reasons=(), gpus_used=8)
    assert unlaunchable(TP8, fits, 8) is None


# -- the sweep ---------------------------------------------------------------------------------


class FakeBox:
    """A launcher's answers, one a layout: tp8 comes up and is measured, tp4 fails to load."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def launch(self, layout):
        self.said.append(f"launch {layout}")
        if layout == TP4:
            return Failed(2, Diagnosis("oom", "CUDA out of memory"))
        return Ready(1, "http://127.0.0.1:8000", 1.0)

    def measure(self, bench: BenchRequest):
        self.said.append(f"bench C={bench.concurrency}")
        return BenchDone(1, levels=len(bench.concurrency))

    def stop(self, reason: str) -> None:
        self.said.append(f"stop: {reason}")


def test_a_sweep_launches_benches_and_stops_each_layout_in_turn():
    box, steps = FakeBox(), []
    job = SweepJob((TP8, TP4), BenchRequest(concurrency=(1, 32)))
    done = job.run(launch=box.launch, measure=box.measure, stop=box.stop, on_step=steps.append)
    assert box.said == [
        "launch tp8",
        "bench C=(1, 32)",
        "stop: sweep: next layout",
        "launch tp4",  # failed: no bench, its server (if any) still stopped
        "stop: sweep done",
    ]
    assert steps == [SweepStep(1, 2, "tp8"), SweepStep(2, 2, "tp4")] and str(steps[0]) == "sweep 1/2: tp8"
    assert done == SweepDone(2, 2, stopped=False)
    assert job.summary() == "1 of 2 layout(s) measured; not measured: tp4"


def test_a_sweep_asked_to_stop_ends_before_its_next_bench_and_step():
    box = FakeBox()
    job = SweepJob((TP8, TP4), BenchRequest())
    stopping = iter([False, True])  # checked before the step, then before its bench
    done = job.run(
        launch=box.launch, measure=box.measure, stop=box.stop, should_stop=lambda: next(stopping, True)
    )
    assert box.said == ["launch tp8", "stop: sweep: next layout"]
    assert done == SweepDone(1, 2, stopped=True)
    assert job.summary() == "0 of 2 layout(s) measured; not measured: tp8"


def test_a_sweep_cut_by_a_signal_still_says_where_it_was():
    box = FakeBox()

    def interrupted(bench):
        raise KeyboardInterrupt

    job = SweepJob((TP8, TP4), BenchRequest())
    with pytest.raises(KeyboardInterrupt):
        job.run(launch=box.launch, measure=interrupted, stop=box.stop)
    assert job.current == SweepStep(1, 2, "tp8") and job.summary() == "0 of 2 layout(s) measured"


# -- servers left running ----------------------------------------------------------------------


def _entry(pid: int, experiment: int) -> ServerEntry:
    return ServerEntry(
        pid, pid, ("vllm", "serve"), 8000 + pid % 10, f"/tmp/{pid}.log", experiment, layout="tp8"
    )


class FakeSupervisor:
    """Stops what it can verify as cockpit's: every pid but 666."""

    def __init__(self) -> None:
        self.stopped: list[int] = []

    def attach(self, entry: ServerEntry):
        if entry.pid == 666:
            raise CockpitError("pid 666 is not a server cockpit started: left alone")
        return entry

    def stop(self, handle) -> str:
        self.stopped.append(handle.pid)
        return "stopped with SIGTERM"


def test_servers_left_running_are_stopped_and_journaled_one_by_one():
    supervisor = FakeSupervisor()
    with Journal() as journal:
        exp = journal.start_experiment(profile="demo", model="m", engine="vllm", layout="tp8", argv=["vllm"])
        entries = [_entry(101, exp), _entry(666, exp), _entry(102, 999)]
        said = list(stop_left_running(entries, supervisor, journal))
        record = journal.experiment(exp)
    assert [(s.entry.pid, s.how, s.refused) for s in said] == [
        (101, "stopped with SIGTERM", ""),
        (666, "", "pid 666 is not a server cockpit started: left alone"),
        (102, "stopped with SIGTERM", ""),  # one left alone does not stop the others
    ]
    assert supervisor.stopped == [101, 102]
    assert record is not None and record.outcome == "stopped" and record.pid == 101
