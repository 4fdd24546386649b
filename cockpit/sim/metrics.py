"""The simulated engine's /metrics: Prometheus text as prometheus_client writes it.

vLLM's families are those of vllm/v1/metrics/loggers.py (PrometheusStatLogger), in its order, with
its help texts, labels and histogram buckets (vllm/v1/metrics/buckets.py): a counter is written as
``name_total`` with a ``name_created`` gauge after it, a histogram as its buckets, count and sum
with a ``name_created`` gauge, every value as prometheus_client's floatToGoString writes it
(docs/simulator.md#checked-against-a-real-vllm). The request histograms are observed once per
request, when it ends (``RequestStats.finish``), from the times the server and the batcher noted.
"""

from __future__ import annotations

import json
import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString: "+Inf", "24.0", "1.796198257213057e+09"."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))


@dataclass(frozen=True)
class Series:
    """One sample line: a name, its labels, its value."""

    name: str
    labels: dict[str, str]
    value: float

    def render(self) -> str:
        return f"{self.name}{{{_labels(self.labels)}}} {go_float(self.value)}\n"


@dataclass
class Family:
    """A metric as the text format groups it: one HELP and TYPE pair over its samples."""

    name: str
    kind: str  # gauge, counter, histogram (as written after # TYPE)
    help: str
    series: list[Series] = field(default_factory=list)

    def render(self) -> str:
        head = f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"
        return head + "".join(s.render() for s in self.series)


def render(families: Iterable[Family]) -> str:
    """The exposition text; a name met twice keeps its first HELP and TYPE, its samples together."""
    merged: dict[str, Family] = {}
    for family in families:
        if family.name in merged:
            merged[family.name].series.extend(family.series)
        else:
            merged[family.name] = Family(family.name, family.kind, family.help, list(family.series))
    return "".join(f.render() for f in merged.values())


def gauge(name: str, help: str, labels: dict[str, str], value: float) -> list[Family]:
    return [Family(name, "gauge", help, [Series(name, labels, value)])]


def counter(
    name: str, help: str, series: Sequence[tuple[dict[str, str], float]], created: float
) -> list[Family]:
    """``name_total`` and its ``name_created`` gauge, one sample per label set."""
    return [
        Family(f"{name}_total", "counter", help, [Series(f"{name}_total", lb, v) for lb, v in series]),
        Family(
            f"{name}_created", "gauge", help, [Series(f"{name}_created", lb, created) for lb, _ in series]
        ),
    ]


