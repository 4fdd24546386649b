"""Metric formulas on hand-made request records: percentiles, per-token splits, windows, peaks."""

from __future__ import annotations

import math
from array import array

import pytest

from cockpit.bench import metrics
from cockpit.bench.config import BenchConfig
from cockpit.bench.health import assess
from cockpit.bench.metrics import Summary, Window, percentile
from cockpit.bench.result import LevelResult
from cockpit.bench.transport import RequestRecord
from cockpit.core.errors import CockpitError

ALL = Window(-math.inf, math.inf)


def rec(
    start: float,
    chunks: list[float],
    *,
    usage: int | None = None,
    end: float | None = None,
    error: str | None = None,
    per_chunk: list[int] | None = None,
    cancelled: bool = False,
) -> RequestRecord:
    record = RequestRecord(
        start=start, end=end if end is not None else (chunks[-1] if chunks else start) + 0.001
    )
    record.chunk_times = array("d", chunks)
    record.first_token = chunks[0] if chunks else None
    record.last_token = chunks[-1] if chunks else None
    record.usage_completion_tokens = usage
    record.error = error
    record.cancelled = cancelled
    if per_chunk is not None:
        record.tokens_in_chunk = array("l", per_chunk)
    return record


def expanded_percentile(values: list[float], weights: list[int], q: float) -> float:
    """numpy's default (linear) percentile of the list with value i repeated weights[i] times."""
    items = sorted(v for v, w in zip(values, weights) for _ in range(w))
    rank = q / 100 * (len(items) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(items) - 1)
    return items[low] + (rank - low) * (items[high] - items[low])


# -- percentiles -----------------------------------------------------------------------------------


def test_percentile_interpolates_linearly_like_numpy():
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert percentile(values, 50) == 30.0
    assert percentile(values, 90) == pytest.approx(46.0)  # rank 3.6: 40 + 0.6 * 10
    assert percentile(values, 99) == pytest.approx(49.6)
    assert percentile(values, 0) == 10.0 and percentile(values, 100) == 50.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


@pytest.mark.parametrize("weights", [[1, 2, 3, 1], [3, 3, 3, 3], [5, 1, 1, 2]])
@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_weighted_percentile_is_the_percentile_of_the_repeated_values(weights, q):
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, q, weights) == pytest.approx(expanded_percentile(values, weights, q))


def test_summary_is_in_milliseconds():
    summary = metrics.summarize([0.010, 0.020, 0.030])
    assert summary == Summary(count=3, mean=20.0, p50=20.0, p90=pytest.approx(28.0), p99=pytest.approx(29.8))
    assert metrics.summarize([]) == Summary()
    assert Summary().to_json() == {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}


# -- per-request latencies ------------------------------------------------------------------------


def test_ttft_tpot_e2e_follow_their_formulas():
    # sent at 0, tokens at 0.1, 0.12, 0.14, 0.16, [DONE] read at 0.17
    record = rec(0.0, [0.10, 0.12, 0.14, 0.16], usage=4, end=0.17)
    assert metrics.ttft([record]).p50 == pytest.approx(100.0)
    assert metrics.tpot([record]).p50 == pytest.approx(20.0)  # (0.16 - 0.10) / (4 - 1), no TTFT in it
    assert metrics.e2e([record]).p50 == pytest.approx(170.0)
    one_token = rec(0.0, [0.1], usage=1)
    assert metrics.tpot([one_token]).count == 0  # undefined for a single token


def test_tpot_of_coalesced_chunks_divides_by_tokens_not_chunks():
    record = rec(0.0, [0.1, 0.4], usage=7)  # 7 tokens in 2 chunks, 300 ms apart
    assert metrics.tpot([record]).p50 == pytest.approx(50.0)


def test_open_loop_queueing_is_due_to_sent():
    record = rec(1.0, [1.1], usage=1)
    record.scheduled = 0.995
    assert metrics.queueing([record]).p50 == pytest.approx(5.0)
    assert metrics.queueing([rec(1.0, [1.1])]).count == 0  # closed loop: nothing is due


# -- ITL per token ----------------------------------------------------------------------------------


def test_itl_is_the_gaps_after_the_first_chunk():
    record = rec(0.0, [0.5, 0.51, 0.53, 0.56], usage=4)
    itl = metrics.itl([record], ALL)
    assert itl.count == 3  # TTFT (0 -> 0.5) is not an inter-token gap
    assert itl.p50 == pytest.approx(20.0) and itl.mean == pytest.approx(20.0)


def test_a_coalesced_chunk_splits_its_gap_over_its_tokens():
    # usage 12 over 4 chunks 30 ms apart: every chunk carries 3 tokens, one every 10 ms
    record = rec(0.0, [0.1, 0.13, 0.16, 0.19], usage=12)
    itl = metrics.itl([record], ALL)
    assert itl.count == 9 and itl.p50 == pytest.approx(10.0) and itl.p99 == pytest.approx(10.0)
    assert record.token_mismatch


