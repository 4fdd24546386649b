"""How many streams and tokens/s one simulated engine process serves before its pacing slips.

Starts the simulated engine (a real process on 127.0.0.1), drives closed-loop streaming load at
rising concurrency with an aiohttp client in this process, and compares the measured output
tokens/s with what the performance model says the engine paces. Prints one row per level:
expected and measured tok/s, their ratio, step slips reported by the engine, and the CPU the
engine process used. Where the ratio falls below ~0.9 or slips climb, the simulator itself (or
this 2-core machine) is the bottleneck, not the modelled GPU.

Run: .venv/bin/python perf/sim_capacity.py [--levels 64,256,1024,2048] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from dataclasses import replace

import aiohttp
import psutil

from cockpit.children import simulated_engine
from cockpit.perfmodel import for_verdict
from cockpit.planner import plan_layout
from cockpit.resolve import SetupOverrides, build_setup

MODEL = "qwen3-30b-a3b-fp8"
FLAGS = [
    "--tensor-parallel-size",
    "8",
    "--enable-expert-parallel",
    "--max-num-seqs",
    "4096",
    "--max-model-len",
    "4096",
]
INPUT_CHARS = 40  # ~10 prompt tokens: decode dominates, as in the model's steady state
OUTPUT_TOKENS = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected_tok_s(concurrency: int) -> float:
    setup, _ = build_setup(SetupOverrides(profile="demo", model=MODEL))
    setup = replace(setup, server_args=tuple(FLAGS), calibration={})
    perf = for_verdict(setup, plan_layout(setup, "tp8 ep"))
    return perf.decode_tok_s(concurrency, input_len=INPUT_CHARS // 4, output_len=OUTPUT_TOKENS)


async def metric(session: aiohttp.ClientSession, url: str, name: str) -> float | None:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([\d.e+]+)$", text, re.M)
    return float(match.group(1)) if match else None


async def level(url: str, concurrency: int, seconds: float) -> tuple[float, float | None, float | None]:
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        slips0 = await metric(session, url, "cockpit_sim_step_slips_total")
        steps0 = await metric(session, url, "cockpit_sim_steps_total")
        stop = time.perf_counter() + seconds
        counted = 0
        warm_until = time.perf_counter() + min(2.0, seconds / 4)

        async def worker() -> None:
            nonlocal counted
            body = {
                "model": MODEL,
                "prompt": "x" * INPUT_CHARS,
                "max_tokens": OUTPUT_TOKENS,
                "stream": True,
                "ignore_eos": True,
            }
            while time.perf_counter() < stop:
                async with session.post(url + "/v1/completions", json=body) as response:
                    async for raw in response.content:
                        now = time.perf_counter()
                        if raw.startswith(b"data: {") and warm_until <= now < stop:
                            counted += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        measured = counted / (stop - warm_until)
        slips1 = await metric(session, url, "cockpit_sim_step_slips_total")
        steps1 = await metric(session, url, "cockpit_sim_steps_total")
    slips = slips1 - slips0 if slips0 is not None and slips1 is not None else None
    steps = steps1 - steps0 if steps0 is not None and steps1 is not None else None
    return measured, slips, steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="64,256,1024,2048")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    port = free_port()
    state = tempfile.mkdtemp(prefix="cockpit-simcap-")
    env = {**os.environ, "COCKPIT_SIM_STATE": state, "COCKPIT_SIM_TIME_SCALE": "100"}
    argv = [*simulated_engine("vllm", ()), "serve", MODEL, *FLAGS, "--port", str(port)]
    engine = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        proc = psutil.Process(engine.pid)
        print(
            f"{'C':>6} {'expected tok/s':>15} {'measured':>10} {'ratio':>6} {'slips/steps':>12} {'engine CPU':>10}"
        )
        rows = []
        for concurrency in levels:
            cpu0 = proc.cpu_times()
            t0 = time.perf_counter()
            measured, slips, steps = asyncio.run(level(url, concurrency, args.seconds))
            cpu1 = proc.cpu_times()
            cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (time.perf_counter() - t0)
            expected = expected_tok_s(concurrency)
            slipped = f"{slips:.0f}/{steps:.0f}" if slips is not None else "n/a"
            print(
                f"{concurrency:>6} {expected:>15,.0f} {measured:>10,.0f} {measured / expected:>6.2f} {slipped:>12} {cpu:>9.0%}"
            )
            rows.append(
                {
                    "concurrency": concurrency,
                    "expected": expected,
                    "measured": measured,
                    "slips": slips,
                    "steps": steps,
                    "engine_cpu": cpu,
                }
            )
        print(json.dumps(rows))
    finally:
        engine.terminate()
        engine.wait(timeout=10)


if __name__ == "__main__":
    main()
