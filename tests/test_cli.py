"""`cockpit plan` as a person runs it: the installed command, real output, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cockpit.faces.cli import main


def run_cockpit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
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
    tok_s = next(i for i, line in enumerate(lines) if line.startswith("tok/s: predicted"))
    assert all("✗ fails" in line for line in lines[first_fail:tok_s])
    assert lines[tok_s + 1 :] and all(line.startswith("speed") for line in lines[tok_s + 1 :])


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
    assert bad["speed"] is None  # no prediction for a layout that cannot start
    speed = by_layout["tp8"]["speed"]  # which backend and data predicted its tok/s
    assert speed["backend"] in ("kernels", "analytic") and speed["label"]


def test_plan_speed_analytic_keeps_measured_kernels_out(capsys):
    assert main(["plan", "--profile", "kimi-k2.6", "--layout", "tp8", "--speed", "analytic", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["speed"] == {
        "backend": "analytic",
        "data": "",
        "data_version": "",
        "box_version": "",
        "note": "",
        "label": "analytic model",
    }
    assert main(["--speed", "analytic", "plan", "--profile", "kimi-k2.6", "--layout", "tp8"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "speed: analytic model"


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
    from cockpit.core.errors import CockpitError

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
    from cockpit.core.errors import CockpitError
    from cockpit.engines import get_engine

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
    from helpers import free_port

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
    from cockpit.engines.arguments import check_args
    from cockpit.engines.options import option_table

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


def test_a_model_plan_says_what_it_is_of_and_counts_one_gpu(capsys):
    """`--model` alone plans the model on the engine's own defaults: no profile is named (its
    profile was only the model's name), and one GPU is one GPU."""
    assert main(["plan", "--model", MINIMAX, "--gpus", "1", "--layout", "tp1"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.endswith("with vLLM  (the engine's own defaults, no profile)"), first
    assert "weights need 214.2 GiB per GPU on 1 GPU, each GPU has 94.97 GiB" in out
    assert main(["plan", "--profile", "minimax-m2.5", "--model", MINIMAX, "--layout", "tp4"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("(profile minimax-m2.5, its model from --model)")
    assert main(["plan", "--profile", "minimax-m2.5", "--layout", "tp4"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("with vLLM  (profile minimax-m2.5)")


# -- predicted against measured -------------------------------------------------------------------

MINIMAX = "MiniMaxAI/MiniMax-M2.5"
FACTS = {
    "weights_gib": 53.1,
    "kv_memory_gib": 28.4,
    "kv_tokens": 212_992,
    "graph_gib": 0.5,
    "max_concurrency": 6.5,
}


def journal_launch(
    layout: str = "tp4",
    *,
    gpu_type: str = "rtx-pro-6000",
    host: str | None = None,
    facts: dict | None = None,
    predicted: dict | None = None,
    points: dict[int, float] | None = None,
    engine: dict | None = None,
) -> int:
    """A launch journaled as the launcher and `cockpit bench` write one: the engine's logged
    numbers, what was predicted, NVML peaks and benchmark points (with the engine's own figures)."""
    from cockpit.store.journal import BenchPoint, Journal

    with Journal() as journal:
        exp = journal.start_experiment(
            profile="minimax-m2.5", model=MINIMAX, engine="vllm", layout=layout, argv=[], host=host
        )
        journal.update_experiment(
            exp, facts=FACTS if facts is None else facts, predicted=predicted or {}, gpu_type=gpu_type
        )
        journal.set_outcome(exp, "ready", load_seconds=41.0)
        journal.record_peak(exp, {0: 80 * 2**30, 1: 79 * 2**30})
        for c, tok_s in (points or {}).items():
            extra = {"engine": engine} if engine else {}
            journal.add_point(
                exp, BenchPoint(c, tok_s, requests=8, input_len=1024, output_len=1024, extra=extra)
            )
    return exp


def test_results_json_sets_predicted_beside_measured_per_level_and_for_memory(capsys):
    engine = {"running_avg": 31.5, "running_peak": 32, "waiting_avg": 0.0, "kv_usage_peak": 0.41}
    predicted = {
        "memory": {"weights_gib": 52.0, "kv_budget_gib": 30.0, "kv_tokens": 200_000, "graph_gib": 0.4},
        "tok_s": {"1024/1024": {"1": 80.0, "32": 700.0}},
        "learned_runs": 2,
        "speed": "measured kernels (AIConfigurator 0.12.0, h200_sxm, vllm 0.24.0)",
    }
    exp = journal_launch(predicted=predicted, points={1: 94.2, 32: 655.0}, engine=engine)
    assert main(["results", "--format", "json"]) == 0
    records = {r["concurrency"]: r for r in json.loads(capsys.readouterr().out)}
    at_32 = records[32]
    assert at_32["output_tok_s"] == 655.0  # the record as it was, the comparison added
    assert at_32["predicted"] == {
        "tok_s": 700.0,
        "weights_gib": 52.0,
        "kv_gib": 30.0,
        "kv_tokens": 200_000,
        "graph_gib": 0.4,
        "learned_runs": 2,
        "speed": "measured kernels (AIConfigurator 0.12.0, h200_sxm, vllm 0.24.0)",  # which source predicted
    }
    measured = at_32["measured"]
    assert measured["experiment"] == exp and measured["tok_s"] == 655.0
    assert (measured["weights_gib"], measured["kv_gib"], measured["kv_tokens"]) == (53.1, 28.4, 212_992)
    assert measured["peak_gib"] == {"0": 80.0, "1": 79.0} and measured["load_seconds"] == 41.0
    assert measured["engine"] == engine
    assert at_32["measured_over_predicted"] == {
        "tok_s": 0.936,
        "weights_gib": 1.021,
        "kv_gib": 0.947,
        "kv_tokens": 1.065,
        "graph_gib": 1.25,
    }
    assert records[1]["measured_over_predicted"]["tok_s"] == 1.177


def test_results_json_counts_a_data_parallel_pool_once_per_replica(capsys):
    """vLLM logs one engine core's KV cache; tp4 dp2 has two, as the planner counts them."""
    journal_launch("tp4 dp2", facts={"kv_tokens": 100_000}, points={1: 90.0})
    assert main(["results", "--format", "json"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["measured"]["kv_tokens"] == 200_000 and record["measured"]["engine"] is None
    assert record["predicted"]["tok_s"] is None and record["measured_over_predicted"]["tok_s"] is None


def _plan_rows(capsys) -> tuple[list[str], dict[str, str]]:
    assert main(["plan", "--profile", "minimax-m2.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return lines, {line.split("  ")[0].strip(): line for line in lines[3:]}


@pytest.fixture
def real_box(monkeypatch):
    """A box with an NVIDIA driver: `plan` reads the launches made on its GPUs, not the simulator's."""
    monkeypatch.setattr("cockpit.telemetry.nvml.driver_present", lambda: True)


def test_plan_has_no_measured_column_without_measurements(capsys, real_box):
    journal_launch("tp4", gpu_type="h200", points={32: 900.0})  # another GPU type: not this box
    journal_launch("tp8 ep", host="elsewhere", points={32: 900.0})
    lines, _ = _plan_rows(capsys)
    assert "last measured" not in lines[1]
    assert lines[-2].endswith(
        "from the performance model with its default constants (nothing learned on this box yet)"
    )
    assert lines[-1].startswith("speed")  # which source predicted the numbers


def test_plan_shows_what_this_box_last_measured_of_each_layout(capsys, real_box):
    journal_launch("tp4", facts={"weights_gib": 50.0, "kv_tokens": 1000}, points={32: 600.0})  # older
    journal_launch("tp4", points={1: 94.2, 32: 655.0})
    journal_launch("tp4", gpu_type="h200", facts={"weights_gib": 1.0}, points={32: 9999.0})  # not here
    journal_launch("tp8 ep", facts={}, points={64: 1512.9})  # benchmarked, memory not logged
    lines, rows = _plan_rows(capsys)
    column = lines[1].index("last measured")
    assert lines[1].index("C=1024") < column < lines[1].index("reason")
    assert rows["tp4"][column:].startswith("53.1 GiB, 212,992 tok, 655 tok/s at C=32  ")
    assert rows["tp8 ep"][column:].startswith("1,513 tok/s at C=64  ")
    assert rows["tp6"][column:].startswith("-  ")
    assert lines[-3].startswith("last measured: the newest launch of each layout on this host")

    data, _ = _plan_json(capsys, "--profile", "minimax-m2.5", "--layout", "tp4", "--layout", "tp6")
    tp4, tp6 = data
    assert tp6["last_measured"] is None
    last = tp4["last_measured"]
    assert last["memory"] == {"weights_gib": 53.1, "kv_gib": 28.4, "kv_tokens": 212_992, "graph_gib": 0.5}
    assert last["best_tok_s"] == 655.0 and last["best_concurrency"] == 32 and last["tok_s"]["1"] == 94.2


def test_plan_says_when_its_predictions_are_calibrated(minimax_vllm):
    from dataclasses import replace

    from cockpit.core.planner import Learned
    from cockpit.reports.measured import calibration_mark, prediction_basis

    assert calibration_mark(Learned()) == "default"
    assert calibration_mark(Learned(runs=1)) == "calibrated from 1 run"
    learned = replace(minimax_vllm, learned=Learned(runs=3, weights_factor=1.02))
    assert prediction_basis(learned) == "calibrated from 3 runs on this box (rtx-pro-6000, vLLM)"


def test_plan_makes_no_journal_to_look_for_measurements(capsys):
    from cockpit.store.journal import default_path

    assert main(["plan", "--layout", "tp4"]) == 0
    assert "last measured" not in capsys.readouterr().out and not default_path().exists()


def test_bare_cockpit_with_sim_plans_with_the_simulated_boxs_measurements(capsys, real_box):
    """`cockpit --sim` without a terminal prints the plan of the simulated box, even where a
    driver is found: its last-measured column is the simulator's launches, not the GPUs'."""
    from cockpit.store.journal import BenchPoint, Journal

    journal_launch("tp4", points={32: 600.0})  # on the GPUs
    with Journal() as journal:
        sim = journal.start_experiment(
            profile="minimax-m2.5", model=MINIMAX, engine="vllm", layout="tp8 ep", argv=[],
            gpu_type="rtx-pro-6000", simulated=True,
        )  # fmt: skip
        journal.add_point(sim, BenchPoint(32, 900.0, input_len=1024, output_len=1024))
    assert main(["--sim", "--profile", "minimax-m2.5"]) == 0
    rows = {line.split("  ")[0].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert "900 tok/s at C=32" in rows["tp8 ep"] and "600 tok/s" not in rows["tp4"]


def test_plans_last_measured_column_takes_the_simulated_or_the_real_launches(capsys):
    """A simulated launch on this host measured the simulator, not the GPUs: `measured_here` reads
    one kind or the other, as the plan is for the simulated box or the real one."""
    from cockpit.reports.measured import measured_here
    from cockpit.store.journal import BenchPoint, Journal
    from cockpit.store.profile_setup import SetupOverrides, build_setup

    journal_launch("tp4", points={32: 600.0})  # on the GPUs
    with Journal() as journal:
        sim = journal.start_experiment(
            profile="minimax-m2.5", model=MINIMAX, engine="vllm", layout="tp8 ep", argv=[],
            gpu_type="rtx-pro-6000", simulated=True,
        )  # fmt: skip
        journal.add_point(sim, BenchPoint(32, 900.0, input_len=1024, output_len=1024))
    setup = build_setup(SetupOverrides(profile="minimax-m2.5"))[0]
    real, _ = measured_here(setup)
    simulated, _ = measured_here(setup, simulated=True)
    assert set(real) == {"tp4"} and set(simulated) == {"tp8 ep"}
    assert simulated["tp8 ep"].best.output_tok_s == 900.0


def test_run_takes_the_profile_engine_and_sim_before_or_after_it():
    """`cockpit --profile P --sim run …` as `cockpit tune` and `sweep` do: run's own options do not
    set them back to their defaults."""
    from cockpit.faces.cli import _parse, build_parser

    parser = build_parser()
    before = _parse(parser, ["--profile", "minimax-m2.5", "--engine", "sglang", "--sim", "run", "try tp4"])
    after = _parse(parser, ["run", "try tp4", "--profile", "minimax-m2.5", "--engine", "sglang", "--sim"])
    for args in (before, after):
        assert (args.profile, args.engine, args.sim) == ("minimax-m2.5", "sglang", True)
    bare = _parse(parser, ["run", "try tp4"])
    assert (bare.profile, bare.engine, bare.sim, bare.startup_timeout) == (None, None, False, 1800.0)
