"""The load generator against the simulated engine as a real process: numbers match the pacing.

The simulated engine paces tokens with the performance model on an honest clock, so what the
client measures can be checked against what the engine did: throughput against
``decode_tok_s``, ITL against ``step_time_s``, TTFT against the batcher's prefill + first step.
Short prompts (8 tokens) keep prefill stalls small, so a closed loop is close to pure decode.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from dataclasses import replace

import httpx
import pytest
from helpers import free_port
from simproc import SimProcess

from cockpit.bench.concurrency_sweep import LevelDone, LevelStart, SweepDone, Tick, run_sweep
from cockpit.bench.config import BenchConfig
from cockpit.bench.result import LevelResult
from cockpit.bench.workload import random_workload
from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import plan_layout
from cockpit.store.profile_setup import SetupOverrides, build_setup

MODEL = "qwen3-30b-a3b-fp8"
IN = 8  # prompt tokens: short, so prefill stalls stay small
FLAGS = ["--tensor-parallel-size", "2", "--max-num-seqs", "256"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    port = free_port()
    sim = SimProcess("vllm", ["serve", MODEL, *FLAGS, "--port", str(port)], tmp_path_factory.mktemp("simbox"))
    url = f"http://127.0.0.1:{port}"
    try:
        sim.wait_ready(url)
        yield url
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def perf():
    """The performance model the engine paces with, built as the engine builds it."""
    setup, _ = build_setup(SetupOverrides(profile="demo", model=MODEL))
    setup = replace(setup, server_args=tuple(FLAGS), calibration={})
    return for_verdict(setup, plan_layout(setup, "tp2"))


def sweep(cfg: BenchConfig, **kwargs) -> tuple[list[LevelResult], list[object]]:
    events: list[object] = []
    results = asyncio.run(run_sweep(cfg, events.append, **kwargs))
    return results, events


def raw_ttft_ms(url: str, count: int = 10) -> float:
    """TTFT p50 seen by a bare blocking socket: the engine's own floor, no client library in it."""
    host, port = url.removeprefix("http://").split(":")
    body = random_workload(MODEL, input_len=IN, output_len=4).body(0)
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    request = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start, first, data = time.perf_counter(), None, b""
            sock.sendall(request)
            while b"[DONE]" not in data:
                data += sock.recv(65536)
                if first is None and b'"text"' in data:
                    first = time.perf_counter()
            samples.append((first - start) * 1e3)
            time.sleep(0.01)
    return statistics.median(samples)


def test_a_closed_loop_sweep_runs_at_the_modelled_speed(engine, perf):
    """128-token outputs: the closed loop's turnaround (a whole batch finishing, C new requests
    parsed and prefilled) costs ~2-4% of a 2 s window, so the window is close to pure decode."""
    cfg = BenchConfig(url=engine, concurrency=(1, 32, 64), input_len=IN, output_len=128, duration_s=2.0)
    results, events = sweep(cfg)

    kinds = [type(e) for e in events]
    assert kinds[0] is LevelStart and kinds[-1] is SweepDone
    assert [e.result.concurrency for e in events if isinstance(e, LevelDone)] == [1, 32, 64]
    assert any(isinstance(e, Tick) and e.concurrency == 64 and e.in_flight == 64 for e in events)
    for result in results:
        c = result.concurrency
        expected = perf.decode_tok_s(c, input_len=IN, output_len=128)
        assert result.output_tok_s == pytest.approx(expected, rel=0.15), (c, result.output_tok_s, expected)
        assert result.model == MODEL and result.errors == 0 and result.token_mismatches == 0
        assert result.duration_s == pytest.approx(2.0) and len(result.series) == 2
        assert result.peak_concurrency == c and result.achieved_concurrency >= 0.95 * c
        step_ms = perf.step_time_s(c, IN + 64) * 1e3
        assert result.itl_ms.p50 == pytest.approx(step_ms, abs=2.0 if c == 1 else 4.0)

    point = results[2].to_bench_point()
    assert point.concurrency == 64 and point.output_tok_s == results[2].output_tok_s
    assert point.itl_ms_p50 == results[2].itl_ms.p50 and point.extra["series"] == results[2].series


