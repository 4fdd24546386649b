"""What sending a sweep's requests needs, in the process that sends them (this one, or a worker):
its transport, its request bodies, an event loop free of GC pauses, enough open files.

``loadgen`` (one process) and ``workers`` (worker processes) both open their sending here.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from cockpit.bench import aiohttp_transport as client
from cockpit.bench import raw_transport as rawclient
from cockpit.bench.config import BenchConfig
from cockpit.bench.transport import Progress, Timeouts, Transport
from cockpit.bench.workload import Workload, jsonl_workload, random_workload

LEVEL_GC_YOUNG = 100_000  # allocations between two collections while a level runs (no_gc_pauses)


@asynccontextmanager
async def open_transport(cfg: BenchConfig, url: str, progress: Progress) -> AsyncIterator[Transport]:
    """The sweep's transport (``cfg.resolved_transport``) to ``url``; its connections close on the
    way out. The only place that knows the concrete transports."""
    timeouts = Timeouts.of(cfg.request_limit_s, read_s=cfg.timeout, connect_s=cfg.timeout)
    if cfg.resolved_transport == "raw":
        async with rawclient.new_session() as raw_session:
            yield rawclient.RawTransport(
                raw_session, url, api_key=cfg.api_key, timeouts=timeouts, progress=progress
            )
        return
    async with client.new_session() as session:
        yield client.AiohttpTransport(session, url, api_key=cfg.api_key, timeouts=timeouts, progress=progress)


@contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Almost no garbage collection while a level runs. What survives so far is collected and
    frozen (as vLLM's bench does), and the young generation is collected only every 100,000
    allocations, never promoted further. A collection stops the loop while every stream's bytes
    wait: at C=1024 the default thresholds (700/10/10) gave, in a 5 s level, 8 gen-1 passes of
    up to 10 ms and a gen-2 pass of ~30 ms, each one in TTFT and the ITL p99. A successful
    request leaves no cyclic garbage (measured: 0 unreachable objects after thousands), so this
    costs no memory; the rare young pass bounds what failures' cycles can hold."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(LEVEL_GC_YOUNG, 1 << 20, 1 << 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def workload_of(cfg: BenchConfig, model: str) -> Workload:
    """The sweep's request bodies: the prompts file's, or random prompts of the configured lengths."""
    if cfg.jsonl:
        return jsonl_workload(cfg.jsonl, model, endpoint=cfg.endpoint, output_len=cfg.output_len)
    return random_workload(
        model, endpoint=cfg.endpoint, input_len=cfg.input_len, output_len=cfg.output_len, seed=cfg.seed
    )


def raise_open_files_limit(needed: int) -> None:
    """One socket per stream: lift the soft open-files limit towards the hard one (Linux, macOS)."""
    try:
        import resource
    except ImportError:  # Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass  # requests beyond the limit fail with a counted "Too many open files"
