"""Goodput: which requests met their latency bounds, and the output rate they got.

The pure rules first, on hand-built records; then the load generator against the simulated
engine as a real process, in this process, over worker processes, and as `cockpit bench
--goodput` in a child that journals the level.
"""

from __future__ import annotations

import asyncio
from array import array

import pytest
from test_bench_sim import MODEL, engine  # noqa: F401  (the simulated engine, a real process, shared)

from cockpit.bench import metrics
from cockpit.bench.command import bench_argv, describe_level
from cockpit.bench.concurrency_sweep import run_sweep
from cockpit.bench.config import BenchConfig
from cockpit.bench.result import LevelResult
from cockpit.bench.transport import RequestRecord
from cockpit.core.benchrequest import BenchRequest
from cockpit.core.errors import CockpitError
from cockpit.core.slo import Slo, parse_slo
from cockpit.runner.benchrun import bench_child, run_bench_child
from cockpit.runner.events import BenchDone, BenchLevel
from cockpit.store.journal import BenchPoint, Journal
from cockpit.store.profile import load_profile

GENEROUS = Slo(ttft_ms=1e6, itl_ms=1e6)
IMPOSSIBLE = Slo(ttft_ms=0.001)


def record(ttft_s: float = 0.1, gap_s: float = 0.01, tokens: int = 5, **changes) -> RequestRecord:
    """A finished request sent at t=10 s: first token after ``ttft_s``, then one every ``gap_s``."""
    times = array("d", [10 + ttft_s + i * gap_s for i in range(tokens)])
    done = RequestRecord(
        start=10.0,
        end=(times[-1] if tokens else 10 + ttft_s) + 0.001,
        first_token=times[0] if tokens else None,
        last_token=times[-1] if tokens else None,
        chunk_times=times,
        usage_completion_tokens=tokens,
    )
    for name, value in changes.items():
        setattr(done, name, value)
    return done


# -- which request is good ------------------------------------------------------------------------


def test_a_request_is_good_when_each_bounded_latency_is_within_its_bound():
    request = record(ttft_s=0.2, gap_s=0.05, tokens=11)  # TTFT 200 ms, TPOT (500 ms / 10) = 50 ms
    assert Slo(ttft_ms=200, itl_ms=50).is_good(request)  # a bound is inclusive, as vLLM's
    assert not Slo(ttft_ms=199).is_good(request)
    assert not Slo(itl_ms=49).is_good(request)
    assert not Slo(ttft_ms=1000, itl_ms=49).is_good(request)
    assert Slo(ttft_ms=1000).is_good(request) and Slo(itl_ms=1000).is_good(request)
    assert Slo().is_good(request)  # no bound: every completed request


def test_tpot_is_the_mean_gap_so_one_slow_gap_among_fast_ones_passes():
    request = record(ttft_s=0.1, gap_s=0.01, tokens=11)
    request.chunk_times[-1] += 0.09  # the last gap 100 ms, the mean (190 ms / 10) 19 ms
    request.last_token = request.chunk_times[-1]
    assert Slo(itl_ms=20).is_good(request)
    assert not Slo(itl_ms=18).is_good(request)


def test_one_output_token_has_no_inter_token_latency_and_passes_that_bound():
    single = record(ttft_s=0.1, tokens=1)
    assert Slo(itl_ms=0.001).is_good(single)
    assert not Slo(ttft_ms=50, itl_ms=0.001).is_good(single)


def test_a_failed_cancelled_or_tokenless_request_is_never_good():
    assert not Slo(ttft_ms=1e6).is_good(record(error="HTTP 500: boom"))
    assert not Slo(ttft_ms=1e6).is_good(record(cancelled=True))
    assert not Slo(ttft_ms=1e6).is_good(record(end=0.0))  # never finished
    tokenless = record(tokens=0)
    assert tokenless.ok and tokenless.first_token is None
    assert not Slo(ttft_ms=1e6).is_good(tokenless) and not Slo(itl_ms=1e6).is_good(tokenless)
    assert not Slo().is_good(tokenless)


def test_goodput_weighs_each_good_request_by_its_output_tokens():
    fast, slow = record(ttft_s=0.1, tokens=30), record(ttft_s=3.0, tokens=10)
    good = metrics.goodput([fast, slow], Slo(ttft_ms=2000))
    assert (good.good_requests, good.good_tokens, good.tokens) == (1, 30, 40)
    assert good.token_share == pytest.approx(0.75)
    assert metrics.goodput([], Slo(ttft_ms=1)).token_share == 0.0


# -- the bounds as typed --------------------------------------------------------------------------


def test_bounds_are_typed_in_ms_and_round_trip():
    assert parse_slo("ttft=2000,itl=50") == Slo(ttft_ms=2000, itl_ms=50)
    assert parse_slo(" itl=50 ") == Slo(itl_ms=50)
    assert parse_slo("ttft:500 tpot:20") == Slo(ttft_ms=500, itl_ms=20)  # vLLM's spelling
    assert parse_slo("TTFT<2s,itl<=50ms") == Slo(ttft_ms=2000, itl_ms=50)
    assert parse_slo("none") == Slo()
    for slo in (Slo(ttft_ms=2000, itl_ms=50), Slo(itl_ms=0.5), Slo()):
        assert parse_slo(slo.to_arg()) == slo
        assert Slo.from_json(slo.to_json()) == slo
    assert Slo.from_json(None) is None
    assert Slo(ttft_ms=2000, itl_ms=50).describe() == "ttft<=2000ms itl<=50ms"


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("", "needs latency bounds"),
        ("ttft", "cannot read 'ttft'"),
        ("ttft=fast", "cannot read 'ttft=fast'"),
        ("e2e=100", "cannot read 'e2e=100'"),
        ("ttft=2000,ttft=100", "ttft is bounded twice"),
        ("itl=50,tpot=40", "tpot is bounded twice"),
        ("ttft=0", "must be above 0 ms"),
        ("ttft=1.2.3", "cannot read"),
    ],
)
def test_a_bound_that_cannot_be_read_says_what_to_type(typed, says):
    with pytest.raises(CockpitError) as caught:
        parse_slo(typed)
    message = str(caught.value)
    assert says in message and "ttft=2000,itl=50" in message and "\n" not in message
    assert message.startswith("--goodput")


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "50"])
def test_a_bound_must_be_a_positive_number_of_ms(value):
    with pytest.raises(CockpitError, match="positive number of ms"):
        Slo(itl_ms=value)


