"""One level's requests, and what the process that sends them measures about itself.

``Load`` is the sending: a closed loop (C streams, each sending its next request as soon as its
last one ends) or an open loop (Poisson arrivals, at most C in flight; an arrival waiting for a
slot keeps its due time, reported as client queueing). It keeps every request's record from
the moment it is sent and tells its owner about each one that ends. It knows nothing of warm-up
or windows: the load generator (one process) or a worker process of ``workers`` owns it.

``LocalSource`` is a level's load in this process, with the health it measures over the window:
the load generator's ``_Level`` takes either it or ``workers.RemoteSource`` (the same load
spread over worker processes) through the same few calls.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from cockpit.bench.health import CpuMeter, LoopLag
from cockpit.bench.transport import Progress, RequestRecord, Transport
from cockpit.bench.workload import Workload

OnDone = Callable[[float, "str | None"], None]  # (end, error) of each request that ended


@dataclass
class ProcessHealth:
    """One sending process's own measurements over the measured window: its CPU (cores), how
    late its event loop woke (seconds, one sample per 5 ms probe), and its socket reads and the
    SSE events they carried."""

    cpu_cores: float = 0.0
    lags: list[float] = field(default_factory=list)
    reads: int = 0
    events: int = 0


class Load:
    """Sends one level's requests until ``over`` is set; the rest are then cancelled by the owner
    (cancelling ``run``), which closes their connections so the server aborts them."""

    def __init__(
        self,
        transport: Transport,
        workload: Workload,
        indices: Iterator[int],
        *,
        concurrency: int,
        rate: float | None,
        rng_key: str,
        on_done: OnDone,
        over: asyncio.Event,
    ) -> None:
        self.transport = transport
        self.workload = workload
        self.indices = indices
        self.concurrency = concurrency
        self.rate = rate
        self.rng_key = rng_key
        self.on_done = on_done
        self.over = over
        self.records: list[RequestRecord] = []
        self.in_flight = 0

    async def run(self) -> None:
        await (self._open_loop() if self.rate else self._closed_loop())

    async def _closed_loop(self) -> None:
        async def stream() -> None:
            while not self.over.is_set():  # decided: send nothing more, the rest is cancelled
                if (await self._one()).error is not None:
                    await asyncio.sleep(0)  # a request can fail without ever yielding: let others run

        await asyncio.gather(*(stream() for _ in range(self.concurrency)))

    async def _open_loop(self) -> None:
        rate = self.rate
        assert rate is not None
        rng = random.Random(self.rng_key)
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[Any]] = set()

        def finished(task: asyncio.Task[Any]) -> None:
            tasks.discard(task)
            slots.release()

        due = perf_counter()
        try:
            while not self.over.is_set():
                due += rng.expovariate(rate)
                delay = due - perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await slots.acquire()
                if self.over.is_set():
                    slots.release()
                    break
                task: asyncio.Task[Any] = asyncio.create_task(self._one(scheduled=due))
                tasks.add(task)
                task.add_done_callback(finished)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, scheduled: float | None = None) -> RequestRecord:
        """One request, kept in ``records`` from the start so a cancelled one still counts."""
        record = RequestRecord(scheduled=scheduled)
        self.records.append(record)
        self.in_flight += 1
        try:
            await self.transport.request(self.workload.body(next(self.indices)), record)
        finally:
            self.in_flight -= 1
        self.on_done(record.end, record.error)
        return record


class LocalSource:
    """A level's load in this process: the way every level ran before worker processes, and
    still the way at one worker (no process, no pipe: the per-core figures stay the same)."""

    def __init__(self, transport: Transport, workload: Workload, indices: Iterator[int]) -> None:
        self.transport = transport
        self.workload = workload
        self.indices = indices
        self.load: Load | None = None
        self.cpu = CpuMeter()
        self.lag = LoopLag()
        self.measuring = False
        self.reads = self.events = 0
        self.cpu_cores = 0.0

    @property
    def progress(self) -> Progress:
        return self.transport.progress

    @property
    def in_flight(self) -> int:
        return self.load.in_flight if self.load is not None else 0

    @property
    def processes(self) -> int:
        return 1

    async def run(
        self, concurrency: int, rate: float | None, rng_key: str, on_done: OnDone, over: asyncio.Event
    ) -> None:
        self.load = Load(
            self.transport,
            self.workload,
            self.indices,
            concurrency=concurrency,
            rate=rate,
            rng_key=rng_key,
            on_done=on_done,
            over=over,
        )
        await self.load.run()

    def window_opened(self) -> None:
        progress = self.progress
        self.reads, self.events = progress.reads, progress.events
        self.cpu.start()
        self.lag.start()
        self.measuring = True

    async def window_closed(self) -> None:
        """Called as the window ends, before the load stops: the CPU it took to hold the level,
        and no lag probe during the cancelling that follows."""
        if self.measuring:
            self.cpu_cores = self.cpu.cores()
        await self.lag.stop()

    async def finish(self) -> tuple[list[RequestRecord], list[ProcessHealth]]:
        """After the load stopped: every record, and this process's health over the window."""
        await self.lag.stop()
        progress = self.progress
        health = ProcessHealth()
        if self.measuring:
            health = ProcessHealth(
                self.cpu_cores,
                list(self.lag.lags),
                progress.reads - self.reads,
                progress.events - self.events,
            )
        return (self.load.records if self.load is not None else []), [health]

    async def abort(self) -> None:
        await self.lag.stop()
