"""`cockpit plan` as a person runs it: the installed command, real output, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cockpit.cli import main


def run_cockpit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_plan_table_for_the_minimax_profile():
    result = run_cockpit("plan", "--profile", "minimax-m2.5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "MiniMax-M2.5" in lines[0] and "8 x RTX PRO 6000" in lines[0]
    rows = {line.split("  ")[0].strip(): line for line in lines[3:]}
    assert "✓ fits" in rows["tp8 ep"] and "✓ fits" in rows["tp4"]
    assert "✗ fails" in rows["tp8"] and "block_n = 128" in rows["tp8"]
    assert "✗ fails" in rows["tp6"] and "KV heads" in rows["tp6"]
    assert "CUDA out of memory. Tried to allocate" in rows["tp2 ep"] and "weights need" in rows["tp2 ep"]
    first_fail = next(i for i, line in enumerate(lines) if "✗ fails" in line)
    assert all("✗ fails" in line for line in lines[first_fail:-1])
    assert lines[-1].startswith("tok/s: predicted")


def test_plan_json_for_chosen_layouts():
    result = run_cockpit("plan", "--profile", "kimi-k2.6", "--layout", "tp4 ep2", "--layout", "tp8", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_layout = {row["layout"]: row for row in data}
    assert by_layout["tp8"]["verdict"] == "fits" and by_layout["tp8"]["gpus_used"] == 8
    bad = by_layout["tp4 ep2"]
    assert bad["verdict"] == "fails" and bad["gpus_used"] == 4
    assert bad["reasons"][0]["rule"] == "oom-at-load"
    assert bad["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert bad["weights_gib_per_gpu"] > 130 and isinstance(bad["kv_tokens"], int)


def test_plan_with_a_model_and_box_on_the_command_line(capsys):
    assert (
        main(["plan", "--model", "qwen3-30b-a3b-fp8", "--gpus", "2", "--gpu", "h100", "--layout", "tp2"]) == 0
    )
    out = capsys.readouterr().out
    assert "qwen3-30b-a3b-fp8" in out and "2 x H100" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan", "--layout", "tq4"], "did you mean 'tp4'"),
        (["plan", "--model", "nobody/Nothing"], "model 'nobody/Nothing' not found"),
        (["plan", "--profile", "nope"], "no profile named 'nope'"),
        (["plan", "--gpu", "voodoo5"], "unknown GPU type"),
    ],
)
def test_errors_are_one_line_with_exit_2(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cockpit: ") and message in err and "\n" not in err


def test_debug_shows_the_traceback():
    from cockpit.errors import CockpitError

    with pytest.raises(CockpitError):
        main(["--debug", "plan", "--layout", "tq4"])


def test_installed_console_script_runs():
    import shutil

    exe = shutil.which("cockpit", path=os.path.dirname(sys.executable))
    assert exe, "the cockpit console script is installed beside the interpreter"
    result = subprocess.run(
        [exe, "plan", "--layout", "tp4", "--json"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and json.loads(result.stdout)[0]["layout"] == "tp4"


@pytest.mark.parametrize("value", ["x", "0,32", ""])
def test_bad_concurrency_levels(capsys, value):
    assert main(["plan", "--concurrency", value]) == 2
    assert "--concurrency" in capsys.readouterr().err


def test_unknown_engine_name():
    from cockpit.engines import get_engine
    from cockpit.errors import CockpitError

    with pytest.raises(CockpitError, match="unknown engine 'trtllm': use one of vllm, sglang"):
        get_engine("trtllm")


def test_bare_cockpit_says_it_uses_the_simulated_box(capsys):
    assert main(["--sim", "--profile", "kimi-k2.6"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "--sim given: using the simulated box (8 x RTX PRO 6000 Blackwell (94.97 GiB, PCIe 5)) and profile kimi-k2.6"
    )
    assert "Kimi-K2.6" in out[1]


def test_gpus_on_the_simulated_box(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    assert main(["gpus", "--sim"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].startswith("GPU 0  NVIDIA RTX PRO 6000") and lines[0].endswith("idle")


def test_gpus_without_a_driver_says_they_are_simulated(capsys, monkeypatch):
    import cockpit.telemetry.nvml as nvml

    monkeypatch.setattr(nvml, "driver_present", lambda: False)
    assert main(["gpus"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(
        "no NVIDIA driver found: these are the simulated box's GPUs (8 x RTX PRO 6000"
    )
    assert len(captured.out.splitlines()) == 8  # stdout stays one line per GPU


def test_gpus_from_an_unreachable_dcgm_endpoint(capsys):
    from simproc import free_port

    assert main(["gpus", "--dcgm", f"http://127.0.0.1:{free_port()}/metrics"]) == 2
    assert "no GPUs answered" in capsys.readouterr().err


def _plan_json(capsys, *args: str) -> tuple[list[dict], str]:
    assert main(["plan", *args, "--json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


@pytest.mark.parametrize(
    "profile, engine, launcher",
    [
        ("minimax-m2.5", "sglang", ["python", "-m", "sglang.launch_server"]),
        ("kimi-k2.6", "vllm", ["vllm", "serve"]),
        ("demo", "sglang", ["python", "-m", "sglang.launch_server"]),
    ],
)
def test_plan_on_another_engine_speaks_that_engines_flags_only(capsys, profile, engine, launcher):
    """Every argv: the engine's launcher, then words the engine's own option table takes."""
    from cockpit.engines.options import check_args, option_table

    rows, err = _plan_json(capsys, "--profile", profile, "--engine", engine)
    table = option_table(engine)
    argvs = [row["argv"] for row in rows if row["argv"]]
    assert argvs
    for argv in argvs:
        assert argv[: len(launcher)] == launcher
        rest = argv[len(launcher) :]
        check_args(table, rest[1:] if engine == "vllm" else rest)  # vLLM's model is positional
    assert err.startswith("note: ") and all(line.startswith("note: ") for line in err.splitlines())


def test_plan_notes_say_what_the_engine_override_dropped(capsys):
    _, err = _plan_json(capsys, "--profile", "minimax-m2.5", "--engine", "sglang", "--layout", "tp4")
    assert "note: --gpu-memory-utilization 0.90 dropped" in err
    assert "note: the profile's launcher `vllm serve` is vLLM's" in err


def test_plan_with_a_model_carries_no_demo_arguments(capsys):
    rows, err = _plan_json(capsys, "--model", "gpt-oss-120b", "--layout", "tp8")
    (row,) = rows
    assert row["argv"][:3] == ["vllm", "serve", "openai/gpt-oss-120b"]
    assert "--max-model-len" not in row["argv"] and err == ""
    rows, _ = _plan_json(capsys, "--model", "qwen3-30b-a3b-fp8", "--engine", "sglang", "--layout", "tp2")
    assert rows[0]["argv"][:5] == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-30B-A3B-FP8",
    ]
