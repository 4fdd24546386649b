"""Nothing orphaned, nothing lost: a failed level never hides good numbers, a keyed server is
benchmarked with its key, and a bench child never outlives the cockpit that started it.

The engines here are real processes (the simulated engine, as cockpit launches it) or servers
in a thread; `cockpit bench` and `cockpit results` run as the CLI, in subprocesses that share
the test's COCKPIT_JOURNAL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port, wait_for
from simproc import SimProcess
from test_sim_server import ServerThread

from cockpit.bench.command import bench_argv
from cockpit.bench.concurrency_sweep import run_sweep
from cockpit.bench.config import BenchConfig
from cockpit.sim.batcher import ConstantPacer
from cockpit.store.journal import Journal

MODEL = "qwen3-30b-a3b-fp8"
SIM_ARGV = ["serve", MODEL, "--tensor-parallel-size", "2"]


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def bench(url: str, experiment: int, *extra: str) -> subprocess.CompletedProcess:
    return cli(
        "bench",
        "--url",
        url,
        "--experiment",
        str(experiment),
        "-c",
        "1,4",
        "--requests",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--timeout",
        "10",
        *extra,
    )


def launch(journal: Journal, layout: str = "tp2") -> int:
    exp = journal.start_experiment(
        profile="p", model=MODEL, engine="vllm", layout=layout, argv=["vllm", "serve"]
    )
    journal.set_outcome(exp, "ready")
    return exp


@pytest.fixture
def engine(tmp_path):
    port = free_port()
    sim = SimProcess("vllm", [*SIM_ARGV, "--port", str(port)], tmp_path / "simbox")
    url = f"http://127.0.0.1:{port}"
    try:
        sim.wait_ready(url)
        yield sim, url
    finally:
        sim.stop()


# -- a failed level never hides good numbers ------------------------------------------------------------


def test_a_level_benched_again_after_the_server_died_keeps_the_good_row(engine):
    sim, url = engine
    with Journal() as journal:
        good = launch(journal)
    first = bench(url, good)
    assert first.returncode == 0, first.stderr
    sim.stop()  # the server dies

    again = bench(url, good, "--model", MODEL)  # the same experiment, benched again
    assert again.returncode == 1
    assert (
        again.stderr.strip()
        .splitlines()[-1]
        .startswith("cockpit bench: no level got a token back (C=1, C=4 failed: ")
    )
    with Journal() as journal:
        relaunched = launch(journal)  # and a relaunch of the layout whose server is gone
    last = bench(url, relaunched, "--model", MODEL)
    assert last.returncode == 1 and "C=1, C=4 failed" in last.stderr

    with Journal() as journal:
        kept = [(p.concurrency, p.failed) for p in journal.points(good)]
        assert kept == [(1, False), (1, True), (4, False), (4, True)]
        [failed] = {p.error for p in journal.points(relaunched)}
        assert "cannot connect: Connection refused" in failed
    records = json.loads(cli("results", "--profile", "p", "--format", "json").stdout)
    assert [(r["concurrency"], r["experiment"], r["failed"]) for r in records] == [
        (1, good, False),
        (4, good, False),
    ]
    assert all(r["output_tok_s"] > 0 for r in records)
    table = cli("results", "--profile", "p").stdout.splitlines()
    row = next(line for line in table if line.startswith("tp2"))
    assert "failed" not in row and " at C=" in row


# -- API keys ----------------------------------------------------------------------------------------------


KEY = "sk-bench-secret"


@pytest.fixture(scope="module")
def keyed():
    server = ServerThread("vllm", ConstantPacer(step_s=0.005, max_running=64), api_key=KEY)
    yield server
    server.stop()


def test_cockpit_bench_sends_the_key_from_the_environment(keyed):
    args = [
        "bench",
        "--url",
        keyed.url,
        "-c",
        "1",
        "--requests",
        "3",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--jsonl",
    ]
    with_key = cli(*args, env={"OPENAI_API_KEY": KEY})  # the model is looked up with the key too
    assert with_key.returncode == 0, with_key.stderr
    [level] = [json.loads(line)["result"] for line in with_key.stdout.splitlines() if '"level_done"' in line]
    assert level["output_tok_s"] > 0 and level["errors"] == 0 and not level["failed"]
    assert KEY not in with_key.stdout + with_key.stderr

    without = {"OPENAI_API_KEY": ""}
    refused = cli(*args, "--model", "MiniMaxAI/MiniMax-M2.5", env=without)
    assert refused.returncode == 1 and "HTTP 401: Unauthorized" in refused.stderr
    lookup = cli(*args, env=without)
    assert lookup.returncode == 2 and "answered HTTP 401" in lookup.stderr


def test_a_simulated_engine_launched_with_a_key_refuses_without_it_and_is_benchmarked_with_it(tmp_path):
    import httpx

    port = free_port()
    sim = SimProcess("vllm", [*SIM_ARGV, "--port", str(port), "--api-key", KEY], tmp_path / "simbox")
    url = f"http://127.0.0.1:{port}"
    try:
        sim.wait_ready(url)  # /health stays open, as vLLM's
        refused = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
        result = cli(
            "bench",
            "--url",
            url,
            "-c",
            "2",
            "--requests",
            "4",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--jsonl",
            env={"OPENAI_API_KEY": KEY},
        )
        assert result.returncode == 0, result.stderr
        [level] = [
            json.loads(line)["result"] for line in result.stdout.splitlines() if '"level_done"' in line
        ]
        assert level["output_tok_s"] > 0 and level["errors"] == 0
    finally:
        sim.stop()


@pytest.mark.parametrize("transport", ["raw", "aiohttp"])
def test_both_transports_send_the_key_on_every_request(keyed, transport):
    cfg = BenchConfig(
        url=keyed.url,
        concurrency=(2,),
        input_len=8,
        output_len=4,
        requests=4,
        api_key=KEY,
        transport=transport,
    )
    [result] = asyncio.run(run_sweep(cfg, lambda event: None))
    assert result.errors == 0 and result.output_tok_s > 0 and not result.failed


# -- a bench child never outlives its parent --------------------------------------------------------------

INTERMEDIATE = """
import subprocess, sys, time
child = subprocess.Popen(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's new parent may be slow to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_bench_child_whose_parent_is_killed_exits_and_journals_nothing_more(engine, tmp_path):
    _, url = engine
    with Journal() as journal:
        exp = launch(journal)
    out = tmp_path / "bench.jsonl"
    # Five 3-second levels: left alone, the child would run on for 10 s and more after the kill.
    argv = bench_argv(url, MODEL, [1, 2, 4, 8, 16], input_len=16, output_len=8, duration=2, experiment=exp)
    parent = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE, str(out), *argv], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert wait_for(lambda: out.exists() and '"level_done"' in out.read_text(), 90), (
            "no level finished in 90 s"
        )
        time.sleep(0.5)  # inside the next 2-second level
        parent.send_signal(signal.SIGKILL)
        parent.wait()  # gone, and its child re-parented
        killed_at = time.time()
        started = time.monotonic()
        assert wait_for(lambda: not running(child), 5), "the bench child outlived its parent by 5 s"
        print(f"bench child gone {time.monotonic() - started:.2f} s after its parent was killed")
        time.sleep(3)  # past the end of the level it was running: no late row
        with Journal() as journal:
            points = journal.points(exp)
        assert points and all(p.created < killed_at for p in points), [
            (p.concurrency, p.created) for p in points
        ]
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


