"""The client measures itself, because a saturated client lies in both directions.

When the client's core is busy, tokens sit in socket buffers and are read in bursts: per-gap
ITL p50 collapses towards 0, p99 and TTFT inflate, while mean ITL still looks right
(perf/bench_client.py shows it against a server pacing tokens exactly 10 ms apart). So each
level carries the client's CPU, its event-loop lag and the concurrency it really held, and is
flagged ``client_limited`` when any of them says the client, not the server, set the pace.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from cockpit.bench.metrics import percentile

MAX_CPU_CORES = 0.7  # asyncio is one thread: past ~70% of a core its wake-ups come late
MAX_LOOP_LAG_MS = 5.0
MIN_ACHIEVED = 0.95  # of the target concurrency, closed loop
LAG_PROBE_S = 0.005


class LoopLag:
    """A task that sleeps 5 ms at a time and records how late it wakes.

    Every stream's timestamps wait behind the same loop, so this lateness is the error a busy
    loop adds to the numbers. (An idle asyncio loop wakes ~0.1-1 ms late on its own.)
    """

    def __init__(self, interval_s: float = LAG_PROBE_S) -> None:
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._probe(), name="bench-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _probe(self) -> None:
        clock, interval = time.perf_counter, self.interval_s
        while True:
            due = clock() + interval
            await asyncio.sleep(interval)
            self.lags.append(max(0.0, clock() - due))

    def p99_ms(self) -> float:
        return percentile(self.lags, 99) * 1e3 if self.lags else 0.0

    def max_ms(self) -> float:
        return max(self.lags, default=0.0) * 1e3


class CpuMeter:
    """This process's CPU time (user + system, all threads) over a stretch of wall time."""

    def __init__(self) -> None:
        self._cpu = self._wall = 0.0

    def start(self) -> None:
        times = os.times()
        self._cpu, self._wall = times.user + times.system, time.perf_counter()

    def cores(self) -> float:
        """CPU seconds per wall second since start: 1.0 is one core fully busy."""
        times = os.times()
        wall = time.perf_counter() - self._wall
        return (times.user + times.system - self._cpu) / wall if wall > 0 else 0.0


@dataclass(frozen=True)
class ClientHealth:
    cpu_cores: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    achieved_concurrency: float  # mean requests in flight over the window
    events_per_read: float  # SSE events per socket read; climbs when the client reads late
    limited: bool
    note: str  # why it is limited, "" when it is not


def assess(
    *,
    cpu_cores: float,
    loop_lag_p99_ms: float,
    loop_lag_max_ms: float = 0.0,
    achieved_concurrency: float,
    target_concurrency: int | None,
    events_per_read: float = 0.0,
) -> ClientHealth:
    """client_limited = CPU > 0.7 cores, or loop lag p99 > 5 ms, or (closed loop) achieved
    concurrency < 95% of the target; the note names every reason that held.

    ``target_concurrency`` None skips the concurrency check (open loop, or a level whose
    requests failed fast, where the server emptied the pipeline).
    """
    reasons = []
    if cpu_cores > MAX_CPU_CORES:
        reasons.append(f"client CPU {cpu_cores:.2f} cores > {MAX_CPU_CORES}")
    if loop_lag_p99_ms > MAX_LOOP_LAG_MS:
        reasons.append(f"event-loop lag p99 {loop_lag_p99_ms:.1f} ms > {MAX_LOOP_LAG_MS:g} ms")
    if target_concurrency and achieved_concurrency < MIN_ACHIEVED * target_concurrency:
        reasons.append(f"held {achieved_concurrency:.1f} of {target_concurrency} requests in flight")
    return ClientHealth(
        cpu_cores=cpu_cores,
        loop_lag_p99_ms=loop_lag_p99_ms,
        loop_lag_max_ms=loop_lag_max_ms,
        achieved_concurrency=achieved_concurrency,
        events_per_read=events_per_read,
        limited=bool(reasons),
        note="; ".join(reasons),
    )