def test_continuous_usage_gives_each_chunk_its_own_count():
    # chunks of 1, 4 and 2 tokens; gaps 40 ms (4 tokens) and 10 ms (2 tokens)
    record = rec(0.0, [0.1, 0.14, 0.15], usage=7, per_chunk=[1, 4, 2])
    itl = metrics.itl([record], ALL)
    assert itl.count == 6
    assert itl.mean == pytest.approx((0.04 + 0.01) / 6 * 1e3)
    assert itl.p50 == pytest.approx(10.0) and itl.p99 == pytest.approx(10.0)  # 4 x 10 ms, 2 x 5 ms
    assert metrics.itl([record], ALL).p90 == pytest.approx(10.0)
    assert percentile([10.0, 5.0], 10, [4, 2]) == pytest.approx(5.0)


def test_itl_counts_only_gaps_ending_inside_the_window():
    record = rec(0.0, [0.1, 0.2, 0.3, 0.4, 0.5], usage=5)
    assert metrics.itl([record], Window(0.25, 0.45)).count == 2  # chunks at 0.3 and 0.4


# -- the window --------------------------------------------------------------------------------------


def test_output_tokens_count_chunks_inside_the_window_at_their_arrival():
    a = rec(0.0, [0.5, 1.0, 1.5, 2.0, 2.5], usage=5)
    b = rec(0.0, [1.2, 1.8], usage=6)  # coalesced: 3 tokens a chunk
    window = Window(1.0, 2.0)  # [1.0, 2.0): a's chunks at 1.0 and 1.5, b's two
    assert metrics.tokens_between(a, 1.0, 2.0) == 2
    assert metrics.tokens_between(b, 1.0, 2.0) == 6
    assert metrics.output_tokens_in([a, b], window) == 8
    assert metrics.output_tok_s([a, b], window) == pytest.approx(8.0)
    assert metrics.output_tok_s([a], Window(1.0, 1.0)) == 0.0


def test_requests_without_usage_take_the_levels_tokens_per_chunk():
    finished = rec(0.0, [0.1, 0.2], usage=8)  # 4 tokens a chunk
    cut_off = rec(0.0, [0.15, 0.25, 0.35], cancelled=True)  # cancelled at the window end: no usage
    k = metrics.tokens_per_chunk([finished, cut_off])
    assert k == 4.0
    assert metrics.output_tokens_in([finished, cut_off], ALL, k) == 8 + 3 * 4
    assert metrics.tokens_per_chunk([cut_off]) == 1.0  # nobody reported usage: chunks are tokens


def test_completions_and_errors_count_in_the_window_only():
    window = Window(1.0, 2.0)
    records = [
        rec(0.0, [0.5], usage=1, end=1.0),  # opened the window: not in it
        rec(0.5, [1.2], usage=1, end=1.3),
        rec(1.1, [1.5], usage=1, end=2.0),  # the completion that closed it: in
        rec(1.5, [1.9], usage=1, end=2.1),  # after
        rec(1.2, [], end=1.4, error="HTTP 429: slow down"),
        rec(1.2, [], end=1.6, error="HTTP 429: slow down"),
        rec(1.2, [1.3], end=1.7, error="connection dropped after 1 chunks"),
        rec(1.5, [1.6], end=2.5, cancelled=True),
    ]
    done = metrics.completed_in(records, window)
    assert [r.end for r in done] == [1.3, 2.0]
    assert metrics.request_s(records, window) == pytest.approx(2.0)
    assert metrics.errors_in(records, window) == {
        "HTTP 429: slow down": 2,
        "connection dropped after 1 chunks": 1,
    }


def test_series_is_tok_s_per_second_of_the_window():
    record = rec(0.0, [0.1 * i for i in range(1, 36)], usage=35)  # 10 tok/s from 0.1 to 3.5
    assert metrics.series([record], Window(0.05, 2.05)) == pytest.approx([10.0, 10.0])
    assert metrics.series([record], Window(0.05, 2.65)) == pytest.approx(
        [10.0, 10.0, 10.0]
    )  # 0.6 s tail kept
    assert len(metrics.series([record], Window(0.05, 2.35))) == 2  # a 0.3 s tail is dropped
    assert metrics.series([record], Window(1.0, 1.0)) == []


# -- concurrency ---------------------------------------------------------------------------------------


