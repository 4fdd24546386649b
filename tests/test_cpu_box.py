"""A CPU box: vLLM's CPU build on the host, a real box on any machine (the real-engine tier's
setup, docs/placement.md#a-cpu-box): its hardware, lab, argv, memory plan and telemetry."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml
from helpers import listening_socket

from cockpit.core.hardware import GIB, gpu_type, hardware
from cockpit.core.planner import Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.lab.box import simulated_reason
from cockpit.lab.lab import Lab
from cockpit.runner.supervisor import _answered_by_another
from cockpit.store.modelfiles import load_model
from cockpit.store.profile import load_profile
from cockpit.telemetry.host import HostSource, engine_processes, is_engine_process

API_SERVER = "vllm.entrypoints.openai.api_server"


def cpu_profile(tmp_path, command: list[str] | None = None) -> str:
    data = {
        "model": "Qwen/Qwen3-30B-A3B-FP8",
        "engine": "vllm",
        "hardware": {"gpu": "cpu", "count": 1, "memory_gib": 64},
        "server": {
            "port": 18431,
            "command": command or [sys.executable, "-m", API_SERVER],
            "args": ["--enforce-eager", "--kv-cache-memory-bytes", "2G"],
            "env": {"VLLM_TARGET_DEVICE": "cpu"},
        },
    }
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_cpu_is_a_device_type_of_its_own():
    cpu = gpu_type("cpu")
    assert cpu.device == "cpu" and cpu.link == "host" and gpu_type("rtx-pro-6000").device == "cuda"
    box = hardware("cpu", 1, 8)
    assert box.on_cpu and box.memory_gib == 8 and not hardware("h200", 8).on_cpu


def test_a_cpu_box_is_real_without_a_driver_and_simulated_only_when_asked(monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)
    assert simulated_reason(False, hardware("cpu", 1)) == ""
    assert simulated_reason(True, hardware("cpu", 1)) == "--sim given"
    assert simulated_reason(False, hardware("h200", 8)) == "no NVIDIA driver found"


def test_the_lab_of_a_cpu_profile_launches_its_own_launcher_with_model_as_a_flag(tmp_path, monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)
    with Lab.open(cpu_profile(tmp_path), sim=False) as lab:
        assert not lab.sim and isinstance(lab.source, HostSource)
        verdict = plan_layout(lab.setup, "tp1")
        # No vLLM for this interpreter: the lab says what it checks flags with.
        assert "could not ask" in lab.box.note and "vLLM 0.33.0" in lab.box.note
        assert "CUDA_VISIBLE_DEVICES" not in lab.launcher.environment((0,))
    assert verdict.argv[:5] == (sys.executable, "-m", API_SERVER, "--model", "Qwen/Qwen3-30B-A3B-FP8")


def test_vllm_names_the_model_positionally_after_serve_and_as_a_flag_after_another_launcher():
    vllm = get_engine("vllm")
    assert vllm.model_args("M", ("vllm", "serve")) == ["M"]
    assert vllm.model_args("M", ("python", "-m", API_SERVER)) == ["--model", "M"]
    assert get_engine("sglang").model_args("M", ("python", "-m", "sglang.launch_server")) == [
        "--model-path",
        "M",
    ]


def test_kv_cache_memory_bytes_is_the_kv_cache_outright(tmp_path):
    """vLLM's CPU worker (and the GPU one) take --kv-cache-memory-bytes as the KV cache itself:
    a real vLLM 0.32 CPU run of the tiny model logged 1,048,576 tokens for 1G at 1,024 bytes a token."""
    model = load_model("Qwen/Qwen3-30B-A3B-FP8", env={})
    box = hardware("cpu", 1, 64)
    engine = get_engine("vllm", "0.32.0")
    given = Setup(model, box, engine, server_args=("--kv-cache-memory-bytes", "2G"), model_path="m")
    memory = plan_layout(given, "tp1").memory
    assert memory is not None and memory.kv_budget_gib == 2.0
    assert memory.kv_tokens == 2 * GIB // memory.kv_bytes_per_token
    decimal = Setup(model, box, engine, server_args=("--kv-cache-memory-bytes", "2g"), model_path="m")
    assert plan_layout(decimal, "tp1").memory.kv_budget_gib == pytest.approx(2e9 / GIB)
    share = plan_layout(Setup(model, box, engine, model_path="m"), "tp1").memory
    assert share.kv_budget_gib != 2.0  # without it: the memory share less weights and reserve


@pytest.mark.parametrize(
    ("name", "argv", "engine"),
    [
        ("VLLM::EngineCore", ["VLLM::EngineCore"], True),
        ("python", ["/v/bin/python", "-m", API_SERVER, "--model", "m"], True),
        ("vllm", ["/v/bin/vllm", "serve", "m"], True),
        ("python", ["python", "-m", "sglang.launch_server", "--model-path", "m"], True),
        ("sglang::scheduler", ["sglang::scheduler_TP0"], True),
        ("python", ["python", "-P", "-m", "cockpit.sim", "vllm", "--", "vllm", "serve", "m"], False),
        ("python", ["python", "-m", "pytest", "-k", "vllm"], False),
        ("cockpit", ["cockpit", "run", "try tp1", "--engine", "vllm"], False),
    ],
)
def test_engine_processes_are_told_by_name_module_or_subcommand(name, argv, engine):
    assert is_engine_process(name, argv) is engine


def test_the_host_source_lists_an_engines_processes_and_their_memory(tmp_path):
    """A process that runs as vLLM's API server module is the box's load; others are not."""
    package = tmp_path / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text("import time\nblock = bytearray(64 << 20)\ntime.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", API_SERVER], env=env)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = [p for p in engine_processes() if p.pid == proc.pid]
            if found and found[0].used_bytes > 64 << 20:
                break
            time.sleep(0.1)
        source = HostSource()
        (sample,) = source.sample()
        assert proc.pid in {p.pid for p in sample.processes}
        assert sample.memory_used >= 64 << 20 and sample.memory_total > sample.memory_used
        assert sample.power_w is None and sample.name.startswith("CPU (")
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in {p.pid for p in HostSource().sample()[0].processes}


def test_ready_is_not_taken_from_a_server_another_process_listens_with():
    """vLLM holds its port without listening while it loads: a program that listens there
    meanwhile answers /health, and that is no sign of the engine's readiness."""
    with listening_socket() as held:
        port = held.getsockname()[1]
        mine = SimpleNamespace(entry=SimpleNamespace(port=port, pgid=os.getpgid(0)))
        other = SimpleNamespace(entry=SimpleNamespace(port=port, pgid=os.getpgid(0) + 1_000_000))
        assert not _answered_by_another(mine)
        assert _answered_by_another(other)
    nobody = SimpleNamespace(entry=SimpleNamespace(port=port, pgid=1))
    assert not _answered_by_another(nobody)  # no listener: nothing to say


