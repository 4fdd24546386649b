"""Continuous batching for the simulated engine, paced by a performance model on an honest clock.

The model, kept deliberately simple, is vLLM's v1 scheduler with chunked prefill
(vllm/v1/core/sched/scheduler.py, ``schedule``: running requests first, then waiting ones with
what is left of the step's token budget); docs/performance.md#the-workload explains the choice:

- One loop runs steps. A step has a token budget, ``token_budget`` (the engine's
  ``max_num_batched_tokens``, SGLang's ``chunked_prefill_size``; None: unlimited, whole prompts,
  as an engine without chunked prefill). Running sequences come first, in arrival order: one
  token each for those decoding, the next chunk of the prompt for those still prefilling.
- Then waiting sequences are admitted in FIFO order while budget is left and there is room:
  fewer than ``max_running`` running, and the KV cache can hold the whole life of the new
  sequence (prompt + max_tokens) next to what the running ones reserve. Reserving the full length
  means the sim never has to preempt, like SGLang's conservative admission; a lone sequence
  larger than the cache is still admitted, so nothing waits forever. An admitted sequence gets
  as much of its prompt as the budget leaves; the rest comes in later steps.
- A step lasts ``step_time_s(emitting, their mean context)`` plus ``prefill_time_s`` of the
  prompt tokens it prefills. The sequences that emit are those decoding and those whose last
  chunk ran in this step: each gets exactly one token at the end of the step, so a sequence's
  first token comes at the end of the step that finished its prompt. The total prefill work of a
  request is the same with or without chunks; chunks spread its stall over several steps.
- A sequence always generates ``max_tokens`` tokens: the sim has no EOS, so ``ignore_eos``
  changes nothing.

The clock is honest: steps are scheduled against absolute deadlines on a ``Clock``, by default
``RealClock`` (``perf_counter``), so sleep overshoot never accumulates and measured tokens/s
match the pacer. ``cockpit.sim.pacing`` holds the rule: the schedule is kept (a deadline follows
the previous deadline, not the time the loop got round to it), lateness is measured when the
clock wakes, a wake more than ``SLIP_S`` late is a slip, a late step's successor catches up at
most half its own duration (no bursts), and what the engine cannot catch up is dropped, counted
and logged. The real clock waits for deadlines in a helper thread: asyncio's timers count whole
milliseconds (and round up twice on some Pythons), waking up to ~2 ms late, while
``time.sleep`` in a thread wakes within ~0.5 ms and burns no CPU spinning. ``VirtualClock``
jumps to each deadline at once, so a test can serve minutes of simulated load in a fraction of
a second with the same scheduling.

Tokens reach a sequence's reader in one of two ways. By default a ``Sequence`` is an async
iterator (a queue: one task wake-up per token, fine for tests and in-process clients). A
``TokenSink`` given to ``submit`` is called synchronously at the end of each step instead,
with no queue and no task switch: the HTTP server writes each stream's SSE frame from there,
which is what lets one core keep the clock at a batch of 1024 (docs/simulator.md#keeping-the-clock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from .pacing import Pace

log = logging.getLogger(__name__)


class Pacer(Protocol):
    """How long the simulated GPU takes: the performance model behind the batcher."""

    @property
    def max_running(self) -> int:
        """The engine's cap on running sequences."""
        ...

    @property
    def kv_tokens(self) -> int:
        """KV cache tokens the running sequences' reservations must fit in."""
        ...

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        """One decode step for ``batch`` sequences whose mean context is ``context_tokens``."""
        ...

    def prefill_time_s(self, tokens: int) -> float:
        """Prefill of ``tokens`` prompt tokens (whole prompts or chunks) computed in one step."""
        ...

    def kv_cost(self, tokens: int) -> int:
        """What a sequence of ``tokens`` holds of ``kv_tokens`` for its whole life: its tokens, or
        more where the engine's pool charges whole blocks and a hybrid model's state."""
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

    def kv_cost(self, tokens: int) -> int:
        return tokens


class Clock(Protocol):
    """Where the batcher reads the time and waits for a step's deadline."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` (or at once if it has passed), letting other tasks run meanwhile."""
        ...

    def close(self) -> None:
        """Release what waiting needed; the clock may be used again afterwards."""
        ...


class RealClock:
    """``perf_counter``, waited on in a helper thread (see the module docstring for why)."""

    def __init__(self) -> None:
        self._thread: ThreadPoolExecutor | None = None

    def now(self) -> float:
        return time.perf_counter()

    async def sleep_until(self, deadline: float) -> None:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-clock")
        await asyncio.get_running_loop().run_in_executor(self._thread, _sleep_until, deadline)

    def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False, cancel_futures=True)


