"""Continuous batching for the simulated engine, paced by a performance model on an honest clock.

The model, kept deliberately simple:

- One loop runs decode steps. At the start of a step, waiting sequences are admitted in FIFO
  order while there is room: fewer than ``max_running`` running, and the KV cache can hold the
  whole life of the new sequence (prompt + max_tokens) next to what the running ones reserve.
  Reserving the full length means the sim never has to preempt, like SGLang's conservative
  admission; a lone sequence larger than the cache is still admitted, so nothing waits forever.
- A step lasts ``step_time_s(batch, mean context)``; the step that admits sequences also pays
  ``prefill_time_s`` of their prompt tokens, so prefill stalls decode as on an engine without
  chunked prefill. Every running sequence gets exactly one token at the end of the step.
- A sequence always generates ``max_tokens`` tokens: the sim has no EOS, so ``ignore_eos``
  changes nothing.

The clock is honest: steps are scheduled against absolute ``perf_counter`` deadlines, so
sleep overshoot never accumulates and measured tokens/s match the pacer. A step that starts
more than ``SLIP_S`` late (an overloaded machine) counts as a slip and restarts the schedule
from now instead of bursting to catch up. The loop waits for deadlines in a helper thread:
asyncio's timers count whole milliseconds (and round up twice on some Pythons), waking up to
~2 ms late, while ``time.sleep`` in a thread wakes within ~0.5 ms and burns no CPU spinning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

SLIP_S = 0.002
"""A step starting later than this behind its deadline is a slip."""


class Pacer(Protocol):
    """How long the simulated GPU takes: the performance model behind the batcher."""

    max_running: int
    kv_tokens: int

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        """One decode step for ``batch`` sequences whose mean context is ``context_tokens``."""
        ...

    def prefill_time_s(self, tokens: int) -> float:
        """Prefill of ``tokens`` prompt tokens admitted in one step."""
        ...


@dataclass(frozen=True)
class ConstantPacer:
    """A fixed step time, for tests and for a sim that needs no performance model."""

    step_s: float = 0.01
    prefill_s_per_token: float = 0.0
    max_running: int = 256
    kv_tokens: int = 1 << 30

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        return self.step_s

    def prefill_time_s(self, tokens: int) -> float:
        return tokens * self.prefill_s_per_token


class BatcherClosed(RuntimeError):
    """The batcher was closed (or its loop died) while the sequence was in it."""


class Sequence:
    """One request in the batch: an async iterator of its token positions 0, 1, ..., max_tokens-1.

    Use it as ``async with batcher.submit(p, n) as seq: async for pos in seq: ...`` so that a
    reader that stops early (a client that went away) frees its place in the batch.
    """

    def __init__(self, batcher: Batcher, prompt_tokens: int, max_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.generated = 0
        self._batcher = batcher
        self._out: asyncio.Queue[int | BaseException | None] = asyncio.Queue()

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def reserved_tokens(self) -> int:
        """KV tokens held for the sequence's whole life."""
        return self.prompt_tokens + self.max_tokens

    def cancel(self) -> None:
        """Leave the batch (or the queue) now; harmless once finished."""
        self._batcher._drop(self)

    def __aiter__(self) -> Sequence:
        return self

    async def __anext__(self) -> int:
        item = await self._out.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def __aenter__(self) -> Sequence:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cancel()

    def _push(self, item: int | BaseException | None) -> None:
        self._out.put_nowait(item)


