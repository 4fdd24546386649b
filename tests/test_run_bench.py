"""Benchmarks through `cockpit run --bench` and `cockpit bench`: journaled, comparable, interruptible."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import free_port
from simproc import SimProcess
from test_run import cockpit, fast_sim  # noqa: F401  (the fixture sets up the sim, journal and state dirs)

from cockpit.store.journal import Journal


def test_seed_table_shape_from_journaled_simulated_runs(profile_file):
    profile, _ = profile_file("kimi-k2.6")
    for layout in ("tp8", "pp8", "tp8 ep8"):
        result = cockpit(
            "run",
            f"try {layout}",
            "--profile",
            profile,
            "--sim",
            "--quiet",
            "--bench",
            "c=1,32,64 in=32 out=8 t=1",
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "bench     done: 3 level(s) journaled" in result.stdout
    table = cockpit("results", "--profile", "kimi-k2.6", "--format", "markdown").stdout.splitlines()
    assert (
        table[0] == "## Kimi-K2.6 on 8 × RTX PRO 6000 Blackwell · SGLang 0.5.23"
    )  # the report's title and context
    assert "- Request lengths: input 32 tokens, output 8 tokens" in table
    head = next(i for i, line in enumerate(table) if line.startswith("| Layout |"))
    assert table[head].startswith("| Layout | C=1 tok/s | C=32 | C=64 | Peak |")
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), table[head + 2 :]))
    assert [row.split("|")[1].strip() for row in rows] == ["tp8", "pp8", "tp8 ep8"]
    assert all(row.count("|") == 6 for row in rows)
    assert any("**" in row for row in rows)  # the best of each column is marked
    data = json.loads(cockpit("results", "--profile", "kimi-k2.6", "--format", "json").stdout)
    points = [p for p in data if p.get("concurrency")]
    assert {p["layout"] for p in points} == {"tp8", "pp8", "tp8 ep8"}
    for point in points:
        assert {"concurrency", "output_tok_s", "ttft_ms_p50", "itl_ms_p50"} <= set(point)
        assert point["output_tok_s"] > 0


@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
def test_ctrl_c_in_the_middle_of_a_sweep_keeps_finished_levels(tmp_path, inherited):
    """Also when the child inherits SIGINT ignored (a cockpit started from a shell's background
    job): the parent's SIGINT is still how it stops the sweep."""
    port = free_port()
    sim = SimProcess(
        "vllm",
        ["serve", "qwen3-30b-a3b-fp8", "--tensor-parallel-size", "2", "--port", str(port)],
        tmp_path / "simbox",
    )
    try:
        sim.wait_ready(f"http://127.0.0.1:{port}")
        with Journal() as journal:
            exp = journal.start_experiment(
                profile="p", model="qwen3-30b-a3b-fp8", engine="vllm", layout="tp2", argv=["vllm", "serve"]
            )
        bench = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cockpit.faces.cli",
                "bench",
                "--url",
                f"http://127.0.0.1:{port}",
                "--jsonl",
                "-c",
                "1,8",
                "--input-len",
                "16",
                "--output-len",
                "4",
                "--duration",
                "3",
                "--experiment",
                str(exp),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=None
            if inherited == signal.SIG_DFL
            else lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        # Each level runs 3 s: interrupt once C=1 is done and C=8 has started (3 s is room enough
        # for the signal to land inside C=8 on a loaded machine; a short level could end first).
        for line in bench.stdout:
            event = json.loads(line)
            if event["type"] == "level_start" and event["concurrency"] == 8:
                break
        bench.send_signal(signal.SIGINT)
        out, err = bench.communicate(timeout=30)
        assert bench.returncode == 130, err
        assert "finished levels kept: C=1" in err
        with Journal() as journal:
            assert [p.concurrency for p in journal.points(exp)] == [1]
    finally:
        sim.stop()


def test_bench_errors_are_one_line(capsys):
    from cockpit.faces.cli import main

    assert main(["bench", "--url", "localhost:8000"]) == 2
    assert "--url must start with http://" in capsys.readouterr().err
    assert main(["bench", "--url", "http://127.0.0.1:1", "-c", "0"]) == 2
    assert "concurrency levels must be 1 or more" in capsys.readouterr().err
    assert main(["bench", "--url", "http://127.0.0.1:1", "--experiment", "999"]) == 2
    assert "no experiment 999" in capsys.readouterr().err


def test_bench_against_a_dead_server_says_why_and_fails(capsys):
    from cockpit.faces.cli import main

    port = free_port()
    assert (
        main(["bench", "--url", f"http://127.0.0.1:{port}", "--model", "m", "-c", "1", "--requests", "2"])
        == 1
    )
    captured = capsys.readouterr()
    assert "errors" in captured.out and "x " in captured.out  # the commonest reason, counted
    assert "no level got a token back" in captured.err
    assert main(["bench", "--url", f"http://127.0.0.1:{port}", "-c", "1"]) == 2
    assert "is the server up?" in capsys.readouterr().err
