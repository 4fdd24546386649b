"""The engines' /metrics, read: both engines' names old and new, replicas, garbage, the window's
averages and deltas, the scrapers against servers that fail, and the benchmark journaling the
engine's figures with each level, against the simulated engine as a real process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from aiohttp import web
from helpers import free_port
from simproc import SimProcess

from cockpit.bench.concurrency_sweep import run_sweep
from cockpit.bench.config import BenchConfig
from cockpit.bench.result import LevelResult
from cockpit.sim.batcher import Batcher, ConstantPacer
from cockpit.sim.server import make_app, serve
from cockpit.store.journal import Journal
from cockpit.telemetry.enginemetrics import (
    AsyncEngineScraper,
    EngineMetrics,
    EngineScraper,
    EngineWindow,
    metrics_url,
    parse_engine_metrics,
    parse_series,
)

# vLLM 0.33, two data-parallel engines, as prometheus_client writes it (labels sorted; counters
# with _total and _created; a histogram in between).
VLLM_DP2 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 30.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 28.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-8B"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="Qwen/Qwen3-8B",reason="capacity"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.97
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.41
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 5.0
vllm:num_preemptions_total{engine="1",model_name="Qwen/Qwen3-8B"} 1.0
vllm:num_preemptions_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7e+09
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="Qwen/Qwen3-8B"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-8B"} 500.0
vllm:prefix_cache_hits_total{engine="1",model_name="Qwen/Qwen3-8B"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-8B"} 0.0
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 12345.0
vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 10000.0
"""

# vLLM v0 (vllm/engine/metrics.py): one engine, only model_name, the old spellings.
VLLM_V0 = """\
vllm:num_requests_running{model_name="m"} 4.0
vllm:num_requests_swapped{model_name="m"} 0.0
vllm:num_requests_waiting{model_name="m"} 2.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:cpu_cache_usage_perc{model_name="m"} 0.0
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5
vllm:num_preemptions_total{model_name="m"} 7.0
vllm:generation_tokens_total{model_name="m"} 99.0
"""