# -- counting ----------------------------------------------------------------------------------------------


def test_a_level_result_becomes_a_failed_journal_point_with_its_reason():
    from collections import Counter

    from cockpit.bench.concurrency_sweep import level_failure

    assert level_failure(10, Counter({"HTTP 500: boom": 3}), 100.0) is None
    assert level_failure(2, Counter({"HTTP 500: boom": 3}), 100.0) == "3 of 5 requests failed: HTTP 500: boom"
    assert level_failure(4, Counter(), 0.0) == "no token came back"
    assert level_failure(0, Counter({"a": 2, "b": 5}), 0.0) == "7 of 7 requests failed: b"


def test_errors_never_exceed_the_requests_sent_with_half_the_streams_dropping():
    """Requests that fail, ones cancelled at the window's end and warm-up stragglers: each counts once."""
    from test_bench_client import Server

    server = Server()
    try:
        for transport in ("raw", "aiohttp"):
            cfg = BenchConfig(
                url=f"{server.url}/flaky", model="m", concurrency=(4,), requests=12, transport=transport
            )
            [result] = asyncio.run(run_sweep(cfg, lambda event: None))
            assert result.requests + result.errors + result.cancelled <= result.sent
            assert result.errors == sum(result.error_reasons.values()) >= 1
            point = result.to_bench_point()
            assert (point.failed, point.error) == (result.failed, result.error)
    finally:
        server.stop()