class VirtualClock:
    """Simulated time for tests: a wait lets every other ready task run, then jumps to the deadline.

    Clients woken by a step's tokens run (and send their next request) at the time the step
    ended, as they would with no network between them and the engine; nothing ever sleeps.
    """

    YIELDS = 8  # event-loop turns given to other tasks before the jump: a client's whole turnaround

    def __init__(self, start: float = 0.0) -> None:
        self.time = start

    def now(self) -> float:
        return self.time

    async def sleep_until(self, deadline: float) -> None:
        for _ in range(self.YIELDS):
            await asyncio.sleep(0)
        self.time = max(self.time, deadline)

    def close(self) -> None:
        pass


class BatcherClosed(RuntimeError):
    """The batcher was closed (or its loop died) while the sequence was in it."""


class TokenSink(Protocol):
    """Where a sequence's tokens go, called on the event loop as each step ends."""

    def token(self, position: int) -> None:
        """Token ``position`` (0, 1, ...) was generated. Called for every sequence of the step in
        turn, so it must not block; ``Sequence.generated`` already counts it."""
        ...

    def end(self, error: BatcherClosed | None) -> None:
        """No more tokens: all generated or the sequence cancelled (None), or the batcher closed
        or died, or ``token`` raised (the error). Called once."""
        ...


class _Queue:
    """The default sink: tokens queued for ``async for`` (one task wake-up per token)."""

    def __init__(self) -> None:
        self.items: asyncio.Queue[int | BatcherClosed | None] = asyncio.Queue()

    def token(self, position: int) -> None:
        self.items.put_nowait(position)

    def end(self, error: BatcherClosed | None) -> None:
        self.items.put_nowait(error)