class Histogram:
    """Cumulative buckets ("le" is the upper bound, inclusive), a count and a sum."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf only)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.count += times
        self.total += value * times

    def families(self, name: str, help: str, labels: dict[str, str], created: float) -> list[Family]:
        samples = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            samples.append(Series(f"{name}_bucket", {**labels, "le": go_float(bound)}, running))
        samples += [Series(f"{name}_count", labels, self.count), Series(f"{name}_sum", labels, self.total)]
        return [
            Family(name, "histogram", help, samples),
            Family(f"{name}_created", "gauge", help, [Series(f"{name}_created", labels, created)]),
        ]


# vllm/v1/metrics/buckets.py
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TIME_TO_FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                               5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
INTER_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vllm/v1/metrics/buckets.py)."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


# The request histograms, in the order vLLM registers them: name, help, bucket family.
_HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "tokens"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "tokens"),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "tokens",
    ),
    ("vllm:request_params_n", "Histogram of the n request parameter.", "n"),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "tokens"),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "itl",
    ),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "latency"),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "latency"),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "latency",
    ),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "latency"),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "latency"),
    (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        "preemptions",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "tokens",
    ),
)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vllm/v1/engine: FinishReason


class RequestStats:
    """What vLLM counts per finished request: the success counter by reason and the histograms."""

    def __init__(self, max_model_len: int) -> None:
        self.created = time.time()
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        buckets = {
            "tokens": build_1_2_5_buckets(max(1, max_model_len)),
            "n": REQUEST_PARAMS_N_BUCKETS,
            "ttft": TIME_TO_FIRST_TOKEN_BUCKETS,
            "itl": INTER_TOKEN_LATENCY_BUCKETS,
            "latency": REQUEST_LATENCY_BUCKETS,
            "preemptions": REQUEST_NUM_PREEMPTIONS_BUCKETS,
        }
        self.histograms = {name: Histogram(buckets[kind]) for name, _, kind in _HISTOGRAMS}

    def finish(
        self,
        *,
        reason: str,
        prompt_tokens: int,
        generated: int,
        max_tokens: int,
        received: float,
        admitted: float | None,
        first: float | None,
        last: float | None,
        end: float,
    ) -> None:
        """One request's end (perf_counter times): what vLLM's stat logger records of it. The gaps
        between its tokens are observed at their mean, once per gap: their sum and count are exact."""
        self.finished[reason] += 1
        h = self.histograms
        h["vllm:request_prompt_tokens"].observe(prompt_tokens)
        h["vllm:request_generation_tokens"].observe(generated)
        h["vllm:request_max_num_generation_tokens"].observe(max_tokens)
        h["vllm:request_params_n"].observe(1)
        h["vllm:request_params_max_tokens"].observe(max_tokens)
        h["vllm:request_num_preemptions"].observe(0)
        h["vllm:request_prefill_kv_computed_tokens"].observe(prompt_tokens)
        h["vllm:e2e_request_latency_seconds"].observe(end - received)
        if admitted is None:
            return
        h["vllm:request_queue_time_seconds"].observe(max(0.0, admitted - received))
        if first is None:
            return
        last = first if last is None else last
        h["vllm:time_to_first_token_seconds"].observe(max(0.0, first - received))
        h["vllm:request_prefill_time_seconds"].observe(max(0.0, first - admitted))
        h["vllm:request_decode_time_seconds"].observe(max(0.0, last - first))
        h["vllm:request_inference_time_seconds"].observe(max(0.0, last - admitted))
        if generated > 1:
            gap = max(0.0, last - first) / (generated - 1)
            h["vllm:inter_token_latency_seconds"].observe(gap, generated - 1)
            h["vllm:request_time_per_output_token_seconds"].observe(gap)

    def families(self, labels: dict[str, str]) -> list[Family]:
        out = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [({**labels, "finished_reason": r}, n) for r, n in self.finished.items()],
            self.created,
        )
        for name, help, _ in _HISTOGRAMS:
            out += self.histograms[name].families(name, help, labels, self.created)
        return out


@dataclass(frozen=True)
class VllmFigures:
    """What the batcher and the server know at a scrape."""

    running: int
    waiting: int
    kv_usage: float
    prompt_tokens: int
    generation_tokens: int
    preemptions: int


def vllm_families(figures: VllmFigures, stats: RequestStats, model_name: str) -> list[Family]:
    """vllm/v1/metrics/loggers.py (PrometheusStatLogger), one engine: every series labelled with its
    index and the model's name. The simulator has no prefix, multimodal or external KV cache: every
    prompt token is a query that misses and is computed locally."""
    labels = {"engine": "0", "model_name": model_name}
    created = stats.created
    out: list[Family] = []
    out += gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", labels, figures.running
    )
    out += gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, figures.waiting
    )
    out.append(
        Family(
            "vllm:num_requests_waiting_by_reason",
            "gauge",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
            "status). Sum of all reasons equals vllm:num_requests_waiting.",
            [
                Series(
                    "vllm:num_requests_waiting_by_reason", {**labels, "reason": "capacity"}, figures.waiting
                ),
                Series("vllm:num_requests_waiting_by_reason", {**labels, "reason": "deferred"}, 0),
            ],
        )
    )
    out.append(
        Family(
            "vllm:engine_sleep_state",
            "gauge",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            [
                Series("vllm:engine_sleep_state", {**labels, "sleep_state": state}, value)
                for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))
            ],
        )
    )
    out += gauge(
        "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, figures.kv_usage
    )
    prompt = figures.prompt_tokens
    for name, help, value in (
        ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", prompt),
        ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 0),
        (
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
            "number of queried tokens.",
            0,
        ),
        (
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
            "number of cached tokens.",
            0,
        ),
        ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", 0),
        ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", 0),
        ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", figures.preemptions),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt),
    ):
        out += counter(name, help, [(labels, value)], created)
    out += counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        [
            ({**labels, "source": source}, value)
            for source, value in (
                ("local_compute", prompt),
                ("local_cache_hit", 0),
                ("external_kv_transfer", 0),
            )
        ],
        created,
    )
    out += counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        [(labels, 0)],
        created,
    )
    out += counter(
        "vllm:prompt_tokens_cached_by_source",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded "
        "to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at "
        "admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        [({**labels, "source": s}, 0) for s in ("device", "host", "p2p", "disk", "external_unspecified")],
        created,
    )
    out += counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        [(labels, figures.generation_tokens)],
        created,
    )
    out += stats.families(labels)[:2]  # request_success
    out += counter(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        [
            ({"model_name": model_name, "reason": r}, 0)
            for r in ("max_num_queued_reqs", "max_num_queued_tokens")
        ],
        created,
    )
    out += stats.families(labels)[2:]  # the histograms
    return out
