"""A level spread over worker processes, when one core cannot drive it.

One asyncio loop stamps every chunk it reads; past ~0.7 of a core its wake-ups come late and the
numbers with them (``health``). With ``workers`` N > 1 a level's concurrency is split over N
processes (``python -m cockpit.bench.worker_pool``), each its own event loop (uvloop where
installed) and its own connections, and this process only coordinates:

* **one level state machine.** Workers are plain load generators (``load.Load``): they stream
  each completion's (end, error) here in small batches, and the load generator's one ``_Level``
  finds the warm-up's end and the window in them exactly as for one process, ticks and watches
  the engine. Its "stop" ends every worker's load at once.
* **one time base.** Every time is ``time.perf_counter()``, which on Linux is
  ``clock_gettime(CLOCK_MONOTONIC)``, one clock for every process of the machine (CPython's
  ``Python/pytime.c``; macOS's ``mach_absolute_time`` and Windows' ``QueryPerformanceCounter``
  are system-wide too). A worker's first word is its clock, checked to lie between our send and
  our receive, so a platform where that fails is refused instead of merging skewed times.
* **exact merging.** At the level's end each worker sends its raw request records (arrays of
  chunk times) and its own health; the result is computed from all records together, as for
  one process: percentiles of the merged samples (never averaged percentiles), counts summed,
  tok/s over the one window, the ``requests``-th completion found in the merged records.

Workers start on the first level that needs them and stay for the sweep (their connections stay
open between levels, as one process's do). They are this process's children and never outlive
it: the pool stops them on the way out (Ctrl-C included, losing only the level it interrupts),
and a worker ends by itself when its stdin closes, which is also what happens when this process
dies. A terminal's Ctrl-C reaches the whole process group: workers ignore it and wait for us.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from cockpit.bench.config import BenchConfig
from cockpit.bench.health import MAX_CPU_CORES, MAX_LOOP_LAG_MS, CpuMeter, LoopLag
from cockpit.bench.one_level import Load, OnDone, ProcessHealth
from cockpit.bench.result import LevelSummary
from cockpit.bench.sending import no_gc_pauses, open_transport, raise_open_files_limit, workload_of
from cockpit.bench.transport import Progress, RequestRecord, Transport
from cockpit.bench.workload import Workload
from cockpit.core.benchrequest import MAX_WORKERS
from cockpit.core.errors import CockpitError
from cockpit.system.children import python_module
from cockpit.system.eventloop import run

TARGET_CORES = 0.5  # what "auto" plans a worker to use: the client-limited flag is at 0.7
FLUSH_S = 0.005  # a completion reaches the coordinator within ~5 ms
BEAT_S = 0.25  # running totals for the once-a-second ticks, even with no completion
STOP_WAIT_S = 5.0  # a worker told to go that is still there after this is killed
# Prompt tags (28 bits) in disjoint ranges: the coordinator's own levels count from 0, worker k
# from (k + 1) * TAG_SPACE, so no two requests of a sweep carry the same tag.
TAG_SPACE = (1 << 28) // (MAX_WORKERS + 1)
_HEADER = struct.Struct(">I")
_LOCAL_HOSTS = ("localhost", "::1")


# -- how many -------------------------------------------------------------------------------------


def plan_workers(cfg: BenchConfig, concurrency: int, previous: LevelSummary | None) -> int:
    """Worker processes for a level: ``cfg.workers`` when set, else (``workers=None``, "auto")
    chosen from the level before, as the client-health check measured it.

    Auto: the first level runs in this process. After it, the client CPU the last level took is
    scaled to this level (by concurrency in closed loop, where tok/s grows at most linearly with
    it; as it is in open loop, where the rate stays). One process is kept while that stays under
    the 0.7 of a core at which a level is flagged client-limited; above it the level is split so
    that each worker plans for ``TARGET_CORES`` (0.5). A last level whose own processes were
    CPU- or lag-limited read less than it needed, so this one gets at least twice its workers.
    Never more than the CPUs this process may run on (less one when the server is on this
    machine, which needs its own), nor than the concurrency.
    """
    if cfg.workers is not None:
        return max(1, min(cfg.workers, concurrency))
    if previous is None:
        return 1
    scale = concurrency / previous.concurrency if cfg.rate is None else 1.0
    cores = previous.client_cpu_cores * scale
    wanted = 1 if cores <= MAX_CPU_CORES else math.ceil(cores / TARGET_CORES)
    per_process = previous.worker_cpu_cores or [previous.client_cpu_cores]
    if max(per_process) > MAX_CPU_CORES or previous.loop_lag_p99_ms > MAX_LOOP_LAG_MS:
        wanted = max(wanted, 2 * previous.workers)
    return max(1, min(wanted, concurrency, usable_cpus(cfg.base_url), MAX_WORKERS))


def usable_cpus(server_url: str) -> int:
    """CPUs this process may run on, less one for a server on this machine."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cpus = os.cpu_count() or 1
    host = urlsplit(server_url).hostname or ""
    if host.startswith("127.") or host in _LOCAL_HOSTS:
        cpus -= 1
    return max(1, cpus)