def truth(url: str, reset: bool = False, since: float | None = None) -> dict:
    """The engine's own record of what it paced (request received -> first token written; gaps),
    of what began at perf_counter ``since`` or later (one clock for every process here)."""
    query = "?reset=1" if reset else (f"?since={since!r}" if since is not None else "")
    return httpx.get(url + "/cockpit/truth" + query).json()


def test_at_1_ttft_and_itl_are_what_the_engine_paced_within_2_ms(engine):
    cfg = BenchConfig(url=engine, concurrency=(1,), input_len=IN, output_len=16, requests=10)
    sweep(replace(cfg, requests=2))  # connections up, code warm
    truth(engine, reset=True)
    [one], _ = sweep(cfg)
    paced = truth(engine)
    # Margins that hold with a CPU-bound process beside the suite; perf/bench_client.py measures
    # how close it really is on a quiet machine.
    assert abs(one.ttft_ms.p50 - paced["ttft_ms"]["p50"]) < 2.0, (one.ttft_ms, paced["ttft_ms"])
    assert abs(one.itl_ms.p50 - paced["itl_ms"]["p50"]) < 2.0, (one.itl_ms, paced["itl_ms"])


def test_at_256_itl_is_what_the_engine_paced_within_10_ms(engine):
    """ITL within 10 ms of the engine's own gaps (a few ms on a quiet machine: perf/). TTFT is only bounded below here: a closed loop
    of equal requests runs in waves of 256, and the engine's truth starts when its HTTP front
    hands it a request, which for a wave on this 2-core box comes tens of ms after the send."""
    cfg = BenchConfig(url=engine, concurrency=(256,), input_len=IN, output_len=32, requests=256)
    # A cold first wave (code not yet warm, 256 connections opening) is run and forgotten; then
    # the engine's record is read for the requests sent after the level's warm-up wave only, the
    # same population the client measured (the warm-up wave, slower, would raise its median).
    sweep(replace(cfg, requests=1, warmup=0))
    truth(engine, reset=True)
    [result], _ = sweep(cfg, keep_records=True)
    after_warmup = sorted(r.start for r in result.records)[result.warmup]
    paced = truth(engine, since=after_warmup)
    assert result.errors == 0
    assert result.ttft_ms.p50 >= paced["ttft_ms"]["p50"] - 1.0, (result.ttft_ms, paced["ttft_ms"])
    assert abs(result.itl_ms.p50 - paced["itl_ms"]["p50"]) < 10.0, (result.itl_ms, paced["itl_ms"])


def test_open_loop_at_250_in_flight_ttft_is_what_the_engine_paced_within_15_ms(engine):
    """Poisson arrivals keep ~250 streams in flight without waves, so the engine's record of
    each request's TTFT is comparable with the client's: a step's 250 chunks land at once, and
    each must still be stamped within a few ms of its arrival."""
    cfg = BenchConfig(url=engine, concurrency=(256,), input_len=IN, output_len=64, rate=125.0, duration_s=3.0)
    truth(engine, reset=True)
    [result], _ = sweep(cfg, keep_records=True)
    # The same population on both sides: the requests sent after the client's warm-up ramp (which
    # ran at a low batch), not every request the engine saw since the reset.
    after_warmup = sorted(r.start for r in result.records)[result.warmup]
    paced = truth(engine, since=after_warmup)
    assert result.errors == 0 and result.achieved_concurrency > 200, result.achieved_concurrency
    # 2.4-4 ms on a quiet machine (perf/); the margin holds with a CPU burner beside the suite.
    assert abs(result.ttft_ms.p50 - paced["ttft_ms"]["p50"]) < 15.0, (result.ttft_ms, paced["ttft_ms"])
    assert abs(result.itl_ms.p50 - paced["itl_ms"]["p50"]) < 15.0, (result.itl_ms, paced["itl_ms"])


