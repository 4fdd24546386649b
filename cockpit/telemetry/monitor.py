"""Polls a GPU source on its own thread and keeps what the screens and experiments need.

NVML and HTTP calls block, so sampling never runs on the event loop: a daemon thread polls,
then sleeps until the next tick (polls never overlap, a slow poll skips ticks rather than
bunching them). Screens read `latest()` / `history()` or subscribe; experiments ask for the
peak memory each of their GPUs reached while they ran.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from cockpit.telemetry.base import GpuSample, GpuSource, unknown_sample

log = logging.getLogger(__name__)

Subscriber = Callable[[list[GpuSample]], None]


class Monitor:
    """A sampling thread over one source, with bounded per-GPU history and peak tracking."""

    def __init__(self, source: GpuSource, interval: float = 1.0, history: int = 300) -> None:
        if interval <= 0 or history < 1:
            raise ValueError(f"interval must be > 0 and history >= 1, not {interval} and {history}")
        self.source = source
        self.interval = interval
        self._history_length = history
        self._lock = threading.Lock()  # guards the state below; never held while polling
        self._poll_lock = threading.Lock()  # one poll at a time: the thread's and sample_now()'s
        self._latest: list[GpuSample] = []
        self._history: dict[int, deque[GpuSample]] = {}
        self._subscribers: list[Subscriber] = []
        self._peaks: dict[int, tuple[frozenset[int], dict[int, int]]] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    # Reading

    def latest(self) -> list[GpuSample]:
        """The last poll's samples, in index order; empty before the first poll."""
        with self._lock:
            return list(self._latest)

    def history(self, index: int) -> list[GpuSample]:
        """GPU `index`'s samples, oldest first, at most `history` of them."""
        with self._lock:
            return list(self._history.get(index, ()))

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(samples)` after every poll, on the polling thread; returns unsubscribe."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # Experiments

    def track(self, experiment_id: int, gpus: Sequence[int]) -> None:
        """Record, from the next poll on, the most memory each of `gpus` holds."""
        with self._lock:
            self._peaks[experiment_id] = (frozenset(gpus), {})

    def peaks(self, experiment_id: int) -> dict[int, int]:
        """GPU index -> most bytes used since `track`; a GPU never read yet is absent."""
        with self._lock:
            _, peaks = self._peaks.get(experiment_id, ((), {}))
            return dict(peaks)

    def untrack(self, experiment_id: int) -> dict[int, int]:
        """Stop tracking the experiment and return its peaks."""
        with self._lock:
            _, peaks = self._peaks.pop(experiment_id, ((), {}))
            return dict(peaks)

    # Polling

    def sample_now(self) -> list[GpuSample]:
        """Poll once on the calling thread, record it, tell subscribers, and return it."""
        with self._poll_lock:
            samples = self._poll()
            with self._lock:
                self._record(samples)
                subscribers = list(self._subscribers)
            for callback in subscribers:
                try:
                    callback(list(samples))
                except Exception:  # one broken screen must not stop the others or the thread
                    log.exception("GPU monitor subscriber %r failed", callback)
            return samples

    def _poll(self) -> list[GpuSample]:
        """The source's samples; when it raises anyway, the last GPUs known with every reading n/a."""
        try:
            samples = list(self.source.sample())
        except Exception:
            if not self._failing:  # once per outage, not once a second
                log.exception("GPU source %s failed; showing n/a", getattr(self.source, "name", "?"))
                self._failing = True
            now = time.time()
            return [unknown_sample(s.index, s.name, now) for s in self.latest()]
        self._failing = False
        return samples

    def _record(self, samples: list[GpuSample]) -> None:
        self._latest = samples
        for sample in samples:
            history = self._history.get(sample.index)
            if history is None:
                history = self._history[sample.index] = deque(maxlen=self._history_length)
            history.append(sample)
            if sample.memory_used is None:
                continue
            for gpus, peaks in self._peaks.values():
                if sample.index in gpus:
                    peaks[sample.index] = max(peaks.get(sample.index, 0), sample.memory_used)

    # Thread

    def start(self) -> Monitor:
        """Start the polling thread (once; starting a running monitor does nothing)."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="cockpit-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread to finish its current poll."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        tick = time.monotonic()
        while not self._stopping.is_set():
            try:
                self.sample_now()
            except Exception:  # sample_now guards itself; this is the last line of defence
                log.exception("GPU monitor poll failed")
            tick += self.interval
            delay = tick - time.monotonic()
            if delay < 0:  # the poll outran the interval: skip the missed ticks
                tick, delay = time.monotonic(), 0.0
            self._stopping.wait(delay)

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