def shares(concurrency: int, workers: int) -> list[int]:
    """A level's concurrency split as evenly as whole streams allow: 1025 over 2 is 513 + 512."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if k < extra else 0) for k in range(workers)]


# -- the coordinator's side -----------------------------------------------------------------------


class WorkerPool:
    """The worker processes of one sweep, started when a level first needs them."""

    def __init__(self, cfg: BenchConfig, model: str) -> None:
        self.cfg = cfg
        self.model = model
        self.workers: list[_Worker] = []

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def source(self, count: int) -> RemoteSource:
        """A level's source on the first ``count`` workers, starting those not running yet."""
        starting = []
        while len(self.workers) < count:
            worker = _Worker(len(self.workers) + 1)
            self.workers.append(worker)  # before it starts: close() stops it whatever happens
            starting.append(worker.start(self.cfg, self.model))
        await asyncio.gather(*starting)
        return RemoteSource(self.workers[:count])

    async def close(self) -> None:
        await asyncio.gather(*(worker.stop() for worker in self.workers))
        self.workers.clear()


class _Worker:
    """One worker process, seen from the coordinator: frames to its stdin, frames from its stdout."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.process: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        self.on_message: Callable[[_Worker, tuple[Any, ...]], None] | None = None
        self.on_exit: Callable[[_Worker, str], None] | None = None
        self.level_over: asyncio.Future[tuple[Any, ...]] | None = None

    async def start(self, cfg: BenchConfig, model: str) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *python_module("cockpit.bench.worker_pool"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        sent = perf_counter()
        self.send(("sweep", cfg, model, self.number))
        try:
            kind, clock = await _read_frame(self._stdout())
        except (asyncio.IncompleteReadError, ConnectionError):
            code = await self.process.wait()
            raise CockpitError(f"bench worker {self.number} did not start (exit code {code})") from None
        received = perf_counter()
        if kind != "ready" or not sent <= clock <= received:
            raise CockpitError(
                f"bench worker {self.number} runs on another clock (perf_counter {clock:.6f} s, "
                f"here {sent:.6f}-{received:.6f} s): its times cannot be merged; use one worker"
            )
        self.reader = asyncio.create_task(self._read())

    def send(self, message: tuple[Any, ...]) -> None:
        assert self.process is not None and self.process.stdin is not None
        if not self.process.stdin.is_closing():
            self.process.stdin.write(_frame(message))

    def _stdout(self) -> asyncio.StreamReader:
        assert self.process is not None and self.process.stdout is not None
        return self.process.stdout

    async def _read(self) -> None:
        why = "exited"
        try:
            while True:
                message = await _read_frame(self._stdout())
                kind = message[0]
                if kind == "level_over":
                    if self.level_over is not None and not self.level_over.done():
                        self.level_over.set_result(message)
                elif kind == "failed":
                    why = f"failed: {message[1]}"
                    break
                elif self.on_message is not None:
                    self.on_message(self, message)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        failure = CockpitError(f"bench worker {self.number} {why}")
        if self.level_over is not None and not self.level_over.done():
            self.level_over.set_exception(failure)
        if self.on_exit is not None:
            self.on_exit(self, str(failure))

    async def stop(self) -> None:
        """Close its stdin (its word to go), wait a little, then kill it."""
        process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), STOP_WAIT_S)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
        finally:
            if self.reader is not None:
                self.reader.cancel()
                await asyncio.gather(self.reader, return_exceptions=True)


class RemoteSource:
    """A level's load on worker processes (see ``loadgen.LevelSource``)."""

    def __init__(self, workers: Sequence[_Worker]) -> None:
        self.workers = list(workers)
        self.progress = Progress()
        self.totals: dict[int, tuple[int, int, int, int]] = {}  # worker: tokens, reads, events, in flight
        self.on_done: OnDone | None = None
        self.failure: asyncio.Future[None] | None = None

    @property
    def in_flight(self) -> int:
        return sum(total[3] for total in self.totals.values())

    @property
    def processes(self) -> int:
        return len(self.workers)

    async def run(
        self, concurrency: int, rate: float | None, rng_key: str, on_done: OnDone, over: asyncio.Event
    ) -> None:
        self.on_done = on_done
        self.failure = asyncio.get_running_loop().create_future()
        for worker, share in zip(self.workers, shares(concurrency, len(self.workers))):
            worker.on_message = self._message
            worker.on_exit = self._exit
            share_rate = rate * share / concurrency if rate else None  # Poisson streams add up
            worker.send(("level", share, share_rate, f"{rng_key}:{worker.number}"))
        await self.failure  # until the level cancels it, or a worker fails

    def _message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        _, completions, tokens, reads, events, in_flight = message
        self.totals[worker.number] = (tokens, reads, events, in_flight)
        self.progress.tokens = sum(total[0] for total in self.totals.values())
        if self.on_done is not None:
            for end, error in completions:
                self.on_done(end, error)

    def _exit(self, worker: _Worker, why: str) -> None:
        if self.failure is not None and not self.failure.done():
            self.failure.set_exception(CockpitError(why))

    def window_opened(self) -> None:
        for worker in self.workers:
            worker.send(("window",))

    async def window_closed(self) -> None:
        for worker in self.workers:
            worker.send(("closed",))

    async def finish(self) -> tuple[list[RequestRecord], list[ProcessHealth]]:
        loop = asyncio.get_running_loop()
        for worker in self.workers:
            worker.on_message = None
            worker.level_over = loop.create_future()
            worker.send(("stop",))
        answers = await asyncio.gather(*(w.level_over for w in self.workers if w.level_over is not None))
        records: list[RequestRecord] = []
        healths: list[ProcessHealth] = []
        for _, worker_records, health in answers:
            records.extend(worker_records)
            healths.append(health)
        return records, healths

    async def abort(self) -> None:
        for worker in self.workers:
            worker.on_message = None
            worker.send(("stop",))


