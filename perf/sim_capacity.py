"""How many streams and tokens/s one simulated engine process serves before its pacing slips.

Starts the simulated engine (a real process on 127.0.0.1, pinned to CPU 0), drives closed-loop
streaming load at rising concurrency from this process (pinned to CPU 1) and compares the
measured output tokens/s with what the performance model says the engine paces. The client is a
bare ``asyncio.Protocol`` on uvloop that only counts ``data: {`` events and sends the next request
when a stream ends, so it stays far cheaper per token than the engine and never sets the pace
(its own CPU is printed to show it). Each level's window opens after a warm-up and spans whole
closed-loop rounds (at least ``--seconds``). Columns, over the window only:

- decode, workload: the predicted tok/s, pure decode (running / step time, the yardstick of the
  issue's figures) and the workload's (prompts' prefill and the closed loop's rounds counted,
  ``PerfModel.workload_tok_s``); measured, and its ratio to each (ratio, (wl));
- slips/steps, slips: the engine's steps that woke more than 2 ms after their deadline, and
  their share (``cockpit_sim_step_slips_total`` over ``cockpit_sim_steps_total``);
- late p50/p99/max, dropped: the lateness at wake and the schedule time given up, from the
  engine's ``/cockpit/truth`` ("n/a" from an engine that does not report them);
- engine, us/tok, (sys): the engine's CPU (share of one core), its CPU per token and the kernel's
  part of it; client: this process's CPU; others: what every other process on the machine used
  meanwhile (above a few % the machine was not quiet and the row says little).

``--profile DIR --py-spy BIN`` runs the engine under py-spy (sampling, ~no overhead; installed
outside the repo: ``python -m venv /tmp/pyspy && /tmp/pyspy/bin/pip install py-spy``) and prints
the functions that take the engine's CPU while it serves, by own time and with what they call.

Run: .venv/bin/python perf/sim_capacity.py [--levels 64,256,1024,2048] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import psutil

from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import plan_layout
from cockpit.store.profile_setup import SetupOverrides, build_setup
from cockpit.system.children import simulated_engine

MODEL = "qwen3-30b-a3b-fp8"
LAYOUT = "tp8 ep"
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
ENGINE_CPU, CLIENT_CPU = 0, 1
STREAM_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked response
EVENT = b"data: {"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Prediction:
    decode_tok_s: float  # pure decode: running / step time (what the figures compare with)
    workload_tok_s: float  # with the prompts' prefill and the closed loop's rounds (docs/performance.md)
    round_s: float  # one closed-loop round: every client's request, prefill to last token


def predicted(concurrency: int) -> Prediction:
    setup, _ = build_setup(SetupOverrides(profile="demo", model=MODEL))
    setup = replace(setup, server_args=tuple(FLAGS), calibration={})
    perf = for_verdict(setup, plan_layout(setup, LAYOUT))
    assert perf is not None
    input_len = INPUT_CHARS // 4
    return Prediction(
        perf.decode_tok_s(concurrency, input_len=input_len, output_len=OUTPUT_TOKENS),
        perf.workload_tok_s(concurrency, input_len, OUTPUT_TOKENS),
        perf.closed_loop(concurrency, input_len, OUTPUT_TOKENS).round_s,
    )


# -- the client: closed-loop streams that only count events -----------------------------------


class Load:
    """Shared by every stream of a level: the request bytes, the running count, the stop flag."""

    def __init__(self, port: int) -> None:
        body = json.dumps(
            {
                "model": MODEL,
                "prompt": "x" * INPUT_CHARS,
                "max_tokens": OUTPUT_TOKENS,
                "stream": True,
                "ignore_eos": True,
            }
        ).encode()
        self.request = (
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
        )
        self.events = 0
        self.requests = 0
        self.going = True
        self.failed: str | None = None
        self.streams: list[Stream] = []


class Stream(asyncio.Protocol):
    """One keep-alive connection sending request after request."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.tail = b""
        self.fresh = True  # the next bytes start a response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        self.fresh = True
        self.tail = b""
        self.load.requests += 1
        self.transport.write(self.load.request)

    def data_received(self, data: bytes) -> None:
        if self.fresh:
            self.fresh = False
            if not data.startswith(b"HTTP/1.1 200"):
                self.load.failed = data[:300].decode("latin-1")
                self.load.going = False
        buf = self.tail + data  # the tail is shorter than an event: nothing counted twice
        self.load.events += buf.count(EVENT)
        if buf.endswith(STREAM_END):
            if self.load.going:
                self.send()
            return
        self.tail = buf[-(len(EVENT) - 1) :]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def http_get(port: int, path: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():  # aiohttp answers small bodies with a length; be safe anyway
        body = _unchunk(body)
    return body.decode()


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out


def metric(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([\d.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else None


@dataclass
class Snapshot:
    at: float
    events: int
    slips: float | None
    steps: float | None
    engine_user: float
    engine_system: float
    client_cpu: float
    machine_busy: float


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (all cores; /proc/stat, Linux only)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return float("nan")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def snapshot(port: int, load: Load, engine: psutil.Process) -> Snapshot:
    at, events = time.perf_counter(), load.events  # what the client saw, when
    cpu = engine.cpu_times()
    own = os.times()
    text = await http_get(port, "/metrics")
    return Snapshot(
        at,
        events,
        metric(text, "cockpit_sim_step_slips_total"),
        metric(text, "cockpit_sim_steps_total"),
        cpu.user,
        cpu.system,
        own.user + own.system,
        machine_busy_s(),
    )


async def level(port: int, concurrency: int, warmup: float, seconds: float, engine: psutil.Process) -> dict:
    """One level: ``concurrency`` closed-loop streams; the window is whole closed-loop rounds,
    at least ``seconds`` long, so prefill waves weigh in as the workload prediction counts them."""
    prediction = predicted(concurrency)
    window = math.ceil(seconds / prediction.round_s) * prediction.round_s
    loop = asyncio.get_running_loop()
    load = Load(port)
    for _ in range(concurrency):  # one by one: the listen backlog stays short
        _, stream = await loop.create_connection(lambda: Stream(load), "127.0.0.1", port)
        load.streams.append(stream)
    await asyncio.sleep(warmup)
    first = await snapshot(port, load, engine)
    await asyncio.sleep(window)
    last = await snapshot(port, load, engine)
    truth = json.loads(await http_get(port, f"/cockpit/truth?since={first.at}"))
    load.going = False
    for stream in load.streams:
        if stream.transport is not None:
            stream.transport.close()
    await _drained(port)
    if load.failed:
        raise SystemExit(f"the engine refused a request:\n{load.failed}")
    wall = last.at - first.at
    tokens = last.events - first.events
    user, system = last.engine_user - first.engine_user, last.engine_system - first.engine_system
    client = last.client_cpu - first.client_cpu
    steps = last.steps - first.steps if last.steps is not None and first.steps is not None else None
    slips = last.slips - first.slips if last.slips is not None and first.slips is not None else None
    measured = tokens / wall
    return {
        "concurrency": concurrency,
        "window_s": wall,
        "decode_tok_s": prediction.decode_tok_s,
        "workload_tok_s": prediction.workload_tok_s,
        "measured_tok_s": measured,
        "ratio": measured / prediction.decode_tok_s,
        "workload_ratio": measured / prediction.workload_tok_s,
        "steps": steps,
        "slips": slips,
        "slip_share": slips / steps if slips is not None and steps else None,
        "clock": truth.get("clock"),
        "engine_cpu": (user + system) / wall,
        "engine_us_per_token": (user + system) / tokens * 1e6 if tokens else None,
        "engine_system_us_per_token": system / tokens * 1e6 if tokens else None,
        "client_cpu": client / wall,
        "others_cpu": (last.machine_busy - first.machine_busy - user - system - client) / wall,
    }


async def _drained(port: int) -> None:
    """Wait until the engine has let go of every request of the level (closed connections)."""
    for _ in range(100):
        await asyncio.sleep(0.1)
        text = await http_get(port, "/metrics")
        running = metric(text, "vllm:num_requests_running") or 0
        waiting = metric(text, "vllm:num_requests_waiting") or 0
        if running == 0 and waiting == 0:
            return


def run_level(port: int, concurrency: int, warmup: float, seconds: float, engine: psutil.Process) -> dict:
    try:
        import uvloop

        return uvloop.run(level(port, concurrency, warmup, seconds, engine))
    except ImportError:
        return asyncio.run(level(port, concurrency, warmup, seconds, engine))


# -- reading the profile -----------------------------------------------------------------------


def print_profile(raw: Path, top: int = 25) -> None:
    """py-spy's collapsed stacks ("f (file:line);g (file:line) count") of the engine's main thread
    (its event loop) while serving: own time and time with what each function calls. The clock's
    helper thread is left out: py-spy counts its sleep as busy here."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "_run_module_as_main" not in stack or "importlib._bootstrap" in stack:
            continue  # another thread, or start-up's imports
        if "SimEngine._live" in stack and "SimEngine.serve" not in stack:
            continue  # start-up: loading the simulated weights
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"\nprofile: {total} samples of the engine's event loop while serving; own time")
    for frame, n in own.most_common(top):
        print(f"  {n / total:6.1%}  {frame}")
    print("with what it calls")
    for frame, n in inclusive.most_common(top):
        print(f"  {n / total:6.1%}  {frame}")


# -- main --------------------------------------------------------------------------------------


def pinned(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="64,256,1024,2048")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window opens")
    parser.add_argument("--profile", type=Path, help="folder for the engine's py-spy profile")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable (with --profile)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    port = free_port()
    state = tempfile.mkdtemp(prefix="cockpit-simcap-")
    env = {**os.environ, "COCKPIT_SIM_STATE": state, "COCKPIT_SIM_TIME_SCALE": "100"}
    argv = [*pinned(ENGINE_CPU), *simulated_engine("vllm", ()), "serve", MODEL, *FLAGS, "--port", str(port)]
    raw = None
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        raw = args.profile / "engine.pyspy.txt"
        argv = [args.py_spy, "record", "--rate", "250", "--format", "raw", "-o", str(raw), "--", *argv]
    log_path = Path(state) / "engine.log"
    with open(log_path, "w") as log:
        engine = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    if pinned(CLIENT_CPU):
        os.sched_setaffinity(0, {CLIENT_CPU})
    else:
        print("fewer than 2 CPUs or no taskset: engine and client NOT pinned; the numbers mix both")
    rows = []
    proc = psutil.Process(engine.pid)
    try:
        proc = _engine_process(engine, profiled=raw is not None)
        _wait_ready(port, engine, log_path)
        print(
            f"{'C':>5} {'decode':>7} {'workload':>8} {'measured':>8} {'ratio':>5} {'(wl)':>5} "
            f"{'slips/steps':>11} {'slips':>6} {'late p50/p99/max ms':>19} {'dropped':>7} "
            f"{'engine':>6} {'us/tok':>6} {'(sys)':>5} {'client':>6} {'others':>6}"
        )
        for concurrency in levels:
            row = run_level(port, concurrency, args.warmup, args.seconds, proc)
            rows.append(row)
            print(_format(row), flush=True)
        print(json.dumps(rows))
        if args.json_out:
            args.json_out.write_text(json.dumps(rows, indent=1))
    finally:
        proc.terminate()  # the engine itself: under py-spy, py-spy then writes its profile and exits
        engine.wait(timeout=60)
    warnings = [line for line in log_path.read_text().splitlines() if "WARNING" in line]
    shutil.rmtree(state, ignore_errors=True)
    print(f"engine log: {len(warnings)} warning lines" + (f"; last: {warnings[-1]}" if warnings else ""))
    if raw is not None and raw.exists():
        print_profile(raw)
    elif raw is not None:
        print(f"py-spy wrote no profile to {raw}")


def _format(row: dict[str, Any]) -> str:
    share = row["slip_share"]
    slipped = f"{row['slips']:.0f}/{row['steps']:.0f}" if row["steps"] is not None else "n/a"
    late = dropped = "n/a"
    clock = row.get("clock") or {}
    lateness = clock.get("lateness_ms") or {}
    if lateness.get("n"):
        late = f"{lateness['p50']:.1f}/{lateness['p99']:.1f}/{lateness['max']:.1f}"
        dropped = f"{clock['dropped_s']:.2f}s"
    shown = "n/a" if share is None else f"{share:.1%}"
    return (
        f"{row['concurrency']:>5} {row['decode_tok_s']:>7,.0f} {row['workload_tok_s']:>8,.0f} "
        f"{row['measured_tok_s']:>8,.0f} {row['ratio']:>5.3f} {row['workload_ratio']:>5.3f} "
        f"{slipped:>11} {shown:>6} {late:>19} {dropped:>7} {row['engine_cpu']:>6.0%} "
        f"{row['engine_us_per_token'] or 0:>6.1f} {row['engine_system_us_per_token'] or 0:>5.1f} "
        f"{row['client_cpu']:>6.0%} {row['others_cpu']:>6.0%}"
    )


def _engine_process(engine: subprocess.Popen, profiled: bool) -> psutil.Process:
    """The engine itself (under py-spy: py-spy's child)."""
    proc = psutil.Process(engine.pid)
    if not profiled:
        return proc
    for _ in range(100):
        children = proc.children(recursive=True)
        if children:
            return children[-1]
        time.sleep(0.05)
    raise SystemExit("py-spy started no engine")


def _wait_ready(port: int, engine: subprocess.Popen, log_path: Path) -> None:
    import httpx

    for _ in range(600):
        if engine.poll() is not None:
            raise SystemExit(f"the engine exited {engine.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the engine did not get ready")


if __name__ == "__main__":
    sys.exit(main())