def test_a_cpu_profile_loads(tmp_path):
    profile = load_profile(cpu_profile(tmp_path))
    assert profile.gpu == "cpu" and profile.command[-1] == API_SERVER


def test_stop_waits_for_every_process_of_the_servers_group(tmp_path):
    """vLLM's API server ends at once on SIGTERM; its engine core and workers a moment later, and
    they hold the memory. A stop returns when the whole group is gone (the real engine's next
    launch found the box busy before)."""
    from cockpit.runner.registry import Registry
    from cockpit.runner.supervisor import Supervisor, group_members

    child = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.5), exit(0)))\n"
        "open(__import__('sys').argv[1], 'w').close()\n"
        "time.sleep(60)\n"
    )
    leader = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1]])\n"
        "time.sleep(60)\n"
    )
    started = tmp_path / "child-started"
    supervisor = Supervisor(Registry())
    handle = supervisor.start(
        experiment=1,
        argv=[sys.executable, "-c", leader, str(started)],
        env={},
        port=18432,
        log_path=tmp_path / "server.log",
    )
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(handle.entry.pgid)) == 2
    how = supervisor.stop(handle, grace=10)
    assert how == "stopped with SIGTERM"
    assert group_members(handle.entry.pgid) == []  # the child's 1.5 s of dying included
