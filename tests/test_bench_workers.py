"""A level spread over worker processes measures what one process measures.

The same closed-loop level against the simulated engine (a real process): once from this
process, once split over two worker processes. The workers' raw records are merged, so the
counts must be the same and the latencies those of the same engine; the margins are what two
separate runs share on a loaded 2-core machine, not the accuracy (perf/bench_client.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import psutil
import pytest
from test_bench_sim import MODEL, engine  # noqa: F401  (the simulated engine, a real process, shared)

from cockpit.bench import metrics
from cockpit.bench.concurrency_sweep import LevelDone, run_sweep
from cockpit.bench.config import BenchConfig
from cockpit.bench.result import LevelResult
from cockpit.bench.worker_pool import plan_workers, shares

C, OUT = 32, 16


def sweep(cfg: BenchConfig) -> LevelResult:
    [result] = asyncio.run(run_sweep(cfg, lambda event: None, keep_records=True))
    return result


def worker_processes() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if "cockpit.bench.worker_pool" in " ".join(child.cmdline())
    ]


def test_two_workers_count_what_one_process_counts(engine):
    cfg = BenchConfig(url=engine, concurrency=(C,), input_len=8, output_len=OUT, requests=2 * C)
    sweep(replace(cfg, requests=1, warmup=0))  # the engine and this process warm
    one = sweep(cfg)
    two = sweep(replace(cfg, workers=2))

    assert (one.workers, two.workers) == (1, 2)
    assert len(two.worker_cpu_cores) == 2 and not one.worker_cpu_cores
    assert one.requests == two.requests == 2 * C  # the window closes at its 64th completion, exactly
    assert one.errors == two.errors == 0 and not one.failed and not two.failed
    # Two waves of 32 requests of 16 tokens: every window holds about 1024 tokens.
    assert one.output_tokens == pytest.approx(2 * C * OUT, rel=0.1)
    assert two.output_tokens == pytest.approx(one.output_tokens, rel=0.1)
    assert one.peak_concurrency == two.peak_concurrency == C
    assert two.achieved_concurrency == pytest.approx(one.achieved_concurrency, rel=0.1)
    # The same engine step, whoever reads it; TTFT of the same waves.
    assert abs(two.itl_ms.p50 - one.itl_ms.p50) < 4.0, (one.itl_ms, two.itl_ms)
    assert abs(two.ttft_ms.p50 - one.ttft_ms.p50) < 20.0, (one.ttft_ms, two.ttft_ms)


def test_merged_figures_come_from_the_merged_samples(engine):
    """Percentiles of all workers' samples together (never averaged percentiles), counts summed,
    tok/s over the one window."""
    cfg = BenchConfig(url=engine, concurrency=(12,), input_len=8, output_len=16, requests=36, workers=3)
    result = sweep(cfg)
    records, window = list(result.records), result.window
    assert window is not None and result.workers == 3 and len(result.worker_loop_lag_p99_ms) == 3
    k = metrics.tokens_per_chunk(records)
    completed = metrics.completed_in(records, window)
    assert len(completed) == result.requests == 36
    assert metrics.itl(records, window, k) == result.itl_ms
    assert metrics.ttft(completed) == result.ttft_ms
    assert metrics.output_tokens_in(records, window, k) == result.output_tokens
    assert result.output_tok_s == pytest.approx(result.output_tokens / window.length)
    assert result.duration_s == window.length and result.sent == len(records) >= 36 + 12
    # The window closed at the end of its 36th completion, whichever worker reported it first.
    ends = sorted(r.end for r in records if not r.cancelled and r.end > window.start)
    assert window.end == ends[35]


def test_a_cancelled_level_stops_its_workers_and_keeps_the_levels_before(engine):
    delivered: list[LevelResult] = []

    async def main() -> None:
        cfg = BenchConfig(
            url=engine, concurrency=(4, 16), input_len=8, output_len=32, duration_s=0.3, workers=2
        )

        def on_event(event: object) -> None:
            if isinstance(event, LevelDone):
                delivered.append(event.result)

        task = asyncio.create_task(run_sweep(cfg, on_event))
        deadline = time.monotonic() + 20
        while not delivered and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert delivered, task.exception() if task.done() else "no level finished in 20 s"
        assert len(worker_processes()) == 2
        await asyncio.sleep(0.2)  # inside the second level
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [r.concurrency for r in delivered] == [4] and delivered[0].workers == 2
    assert worker_processes() == []


def test_a_level_is_split_as_evenly_as_whole_streams_allow():
    assert shares(1025, 2) == [513, 512]
    assert shares(8, 3) == [3, 3, 2]
    assert sum(shares(1024, 7)) == 1024


def test_auto_spreads_a_level_only_when_the_one_before_says_one_core_will_not_do(monkeypatch):
    monkeypatch.setattr("cockpit.bench.worker_pool.usable_cpus", lambda url: 8)
    auto = BenchConfig(url="http://10.0.0.1:8000", concurrency=(256, 1024), workers=None)

    def level(c: int, cores: float, lag_ms: float = 1.0, workers: int = 1) -> LevelResult:
        result = _result(c)
        per = [cores / workers] * workers if workers > 1 else []
        return replace(
            result, client_cpu_cores=cores, loop_lag_p99_ms=lag_ms, workers=workers, worker_cpu_cores=per
        )

    assert plan_workers(auto, 256, None) == 1  # the first level: this process
    assert plan_workers(auto, 1024, level(256, 0.1)) == 1  # 0.4 cores predicted
    assert plan_workers(auto, 1024, level(256, 0.3)) == 3  # 1.2 cores: 0.5 a worker
    assert plan_workers(auto, 1024, level(256, 0.4, lag_ms=9.0, workers=2)) == 4  # late: twice as many
    assert plan_workers(auto, 8, level(256, 0.6)) == 1
    assert plan_workers(replace(auto, workers=2), 1024, None) == 2
    assert plan_workers(replace(auto, workers=4), 2, None) == 2  # never more than the streams
    monkeypatch.setattr("cockpit.bench.worker_pool.usable_cpus", lambda url: 2)
    assert plan_workers(auto, 1024, level(256, 0.9)) == 2  # no more than the CPUs


def _result(concurrency: int) -> LevelResult:
    empty = metrics.Summary()
    return LevelResult(
        concurrency=concurrency,
        rate=None,
        input_len=8,
        output_len=8,
        requests=0,
        errors=0,
        error_reasons={},
        duration_s=1.0,
        output_tok_s=0.0,
        request_s=0.0,
        output_tokens=0.0,
        ttft_ms=empty,
        tpot_ms=empty,
        itl_ms=empty,
        e2e_ms=empty,
        queue_ms=empty,
        series=[],
        token_mismatches=0,
        tokens_per_chunk=1.0,
        peak_concurrency=0,
        achieved_concurrency=0.0,
        client_cpu_cores=0.0,
        loop_lag_p99_ms=0.0,
        loop_lag_max_ms=0.0,
        events_per_read=0.0,
        client_limited=False,
        client_note="",
        warmup=0,
    )