def test_at_1_ttft_and_itl_match_the_batcher(engine, perf):
    before = raw_ttft_ms(engine)
    cfg = BenchConfig(url=engine, concurrency=(1,), input_len=IN, output_len=16, requests=10)
    [one], _ = sweep(cfg)
    floor_ms = (before + raw_ttft_ms(engine)) / 2  # either side of the sweep: the same machine load
    assert one.requests == 10 and one.errors == 0
    assert one.itl_ms.p50 == pytest.approx(perf.step_time_s(1, IN + 8) * 1e3, abs=2.0)
    assert one.tpot_ms.p50 == pytest.approx(perf.step_time_s(1, IN + 8) * 1e3, abs=2.0)
    paced_ms = (perf.prefill_time_s(IN) + perf.step_time_s(1, IN)) * 1e3  # an idle engine admits at once
    # The engine's HTTP front and wake-ups add ~1 ms that no client can remove (a bare socket
    # sees it too); the client's own share stays under 1 ms on a quiet machine (perf/), and
    # under 3 ms with a CPU burner beside the suite. Whether the client flags itself limited
    # depends on that load too, so it is measured in perf/, not asserted here.
    assert one.ttft_ms.p50 - floor_ms < 3.0, (one.ttft_ms, floor_ms)
    assert paced_ms <= one.ttft_ms.p50 < paced_ms + 8.0, (one.ttft_ms, paced_ms)


def test_at_256_itl_tpot_and_ttft_match_the_batcher(engine, perf):
    cfg = BenchConfig(url=engine, concurrency=(256,), input_len=IN, output_len=32, requests=256)
    [result], _ = sweep(cfg, keep_records=True)
    assert result.requests == 256 and result.errors == 0 and result.peak_concurrency == 256
    step_ms = perf.step_time_s(256, IN + 16) * 1e3
    assert result.itl_ms.p50 == pytest.approx(step_ms, abs=8.0)
    assert result.tpot_ms.p50 == pytest.approx(step_ms, abs=8.0)
    # A request's first token leaves at the end of the step that admitted it, which lasts the
    # prefill of everything admitted with it plus one decode step of the batch: no TTFT can be
    # shorter. (How long it waited before that step depends on the engine's HTTP front.)
    records = [r for r in result.records if r.chunks]
    assert {r.usage_prompt_tokens for r in records if r.ok} == {IN}  # the sim counts our prompts exactly
    for cluster in steps(records):
        admitted = [records[r] for _, r, k in cluster if k == 0]
        context = IN + sum(k for _, _, k in cluster) / len(cluster)
        paced = perf.step_time_s(len(cluster), context) + perf.prefill_time_s(IN * len(admitted))
        for record in admitted:
            assert record.first_token - record.start >= paced - 0.005, (len(admitted), len(cluster))


def steps(records) -> list[list[tuple[float, int, int]]]:
    """Every chunk (time, record, index) clustered into the engine's steps: a step's tokens all
    leave at its end, and steps here are 20+ ms apart."""
    stamps = sorted((t, r, k) for r, record in enumerate(records) for k, t in enumerate(record.chunk_times))
    clusters: list[list[tuple[float, int, int]]] = []
    for stamp in stamps:
        if clusters and stamp[0] - clusters[-1][-1][0] < 0.005:
            clusters[-1].append(stamp)
        else:
            clusters.append([stamp])
    return clusters


def test_open_loop_sends_at_the_rate(engine):
    cfg = BenchConfig(
        url=engine,
        concurrency=(64,),
        input_len=IN,
        output_len=16,
        rate=40.0,
        warmup=2,
        duration_s=1.5,
        seed=1,
    )
    [result], _ = sweep(cfg)
    assert result.rate == 40.0 and result.errors == 0
    assert 20 < result.request_s < 60  # Poisson: ~60 arrivals in the window
    assert result.queue_ms.p99 is not None and result.queue_ms.p99 < 20  # never waited for a slot
    assert result.achieved_concurrency < 64 and "in flight" not in result.client_note


def test_cancelling_keeps_finished_levels_and_frees_the_engine(engine):
    delivered: list[LevelResult] = []

    async def main() -> None:
        cfg = BenchConfig(url=engine, concurrency=(4, 16), input_len=IN, output_len=32, duration_s=0.3)

        def on_event(event: object) -> None:
            if isinstance(event, LevelDone):
                delivered.append(event.result)

        task = asyncio.create_task(run_sweep(cfg, on_event))
        deadline = time.monotonic() + 10
        while not delivered and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert delivered, task.exception() if task.done() else "no level finished in 10 s"
        await asyncio.sleep(0.2)  # inside the second level
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [r.concurrency for r in delivered] == [4]
    deadline = time.monotonic() + 2
    while True:  # the engine saw the connections close and let go of every request
        running = [
            line
            for line in httpx.get(engine + "/metrics").text.splitlines()
            if line.startswith("vllm:num_requests_running")
        ]
        if running and running[0].endswith(" 0.0") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert running[0].endswith(" 0.0"), running
