"""Real failures, in vLLM's own words: what cockpit refuses before a launch says what the engine
would print, and what the engine prints when it fails is diagnosed.

The engine runs of the refused cases (a bad flag value, a config.json that does not parse, a port
in use) start together, once for the module: each costs the engine's ~20 s of imports.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

import pytest
from realengine import READY_S, cockpit, engines_of, experiments, wait_gone

from cockpit.core.outcome import FAILED
from cockpit.runner.diagnose import diagnose_exit


def engine_argv(engine_python: str, model, port: int, *extra: str) -> list[str]:
    """The argv cockpit builds for `tp1` on the CPU profile (tests/real/conftest.py), plus ``extra``."""
    return [
        engine_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--tensor-parallel-size",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        "1G",
        *extra,
    ]


def listening_socket() -> socket.socket:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    return held


@pytest.fixture(scope="module")
def broken_model(tiny_model, tmp_path_factory):
    """The tiny model with a config.json cut short, as an interrupted download leaves it."""
    folder = tmp_path_factory.mktemp("broken") / "tiny-moe"
    shutil.copytree(tiny_model, folder)
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    return folder


@pytest.fixture(scope="module")
def engine_failures(engine_python, tiny_model, broken_model, engine_cache, tmp_path_factory):
    """The real engine on three argvs cockpit refuses, run at once: name -> (exit code, log lines)."""
    held = listening_socket()
    port = held.getsockname()[1]
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(engine_cache),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path_factory.mktemp("home")),
    }
    free = listening_socket()
    other_port = free.getsockname()[1]
    free.close()
    runs = {
        "bad-value": engine_argv(engine_python, tiny_model, other_port, "--max-num-seqs", "abc"),
        "broken-config": engine_argv(engine_python, broken_model, other_port),
        "port-in-use": engine_argv(engine_python, tiny_model, port),
    }
    procs = {
        name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for name, argv in runs.items()
    }
    try:
        results = {name: proc.communicate(timeout=READY_S) for name, proc in procs.items()}
        return {name: (procs[name].returncode, results[name][0].splitlines()) for name in procs}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        held.close()


def test_a_flag_value_the_parser_rejects_is_refused_before_launch_in_its_own_words(
    cpu_profile, engine_failures, tmp_path
):
    profile, _ = cpu_profile()
    refused = cockpit("run", "try tp1 --max-num-seqs abc", "--profile", profile, timeout=120)
    assert refused.returncode != 0 and not engines_of(tmp_path)
    (said,) = [line for line in refused.stdout.splitlines() if line.startswith("failed ")]
    code, lines = engine_failures["bad-value"]
    assert code == 2
    engine_words = lines[-1].split("error: ", 1)[1]  # "api_server.py: error: argument ...: invalid int ..."
    assert engine_words == "argument --max-num-seqs: invalid int value: 'abc'"
    assert engine_words in said  # cockpit quotes the engine's parser, found without a launch
    diagnosis = diagnose_exit(lines, code, None)
    assert diagnosis.kind == "bad-argument" and "invalid int value: 'abc'" in diagnosis.cause
    assert "--max-num-seqs" in diagnosis.next_step
    (exp,) = experiments()  # journaled as refused: it never ran
    assert exp.outcome == FAILED and exp.pid is None


def test_a_config_json_that_does_not_parse_is_one_line_and_the_engines_failure_is_diagnosed(
    cpu_profile, broken_model, engine_failures, tmp_path
):
    profile, _ = cpu_profile(model=broken_model)
    refused = cockpit("run", "try tp1", "--profile", profile, timeout=120)
    assert refused.returncode != 0 and not engines_of(tmp_path)
    said = refused.stderr.strip()
    assert len(said.splitlines()) == 1 and "config.json" in said, said
    with pytest.raises(json.JSONDecodeError):  # the engine's own reader agrees it is broken
        json.loads((broken_model / "config.json").read_text())
    code, lines = engine_failures["broken-config"]
    assert code == 1
    diagnosis = diagnose_exit(lines, code, None)
    assert diagnosis.kind == "model-config"
    assert "is not a valid JSON file" in diagnosis.cause and "config.json" in diagnosis.next_step


def test_a_port_in_use_is_refused_naming_its_holder_and_the_engines_bind_error_is_diagnosed(
    cpu_profile, engine_failures, tmp_path
):
    profile, port = cpu_profile()
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen(1)
    try:
        refused = cockpit("run", "try tp1", "--profile", profile, timeout=120)
    finally:
        held.close()
    assert refused.returncode != 0 and not engines_of(tmp_path)
    assert f"port {port} is already in use" in refused.stdout + refused.stderr
    code, lines = engine_failures["port-in-use"]
    assert code == 1 and any("Address already in use" in line for line in lines)
    diagnosis = diagnose_exit(lines, code, None)
    assert diagnosis.kind == "port-in-use" and "already in use" in diagnosis.cause


def test_a_context_beyond_the_models_is_planned_to_fail_and_the_forced_launch_is_diagnosed(
    cpu_profile, tmp_path
):
    profile, _ = cpu_profile(args=("--max-model-len", "100000"))
    quote = "User-specified max_model_len (100000) is greater than the derived max_model_len"
    plan = cockpit("plan", "--profile", profile, "--json", timeout=120)
    (row,) = json.loads(plan.stdout)
    assert row["verdict"] == "fails" and quote in row["reasons"][0]["message"]
    run = cockpit("run", "try tp1", "--profile", profile, "--force", "--quiet", timeout=READY_S)
    assert run.returncode != 0
    assert quote in run.stdout, run.stdout[-3000:]
    (exp,) = experiments()
    assert exp.outcome == FAILED and exp.diagnosis_kind == "max-model-len"
    assert "4096" in (exp.next_step or "")
    assert not wait_gone(tmp_path)
