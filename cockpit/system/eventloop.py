"""One way to run cockpit's busy event loops (the bench's, the simulated engine's): on uvloop where
it is installed (a dependency except on Windows, github.com/MagicStack/uvloop), else on asyncio's.

Both measured the difference with perf/ scripts: ~40% less client CPU per token for the bench at a
paced load (perf/bench_client.py); for the simulated engine the same CPU per token but a clock that
wakes on time, p99 lateness 0.9 ms against 16 ms at C=1024 (perf/sim_capacity.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return asyncio.run(coro)