# -- framing ----------------------------------------------------------------------------------------


def _frame(message: tuple[Any, ...]) -> bytes:
    """A length-prefixed pickle: parent and worker are the same program, trusting each other."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


async def _read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    message: tuple[Any, ...] = pickle.loads(await reader.readexactly(size))
    return message


def _write_frame(fd: int, message: tuple[Any, ...]) -> None:
    """Blocking, whole: the coordinator reads all the time, and a worker whose coordinator is
    gone gets BrokenPipeError and ends."""
    view = memoryview(_frame(message))
    while view:
        view = view[os.write(fd, view) :]


# -- the worker process ---------------------------------------------------------------------------


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    channel = os.dup(1)
    os.dup2(2, 1)  # stdout is the coordinator's channel alone: a stray print goes to stderr
    try:
        run(_serve(channel))
    except BrokenPipeError:
        return 1  # the coordinator is gone
    return 0


async def _serve(out: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    try:
        _, cfg, model, number = await _read_frame(reader)
    except asyncio.IncompleteReadError:
        return
    _write_frame(out, ("ready", perf_counter()))
    workload = workload_of(cfg, model)
    raise_open_files_limit(max(cfg.concurrency) + 64)
    indices = itertools.count(number * TAG_SPACE)
    progress = Progress()
    async with open_transport(cfg, cfg.base_url + workload.path, progress) as transport:
        while True:
            try:
                message = await _read_frame(reader)
            except asyncio.IncompleteReadError:
                return  # stdin closed: the coordinator is done with us, or gone
            if message[0] == "level":
                _, share, rate, rng_key = message
                try:
                    with no_gc_pauses():
                        await _level(reader, out, _Sender(transport, workload, indices), share, rate, rng_key)
                except asyncio.IncompleteReadError:
                    return  # stdin closed mid-level: stop; the connections close with us


class _Sender:
    """What a worker's levels share: its transport, workload and prompt numbers."""

    def __init__(self, transport: Transport, workload: Workload, indices: Iterator[int]) -> None:
        self.transport = transport
        self.workload = workload
        self.indices = indices


