"""The simulated box: real files in a temporary folder, real processes where PIDs matter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import GIB, hardware
from cockpit.sim.box import (
    IDLE_POWER_FRACTION,
    LOADED_POWER_FRACTION,
    GpuLoad,
    SimBox,
    box_from_env,
)
from cockpit.telemetry.base import GpuProcess, GpuSample
from cockpit.telemetry.simbox import SimBoxSource

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


@pytest.fixture
def box(tmp_path, seed_box):
    return SimBox(seed_box, root=tmp_path / "sim").create()


def reaped_child_pid() -> int:
    """The PID of a process that has run, exited and been reaped: nothing lives under it."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_publish_from_this_process_and_read_back(box):
    box.publisher(os.getpid(), "vllm").publish({0: GpuLoad(40 * GIB, 85.0, 450.0)})

    (process,) = box.read().processes
    assert process.pid == os.getpid()
    assert process.name == "vllm"
    assert process.gpus == {0: GpuLoad(40 * GIB, 85.0, 450.0)}

    gpu0, gpu1, *_ = SimBoxSource(box).sample()
    assert gpu0.name == RTX
    assert gpu0.memory_used == 40 * GIB
    assert gpu0.memory_total == int(94.97 * GIB)
    assert gpu0.power_w == 450.0 and gpu0.power_limit_w == 600.0
    assert gpu0.utilization == 85.0
    assert gpu0.temperature_c == pytest.approx(30 + 45 * 450 / 600)
    assert gpu0.processes == (GpuProcess(os.getpid(), "vllm", 40 * GIB),)
    assert gpu1.memory_used == 0 and gpu1.processes == ()


def test_two_publishers_add_up(box):
    parent = os.getppid()  # a second live process we did not start and will not outlive
    box.publisher(os.getpid(), "vllm").publish({0: GpuLoad(10 * GIB, 30.0, 200.0)})
    box.publisher(parent, "sglang").publish({0: GpuLoad(5 * GIB, 90.0, 300.0)})

    gpu0 = SimBoxSource(box).sample()[0]
    assert gpu0.memory_used == 15 * GIB
    assert gpu0.utilization == 90.0
    assert gpu0.power_w == 500.0
    assert {p.name for p in gpu0.processes} == {"vllm", "sglang"}


def test_power_is_capped_at_the_limit(box):
    box.publisher(os.getpid(), "vllm").publish({0: GpuLoad(GIB, 100.0, 550.0)})
    box.publisher(os.getppid(), "vllm").publish({0: GpuLoad(GIB, 100.0, 550.0)})
    assert SimBoxSource(box).sample()[0].power_w == 600.0


def test_memory_held_without_work_draws_more_than_idle(box):
    box.publisher(os.getpid(), "vllm").publish({3: GpuLoad(80 * GIB, 0.0, 0.0)})
    samples = SimBoxSource(box).sample()
    assert samples[3].power_w == pytest.approx(600 * LOADED_POWER_FRACTION)
    assert samples[2].power_w == pytest.approx(600 * IDLE_POWER_FRACTION)
    assert samples[3].temperature_c > samples[2].temperature_c


def test_idle_box_shows_idle_power_and_nothing_used(box):
    samples = SimBoxSource(box).sample()
    assert [s.index for s in samples] == list(range(8))
    for s in samples:
        assert s.memory_used == 0 and s.memory_fraction == 0.0
        # The idle draw seen on the reference box (docs/simulator.md#the-simulated-box).
        assert s.power_w == pytest.approx(33.0)
        assert s.utilization == 0.0 and s.processes == ()
        assert 30.0 <= s.temperature_c < 33.0


def test_a_dead_process_allocation_vanishes(box):
    publisher = box.publisher(reaped_child_pid(), "vllm")
    publisher.publish({0: GpuLoad(50 * GIB, 100.0, 500.0)})
    assert publisher.path.exists()

    assert box.read().processes == ()
    assert not publisher.path.exists()


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs os.waitid to keep a zombie")
def test_a_zombie_process_allocation_vanishes(box):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        box.publisher(child.pid, "sglang").publish({1: GpuLoad(GIB, 0.0, 0.0)})
        assert box.read().processes == ()
    finally:
        child.wait()


def test_a_reused_pid_does_not_inherit_the_allocation(box):
    publisher = box.publisher(os.getpid(), "vllm")
    publisher.publish({0: GpuLoad(GIB, 0.0, 0.0)})
    data = json.loads(publisher.path.read_text())
    data["create_time"] -= 3600  # written by an earlier process with this PID
    publisher.path.write_text(json.dumps(data))

    assert box.read().processes == ()
    assert not publisher.path.exists()


