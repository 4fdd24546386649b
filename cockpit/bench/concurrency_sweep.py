"""The concurrency sweep: per level, a warm-up, a measured window, a result; events as it goes.

Closed loop (the default, what layout comparisons use): C workers, each sending its next request
as soon as its last one ends. The warm-up is the level's first ``warmup`` completions (at least
C, so the first measured batch is not cold); the measured window starts at the last of them,
with the workers still running, so the window sees the level's steady state and no ramp. It ends
at the ``requests``-th completion after that, or after ``duration_s``; whatever is still in
flight is then cancelled (its connection closed, the engine aborts it), so no drained tail with
fewer than C in flight ever counts. Open loop (``rate``): Poisson arrivals, at most C in flight;
an arrival waiting for a slot keeps its due time, and the wait is reported as client queueing.

Another client's load on the same server skews every number, so the engine's /metrics are read
before each level: requests it already runs or queues, when this bench sends none, are another
client's, and a ``Busy`` event says so. A level whose window saw the engine hold more requests
than the level sends is marked ``contended`` (``LevelResult.contended``, journaled in ``extra``),
never compared as clean.

Each finished level is delivered through ``on_event`` before the next starts, so a Ctrl-C
(the caller's task cancelled) loses only the level it interrupts; connections close on the way
out.

The sending itself is ``load.Load``, in this process (``load.LocalSource``) or spread over
worker processes (``workers.RemoteSource``, ``BenchConfig.workers``); either way one ``_Level``
here finds the window in the completions and builds the result from all the raw records.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from time import perf_counter
from typing import Any, Protocol

from cockpit.bench import metrics
from cockpit.bench.config import BenchConfig
from cockpit.bench.health import MIN_ACHIEVED, ClientHealth, assess
from cockpit.bench.metrics import Window
from cockpit.bench.one_level import LocalSource, OnDone, ProcessHealth
from cockpit.bench.result import LevelResult
from cockpit.bench.sending import no_gc_pauses, open_transport, raise_open_files_limit, workload_of
from cockpit.bench.transport import Progress, RequestRecord, is_timeout
from cockpit.bench.worker_pool import WorkerPool, plan_workers
from cockpit.core.errors import CockpitError
from cockpit.core.secrets import redact_text
from cockpit.system.eventloop import run as run  # the bench's loop: uvloop where installed
from cockpit.telemetry.enginemetrics import AsyncEngineScraper, EngineMetrics, EngineWindow

TICK_S = 1.0
BUSY_SCRAPES = 3  # reads of /metrics before a level that must all show load for it to be another's
BUSY_PAUSE_S = 0.5  # between them: the last level's cancelled requests take a moment to be aborted
ENGINE_TIMEOUT_S = 2.0  # a /metrics slower than this gives no figures for that scrape
GIVE_UP_AFTER = 8  # a warm-up whose first 8 (and at least C) requests all failed: not measured


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelStart:
    concurrency: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "level_start", "concurrency": self.concurrency}


@dataclass(frozen=True)
class Tick:
    """About once a second inside the measured window; tok_s is over the last tick's span."""

    concurrency: int
    elapsed_s: float
    tok_s: float
    requests_done: int
    in_flight: int
    errors: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "tick", **{f.name: getattr(self, f.name) for f in fields(self)}}


@dataclass(frozen=True)
class Busy:
    """Before a level: the server already runs (or queues) requests this bench did not send."""

    concurrency: int
    requests: int

    @property
    def message(self) -> str:
        return (
            f"the server already runs {self.requests} requests not from this bench: "
            f"numbers at C={self.concurrency} are contended"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "busy",
            "concurrency": self.concurrency,
            "requests": self.requests,
            "message": self.message,
        }


@dataclass(frozen=True)
class LevelDone:
    result: LevelResult

    def to_json(self) -> dict[str, Any]:
        return {"type": "level_done", "result": self.result.to_json()}


@dataclass(frozen=True)
class SweepDone:
    results: tuple[LevelResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "sweep_done", "results": [r.to_json() for r in self.results]}


Event = LevelStart | Busy | Tick | LevelDone | SweepDone


# -- the sweep ------------------------------------------------------------------------------------


