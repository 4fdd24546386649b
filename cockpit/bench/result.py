"""What one concurrency level measured: ``LevelSummary``, the record that goes to JSON and comes
back from it whole (`cockpit bench --jsonl` to its parent, the journal's ``extra``), and
``LevelResult``, the same summary with the raw records a test or an analysis may keep.

Whoever reads a level (the screen, `cockpit run`, a tune) reads a ``LevelSummary``, never the
JSON's keys: ``LevelSummary.from_json(summary.to_json()) == summary``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from cockpit.bench.metrics import Summary, Window
from cockpit.bench.transport import RequestRecord
from cockpit.core.slo import Slo

if TYPE_CHECKING:
    from cockpit.store.journal import BenchPoint

_SUMMARIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
_OMITTED_WHEN_EMPTY = ("engine", "worker_cpu_cores", "worker_loop_lag_p99_ms")
_OMITTED_WHEN_NONE = ("slo", "good_requests", "goodput_tok_s", "goodput_request_s", "contended")


@dataclass(frozen=True)
class LevelSummary:
    """Everything one level measured. Latencies are Summaries in ms (see metrics for formulas).

    With latency bounds (``BenchConfig.slo``, kept as ``slo``), the goodput too: a completed
    request is good when its own TTFT and mean inter-token latency are within the bounds
    (``slo.Slo.is_good``, as ``vllm bench serve --goodput`` counts), and ``goodput_tok_s`` is
    ``output_tok_s`` x the good requests' share of the completed requests' output tokens
    (``metrics.goodput``): the output rate that served requests in time, DistServe's goodput.
    Without bounds the three goodput figures are None and left out of ``to_json``.

    Every figure has a default (nothing measured), so a summary read back from JSON that lacks
    one reads as none of it."""

    concurrency: int = 0
    rate: float | None = None
    input_len: int = 0
    output_len: int = 0
    requests: int = 0  # successful requests completed inside the window
    errors: int = 0  # failed requests that ended inside the window (or in warm-up, if all of it failed)
    error_reasons: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0  # the measured window
    output_tok_s: float = 0.0
    request_s: float = 0.0
    output_tokens: float = 0.0  # received inside the window
    ttft_ms: Summary = Summary()
    tpot_ms: Summary = Summary()
    itl_ms: Summary = Summary()
    e2e_ms: Summary = Summary()
    queue_ms: Summary = Summary()  # open loop: arrival due -> sent
    series: list[float] = field(default_factory=list)  # tok/s per second of the window
    token_mismatches: int = 0  # requests whose usage differs from their chunk count
    tokens_per_chunk: float = 0.0
    peak_concurrency: int = 0
    achieved_concurrency: float = 0.0
    client_cpu_cores: float = 0.0
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    events_per_read: float = 0.0
    client_limited: bool = False
    client_note: str = ""
    warmup: int = 0
    model: str = ""
    endpoint: str = "completions"
    sent: int = 0  # requests the level sent, warm-up and those cancelled at its end included
    cancelled: int = 0  # in flight when the level ended: neither completed nor errors
    failed: bool = False  # errors > half of the requests that ended, or no token came back
    error: str | None = None  # why it failed, one line
    # Another client's load seen at this level (``contention``): the engine's peaks of running and
    # waiting requests in the window, and/or the requests it ran before the level; None: none seen.
    contended: dict[str, int] | None = None
    # The engine's own figures over the window (EngineWindow.summary): running, waiting and KV
    # usage averages and peaks, preemptions, prefix hit rate, the engine's generated tok/s
    # (gen_tok_s, beside output_tok_s); {} when it serves no /metrics.
    engine: dict[str, float] = field(default_factory=dict)
    workers: int = 1  # processes that sent the level's requests (BenchConfig.workers)
    # Each worker process's own CPU (cores) and event-loop lag p99 (ms), when there were several.
    worker_cpu_cores: list[float] = field(default_factory=list)
    worker_loop_lag_p99_ms: list[float] = field(default_factory=list)
    slo: Slo | None = None  # the bounds the goodput figures count by
    good_requests: int | None = None  # completed requests inside the window that met the bounds
    goodput_tok_s: float | None = None  # output_tok_s x good requests' share of completed tokens
    goodput_request_s: float | None = None  # good_requests / duration_s

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(LevelSummary):  # a LevelResult's raw records stay out
            value = getattr(self, f.name)
            if (f.name in _OMITTED_WHEN_EMPTY and not value) or (
                f.name in _OMITTED_WHEN_NONE and value is None
            ):
                continue
            out[f.name] = value.to_json() if isinstance(value, (Summary, Slo)) else value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LevelSummary:
        """The summary ``to_json`` wrote; keys it does not know (a newer cockpit's) are left out."""
        known = {f.name for f in fields(LevelSummary)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        for name in _SUMMARIES:
            if name in values:
                values[name] = Summary.from_json(values[name])
        if "slo" in values:
            values["slo"] = Slo.from_json(values["slo"])
        return LevelSummary(**values)

    def to_bench_point(self) -> BenchPoint:
        """The journal's row: its columns filled, everything else (series, health...) in extra."""
        from cockpit.store.journal import BenchPoint

        columns: dict[str, Any] = {
            "concurrency": self.concurrency,
            "output_tok_s": self.output_tok_s,
            "requests": self.requests,
            "errors": self.errors,
            "duration_s": self.duration_s,
            "request_s": self.request_s,
            "ttft_ms_p50": self.ttft_ms.p50,
            "ttft_ms_p90": self.ttft_ms.p90,
            "ttft_ms_p99": self.ttft_ms.p99,
            "tpot_ms_p50": self.tpot_ms.p50,
            "itl_ms_p50": self.itl_ms.p50,
            "itl_ms_p90": self.itl_ms.p90,
            "itl_ms_p99": self.itl_ms.p99,
            "e2e_ms_p50": self.e2e_ms.p50,
            "e2e_ms_p99": self.e2e_ms.p99,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "client_limited": self.client_limited,
            "failed": self.failed,
            "error": self.error,
        }
        extra = {k: v for k, v in self.to_json().items() if k not in columns}
        return BenchPoint(**columns, extra=extra)


@dataclass(frozen=True)
class LevelResult(LevelSummary):
    """A level as the load generator hands it over: its summary, and with ``keep_records`` the
    raw request records and the window they were counted in (never written to JSON)."""

    records: tuple[RequestRecord, ...] = field(default=(), repr=False, compare=False)  # keep_records only
    window: Window | None = field(default=None, repr=False, compare=False)  # keep_records only: perf_counter


def _whole(value: object) -> int:
    """A count from a level's figures; anything else counts as none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return int(value)


def request_failures(levels: Iterable[LevelSummary]) -> str:
    """`C=8 had 3/9 requests fail (HTTP 500); C=16 had 4/9 requests fail (...)`: the levels that
    were measured (not failed) although some of their requests failed; "" when there is none.
    The count is of the requests that ended in the level's window: completed plus failed."""
    parts = []
    for level in levels:
        errors = _whole(level.errors)
        if errors <= 0 or level.failed:
            continue
        reasons = level.error_reasons
        reason = max(reasons.items(), key=lambda item: item[1])[0] if reasons else ""
        ended = errors + _whole(level.requests)
        parts.append(
            f"C={_whole(level.concurrency)} had {errors}/{ended} requests fail"
            + (f" ({reason})" if reason else "")
        )
    return "; ".join(parts)


def contention_note(level: LevelSummary) -> str:
    """`contended: the engine held 16 requests at C=8` for a level that saw another client's load
    (``LevelSummary.contended``); "" for one that saw none."""
    seen = level.contended
    if not seen:
        return ""
    concurrency = _whole(level.concurrency)
    if peak := _whole(seen.get("requests_peak")):
        return f"contended: the engine held {peak} requests at C={concurrency}"
    if before := _whole(seen.get("busy_before")):
        return f"contended: the server already ran {before} requests not from this bench"
    return "contended: another client's load shared the server"
