"""Predicted tok/s for a benchmark's workload against the simulated engine, on the real clock.

Starts the simulated engine (a real process on 127.0.0.1) for each layout of the MiniMax profile
and runs cockpit's real bench against it at the grid of docs/performance.md#the-workload: in/out
256/128, 1024/1024 and 8192/256 at C=1 and C=32, the bench's own warm-up and window. Prints one
row per level: predicted and measured output tok/s, their ratio, predicted and measured mean
TTFT, and the engine's step slips during the level (a slip is a step that started late on this
machine: it makes the measurement low, never high). Takes about 7 minutes per layout.

Run: .venv/bin/python perf/prediction_check.py [--layouts "tp8 ep,tp4"] [--levels 1,32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import tempfile
import time

import httpx

from cockpit.bench.concurrency_sweep import BenchConfig, run_sweep
from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import plan_layout
from cockpit.store.profile_setup import SetupOverrides, build_setup
from cockpit.system.children import simulated_engine

PROFILE = "minimax-m2.5"
WORKLOADS = ((256, 128), (1024, 1024), (8192, 256))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slips(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    match = re.search(r"^cockpit_sim_step_slips_total(?:\{[^}]*\})? ([\d.e+]+)$", text, re.M)
    return float(match.group(1)) if match else float("nan")


def wait_ready(url: str, engine: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.poll() is not None:
            raise SystemExit(f"the simulated engine exited with {engine.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the simulated engine was not ready after {timeout:.0f} s")


def check_layout(layout: str, levels: tuple[int, ...]) -> None:
    setup, profile = build_setup(SetupOverrides(profile=PROFILE))
    verdict = plan_layout(setup, layout)
    perf = for_verdict(setup, verdict)
    if perf is None or verdict.placement is None:
        print(f"{layout}: does not fit, nothing to check")
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "COCKPIT_SIM_STATE": tempfile.mkdtemp(prefix="cockpit-predcheck-")}
    env["COCKPIT_SIM_TIME_SCALE"] = "50"  # loading only; the serving clock is never scaled
    argv = [
        *simulated_engine("vllm", ()),
        "serve",
        profile.model,
        *verdict.placement.flags,
        "--port",
        str(port),
        *profile.args,
    ]
    engine = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(url, engine)
        for input_len, output_len in WORKLOADS:
            for concurrency in levels:
                before = slips(url)
                cfg = BenchConfig(
                    url=url, concurrency=(concurrency,), input_len=input_len, output_len=output_len
                )
                [result] = asyncio.run(run_sweep(cfg, lambda event: None))
                loop = perf.closed_loop(concurrency, input_len, output_len)
                ttft_ms = result.ttft_ms.mean or 0.0
                print(
                    f"{layout:8} {input_len:>5}/{output_len:<5} C={concurrency:<4}"
                    f" {loop.tok_s:9.1f} {result.output_tok_s:9.1f} {result.output_tok_s / loop.tok_s:7.3f}"
                    f" {loop.ttft_s * 1e3:10.0f} {ttft_ms:10.0f} {slips(url) - before:6.0f}",
                    flush=True,
                )
    finally:
        engine.terminate()
        engine.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layouts", default="tp8 ep")
    parser.add_argument("--levels", default="1,32")
    args = parser.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    print(
        f"{'layout':8} {'in/out':11} {'C':6} {'pred tok/s':>9} {'measured':>9} {'ratio':>7}"
        f" {'pred TTFT':>10} {'meas TTFT':>10} {'slips':>6}"
    )
    for layout in args.layouts.split(","):
        check_layout(layout.strip(), levels)


if __name__ == "__main__":
    main()