@pytest.mark.parametrize("text", ["", '{"pid": 1, "na', "[]", '{"name": "vllm", "gpus": 3}'])
def test_a_corrupted_proc_file_is_skipped(box, text):
    box.publisher(os.getpid(), "vllm").publish({0: GpuLoad(GIB, 10.0, 100.0)})
    (box.folder / f"proc-{os.getppid()}.json").write_text(text)

    assert [p.pid for p in box.read().processes] == [os.getpid()]
    assert SimBoxSource(box).sample()[0].memory_used == GIB


def test_a_corrupted_file_of_a_dead_process_is_deleted(box):
    path = box.folder / f"proc-{reaped_child_pid()}.json"
    path.write_text("{not json")
    assert box.read().processes == ()
    assert not path.exists()


def test_writes_leave_no_temporary_files(box):
    publisher = box.publisher(os.getpid(), "vllm")
    for step in range(5):
        publisher.publish({0: GpuLoad(step * GIB, 50.0, 300.0)})
    box.create()
    assert sorted(p.name for p in box.folder.iterdir()) == ["box.json", f"proc-{os.getpid()}.json"]


def test_box_json_describes_the_box(box):
    spec = json.loads((box.folder / "box.json").read_text())
    assert spec == {
        "gpu": "rtx-pro-6000",
        "name": RTX,
        "count": 8,
        "memory_gib": 94.97,
        "power_limit_w": 600.0,
    }


def test_clear_removes_the_allocation(box):
    publisher = box.publisher(os.getpid(), "vllm")
    publisher.publish({0: GpuLoad(GIB, 10.0, 100.0)})
    publisher.clear()
    publisher.clear()  # a second clear (SIGTERM after shutdown) is harmless
    assert box.read().processes == ()
    assert SimBoxSource(box).sample()[0].memory_used == 0


@pytest.mark.parametrize("index", [8, -1])
def test_a_gpu_index_outside_the_box_is_refused(box, index):
    with pytest.raises(CockpitError, match="GPUs 0 to 7"):
        box.publisher(os.getpid(), "vllm").publish({index: GpuLoad(GIB, 0.0, 0.0)})


def test_an_impossible_load_is_refused(box):
    with pytest.raises(CockpitError, match="utilization 0-100"):
        box.publisher(os.getpid(), "vllm").publish({0: GpuLoad(GIB, 150.0, 0.0)})


def test_box_from_env():
    assert box_from_env({}) == hardware("rtx-pro-6000", 8)
    assert box_from_env({"COCKPIT_SIM_GPUS": "4xh200"}) == hardware("h200", 4)
    assert box_from_env({"COCKPIT_SIM_GPUS": " 2 x H100 "}) == hardware("h100", 2)


@pytest.mark.parametrize("spec", ["eight h200", "0xh200", "8xquantum-9000"])
def test_box_from_env_refuses_a_bad_spec(spec):
    with pytest.raises(CockpitError, match="COCKPIT_SIM_GPUS") as err:
        box_from_env({"COCKPIT_SIM_GPUS": spec})
    assert "\n" not in str(err.value)


def test_the_state_folder(tmp_path, monkeypatch):
    # conftest points XDG_RUNTIME_DIR at tmp_path / "run"
    assert SimBox.from_env({}).folder == tmp_path / "run" / "cockpit" / "simbox" / "8xrtx-pro-6000"
    env = {"COCKPIT_SIM_STATE": str(tmp_path / "state"), "COCKPIT_SIM_GPUS": "4xh200"}
    assert SimBox.from_env(env).folder == tmp_path / "state" / "4xh200"
    assert SimBox(hardware("h200", 4, 100.0), tmp_path).folder == tmp_path / "4xh200-100gib"
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "env"))
    assert SimBox(hardware("h200", 4)).folder == tmp_path / "env" / "4xh200"


def test_boxes_of_different_shapes_do_not_share_processes(tmp_path):
    rtx = SimBox(hardware("rtx-pro-6000", 8), tmp_path)
    h200 = SimBox(hardware("h200", 8), tmp_path)
    rtx.publisher(os.getpid(), "vllm").publish({0: GpuLoad(GIB, 0.0, 0.0)})
    assert h200.read().processes == ()


def test_reading_a_box_nobody_created_is_an_idle_box(tmp_path):
    samples = SimBoxSource(SimBox(hardware("h200", 2), tmp_path / "nothing")).sample()
    assert [(s.name, s.memory_used, s.power_w) for s in samples] == [("NVIDIA H200", 0, 38.5)] * 2


def test_sample_fields_may_be_unknown():
    sample = GpuSample(0, "gpu", None, None, None, None, None, None)
    assert sample.memory_used_gib is None and sample.memory_fraction is None
    assert GpuSample(0, "gpu", GIB, 0, None, None, None, None).memory_fraction is None
    assert GpuSample(0, "gpu", GIB, 4 * GIB, None, None, None, None).memory_used_gib == 1.0
