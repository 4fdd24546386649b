"""Shared fixtures: the reference box (8 x RTX PRO 6000, docs/performance.md#reference-measurements),
the bundled models, and a clean user environment."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from cockpit.core.hardware import hardware
from cockpit.core.planner import Setup
from cockpit.engines import get_engine
from cockpit.store.modelfiles import load_model

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models"

# The tests send Ctrl-C and SIGHUP to the cockpits they start. A suite started in the background
# (`pytest &` in a script, `nohup pytest`) has those signals ignored, its children inherit that, and
# cockpit rightly keeps an ignored signal ignored (as under nohup). Handled here, they reach the
# children as the default (exec resets a handled signal, never an ignored one); the suite itself
# still shrugs off a hangup.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)


REAL_ENGINE_DIR = Path(__file__).parent / "real"


def pytest_addoption(parser):
    parser.addoption(
        "--real-engine",
        action="store_true",
        help="run the real-engine tier (tests/real: vLLM's CPU build, see README.md)",
    )


def pytest_ignore_collect(collection_path, config):
    """The real-engine tier runs only when asked for (``--real-engine``): it starts a real vLLM,
    which wants the cores to itself, so it runs apart from the main suite."""
    if config.getoption("--real-engine"):
        return None
    return True if Path(collection_path).is_relative_to(REAL_ENGINE_DIR) else None


def pytest_configure(config):
    """Compile the package once, before the suite starts hundreds of `cockpit` and engine processes.

    Where PYTHONDONTWRITEBYTECODE is set (many containers and CI images set it), no process ever
    writes the package's bytecode, so each child would compile every module of cockpit again:
    ~0.7 s of CPU per process start. Compiled files are read even with the variable set. Only the
    controlling process compiles (under pytest-xdist, workers find it done).
    """
    if hasattr(config, "workerinput"):
        return
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parent.parent / "cockpit", quiet=1)


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path, monkeypatch):
    """Keep tests away from the real user's config, data, state and HF cache folders."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)


@pytest.fixture(scope="session")
def seed_box():
    return hardware("rtx-pro-6000", 8)


@pytest.fixture(scope="session")
def minimax():
    return load_model("MiniMaxAI/MiniMax-M2.5", env={})


@pytest.fixture(scope="session")
def kimi():
    return load_model("moonshotai/Kimi-K2.6", env={})


@pytest.fixture(scope="session")
def minimax_vllm(minimax, seed_box):
    return Setup(minimax, seed_box, get_engine("vllm"), model_path="MiniMaxAI/MiniMax-M2.5")


@pytest.fixture(scope="session")
def kimi_sglang(kimi, seed_box):
    return Setup(kimi, seed_box, get_engine("sglang"), model_path="moonshotai/Kimi-K2.6")


@pytest.fixture(autouse=True, scope="session")
def no_process_left_behind(tmp_path_factory):
    """Every engine this test session starts is gone when the suite ends (and is killed if not).

    Engines are recognised by their simulated box living under this session's temporary folder,
    so other test sessions on the same machine are left alone.
    """
    import os
    import signal
    import time

    import psutil

    base = str(tmp_path_factory.getbasetemp())
    yield
    time.sleep(0.2)
    leftovers = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "cockpit.sim" not in cmdline or proc.pid == os.getpid():
                continue
            if not proc.environ().get("COCKPIT_SIM_STATE", "").startswith(base):
                continue
            leftovers.append(f"{proc.pid}: {cmdline[:120]}")
            os.kill(proc.pid, signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    assert not leftovers, f"tests left engine processes behind: {leftovers}"


@pytest.fixture
def profile_file(tmp_path):
    """A bundled profile copied with a free port, so tests never collide with a real server."""
    import yaml
    from helpers import free_port

    from cockpit.store.profile import find_profile

    def make(name: str, **server) -> tuple[str, int]:
        data = yaml.safe_load(find_profile(name).read_text())
        port = free_port()
        data.setdefault("server", {})["port"] = port
        data["server"].update(server)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path), port

    return make