def test_peak_concurrency_is_exact():
    back_to_back = [rec(0.0, [0.5], end=1.0), rec(1.0, [1.5], end=2.0), rec(2.0, [2.5], end=3.0)]
    assert metrics.peak_concurrency(back_to_back) == 1  # a 1 s bucket count would say 2
    nested = [
        rec(0.0, [1.0], end=10.0),
        rec(1.0, [2.0], end=2.5),
        rec(2.0, [2.2], end=3.0),
        rec(2.4, [2.6], end=2.8),
    ]
    assert metrics.peak_concurrency(nested) == 4  # at 2.4: all four
    assert metrics.peak_concurrency(nested, Window(2.6, 3.0)) == 3  # 0-10, 2-3, 2.4-2.8; 1-2.5 is over
    assert metrics.peak_concurrency(nested, Window(5.0, 6.0)) == 1
    assert metrics.peak_concurrency([]) == 0


def test_mean_concurrency_is_busy_time_over_the_window():
    records = [rec(0.0, [0.5], end=2.0), rec(1.0, [1.5], end=1.5), rec(1.9, [1.95], end=5.0)]
    # in [1, 2): first 1.0 s, second 0.5 s, third 0.1 s
    assert metrics.mean_concurrency(records, Window(1.0, 2.0)) == pytest.approx(1.6)


# -- client health --------------------------------------------------------------------------------------


def test_client_limited_names_every_reason():
    fine = assess(cpu_cores=0.3, loop_lag_p99_ms=1.0, achieved_concurrency=63.5, target_concurrency=64)
    assert not fine.limited and fine.note == ""
    busy = assess(cpu_cores=0.9, loop_lag_p99_ms=12.0, achieved_concurrency=50.0, target_concurrency=64)
    assert busy.limited
    assert busy.note == (
        "client CPU 0.90 cores > 0.7; event-loop lag p99 12.0 ms > 5 ms; held 50.0 of 64 requests in flight"
    )
    open_loop = assess(cpu_cores=0.1, loop_lag_p99_ms=0.5, achieved_concurrency=3.0, target_concurrency=None)
    assert not open_loop.limited


# -- a level's result, and how big a level is --------------------------------------------------------


def level_result(**changes) -> LevelResult:
    stats = Summary(10, 12.0, 11.0, 15.0, 19.0)
    values = dict(
        concurrency=64,
        rate=None,
        input_len=1024,
        output_len=1024,
        requests=128,
        errors=1,
        error_reasons={"HTTP 500: boom": 1},
        duration_s=30.0,
        output_tok_s=3000.0,
        request_s=2.9,
        output_tokens=90000.0,
        ttft_ms=stats,
        tpot_ms=stats,
        itl_ms=stats,
        e2e_ms=stats,
        queue_ms=Summary(),
        series=[2990.0, 3010.0],
        token_mismatches=0,
        tokens_per_chunk=1.0,
        peak_concurrency=64,
        achieved_concurrency=63.9,
        client_cpu_cores=0.2,
        loop_lag_p99_ms=0.8,
        loop_lag_max_ms=2.0,
        events_per_read=1.1,
        client_limited=False,
        client_note="",
        warmup=64,
        model="m",
    )
    return LevelResult(**(values | changes))


def test_a_level_result_fills_the_journal_columns_and_keeps_the_rest_in_extra():
    result = level_result()
    point = result.to_bench_point()
    assert (point.concurrency, point.output_tok_s, point.requests, point.errors) == (64, 3000.0, 128, 1)
    assert (point.ttft_ms_p50, point.ttft_ms_p90, point.ttft_ms_p99, point.tpot_ms_p50) == (
        11.0,
        15.0,
        19.0,
        11.0,
    )
    assert (point.itl_ms_p99, point.e2e_ms_p50, point.e2e_ms_p99, point.duration_s) == (
        19.0,
        11.0,
        19.0,
        30.0,
    )
    assert point.extra["series"] == [2990.0, 3010.0] and point.extra["error_reasons"] == {"HTTP 500: boom": 1}
    assert point.extra["client_cpu_cores"] == 0.2 and point.extra["itl_ms"]["mean"] == 12.0
    data = result.to_json()
    assert data["ttft_ms"] == {"n": 10, "mean": 12.0, "p50": 11.0, "p90": 15.0, "p99": 19.0}
    assert "records" not in data


def test_level_sizes_default_to_whole_rounds_of_c():
    cfg = BenchConfig(url="http://x")
    assert [cfg.measured_requests(c) for c in (1, 32, 1024)] == [8, 64, 2048]
    assert [cfg.warmup_requests(c) for c in (1, 32)] == [1, 32]
    assert BenchConfig(url="http://x", warmup=4).warmup_requests(32) == 32  # never below C
    assert BenchConfig(url="http://x", duration_s=30).measured_requests(64) is None
    assert BenchConfig(url="http://x", rate=2.0).warmup_requests(64) == 20  # ~10 s of arrivals
    assert BenchConfig(url="http://x/v1/").base_url == "http://x"
    with pytest.raises(CockpitError):
        BenchConfig(url="http://x", concurrency=(0,))
    with pytest.raises(CockpitError):
        BenchConfig(url="http://x", endpoint="embeddings")