# SGLang 0.5.23: attention DP 2 (dp_rank), every scheduler reporting (tp_rank 0 and 1 of a replica
# say the same), priority scheduling (per-priority breakdowns beside the total, priority="").
SGLANG_DP2 = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 10.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="1",pp_rank="0",priority="",tp_rank="1"} 10.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="1",tp_rank="0"} 6.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 12.0
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 1.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 2.0
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.5
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 0.88
sglang:gen_throughput{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 400.0
sglang:gen_throughput{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 420.0
sglang:cache_hit_rate{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.2
sglang:cache_hit_rate{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 0.4
sglang:num_retracted_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 2.0
sglang:num_retracted_requests_total{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 3.0
sglang:num_retracted_requests_total{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="2",pp_rank="0",priority="",tp_rank="2"} 4.0
sglang:prompt_tokens_total{engine_type="unified",is_streaming="false",model_name="m",priority=""} 600.0
sglang:prompt_tokens_total{engine_type="unified",is_streaming="true",model_name="m",priority=""} 400.0
sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="m",priority=""} 250.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m",priority=""} 5000.0
"""


def test_vllm_replicas_sum_their_counts_and_the_fullest_kv_cache_counts():
    m = parse_engine_metrics(VLLM_DP2, at=5.0)
    assert m is not None and m.engine == "vllm" and m.time == 5.0
    assert (m.running, m.waiting, m.kv_usage) == (58.0, 3.0, 0.97)
    assert (m.preemptions_total, m.generation_tokens_total) == (6.0, 22345.0)
    assert (m.prefix_hits_total, m.prefix_queries_total, m.prefix_hit_rate) == (800.0, 2000.0, None)
    assert m.gen_throughput is None


def test_vllm_v0_spellings_are_read():
    m = parse_engine_metrics(VLLM_V0)
    assert m is not None and m.engine == "vllm"
    assert (m.running, m.waiting, m.kv_usage, m.prefix_hit_rate, m.preemptions_total) == (4, 2, 0.25, 0.5, 7)
    assert m.prefix_queries_total is None


def test_the_new_spelling_wins_where_a_version_serves_both():
    both = (
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 1.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 9.0\n'
    )
    m = parse_engine_metrics(both)
    assert m is not None and (m.kv_usage, m.prefix_hits_total) == (0.6, 9.0)
    early_v1 = 'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 40.0\n'
    assert parse_engine_metrics(early_v1).prefix_queries_total == 40.0


def test_sglang_replicas_ranks_and_priorities_each_count_once():
    m = parse_engine_metrics(SGLANG_DP2)
    assert m is not None and m.engine == "sglang"
    assert (m.running, m.waiting, m.kv_usage) == (22.0, 3.0, 0.88)
    assert m.gen_throughput == 820.0 and m.prefix_hit_rate == pytest.approx(0.3)
    assert m.preemptions_total == 7.0  # the counter; the old per-report gauge is not read
    assert (m.prefix_hits_total, m.prefix_queries_total, m.generation_tokens_total) == (250, 1000, 5000)


def test_garbage_lines_are_skipped_and_a_text_without_engine_figures_is_none():
    text = "\n".join(
        [
            "garbage",
            "vllm:num_requests_running{model_name=oops} 9",  # a label without quotes
            'vllm:num_requests_running{model_name="m"} many',
            'vllm:num_requests_running{model_name="m"} NaN',
            'vllm:num_requests_waiting{model_name="m"} +Inf',
            'vllm:kv_cache_usage_perc{model_name="a\\"b,}c"} 0.5 1712345678000',  # escapes, a timestamp
            "vllm:num_requests_running 3",  # no labels at all
            "\x00\xff {{{",
            "",
        ]
    )
    m = parse_engine_metrics(text)
    assert m is not None and (m.running, m.waiting, m.kv_usage) == (3.0, None, 0.5)
    assert parse_engine_metrics("") is None
    assert parse_engine_metrics('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\nprocess_cpu_seconds_total 3.0\n') is None
    assert parse_engine_metrics("<html>404 Not Found</html>") is None


def test_labels_in_any_order_name_the_same_series():
    """prometheus_client sorts labels; another exporter need not, and one replica's ranks still count once."""
    text = (
        'sglang:num_running_reqs{tp_rank="0",model_name="m",dp_rank="0",pp_rank="0",priority=""} 10.0\n'
        'sglang:num_running_reqs{priority="",pp_rank="0",dp_rank="0",model_name="m",tp_rank="1"} 10.0\n'
        'sglang:num_running_reqs{dp_rank="1", model_name="m" ,priority="",tp_rank="2",pp_rank="0",} 7.0\n'
        'sglang:token_usage{model_name="m",dp_rank="1"} 0.5\n'
        'sglang:token_usage{dp_rank="1",model_name="m"} 0.75\n'  # the same series again: the largest
    )
    m = parse_engine_metrics(text)
    assert m is not None and (m.running, m.kv_usage) == (17.0, 0.75)


def test_escaped_label_values_exemplars_and_timestamps_are_read():
    text = "\n".join(
        [
            # escaped quote, backslash and newline; a brace and a comma inside a value
            'vllm:num_requests_running{engine="0",model_name="a\\"b\\\\c\\nd},e"} 3.0',
            # OpenMetrics: an exemplar after the value, with and without its own timestamp
            'vllm:generation_tokens_total{engine="0",model_name="m"} 120.0 # {trace_id="4bf9"} 1.0',
            'vllm:num_preemptions_total{engine="0",model_name="m"} 2.0 # {trace_id="x y"} 1.0 1712345678.5',
            # a timestamp in milliseconds (Prometheus) and in seconds with a fraction (OpenMetrics)
            'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0 1712345678000',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25 1712345678.125',
            "vllm:prefix_cache_hits_total{} 9.0",  # an empty label set
        ]
    )
    m = parse_engine_metrics(text)
    assert m is not None
    assert (m.running, m.waiting, m.kv_usage) == (3.0, 5.0, 0.25)
    assert (m.generation_tokens_total, m.preemptions_total, m.prefix_hits_total) == (120.0, 2.0, 9.0)
    [(_, labels, _)] = [s for s in parse_series(text) if s[0] == "vllm:num_requests_running"]
    assert labels["model_name"] == 'a"b\\c\nd},e'


def test_non_finite_values_created_series_and_broken_samples_are_skipped():
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0",model_name="m"} NaN',
            'vllm:num_requests_running{engine="1",model_name="m"} 4.0',
            'vllm:num_requests_waiting{engine="0",model_name="m"} +Inf',
            'vllm:num_requests_waiting{engine="1",model_name="m"} -Inf',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} Inf',
            # prometheus_client writes a counter's creation time beside it: not the counter
            'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7123456e+09',
            'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7123456e+09',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 50.0',
            'vllm:num_preemptions_total{engine="0",model_name="m"} 1.0 not-a-time',  # a bad timestamp
            'vllm:num_preemptions_total{engine="0",model_name="m"} 1.0 2 3',  # one field too many
            'vllm:num_preemptions_total{engine="0",model_name="m"}1.0',  # no space before the value
            'vllm:num_preemptions_total{engine="0",model_name="m" 1.0',  # the label set never closes
            'vllm:num_preemptions_totally{engine="0"} 1.0',  # another name that starts like ours
        ]
    )
    m = parse_engine_metrics(text)
    assert m is not None and m.running == 4.0 and m.waiting is None and m.kv_usage is None
    assert m.generation_tokens_total == 50.0 and m.preemptions_total is None


def test_a_large_exposition_of_histograms_reads_the_same_figures():
    """Eight DP engines' histograms (most of a real exposition) around the few lines that count."""
    lines = []
    for engine in range(8):
        labels = f'engine="{engine}",model_name="m"'
        for histogram in ("time_to_first_token_seconds", "request_prompt_tokens", "iteration_tokens_total"):
            for bucket in (*(str(0.001 * 2**b) for b in range(25)), "+Inf"):
                lines.append(f'vllm:{histogram}_bucket{{{labels},le="{bucket}"}} 7.0')
            lines += [f"vllm:{histogram}_sum{{{labels}}} 1.5", f"vllm:{histogram}_count{{{labels}}} 7.0"]
        lines += [
            f"vllm:num_requests_running{{{labels}}} {engine}.0",
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.{engine}",
            f"vllm:generation_tokens_total{{{labels}}} 100.0",
            f"vllm:generation_tokens_created{{{labels}}} 1.7e+09",
        ]
    m = parse_engine_metrics("\r\n".join(lines))  # CRLF line ends too
    assert m is not None and (m.running, m.kv_usage, m.generation_tokens_total) == (28.0, 0.7, 800.0)
    assert m.waiting is None and m.preemptions_total is None


def snapshot(t: float, **figures: float | None) -> EngineMetrics:
    return EngineMetrics(engine="vllm", time=t, **figures)


def test_a_window_keeps_averages_peaks_and_counter_deltas():
    window = EngineWindow()
    for t, running, waiting, kv, preempted in ((0, 10, 0, 0.5, 4), (1, 32, 6, 0.95, 7), (2, 30, 2, 0.9, 9)):
        window.add(
            snapshot(
                t,
                running=running,
                waiting=waiting,
                kv_usage=kv,
                preemptions_total=preempted,
                prefix_hits_total=30 * t,
                prefix_queries_total=100 * t,
            )
        )
    assert window.summary() == {
        "running_avg": 24.0,
        "running_peak": 32.0,
        "waiting_avg": 2.67,
        "waiting_peak": 6.0,
        "kv_usage_avg": 0.7833,
        "kv_usage_peak": 0.95,
        "preemptions": 5.0,
        "prefix_hit_rate": 0.3,
    }


def test_a_window_leaves_out_what_it_did_not_see():
    assert EngineWindow().summary() == {}
    one = EngineWindow()
    one.add(snapshot(0, running=3, preemptions_total=2))
    assert one.summary() == {"running_avg": 3.0, "running_peak": 3.0}  # a delta needs two scrapes
    gauge = EngineWindow()
    for t, rate in enumerate((0.2, 0.4)):
        gauge.add(snapshot(t, prefix_hit_rate=rate, prefix_queries_total=100.0))  # no new queries
    assert gauge.summary() == {"prefix_hit_rate": pytest.approx(0.3)}


def test_gen_tok_s_is_the_counters_growth_over_the_scrapes_time_else_the_gauge():
    counted = EngineWindow()
    for t, generated in ((10.0, 1000.0), (11.0, 3000.0), (12.5, 6000.0)):
        counted.add(snapshot(t, generation_tokens_total=generated, gen_throughput=1.0))
    assert counted.summary() == {"gen_tok_s": 2000.0}  # the counter wins over the gauge
    gauge = EngineWindow()
    for t, rate in enumerate((400.0, 500.0)):
        gauge.add(EngineMetrics(engine="sglang", time=t, gen_throughput=rate))
    assert gauge.summary() == {"gen_tok_s": 450.0}
    one = EngineWindow()  # one scrape of the counter spans no time: the gauge's mean
    one.add(EngineMetrics(engine="sglang", time=0, generation_tokens_total=10.0, gen_throughput=300.0))
    assert one.summary() == {"gen_tok_s": 300.0}
    assert "gen_tok_s" not in EngineWindow().summary()


def test_a_counter_that_restarts_counts_from_zero():
    window = EngineWindow()
    for t, total in enumerate((10.0, 12.0, 1.0, 3.0)):
        window.add(snapshot(t, preemptions_total=total))
    assert window.delta("preemptions_total") == 2 + 1 + 2


def test_the_metrics_url_drops_v1():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"):
        assert metrics_url(url) == "http://h:8000/metrics"


# -- the scrapers against servers that fail ---------------------------------------------------------


class _Endpoint(BaseHTTPRequestHandler):
    status = 200
    body = VLLM_V0

    def do_GET(self) -> None:
        payload = self.body.encode()
        self.send_response(self.status if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
    _Endpoint.status, _Endpoint.body = 200, VLLM_V0


def test_the_scraper_reads_a_server_and_says_once_when_it_gives_nothing(endpoint, caplog):
    url = f"http://127.0.0.1:{endpoint.server_address[1]}/v1"
    scraper = EngineScraper(url, timeout=1.0)
    caplog.set_level(logging.INFO, logger="cockpit.telemetry.enginemetrics")
    try:
        assert scraper.scrape().running == 4.0
        _Endpoint.status = 404
        assert scraper.scrape() is None and scraper.scrape() is None
        _Endpoint.status, _Endpoint.body = 200, "# nothing of an engine\n"
        assert scraper.scrape() is None
        _Endpoint.body = VLLM_V0
        assert scraper.scrape().waiting == 2.0
    finally:
        scraper.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "HTTP 404" in said[0] and "again" in said[1], said


def test_the_scrapers_never_raise_on_a_closed_port_or_a_silent_server():
    closed = f"http://127.0.0.1:{free_port()}"
    scraper = EngineScraper(closed, timeout=0.5)
    assert scraper.scrape() is None
    scraper.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections into the backlog, never answers

    async def both() -> list[EngineMetrics | None]:
        results = []
        for url in (closed, f"http://127.0.0.1:{silent.getsockname()[1]}"):
            scraper = AsyncEngineScraper(url, timeout=0.3)
            results.append(await scraper.scrape())
            await scraper.aclose()
        return results

    try:
        assert asyncio.run(both()) == [None, None]
    finally:
        silent.close()


# -- the simulated engine as a real process ------------------------------------------------------------

MODEL = "qwen3-30b-a3b-fp8"
ENGINE_KEYS = {"running_avg", "running_peak", "waiting_avg", "waiting_peak", "kv_usage_avg", "kv_usage_peak"}


def start_sim(engine: str, state, *flags: str) -> tuple[SimProcess, str]:
    port = free_port()
    # SGLang serves /metrics only when asked, and cockpit always asks (SGLang.always_args).
    argv = ["serve", MODEL] if engine == "vllm" else ["--model-path", MODEL, "--enable-metrics"]
    tp = ["--tensor-parallel-size", "2"] if engine == "vllm" else ["--tp-size", "2"]
    sim = SimProcess(engine, [*argv, *tp, *flags, "--port", str(port)], state)
    url = f"http://127.0.0.1:{port}"
    sim.wait_ready(url)
    return sim, url


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_simulated_engine_serves_its_engines_names_driven_by_its_batcher(tmp_path, engine):
    """C=8 with room for 4 running: the engine says 4 running, 4 waiting, KV in use."""
    max_running = ["--max-num-seqs", "4"] if engine == "vllm" else ["--max-running-requests", "4"]
    sim, url = start_sim(engine, tmp_path / "simbox", *max_running)
    try:
        cfg = BenchConfig(url=url, concurrency=(8,), input_len=16, output_len=64, duration_s=2.5)
        [result] = asyncio.run(run_sweep(cfg, lambda event: None))
        text = httpx.get(metrics_url(url)).text
    finally:
        sim.stop()
    usage = "vllm:kv_cache_usage_perc" if engine == "vllm" else "sglang:token_usage"
    assert f"# HELP {usage} " in text and f"# TYPE {usage} gauge" in text
    figures = result.engine
    assert set(figures) >= ENGINE_KEYS, figures
    assert figures["running_peak"] == 4 and 1 <= figures["waiting_peak"] <= 4, figures  # the cap holds
    assert figures["running_avg"] <= 4 and figures["running_avg"] + figures["waiting_avg"] <= 8, figures
    assert 0 < figures["kv_usage_avg"] <= figures["kv_usage_peak"] < 1
    assert figures["preemptions"] == 0 and figures["prefix_hit_rate"] == 0


def test_benchmark_points_in_the_journal_carry_the_engines_figures(tmp_path):
    """`cockpit bench --experiment` as cockpit runs it: each level's point has its engine figures."""
    sim, url = start_sim("vllm", tmp_path / "simbox")
    try:
        with Journal() as journal:
            exp = journal.start_experiment(profile="p", model=MODEL, engine="vllm", layout="tp2", argv=[])
        done = subprocess.run(
            [sys.executable, "-m", "cockpit.faces.cli", "bench", "--url", url, "--jsonl", "-c", "1,16"]
            + ["--input-len", "16", "--output-len", "128", "--duration", "1.5", "--experiment", str(exp)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        sim.stop()
    assert done.returncode == 0, done.stderr
    levels = [json.loads(line)["result"] for line in done.stdout.splitlines() if '"level_done"' in line]
    assert [level["concurrency"] for level in levels if level["engine"]] == [1, 16]  # the child's events too
    with Journal() as journal:
        points = journal.points(exp)
    assert [p.concurrency for p in points] == [1, 16]
    for point in points:
        engine = point.extra["engine"]
        # no prefix_hit_rate when no new prompt came in the window (16 long requests all along)
        assert set(engine) >= ENGINE_KEYS | {"preemptions"}, engine
        # at a scrape, a request or two may sit between its end and the client's next one
        assert point.concurrency / 2 <= engine["running_peak"] <= point.concurrency, engine
        assert engine["running_avg"] + engine["waiting_avg"] <= point.concurrency, engine  # a closed loop
        assert engine["preemptions"] == 0, engine
        assert 0 < engine["kv_usage_peak"] < 1


@web.middleware
async def _no_metrics(request: web.Request, handler) -> web.StreamResponse:
    if request.path == "/metrics":
        raise web.HTTPNotFound()
    return await handler(request)


def test_a_server_without_metrics_leaves_no_engine_key_and_the_bench_goes_on():
    async def sweep() -> list[LevelResult]:
        app = make_app(model_id="m", engine="vllm", batcher=Batcher(ConstantPacer(0.005)), max_model_len=4096)
        app.middlewares.append(_no_metrics)  # an OpenAI-compatible server that serves no /metrics
        runner = await serve(app, port=0)
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            cfg = BenchConfig(url=url, model="m", concurrency=(2,), input_len=4, output_len=8, duration_s=1.5)
            return await run_sweep(cfg, lambda event: None)
        finally:
            await runner.cleanup()

    [result] = asyncio.run(sweep())
    assert result.requests > 0 and not result.failed
    assert result.engine == {} and "engine" not in result.to_json()
    assert "engine" not in result.to_bench_point().extra
    measured = replace(result, engine={"running_avg": 2.0})
    assert measured.to_bench_point().extra["engine"] == {"running_avg": 2.0}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_level_carries_the_engines_own_generation_throughput(tmp_path, engine):
    """gen_tok_s beside the client's tok/s. vLLM counts tokens as steps emit them; SGLang when a
    request finishes, so short outputs keep its lumps small against the window."""
    sim, url = start_sim(engine, tmp_path / "simbox")
    try:
        cfg = BenchConfig(url=url, concurrency=(16,), input_len=16, output_len=16, duration_s=3.0)
        [result] = asyncio.run(run_sweep(cfg, lambda event: None))
    finally:
        sim.stop()
    assert result.errors == 0 and result.output_tok_s > 0
    # SGLang's counter moves by a whole wave of 16 finished requests (256 tokens) at a time: up to
    # ~12% of the ~2 s between the window's first and last scrapes at this speed.
    tolerance = 0.1 if engine == "vllm" else 0.25
    assert result.engine["gen_tok_s"] == pytest.approx(result.output_tok_s, rel=tolerance), (
        result.engine,
        result.output_tok_s,
    )


def test_the_simulated_engine_s_dropped_time_over_a_window():
    from cockpit.telemetry.enginemetrics import EngineWindow

    window = EngineWindow()
    for t, dropped in ((0.0, 0.1), (1.0, 0.1), (2.0, 0.4)):
        window.add(EngineMetrics(engine="vllm", time=t, sim_dropped_s_total=dropped))
    assert window.summary()["sim_dropped_s"] == pytest.approx(0.3)
    real = EngineWindow()
    real.add(EngineMetrics(engine="vllm", time=0.0, running=1.0))
    real.add(EngineMetrics(engine="vllm", time=1.0, running=1.0))
    assert "sim_dropped_s" not in real.summary()  # a real engine does not serve it