class Sequence:
    """One request in the batch: an async iterator of its token positions 0, 1, ..., max_tokens-1,
    unless a ``TokenSink`` was given to ``submit``, which then gets them.

    Use it as ``async with batcher.submit(p, n) as seq: async for pos in seq: ...`` so that a
    reader that stops early (a client that went away) frees its place in the batch.
    """

    def __init__(
        self, batcher: Batcher, prompt_tokens: int, max_tokens: int, reserved: int, sink: TokenSink | None
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.reserved_tokens = reserved  # KV held for the sequence's whole life (Pacer.kv_cost)
        self.generated = 0
        self.prefilled = 0  # prompt tokens computed so far: chunked prefill advances it
        self.admitted: float | None = None  # the clock's time when it left the queue for the batch
        self._batcher = batcher
        self._queue: _Queue | None = None
        if sink is None:
            sink = self._queue = _Queue()
        self.sink: TokenSink = sink
        self.ended = False

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def prefill_left(self) -> int:
        return self.prompt_tokens - self.prefilled

    def cancel(self) -> None:
        """Leave the batch (or the queue) now; harmless once finished."""
        self._batcher._drop(self)

    def __aiter__(self) -> Sequence:
        return self

    async def __anext__(self) -> int:
        if self._queue is None:
            raise TypeError("this sequence hands its tokens to a sink, not to async for")
        item = await self._queue.items.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def __aenter__(self) -> Sequence:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cancel()

    def _end(self, error: BatcherClosed | None) -> None:
        if not self.ended:
            self.ended = True
            self.sink.end(error)


@dataclass
class _Step:
    """What one step does: the prompt tokens each prefilling sequence gets, and who emits a token."""

    chunks: dict[Sequence, int]
    emitting: list[Sequence]

    @property
    def prefill_tokens(self) -> int:
        return sum(self.chunks.values())


class Batcher:
    """The engine's scheduler: a queue, a running batch and a step loop on the event loop.

    Create it anywhere; its loop task starts on the first ``submit`` inside a running event
    loop and sleeps while there is nothing to do. ``on_step(batch)`` is called at the start of
    every step with the number of running sequences, and with 0 when the engine goes idle.
    ``token_budget`` caps the tokens of one step (module docstring); ``clock`` paces the steps;
    ``warn`` gets the line that says the engine cannot keep its clock (default: this module's
    logger, as a warning).
    """

    def __init__(
        self,
        pacer: Pacer,
        *,
        on_step: Callable[[int], None] | None = None,
        token_budget: int | None = None,
        clock: Clock | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        if token_budget is not None and token_budget < 1:
            raise ValueError(f"token_budget must be 1 or more (None: unlimited), got {token_budget}")
        self.pacer = pacer
        self.on_step = on_step
        self.token_budget = token_budget
        self.clock: Clock = clock or RealClock()
        self.pace = Pace(warn or log.warning)
        self.steps = 0
        self.tokens_out = 0
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
    def slips(self) -> int:
        """Steps whose clock woke more than SLIP_S after their deadline (cockpit.sim.pacing)."""
        return self.pace.slips

    @property
    def kv_reserved(self) -> int:
        """KV tokens reserved by the running sequences."""
        return self._reserved

    def submit(self, prompt_tokens: int, max_tokens: int, sink: TokenSink | None = None) -> Sequence:
        """Queue a request; must be called from the event loop that serves it. With ``sink``,
        its tokens go there (synchronously, as each step ends) instead of to ``async for``."""
        if self._closed:
            raise BatcherClosed("the batcher is closed")
        if prompt_tokens < 0 or max_tokens < 1:
            raise ValueError(
                f"need prompt_tokens >= 0 and max_tokens >= 1, got {prompt_tokens}, {max_tokens}"
            )
        reserved = self.pacer.kv_cost(prompt_tokens + max_tokens)
        seq = Sequence(self, prompt_tokens, max_tokens, reserved, sink)
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
        try:
            await self._steps()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken pacer must not leave clients hanging forever
            log.exception("simulated batcher loop died")
            self._closed = True
            self._fail_all(BatcherClosed(f"the batcher loop died: {exc!r}"))
        finally:
            self.clock.close()

    async def _steps(self) -> None:
        clock, pace = self.clock, self.pace
        deadline = woke = clock.now()  # when the last step was due, and when the clock woke for it
        while True:
            if not self._running and not self._waiting:
                self._notify(0)
                pace.idle(clock.now())
                await self._idle()
                deadline = woke = clock.now()  # nothing was due while idle: a new schedule
            step = self._schedule()
            if not step.emitting and not step.chunks:  # nothing may run (max_running 0): no busy loop
                await self._idle()
                deadline = woke = clock.now()
                continue
            self._notify(len(self._running))
            deadline = pace.next_deadline(deadline, woke, self._duration(step))
            await clock.sleep_until(deadline)
            woke = clock.now()
            pace.woke(deadline, woke)  # lateness at the wake; handing the tokens out comes after
            self._emit(step)

    async def _idle(self) -> None:
        self._wake.clear()
        await self._wake.wait()

    def _schedule(self) -> _Step:
        """This step's work: running sequences first, then admissions, within the token budget."""
        budget = self.token_budget if self.token_budget is not None else float("inf")
        step = _Step({}, [])
        for seq in self._running:
            if budget <= 0:
                break
            if seq.prefill_left > 0:
                budget -= self._plan_chunk(step, seq, budget)
            else:  # decoding: one token
                step.emitting.append(seq)
                budget -= 1
        while self._waiting and budget > 0 and len(self._running) < self.pacer.max_running:
            seq = next(iter(self._waiting))
            if self._running and self._reserved + seq.reserved_tokens > self.pacer.kv_tokens:
                break  # strict FIFO: the head waits, and so does everyone behind it
            del self._waiting[seq]
            self._running[seq] = None
            self._reserved += seq.reserved_tokens
            seq.admitted = self.clock.now()
            budget -= self._plan_chunk(step, seq, budget)
        return step

    @staticmethod
    def _plan_chunk(step: _Step, seq: Sequence, budget: float) -> int:
        """Give ``seq`` the next chunk of its prompt; it emits if that finishes the prompt."""
        chunk = int(min(seq.prefill_left, budget))
        if chunk:
            step.chunks[seq] = chunk
        if chunk == seq.prefill_left:
            step.emitting.append(seq)
        return chunk

    def _duration(self, step: _Step) -> float:
        seconds = 0.0
        if step.emitting:
            context = sum(seq.prompt_tokens + seq.generated for seq in step.emitting) / len(step.emitting)
            seconds += self.pacer.step_time_s(len(step.emitting), context)
        if step.chunks:
            seconds += self.pacer.prefill_time_s(step.prefill_tokens)
        return seconds

    def _emit(self, step: _Step) -> None:
        """End of a step: chunks done, one token to every emitting sequence still in the batch."""
        for seq, chunk in step.chunks.items():
            seq.prefilled += chunk
        running = self._running
        emitted = 0
        for seq in step.emitting:
            if seq not in running:
                continue  # cancelled during the step
            position = seq.generated
            seq.generated = position + 1
            try:
                seq.sink.token(position)
            except Exception as exc:  # one broken reader must not stop the others' tokens
                log.exception("a token sink failed; its sequence leaves the batch")
                seq.generated = position  # not sent: not counted
                self._finish(seq, BatcherClosed(f"the token sink failed: {exc!r}"))
                continue
            emitted += 1
            if position + 1 >= seq.max_tokens:
                self._finish(seq)
        self.steps += 1
        self.tokens_out += emitted

    def _finish(self, seq: Sequence, error: BatcherClosed | None = None) -> None:
        del self._running[seq]
        self._reserved -= seq.reserved_tokens
        seq._end(error)

    def _drop(self, seq: Sequence) -> None:
        if seq in self._waiting:
            del self._waiting[seq]
            seq._end(None)
        elif seq in self._running:
            self._finish(seq)

    def _fail_all(self, exc: BatcherClosed) -> None:
        for seq in [*self._running, *self._waiting]:
            seq._end(exc)
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
