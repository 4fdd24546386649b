"""The serving engine's own figures, read from its Prometheus `/metrics`: running and waiting
requests, KV cache usage, preemptions, prefix cache hits, generated tokens.

Three parts: `parse_engine_metrics` turns the text into an `EngineMetrics` snapshot (pure; vLLM's
and SGLang's names, old and new spellings); `EngineWindow` sums up snapshots over a stretch of
time (a benchmark level: averages, peaks, counter deltas); `EngineScraper` and
`AsyncEngineScraper` fetch the text, bounded in time, and answer None rather than raise. docs/metrics.md
lists the names and where each engine defines them.

Several series of one metric are one per engine replica: vLLM labels each data-parallel engine
`engine="<index>"` (vllm/v1/metrics/loggers.py, `per_engine_labelvalues`), SGLang each DP rank
`dp_rank` (sglang/srt/observability/metrics_collector.py, `SchedulerMetricsCollector` labels).
Counts and counters are summed over replicas. KV usage is the fullest replica's: each replica
admits from its own pool, so one full pool makes requests wait while a mean over replicas would
hide it behind an idle one.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import httpx

from cockpit.engines import surfaces
from cockpit.engines.surface import EngineSurface

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 2.0


# -- the names -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """One figure: its spellings, newest first (the first one served wins), and how the series of
    several replicas combine."""

    spellings: tuple[str, ...]
    combine: Callable[[Sequence[float]], float]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


# How the series of several replicas combine, per figure; each engine's names for the figures are
# its surface's (cockpit/engines/<engine>/surface.py).
COMBINE: dict[str, Callable[[Sequence[float]], float]] = {
    "running": sum,
    "waiting": sum,
    "kv_usage": max,
    "preemptions_total": sum,
    "prefix_hits_total": sum,
    "prefix_queries_total": sum,
    "prefix_hit_rate": _mean,
    "generation_tokens_total": sum,
    "gen_throughput": sum,
}


def _families(engine: EngineSurface) -> dict[str, _Family]:
    return {key: _Family(spellings, COMBINE[key]) for key, spellings in engine.metrics.items()}


# cockpit's simulated engine serves both engines' names, and these of its own (cockpit/sim/server.py):
# the time its clock could not keep because its CPU was short. A level measured then measured
# the machine running the simulator, not the modelled GPUs (cockpit.lab.tune_loop measures it again).
SIMULATOR: dict[str, _Family] = {
    "sim_dropped_s_total": _Family(("cockpit_sim_dropped_seconds_total",), max),
}
ENGINES: dict[str, dict[str, _Family]] = {e.name: {**_families(e), **SIMULATOR} for e in surfaces()}

# Labels that tell apart the schedulers of one replica: with --enable-metrics-for-all-schedulers
# every TP rank reports the same scheduler state, which must count once, not once per rank.
_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})

_WANTED = frozenset(name for families in ENGINES.values() for f in families.values() for name in f.spellings)


# -- a snapshot ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineMetrics:
    """One scrape. Every figure may be None: not served by this engine or this version.

    kv_usage is 0..1; the *_total fields are counters (since the engine started); prefix_hit_rate
    is a gauge 0..1 and gen_throughput tok/s (SGLang's own figures). time is time.time()."""

    engine: str
    time: float
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions_total: float | None = None
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hit_rate: float | None = None
    generation_tokens_total: float | None = None
    gen_throughput: float | None = None
    sim_dropped_s_total: float | None = None  # the simulated engine's only


Series = tuple[str, dict[str, str], float]  # name, labels, value


def parse_engine_metrics(text: str, at: float = 0.0) -> EngineMetrics | None:
    """The snapshot in a `/metrics` text, or None when it holds neither engine's figures.

    Lines that are not a series of ours (comments, other metrics, histograms, garbage) are skipped.
    """
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in parse_series(text):
        by_name.setdefault(name, []).append((labels, value))
    engine = next((e.name for e in surfaces() if any(n.startswith(e.metric_prefix) for n in by_name)), None)
    if engine is None:
        return None
    figures = {key: _figure(family, by_name) for key, family in ENGINES[engine].items()}
    return EngineMetrics(engine=engine, time=at, **figures)


def parse_series(text: str) -> Iterable[Series]:
    """The engines' series of interest in a Prometheus (or OpenMetrics) text exposition, one by one.

    The lines of our names are found by one regular expression over the whole text, so the
    histograms that make up most of a real engine's exposition (thousands of lines under data
    parallelism) cost no Python per line: the benchmark scrapes on its event loop, beside the
    streams it times."""
    for found in _OUR_LINES.finditer("\n" + text):
        if (series := _parse_line(found[1].strip())) is not None:
            yield series


_Trie = dict[str, "_Trie"]  # a character to the names' rest; "" ends a name


def _one_of(names: Iterable[str]) -> str:
    """A pattern matching any of ``names``, as a trie (`vllm:num_requests_(?:running|waiting)`): a
    line that is none of them fails at its first differing character, not once per name."""
    trie: _Trie = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: _Trie) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items()) if char]
        branches += [""] if "" in node else []
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return pattern(trie)