class Batcher:
    """The engine's scheduler: a queue, a running batch and a step loop on the event loop.

    Create it anywhere; its loop task starts on the first ``submit`` inside a running event
    loop and sleeps while there is nothing to do. ``on_step(batch)`` is called at the start of
    every step with the batch size it serves, and with 0 when the engine goes idle.
    """

    def __init__(self, pacer: Pacer, *, on_step: Callable[[int], None] | None = None) -> None:
        self.pacer = pacer
        self.on_step = on_step
        self.steps = 0
        self.tokens_out = 0
        self.slips = 0
        self._waiting: dict[Sequence, None] = {}  # dicts: FIFO order and O(1) removal
        self._running: dict[Sequence, None] = {}
        self._reserved = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_reserved(self) -> int:
        """KV tokens reserved by the running sequences."""
        return self._reserved

    def submit(self, prompt_tokens: int, max_tokens: int) -> Sequence:
        """Queue a request; must be called from the event loop that serves it."""
        if self._closed:
            raise BatcherClosed("the batcher is closed")
        if prompt_tokens < 0 or max_tokens < 1:
            raise ValueError(
                f"need prompt_tokens >= 0 and max_tokens >= 1, got {prompt_tokens}, {max_tokens}"
            )
        seq = Sequence(self, prompt_tokens, max_tokens)
        self._waiting[seq] = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-batcher")
        self._wake.set()
        return seq

    async def close(self) -> None:
        """Stop the loop; sequences still queued or running end with BatcherClosed."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._fail_all(BatcherClosed("the batcher was closed"))

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        clock = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-clock")
        try:
            await self._steps(clock)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken pacer must not leave clients hanging forever
            log.exception("simulated batcher loop died")
            self._closed = True
            self._fail_all(BatcherClosed(f"the batcher loop died: {exc!r}"))
        finally:
            clock.shutdown(wait=False, cancel_futures=True)

    async def _steps(self, clock: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()  # when the next step is due to start
        while True:
            if not self._running and not self._waiting:
                self._notify(0)
                self._wake.clear()
                await self._wake.wait()
                start = time.perf_counter()
            now = time.perf_counter()
            if now - start > SLIP_S:
                self.slips += 1
                start = now  # run late, never burst to catch up
            admitted_tokens = self._admit()
            batch = len(self._running)
            if batch == 0:
                continue  # everything admitted so far was cancelled
            self._notify(batch)
            context = sum(seq.context_tokens for seq in self._running) / batch
            duration = self.pacer.step_time_s(batch, context)
            if admitted_tokens is not None:
                duration += self.pacer.prefill_time_s(admitted_tokens)
            start += duration
            await loop.run_in_executor(clock, _sleep_until, start)
            self._emit()

    def _admit(self) -> int | None:
        """Move waiting sequences into the batch; return their prompt tokens, None if none."""
        admitted: int | None = None
        while self._waiting and len(self._running) < self.pacer.max_running:
            seq = next(iter(self._waiting))
            if self._running and self._reserved + seq.reserved_tokens > self.pacer.kv_tokens:
                break  # strict FIFO: the head waits, and so does everyone behind it
            del self._waiting[seq]
            self._running[seq] = None
            self._reserved += seq.reserved_tokens
            admitted = (admitted or 0) + seq.prompt_tokens
        return admitted

    def _emit(self) -> None:
        """End of a step: one token to every sequence still in the batch."""
        emitted = 0
        for seq in list(self._running):
            seq._push(seq.generated)
            seq.generated += 1
            emitted += 1
            if seq.generated >= seq.max_tokens:
                self._finish(seq)
        self.steps += 1
        self.tokens_out += emitted

    def _finish(self, seq: Sequence) -> None:
        del self._running[seq]
        self._reserved -= seq.reserved_tokens
        seq._push(None)

    def _drop(self, seq: Sequence) -> None:
        if seq in self._waiting:
            del self._waiting[seq]
            seq._push(None)
        elif seq in self._running:
            self._finish(seq)

    def _fail_all(self, exc: BatcherClosed) -> None:
        for seq in [*self._running, *self._waiting]:
            seq._push(exc)
        self._running.clear()
        self._waiting.clear()
        self._reserved = 0

    def _notify(self, batch: int) -> None:
        if self.on_step is None:
            return
        try:
            self.on_step(batch)
        except Exception:  # a display hook must not stop the engine
            log.exception("on_step hook failed")


def _sleep_until(deadline: float) -> None:
    """Block this (clock) thread until ``deadline`` on the perf_counter clock."""
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)