async def _level(
    reader: asyncio.StreamReader, out: int, sender: _Sender, share: int, rate: float | None, rng_key: str
) -> None:
    """One level's share: send until told to stop, measuring this process over the window."""
    progress = sender.transport.progress
    over = asyncio.Event()
    reporter = _Reporter(out, progress)
    load = Load(
        sender.transport,
        sender.workload,
        sender.indices,
        concurrency=share,
        rate=rate,
        rng_key=rng_key,
        on_done=reporter.add,
        over=over,
    )
    reporter.load = load
    sending = asyncio.create_task(load.run())
    cpu, lag = CpuMeter(), LoopLag()
    health = ProcessHealth()
    reads = events = 0
    measuring = False
    try:
        while True:
            message = await _next_order(reader, out, sending)
            if message[0] == "window":
                reads, events = progress.reads, progress.events
                cpu.start()
                lag.start()
                measuring = True
            elif message[0] == "closed" and measuring:
                measuring = False
                health.cpu_cores = cpu.cores()
                await lag.stop()
                health.lags = lag.lags
                health.reads, health.events = progress.reads - reads, progress.events - events
            elif message[0] == "stop":
                break
    finally:
        over.set()
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        reporter.close()
        await lag.stop()
    _write_frame(out, ("level_over", load.records, health))


async def _next_order(reader: asyncio.StreamReader, out: int, sending: asyncio.Task[None]) -> tuple[Any, ...]:
    """The coordinator's next message; the load failing first (a bug) is reported and raised."""
    order = asyncio.ensure_future(_read_frame(reader))
    await asyncio.wait({order, sending}, return_when=asyncio.FIRST_COMPLETED)
    if order.done():
        return order.result()  # EOF raises IncompleteReadError: the coordinator is gone
    order.cancel()
    error = sending.exception() if not sending.cancelled() else None
    text = f"{type(error).__name__}: {error}" if error is not None else "the load stopped by itself"
    _write_frame(out, ("failed", text))
    raise RuntimeError(text)


class _Reporter:
    """Completions to the coordinator in small batches, with the running totals it ticks on."""

    def __init__(self, out: int, progress: Progress) -> None:
        self.out = out
        self.progress = progress
        self.load: Load | None = None
        self.pending: list[tuple[float, str | None]] = []
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.flush_handle: asyncio.TimerHandle | None = None
        self.beat_handle: asyncio.TimerHandle | None = loop.call_later(BEAT_S, self._beat)

    def add(self, end: float, error: str | None) -> None:
        self.pending.append((end, error))
        if self.flush_handle is None:
            self.flush_handle = self.loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        self.flush_handle = None
        progress = self.progress
        in_flight = self.load.in_flight if self.load is not None else 0
        message = ("done", self.pending, progress.tokens, progress.reads, progress.events, in_flight)
        self.pending = []
        _write_frame(self.out, message)

    def _beat(self) -> None:
        self.flush()
        self.beat_handle = self.loop.call_later(BEAT_S, self._beat)

    def close(self) -> None:
        for handle in (self.flush_handle, self.beat_handle):
            if handle is not None:
                handle.cancel()
        self.flush_handle = self.beat_handle = None


if __name__ == "__main__":
    sys.exit(main())