# A line of one of our names, from its start (the newline before it is a literal the regex engine
# searches for fast), up to its end.
_OUR_LINES = re.compile(r"\n[ \t]*((?:" + _one_of(_WANTED) + r")[{ \t][^\n]*)")

# The text format (prometheus.io/docs/instrumenting/exposition_formats, and OpenMetrics for what
# follows a value): `name{label="value",...} value [timestamp] [# {exemplar labels} value [ts]]`.
# Label values escape `\`, `"` and newlines; labels come in any order.
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*([,}])')
_LABELS_END = re.compile(r"\s*}")
_ESCAPE = re.compile(r"\\(.)")


def _parse_line(line: str) -> Series | None:
    """One sample line as (name, labels, value); None when it is not a finite sample of ours
    (another metric, `_created` and histogram series included, a bad label set, NaN, ±Inf)."""
    name_match = _NAME.match(line)
    if name_match is None or name_match[0] not in _WANTED:
        return None
    position = name_match.end()
    labels: dict[str, str] = {}
    if line.startswith("{", position):
        parsed = _parse_labels(line, position + 1)
        if parsed is None:
            return None
        labels, position = parsed
    rest = line[position:]
    if not rest[:1].isspace():
        return None
    fields = rest.partition("#")[0].split()  # an exemplar (OpenMetrics) follows a `#`
    if not 1 <= len(fields) <= 2:
        return None
    try:
        value = float(fields[0])
        if len(fields) == 2:
            float(fields[1])  # a timestamp: milliseconds (Prometheus) or seconds (OpenMetrics)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return name_match[0], labels, value


def _parse_labels(line: str, position: int) -> tuple[dict[str, str], int] | None:
    """The label set opened just before ``position`` (`a="1",b="x\\"y"}`) and where it ends;
    None when it is not one."""
    labels: dict[str, str] = {}
    while True:
        end = _LABELS_END.match(line, position)
        if end is not None:  # `{}`, or a trailing comma before `}`
            return labels, end.end()
        match = _LABEL.match(line, position)
        if match is None:
            return None
        labels[match[1]] = _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], match[2])
        position = match.end()
        if match[3] == "}":
            return labels, position


def _figure(family: _Family, by_name: Mapping[str, list[tuple[dict[str, str], float]]]) -> float | None:
    """The family's value over every replica, from its newest spelling served; None if none is."""
    series = next((by_name[name] for name in family.spellings if name in by_name), None)
    if not series:
        return None
    replicas: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, value in series:
        if labels.get("priority"):  # SGLang's per-priority breakdown; the total has priority=""
            continue
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in _RANK_LABELS))
        replicas[key] = max(value, replicas.get(key, value))
    return family.combine(list(replicas.values())) if replicas else None


# -- a stretch of time -----------------------------------------------------------------------------


class EngineWindow:
    """Snapshots over one stretch of time (a benchmark level), summed up as the journal keeps them.

    `summary()` holds, for what was served: running/waiting/kv_usage averages and peaks over the
    snapshots, preemptions during the stretch (a counter's delta: two snapshots needed), the
    prefix hit rate (hits over queries during the stretch, else the mean of the gauge) and the
    engine's own generation throughput, gen_tok_s (generated tokens over the time between the
    first and last snapshots that have the counter, else the mean of SGLang's gen_throughput).
    """

    def __init__(self) -> None:
        self.samples: list[EngineMetrics] = []

    def add(self, metrics: EngineMetrics) -> None:
        self.samples.append(metrics)

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in ("running", "waiting", "kv_usage"):
            values = self._values(name)
            if values:
                digits = 4 if name == "kv_usage" else 2
                out[f"{name}_avg"] = round(_mean(values), digits)
                out[f"{name}_peak"] = round(max(values), digits)
        preemptions = self.delta("preemptions_total")
        if preemptions is not None:
            out["preemptions"] = preemptions
        rate = self.prefix_hit_rate()
        if rate is not None:
            out["prefix_hit_rate"] = round(rate, 4)
        tok_s = self.gen_tok_s()
        if tok_s is not None:
            out["gen_tok_s"] = round(tok_s, 1)
        dropped = self.delta("sim_dropped_s_total")
        if dropped is not None:
            out["sim_dropped_s"] = round(dropped, 4)
        return out

    def delta(self, counter: str) -> float | None:
        """How much a counter grew from the first snapshot that has it to the last; a counter
        that went down (the engine restarted) counts from zero."""
        values = self._values(counter)
        if len(values) < 2:
            return None
        return sum(after - before if after >= before else after for before, after in zip(values, values[1:]))

    def gen_tok_s(self) -> float | None:
        """Generated tokens per second over the stretch. vLLM counts tokens as each step emits
        them (vllm/v1/metrics/stats.py, IterationStats); SGLang only when a request finishes
        (TokenizerManager.collect_metrics), so over a short stretch its rate comes in lumps."""
        span = self.span("generation_tokens_total")
        generated = self.delta("generation_tokens_total")
        if span and generated is not None:
            return generated / span
        gauge = self._values("gen_throughput")
        return _mean(gauge) if gauge else None

    def span(self, counter: str) -> float:
        """Seconds from the first snapshot that has the counter to the last one."""
        times = [m.time for m in self.samples if getattr(m, counter) is not None]
        return times[-1] - times[0] if len(times) >= 2 else 0.0

    def prefix_hit_rate(self) -> float | None:
        queries = self.delta("prefix_queries_total")
        hits = self.delta("prefix_hits_total")
        if queries and hits is not None:
            return max(0.0, min(1.0, hits / queries))
        gauge = self._values("prefix_hit_rate")
        return _mean(gauge) if gauge else None

    def _values(self, name: str) -> list[float]:
        return [v for m in self.samples if (v := getattr(m, name)) is not None]