async def run_sweep(
    cfg: BenchConfig, on_event: Callable[[object], None], *, keep_records: bool = False
) -> list[LevelResult]:
    """Every level of ``cfg`` in order; each LevelDone is emitted before the next level starts.

    ``keep_records`` leaves each level's raw RequestRecords on its result (for tests and
    analysis; they cost memory: one float per token).
    """
    model = cfg.model or await discover_model(cfg.base_url, cfg.api_key, timeout=cfg.timeout)
    workload = workload_of(cfg, model)
    raise_open_files_limit(max(cfg.concurrency) + 64)
    indices = itertools.count()  # request numbers across the sweep: every prompt tag is unique
    progress = Progress()
    results: list[LevelResult] = []
    engine = AsyncEngineScraper(cfg.base_url, timeout=min(cfg.timeout, ENGINE_TIMEOUT_S), api_key=cfg.api_key)
    try:
        async with (
            open_transport(cfg, cfg.base_url + workload.path, progress) as transport,
            WorkerPool(cfg, model) as pool,
        ):
            for concurrency in cfg.concurrency:
                on_event(LevelStart(concurrency))
                busy = await busy_requests(engine)
                if busy:
                    on_event(Busy(concurrency, busy))
                workers = plan_workers(cfg, concurrency, results[-1] if results else None)
                source: LevelSource = (
                    await pool.source(workers) if workers > 1 else LocalSource(transport, workload, indices)
                )
                level = _Level(cfg, concurrency, source, on_event, model, engine, busy_before=busy or 0)
                with no_gc_pauses():
                    result = await level.run()
                if keep_records:
                    result = replace(result, records=tuple(level.records), window=level.window)
                results.append(result)
                on_event(LevelDone(result))
    finally:
        await engine.aclose()
    on_event(SweepDone(tuple(results)))
    return results


async def busy_requests(
    engine: AsyncEngineScraper, scrapes: int = BUSY_SCRAPES, pause_s: float = BUSY_PAUSE_S
) -> int | None:
    """Requests the engine runs or queues while this bench sends none: another client's. The
    least of up to ``scrapes`` reads ``pause_s`` apart, so the last level's cancelled requests,
    still being aborted, are not taken for another's; an idle server costs one read. None when
    the server serves no running or waiting figures."""
    seen: list[int] = []
    for attempt in range(scrapes):
        if attempt:
            await asyncio.sleep(pause_s)
        held = _held(await engine.scrape())
        if held is None:
            break
        seen.append(held)
        if held == 0:
            break
    return min(seen) if seen else None


def _held(metrics: EngineMetrics | None) -> int | None:
    """Running plus waiting requests in one scrape; None when it has neither figure."""
    if metrics is None or (metrics.running is None and metrics.waiting is None):
        return None
    return round((metrics.running or 0) + (metrics.waiting or 0))


def contention(
    samples: Sequence[EngineMetrics], concurrency: int, busy_before: int = 0
) -> dict[str, int] | None:
    """Another client's load at a level, from the engine's scrapes over its window: at some
    scrape it held (ran or queued) more requests than the level keeps in flight, which only
    another client's requests can make (a closed loop holds at most C, an open loop caps at C).
    Without a scrape in the window, requests seen before the level (``busy_before``) say it.
    None when nothing says so."""
    held = [h for m in samples if (h := _held(m)) is not None]
    if held and max(held) > concurrency:
        seen = {
            "requests_peak": max(held),
            "running_peak": max((round(m.running) for m in samples if m.running is not None), default=0),
            "waiting_peak": max((round(m.waiting) for m in samples if m.waiting is not None), default=0),
            "concurrency": concurrency,
        }
    elif not held and busy_before > 0:
        seen = {"concurrency": concurrency}
    else:
        return None
    if busy_before > 0:
        seen["busy_before"] = busy_before
    return seen


