"""The numbers of one concurrency level, derived from raw request records and its measured window.

Tools disagree on what TTFT, ITL and throughput mean (vLLM's bench,
vllm/benchmarks/lib/endpoint_request_func.py, takes one ITL sample per chunk gap; guidellm folds
TTFT into TPOT), so each formula is stated here, and tokens are counted per token, not per SSE
chunk: a server that coalesces k tokens into one chunk (speculative decoding, parsers, Dynamo)
must not fake a k-times lower ITL. A chunk's token count comes from ``continuous_usage_stats``
when the server sent it, else it is the request's ``usage.completion_tokens / chunks``; a request
without usage (cancelled at the window end, or a server that never sends usage) takes the
level's tokens-per-chunk ratio.

All times are ``perf_counter`` seconds; summaries are in milliseconds.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from cockpit.bench.transport import RequestRecord
from cockpit.core.slo import Slo


@dataclass(frozen=True)
class Window:
    """The measured stretch of a level: tokens, completions and errors count only inside it."""

    start: float
    end: float

    @property
    def length(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Summary:
    """mean, p50, p90, p99 of one latency, in ms; None where there were no samples."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    def to_json(self) -> dict[str, float | int | None]:
        return {"n": self.count, "mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}

    @classmethod
    def from_json(cls, data: Any) -> Summary:
        """The summary ``to_json`` wrote; none for anything else."""
        if not isinstance(data, dict):
            return cls()
        return cls(
            int(data.get("n") or 0), data.get("mean"), data.get("p50"), data.get("p90"), data.get("p99")
        )


def percentile(values: Sequence[float], q: float, weights: Sequence[float] | None = None) -> float:
    """The q-th percentile (0-100) with linear interpolation, numpy's default.

    Unweighted: sort the n values, r = q/100 * (n - 1), and interpolate between the values at
    ranks floor(r) and floor(r) + 1. Weighted: value i covers ``weights[i]`` consecutive ranks
    (as if repeated that many times), W = sum of weights, r = q/100 * (W - 1); for whole weights
    this is exactly the unweighted percentile of the expanded list.
    """
    return quantiles(values, weights)(q)


def quantiles(values: Sequence[float], weights: Sequence[float] | None = None) -> Callable[[float], float]:
    """Sort once, then answer any percentile (as ``percentile`` defines it)."""
    if not values:
        raise ValueError("percentile of no values")
    if weights is None or len(set(weights)) == 1:
        ordered = sorted(values)
        size = float(weights[0]) if weights else 1.0  # ranks each value covers
        last = len(ordered) - 1
        total = size * len(ordered)

        def at(rank: float) -> float:
            return ordered[min(int(rank // size), last)]

    else:
        pairs = sorted(zip(values, weights))
        ends = list(accumulate(w for _, w in pairs))  # value i covers ranks [ends[i-1], ends[i])
        last = len(pairs) - 1
        total = ends[-1]

        def at(rank: float) -> float:
            return pairs[min(bisect_right(ends, rank), last)][0]

    def percentile_of(q: float) -> float:
        rank = q / 100 * max(0.0, total - 1)
        low = math.floor(rank)
        return at(low) + (rank - low) * (at(low + 1) - at(low))

    return percentile_of


def summarize(seconds: Sequence[float], weights: Sequence[float] | None = None) -> Summary:
    """mean and percentiles of samples given in seconds, as milliseconds (weighted if asked)."""
    if not seconds:
        return Summary()
    if weights is None:
        count, mean = len(seconds), sum(seconds) / len(seconds)
    else:
        total = sum(weights)
        count, mean = round(total), sum(v * w for v, w in zip(seconds, weights)) / total
    at = quantiles(seconds, weights)
    return Summary(count, mean * 1e3, at(50) * 1e3, at(90) * 1e3, at(99) * 1e3)


# -- tokens per chunk ------------------------------------------------------------------------


def tokens_per_chunk(records: Iterable[RequestRecord]) -> float:
    """The level's output tokens per content chunk, from the requests that reported usage (1 if none)."""
    tokens = chunks = 0
    for record in records:
        if record.usage_completion_tokens is not None and record.chunks:
            tokens += record.usage_completion_tokens
            chunks += record.chunks
    return tokens / chunks if chunks else 1.0


def chunk_weight(record: RequestRecord, fallback: float) -> float:
    """Tokens per chunk of one request, when all its chunks carry the same share."""
    if record.usage_completion_tokens is not None and record.chunks:
        return record.usage_completion_tokens / record.chunks
    return fallback


def tokens_between(record: RequestRecord, start: float, end: float, fallback: float = 1.0) -> float:
    """Output tokens of the chunks that arrived in [start, end): a chunk of k tokens counts k."""
    times = record.chunk_times
    low, high = bisect_left(times, start), bisect_left(times, end)
    if high <= low:
        return 0.0
    if record.tokens_in_chunk is not None:
        return float(sum(record.tokens_in_chunk[low:high]))
    return (high - low) * chunk_weight(record, fallback)


# -- the metrics ------------------------------------------------------------------------------


def output_tokens_in(records: Iterable[RequestRecord], window: Window, fallback: float = 1.0) -> float:
    """Tokens received inside the window, from every request (warm-up stragglers and requests
    cancelled at the end included: their tokens were real load)."""
    return sum(tokens_between(r, window.start, window.end, fallback) for r in records)


def output_tok_s(records: Iterable[RequestRecord], window: Window, fallback: float = 1.0) -> float:
    """output tok/s = tokens received inside the window / window length."""
    if window.length <= 0:
        return 0.0
    return output_tokens_in(records, window, fallback) / window.length


def completed_in(records: Iterable[RequestRecord], window: Window) -> list[RequestRecord]:
    """Successful requests that ended inside the window, (start, end]: the completion that
    opened it (the last of the warm-up) is not one of them."""
    return [r for r in records if r.ok and window.start < r.end <= window.end]


def request_s(records: Iterable[RequestRecord], window: Window) -> float:
    """request/s = successful requests completed inside the window / window length."""
    if window.length <= 0:
        return 0.0
    return len(completed_in(records, window)) / window.length


def ttft(requests: Iterable[RequestRecord]) -> Summary:
    """TTFT = first content chunk's arrival - request sent, per request."""
    return summarize([r.first_token - r.start for r in requests if r.first_token is not None])


def tpot(requests: Iterable[RequestRecord]) -> Summary:
    """TPOT = (last chunk - first chunk) / (output_tokens - 1), per request with 2+ tokens.

    TTFT is excluded (guidellm's TPOT includes it and over-reports).
    """
    values = [
        (r.last_token - r.first_token) / (r.output_tokens - 1)
        for r in requests
        if r.first_token is not None and r.last_token is not None and r.output_tokens > 1
    ]
    return summarize(values)


def e2e(requests: Iterable[RequestRecord]) -> Summary:
    """E2E latency = stream ended ([DONE] read) - request sent, per request."""
    return summarize([r.end - r.start for r in requests])


def queueing(requests: Iterable[RequestRecord]) -> Summary:
    """Client queueing (open loop) = sent - due: time an arrival waited for a free slot."""
    return summarize([r.start - r.scheduled for r in requests if r.scheduled is not None])


def itl(records: Iterable[RequestRecord], window: Window, fallback: float = 1.0) -> Summary:
    """ITL per token, over chunks that arrived inside the window (any request).

    The gap before chunk i (i >= 2 of its request; the first chunk's wait is TTFT) is split
    evenly over the k tokens that chunk carried: k samples of gap / k. So a server sending 4
    tokens every 40 ms reports ITL 10 ms, not 40 ms, and not 0 for three of them.
    """
    values: list[float] = []
    weights: list[float] = []
    for record in records:
        times = record.chunk_times
        low = max(1, bisect_left(times, window.start))
        high = bisect_left(times, window.end)
        if high <= low:
            continue
        per_chunk = record.tokens_in_chunk
        if per_chunk is None:
            k = chunk_weight(record, fallback)
            if k <= 0:
                continue  # usage 0 with content chunks: nothing to split
            values.extend([(times[i] - times[i - 1]) / k for i in range(low, high)])
            weights.extend([k] * (high - low))
        else:
            for i in range(low, high):
                if per_chunk[i] > 0:
                    values.append((times[i] - times[i - 1]) / per_chunk[i])
                    weights.append(per_chunk[i])
    return summarize(values, weights)


@dataclass(frozen=True)
class Goodput:
    """The completed requests that met a Slo (``slo.Slo.is_good``) and their share of the tokens."""

    good_requests: int
    good_tokens: int
    tokens: int  # output tokens of every completed request

    @property
    def token_share(self) -> float:
        """Good requests' output tokens / all completed requests' (0 when none completed)."""
        return self.good_tokens / self.tokens if self.tokens else 0.0


def goodput(completed: Iterable[RequestRecord], slo: Slo) -> Goodput:
    """Which of the window's completed requests were good, by request and by output token.

    goodput tok/s = output tok/s x ``token_share``: the window's token rate, scaled by the good
    requests' share of the completed requests' tokens (each request's tokens by
    ``RequestRecord.output_tokens``: usage when sent, else chunks). The rate counts tokens as
    they arrive in the window, so a request is not credited for tokens it got before it; the
    share says how much of that flow went to requests that met their bounds."""
    good = good_tokens = tokens = 0
    for record in completed:
        tokens += record.output_tokens
        if slo.is_good(record):
            good += 1
            good_tokens += record.output_tokens
    return Goodput(good, good_tokens, tokens)


def errors_in(records: Iterable[RequestRecord], window: Window) -> Counter[str]:
    """Failed requests that ended inside the window, by their one-line reason; each request
    counts once (one record, one error), and one cancelled by the load generator is no error."""
    return Counter(
        r.error
        for r in records
        if r.error is not None and not r.cancelled and window.start < r.end <= window.end
    )


def series(
    records: Iterable[RequestRecord], window: Window, bucket_s: float = 1.0, fallback: float = 1.0
) -> list[float]:
    """tok/s in consecutive bucket_s buckets of the window, for sparklines.

    A last bucket shorter than half a bucket is dropped (too noisy); a longer one is its rate.
    """
    if window.length <= 0:
        return []
    edges = [window.start + i * bucket_s for i in range(int(window.length / bucket_s) + 1)]
    if window.end - edges[-1] >= bucket_s / 2:
        edges.append(window.end)
    records = list(records)
    out = []
    for low, high in zip(edges, edges[1:]):
        tokens = sum(tokens_between(r, low, high, fallback) for r in records)
        out.append(tokens / (high - low))
    return out


def peak_concurrency(records: Iterable[RequestRecord], window: Window | None = None) -> int:
    """The most requests in flight at any instant: a sweep over [start, end) intervals.

    Exact, unlike 1 s buckets, which count every request that touched a bucket (vLLM 0.33
    printed 500 for a cap of 64). With a window, intervals are clipped to it.
    """
    low, high = (window.start, window.end) if window is not None else (-math.inf, math.inf)
    points = []
    for r in records:
        start, end = max(r.start, low), min(r.end, high)
        if end > start:
            points.append((start, 1))
            points.append((end, -1))
    points.sort()  # at a tie the end (-1) sorts first: back-to-back requests do not overlap
    peak = current = 0
    for _, step in points:
        current += step
        peak = max(peak, current)
    return peak


def mean_concurrency(records: Iterable[RequestRecord], window: Window) -> float:
    """Mean requests in flight over the window: the sum of each [start, end)'s overlap / length."""
    if window.length <= 0:
        return 0.0
    busy = sum(
        max(0.0, min(r.end, window.end) - max(r.start, window.start)) for r in records if r.end > r.start
    )
    return busy / window.length


# `cockpit bench`'s exit code when every level was measured but some requests failed: not 0 (a
# script must not take the numbers as clean), not 1 (the bench did not fail: its levels are
# journaled, marked).
REQUESTS_FAILED_EXIT = 3