# -- fetching --------------------------------------------------------------------------------------


def metrics_url(server_url: str) -> str:
    """`http://host:8000/metrics` for a server given with or without `/v1`."""
    return server_url.rstrip("/").removesuffix("/v1") + "/metrics"


class _Outage:
    """Says once that the endpoint gives no metrics, and once that it does again."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.failing = False

    def read(self, status: int | None, text: str = "", error: str = "") -> EngineMetrics | None:
        """The figures in a reply (``status`` None: no reply, for ``error``)."""
        if status is not None and status != 200:
            error = f"HTTP {status}"
        metrics = None
        if status is not None and not error:
            metrics = parse_engine_metrics(text, time.time())
            error = "" if metrics is not None else "no vLLM or SGLang metrics in the reply"
        if metrics is None:
            if not self.failing:  # a server without /metrics is normal (SGLang without --enable-metrics)
                log.info("%s: no engine metrics (%s)", self.url, error)
                self.failing = True
            return None
        if self.failing:
            log.info("%s gives engine metrics again", self.url)
            self.failing = False
        return metrics


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class EngineScraper:
    """GET <server>/metrics from a thread; None when the server is down, slow or serves none."""

    def __init__(
        self, server_url: str, *, timeout: float = DEFAULT_TIMEOUT_S, api_key: str | None = None
    ) -> None:
        self.server_url = server_url
        self.url = metrics_url(server_url)
        self._outage = _Outage(self.url)
        self._client = httpx.Client(timeout=timeout, headers=_headers(api_key))

    def scrape(self) -> EngineMetrics | None:
        try:
            response = self._client.get(self.url)
            status, text = response.status_code, response.text
        except Exception as error:  # httpx.HTTPError, a bad encoding, anything: no figures, no crash
            return self._outage.read(None, error=repr(error))
        return self._outage.read(status, text)

    def close(self) -> None:
        self._client.close()


class AsyncEngineScraper:
    """GET <server>/metrics on an event loop; None when the server is down, slow or serves none.

    The benchmark scrapes on the loop that times its streams, so this one uses aiohttp: a GET
    costs the loop ~0.5 ms of CPU where httpx's AsyncClient costs ~2.5 ms (docs/metrics.md). One
    keep-alive connection, opened on the first scrape (a session belongs to a running loop)."""

    def __init__(
        self, server_url: str, *, timeout: float = DEFAULT_TIMEOUT_S, api_key: str | None = None
    ) -> None:
        self.server_url = server_url
        self.url = metrics_url(server_url)
        self._outage = _Outage(self.url)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = _headers(api_key)
        self._session: aiohttp.ClientSession | None = None

    async def scrape(self) -> EngineMetrics | None:
        try:
            if self._session is None:
                connector = aiohttp.TCPConnector(limit=1)
                self._session = aiohttp.ClientSession(
                    connector=connector, timeout=self._timeout, headers=self._headers
                )
            async with self._session.get(self.url) as response:
                status, body = response.status, await response.read()
        except Exception as error:  # aiohttp.ClientError, a timeout, anything: no figures, no crash
            return self._outage.read(None, error=repr(error))
        return self._outage.read(status, body.decode("utf-8", errors="replace"))  # the format is UTF-8

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