def test_the_bounds_reach_the_bench_child_argv():
    argv = bench_argv("http://h:1", None, [1], input_len=4, output_len=4, slo=Slo(ttft_ms=2000, itl_ms=50))
    assert argv[argv.index("--goodput") + 1] == "ttft=2000,itl=50"
    assert "--goodput" not in bench_argv("http://h:1", None, [1], input_len=4, output_len=4)
    bench = BenchRequest(concurrency=(2,), slo=Slo(itl_ms=40))
    argv = bench_child("http://h:1", MODEL, bench, load_profile("demo"), 7)
    assert argv[argv.index("--goodput") + 1] == "itl=40"


def test_a_point_without_bounds_has_no_goodput():
    assert BenchPoint(concurrency=1, output_tok_s=10.0).goodput_tok_s is None
    assert BenchPoint(concurrency=1, output_tok_s=10.0, extra={"goodput_tok_s": 0}).goodput_tok_s == 0.0


# -- against the simulated engine ------------------------------------------------------------------


def level(cfg: BenchConfig) -> LevelResult:
    [result] = asyncio.run(run_sweep(cfg, lambda event: None, keep_records=True))
    return result


def small(url: str, slo: Slo | None, workers: int = 1) -> BenchConfig:
    return BenchConfig(
        url=url, concurrency=(4,), input_len=8, output_len=8, requests=8, slo=slo, workers=workers
    )


def test_a_generous_bound_keeps_every_request_and_an_impossible_one_none(engine):  # noqa: F811
    generous = level(small(engine, GENEROUS))
    assert not generous.failed and generous.requests == 8
    assert generous.slo == GENEROUS and generous.good_requests == 8
    assert generous.goodput_tok_s == pytest.approx(generous.output_tok_s)
    assert generous.goodput_request_s == pytest.approx(generous.request_s)
    data = generous.to_json()
    assert data["slo"] == {"ttft_ms": 1e6, "itl_ms": 1e6} and data["good_requests"] == 8
    assert "goodput" in describe_level(generous) and "100% of requests" in describe_level(generous)

    impossible = level(small(engine, IMPOSSIBLE))
    assert not impossible.failed and impossible.output_tok_s > 0
    assert (impossible.good_requests, impossible.goodput_tok_s, impossible.goodput_request_s) == (0, 0.0, 0.0)

    plain = level(small(engine, None))
    assert (plain.slo, plain.good_requests, plain.goodput_tok_s, plain.goodput_request_s) == (None,) * 4
    assert not {"slo", "good_requests", "goodput_tok_s", "goodput_request_s"} & set(plain.to_json())
    assert "goodput" not in describe_level(plain)


def test_worker_processes_count_goodput_from_the_merged_records(engine):  # noqa: F811
    result = level(small(engine, Slo(ttft_ms=1e6, itl_ms=1e6), workers=2))
    assert result.workers == 2 and result.requests == 8
    assert result.window is not None
    completed = metrics.completed_in(result.records, result.window)
    assert result.good_requests == metrics.goodput(completed, GENEROUS).good_requests == 8
    assert result.goodput_tok_s == pytest.approx(result.output_tok_s)


def test_cockpit_bench_goodput_journals_the_goodput_and_its_bounds(engine):  # noqa: F811
    with Journal() as journal:
        exp = journal.start_experiment(
            profile="p", model=MODEL, engine="vllm", layout="tp2", argv=["vllm", "serve"]
        )
    bench = BenchRequest(concurrency=(2,), input_len=8, output_len=8, requests=4, slo=GENEROUS)
    events = list(run_bench_child(bench_child(engine, MODEL, bench, load_profile("demo"), exp), exp))
    [done] = [e for e in events if isinstance(e, BenchDone)]
    assert done.error == "" and done.levels == 1
    [finished] = [e for e in events if isinstance(e, BenchLevel)]
    assert "goodput" in finished.summary and "ttft<=1e+06ms itl<=1e+06ms" in finished.summary
    with Journal() as journal:
        [point] = journal.points(exp)
    assert point.extra["slo"] == {"ttft_ms": 1e6, "itl_ms": 1e6} and point.extra["good_requests"] == 4
    assert point.goodput_tok_s == pytest.approx(point.output_tok_s)


def test_cockpit_bench_refuses_bounds_it_cannot_read_in_one_line(capsys):
    from cockpit.faces.cli import main

    assert main(["bench", "--url", "http://127.0.0.1:1", "--goodput", "ttft=soon"]) == 2
    err = capsys.readouterr().err
    assert "--goodput: cannot read 'ttft=soon'" in err and "ttft=2000,itl=50" in err
    assert len(err.strip().splitlines()) == 1
