"""Measuring a pacer in process: the simulated engine's real batcher on a virtual clock, driven by
closed-loop clients as the bench drives a server, so a test gets a "measurement" of any truth for
any layout in milliseconds, without a process or a port (docs/simulator.md#a-box-with-its-own-truth).

The window is the bench's (cockpit/bench/config.py, metrics.py): a warm-up of ``concurrency``
completions, then ``requests`` more (default max(2C, 8)); output tok/s counts every token received
inside the window, TTFT and TPOT are the means over the requests that completed inside it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .batcher import Batcher, Pacer, VirtualClock


@dataclass(frozen=True)
class MeasuredLevel:
    """One closed-loop level as a benchmark would report it."""

    concurrency: int
    tok_s: float  # output tokens per second of the whole server, inside the window
    ttft_s: float  # mean time to first token, queueing included
    tpot_s: float  # mean time per output token after the first
    requests: int  # requests completed inside the window
    window_s: float  # the window's length on the virtual clock


@dataclass
class _Request:
    start: float
    tokens: list[float]  # when each token arrived
    end: float = 0.0


def closed_loop(
    pacer: Pacer,
    *,
    concurrency: int,
    input_len: int,
    output_len: int,
    token_budget: int | None,
    requests: int | None = None,
) -> MeasuredLevel:
    """``concurrency`` clients, each sending its next request (``input_len`` prompt tokens,
    ``output_len`` out) as soon as its last one ends, served by the batcher under ``pacer`` with
    ``token_budget`` tokens a step. Deterministic: the same arguments give the same figures."""
    if concurrency < 1 or output_len < 1 or input_len < 0:
        raise ValueError(
            f"need concurrency >= 1, output_len >= 1, input_len >= 0: {concurrency}, {output_len}, {input_len}"
        )
    window = requests if requests is not None else max(2 * concurrency, 8)
    return asyncio.run(_run(pacer, concurrency, input_len, output_len, token_budget, concurrency, window))


async def _run(
    pacer: Pacer,
    concurrency: int,
    input_len: int,
    output_len: int,
    budget: int | None,
    warmup: int,
    window: int,
) -> MeasuredLevel:
    clock = VirtualClock()
    batcher = Batcher(pacer, token_budget=budget, clock=clock)
    records: list[_Request] = []
    done: list[float] = []  # the end of the warm-up's last completion, then of the window's last
    over = asyncio.Event()
    finished = [0]

    class Client:
        """One closed-loop client: its tokens come to a sink (no task per token), and the end of
        each request sends the next, at the time the step ended."""

        def __init__(self) -> None:
            self.record = self.send()

        def send(self) -> _Request:
            record = _Request(start=clock.now(), tokens=[])
            records.append(record)
            self.record = record
            batcher.submit(input_len, output_len, sink=self)
            return record

        def token(self, position: int) -> None:
            self.record.tokens.append(clock.now())

        def end(self, error: BaseException | None) -> None:
            if error is not None:
                over.set()
                return
            self.record.end = clock.now()
            finished[0] += 1
            if finished[0] in (warmup, warmup + window):
                done.append(self.record.end)
                if len(done) == 2:
                    over.set()
            if not over.is_set():
                self.send()

    try:
        for _ in range(concurrency):
            Client()
        await over.wait()
    finally:
        await batcher.close()
    if len(done) < 2:
        raise RuntimeError("the batcher stopped before the window ended")
    start, end = done
    length = end - start
    tokens = sum(1 for r in records for t in r.tokens if start < t <= end)
    inside = [r for r in records if r.end and start < r.end <= end]
    ttft = sum(r.tokens[0] - r.start for r in inside) / len(inside)
    gaps = [(r.end - r.tokens[0]) / (len(r.tokens) - 1) for r in inside if len(r.tokens) > 1]
    return MeasuredLevel(
        concurrency=concurrency,
        tok_s=tokens / length if length > 0 else 0.0,
        ttft_s=ttft,
        tpot_s=sum(gaps) / len(gaps) if gaps else 0.0,
        requests=len(inside),
        window_s=length,
    )