async def discover_model(base_url: str, api_key: str | None = None, *, timeout: float = 10.0) -> str:
    """The first model id the server lists (GET /v1/models); httpx, as this is not the hot path.
    A listing comes at once even from a busy engine: at most 30 s, however long ``timeout``."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = f"{base_url}/v1/models"
    where = redact_text(url)  # what messages say: a URL's password is never shown
    try:
        async with httpx.AsyncClient(timeout=min(timeout, 30.0)) as http:
            response = await http.get(url, headers=headers)
    except httpx.HTTPError as err:
        raise CockpitError(
            f"cannot reach {where} ({type(err).__name__}): is the server up? Or pass --model"
        ) from None
    if response.status_code != 200:
        raise CockpitError(
            f"{where} answered HTTP {response.status_code}: pass --model (and check the API key)"
        )
    try:
        return str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise CockpitError(f"{where} lists no model: pass --model") from None


# -- one level --------------------------------------------------------------------------------------


class LevelSource(Protocol):
    """Where a level's load runs: ``load.LocalSource`` (this process) or ``workers.RemoteSource``
    (worker processes). ``run`` sends until ``over`` is set and is then cancelled; ``finish``
    hands back every record and each process's health over the window."""

    @property
    def progress(self) -> Progress: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def processes(self) -> int: ...

    async def run(
        self, concurrency: int, rate: float | None, rng_key: str, on_done: OnDone, over: asyncio.Event
    ) -> None: ...

    def window_opened(self) -> None: ...

    async def window_closed(self) -> None: ...

    async def finish(self) -> tuple[list[RequestRecord], list[ProcessHealth]]: ...

    async def abort(self) -> None: ...


class _Level:
    """One concurrency level: finds the window in the completions its source reports, ticks,
    watches the engine, builds the result from the records the source hands back."""

    def __init__(
        self,
        cfg: BenchConfig,
        concurrency: int,
        source: LevelSource,
        on_event: Callable[[object], None],
        model: str = "",
        engine: AsyncEngineScraper | None = None,
        *,
        busy_before: int = 0,
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.busy_before = busy_before  # requests not ours the engine held as the level began
        self.engine_window = EngineWindow()
        self.model = model
        self.concurrency = concurrency
        self.source = source
        self.on_event = on_event
        self.warmup = cfg.warmup_requests(concurrency)
        self.target = cfg.measured_requests(concurrency)
        self.records: list[RequestRecord] = []
        self.warm_done = self.warm_failed = 0
        self.done = self.failed = 0  # completions (and failures among them) since the window opened
        self.failing = 0  # failures in a row
        self.timing_out = 0  # timeouts in a row: each one is the server silent for the whole bound
        self.warm_timeouts = 0
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.reached_target = False
        self.warm = asyncio.Event()
        self.over = asyncio.Event()

    async def run(self) -> LevelResult:
        source = self.source
        rng_key = f"{self.cfg.seed}:{self.concurrency}"
        load = asyncio.create_task(
            source.run(self.concurrency, self.cfg.rate, rng_key, self._finished, self.over)
        )
        ticker: asyncio.Task[None] | None = None
        watcher: asyncio.Task[None] | None = None
        try:
            if self.warmup == 0:
                self._open_window(perf_counter())
            await _until(self.warm, load)
            if not self.over.is_set():
                source.window_opened()
                ticker = asyncio.create_task(self._ticks())
                if self.engine is not None:
                    watcher = asyncio.create_task(self._watch_engine(self.engine))
                await self._wait_window(load)
            await source.window_closed()
        except BaseException:
            await _stop(load, ticker, watcher)
            await source.abort()
            raise
        await _stop(load, ticker, watcher)
        failure = ticker.exception() if ticker is not None and not ticker.cancelled() else None
        if failure is not None:
            await source.abort()
            raise failure  # the caller's on_event failed
        self.records, health = await source.finish()
        if self.reached_target:
            self._exact_end()
        return self._result(health)

    # -- completions ------------------------------------------------------------------------------

    def _finished(self, end: float, error: str | None) -> None:
        timed_out = is_timeout(error)
        if not self.warm.is_set():
            self.warm_done += 1
            self.warm_failed += error is not None
            self.warm_timeouts += timed_out
            if self.warm_failed == self.warm_done:  # nothing served yet
                # Failing fast, 8 tries tell a blip from a dead server; each timeout already
                # waited the whole bound, so a warm-up's worth of them is enough.
                enough = self.warmup if self.warm_timeouts else max(self.warmup, GIVE_UP_AFTER)
                if self.warm_done >= max(1, enough):
                    self._open_window(end)
                    self._close_window(end)  # nothing served: do not hammer it for a window
            elif self.warm_done >= self.warmup:
                self._open_window(end)
            return
        if self.over.is_set():
            return
        self.done += 1
        self.failed += error is not None
        self.failing = self.failing + 1 if error is not None else 0
        self.timing_out = self.timing_out + 1 if timed_out else 0
        if self.target is not None and self.done >= self.target:
            self.reached_target = True
            self._close_window(end)
        elif self.failing >= max(100, 10 * self.concurrency) or self.timing_out >= self.concurrency:
            self._close_window(end)  # the server stopped answering: the reasons are known, stop

    def _open_window(self, at: float) -> None:
        self.window_start = at
        self.warm.set()

    def _close_window(self, at: float) -> None:
        self.window_end = at
        self.over.set()

    @property
    def window(self) -> Window | None:
        if self.window_start is None or self.window_end is None:
            return None
        return Window(self.window_start, self.window_end)

    def _exact_end(self) -> None:
        """The window closed at its ``requests``-th completion: that completion's own end, from the
        records. Worker processes report completions a few ms apart and out of order, so the one
        counted last may not be the one that ended last; in one process this changes nothing."""
        assert self.window_start is not None and self.target is not None
        start = self.window_start
        ends = sorted(r.end for r in self.records if not r.cancelled and r.end > start)
        if len(ends) >= self.target:
            self.window_end = ends[self.target - 1]

    async def _wait_window(self, load: asyncio.Task[None]) -> None:
        assert self.window_start is not None
        if self.cfg.duration_s is None:
            await _until(self.over, load)
            return
        deadline = self.window_start + self.cfg.duration_s
        try:
            await asyncio.wait_for(_until(self.over, load), timeout=max(0.0, deadline - perf_counter()))
        except asyncio.TimeoutError:
            self._close_window(deadline)

    async def _watch_engine(self, engine: AsyncEngineScraper) -> None:
        """The engine's /metrics at the window's start and about once a second after, into
        ``engine_window``; a scrape still unanswered when the window ends is dropped."""
        assert self.window_start is not None
        due = self.window_start
        while True:
            metrics = await engine.scrape()
            if metrics is not None and not self.over.is_set():
                self.engine_window.add(metrics)
            due = max(due + TICK_S, perf_counter())
            await asyncio.sleep(due - perf_counter())

    async def _ticks(self) -> None:
        assert self.window_start is not None
        progress = self.source.progress
        last_time, last_tokens = perf_counter(), progress.tokens
        due = self.window_start
        while True:
            due += TICK_S
            await asyncio.sleep(max(0.0, due - perf_counter()))
            now, tokens = perf_counter(), progress.tokens
            tok_s = (tokens - last_tokens) / (now - last_time) if now > last_time else 0.0
            last_time, last_tokens = now, tokens
            elapsed = now - self.window_start
            self.on_event(
                Tick(self.concurrency, elapsed, tok_s, self.done, self.source.in_flight, self.failed)
            )

    # -- the result ------------------------------------------------------------------------------

    def _result(self, processes: list[ProcessHealth]) -> LevelResult:
        assert self.window_start is not None and self.window_end is not None
        window = Window(self.window_start, self.window_end)
        records = self.records
        k = metrics.tokens_per_chunk(records)
        completed = metrics.completed_in(records, window)
        reasons = metrics.errors_in(records, window)
        if window.length == 0:  # every warm-up request failed
            reasons = metrics.errors_in(records, Window(-math.inf, math.inf))
        errors = sum(reasons.values())
        finished = len(completed) + errors
        closed = self.cfg.rate is None and errors <= 0.05 * max(1, finished)
        health = assess_processes(
            processes,
            achieved_concurrency=metrics.mean_concurrency(records, window),
            target_concurrency=self.concurrency if closed and window.length > 0 else None,
        )
        output_tokens = metrics.output_tokens_in(records, window, k)
        failure = level_failure(len(completed), reasons, output_tokens)
        spread = len(processes) > 1
        output_tok_s = output_tokens / window.length if window.length else 0.0
        slo = self.cfg.slo
        good = metrics.goodput(completed, slo) if slo is not None else None
        return LevelResult(
            concurrency=self.concurrency,
            rate=self.cfg.rate,
            input_len=self.cfg.input_len,
            output_len=self.cfg.output_len,
            requests=len(completed),
            errors=errors,
            error_reasons=dict(reasons.most_common()),
            duration_s=window.length,
            output_tok_s=output_tok_s,
            request_s=metrics.request_s(records, window),
            output_tokens=output_tokens,
            ttft_ms=metrics.ttft(completed),
            tpot_ms=metrics.tpot(completed),
            itl_ms=metrics.itl(records, window, k),
            e2e_ms=metrics.e2e(completed),
            queue_ms=metrics.queueing(completed),
            series=metrics.series(records, window, TICK_S, k),
            token_mismatches=sum(r.token_mismatch for r in completed),
            tokens_per_chunk=k,
            peak_concurrency=metrics.peak_concurrency(records, window),
            achieved_concurrency=health.achieved_concurrency,
            client_cpu_cores=health.cpu_cores,
            loop_lag_p99_ms=health.loop_lag_p99_ms,
            loop_lag_max_ms=health.loop_lag_max_ms,
            events_per_read=health.events_per_read,
            client_limited=health.limited,
            client_note=health.note,
            warmup=self.warmup,
            model=self.model,
            endpoint=self.cfg.endpoint,
            sent=len(records),
            cancelled=sum(r.cancelled for r in records),
            failed=failure is not None,
            error=failure,
            contended=contention(self.engine_window.samples, self.concurrency, self.busy_before),
            engine=self.engine_window.summary(),
            workers=len(processes),
            worker_cpu_cores=[p.cpu_cores for p in processes] if spread else [],
            worker_loop_lag_p99_ms=[_lag_p99_ms(p.lags) for p in processes] if spread else [],
            slo=slo,
            good_requests=good.good_requests if good is not None else None,
            goodput_tok_s=output_tok_s * good.token_share if good is not None else None,
            goodput_request_s=(
                (good.good_requests / window.length if window.length else 0.0) if good is not None else None
            ),
        )


async def _stop(*tasks: asyncio.Task[None] | None) -> None:
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def _lag_p99_ms(lags: list[float]) -> float:
    return metrics.percentile(lags, 99) * 1e3 if lags else 0.0


def assess_processes(
    processes: list[ProcessHealth], *, achieved_concurrency: float, target_concurrency: int | None
) -> ClientHealth:
    """The client's health from each sending process's own: the CPU of all of them (cores), the
    event-loop lag of every probe of every process together, and client-limited when any one
    process was (a process past 0.7 of a core or 5 ms of lag stamps late, whatever the others
    do) or the level held too few requests in flight. One process: exactly ``health.assess``."""
    reads = sum(p.reads for p in processes)
    events = sum(p.events for p in processes)
    lags = [lag for p in processes for lag in p.lags]
    merged = assess(
        cpu_cores=sum(p.cpu_cores for p in processes),
        loop_lag_p99_ms=_lag_p99_ms(lags),
        loop_lag_max_ms=max(lags, default=0.0) * 1e3,
        achieved_concurrency=achieved_concurrency,
        target_concurrency=target_concurrency,
        events_per_read=events / reads if reads else 0.0,
    )
    if len(processes) == 1:
        return merged
    reasons = []
    for number, process in enumerate(processes, 1):
        own = assess(
            cpu_cores=process.cpu_cores,
            loop_lag_p99_ms=_lag_p99_ms(process.lags),
            achieved_concurrency=0.0,
            target_concurrency=None,
        )
        if own.limited:
            reasons.append(f"worker {number}: {own.note}")
    if target_concurrency and achieved_concurrency < MIN_ACHIEVED * target_concurrency:
        reasons.append(f"held {achieved_concurrency:.1f} of {target_concurrency} requests in flight")
    return replace(merged, limited=bool(reasons), note="; ".join(reasons))


def level_failure(completed: int, reasons: Counter[str], output_tokens: float) -> str | None:
    """Why a level's numbers must not be compared (None when they can): more than half of the
    requests that ended failed, or no token came back."""
    errors = sum(reasons.values())
    finished = completed + errors
    if errors * 2 > finished or output_tokens <= 0:
        if reasons:
            reason, _ = reasons.most_common(1)[0]
            return f"{errors} of {finished} requests failed: {reason}"
        return "no token came back"
    return None


async def _until(event: asyncio.Event, load: asyncio.Task[None]) -> None:
    """Wait for ``event``; if the load task dies first (a bug), raise its error instead of hanging."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter, load}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not event.is_set():
        load.result()
        raise RuntimeError("the load generator stopped before the level ended")
