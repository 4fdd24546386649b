"""One node's part in a simulated engine across nodes: meet the others, watch them, follow the head.

The engine (cockpit/sim/engine.py) runs the same life on every node; this says what differs
(docs/simulator.md#nodes). The head (node 0) waits at its rendezvous until every node joined,
within the join timeout, and only then loads; it fails with the engine's words when a node never
comes ("rank-timeout") or goes away ("peer-lost"). Every other node loads its own share once all
joined, never serves HTTP, and stays up while the head lives: it leaves when the head stops
(cleanly: it stops too) or vanishes (the engine's words for a lost store).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Awaitable, Mapping
from typing import TypeVar

from cockpit.core.layout import Layout
from cockpit.sim.flags import MultiNode
from cockpit.sim.logs import EngineLog
from cockpit.sim.logs.base import Span
from cockpit.sim.rendezvous import Head, Worker, join_timeout

T = TypeVar("T")

# torch's words when the store cannot listen (torch/csrc/distributed/c10d/socket.cpp): the port
# taken (EADDRINUSE), or an address this node does not have (EADDRNOTAVAIL).
STORE_CANNOT_LISTEN = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
    "address. port: {port}, useIpv6: 0, code: -{code}, name: {name}, message: {message}"
)


def span_of(nodes: MultiNode, layout: Layout, gpus_used: int | None) -> Span:
    """This node's ranks: the world (every GPU the layout uses) split evenly over the nodes."""
    world = gpus_used or layout.tp * layout.pp * max(1, layout.dp)
    per_node = max(1, world // nodes.nnodes)
    start = nodes.node_rank * per_node
    return Span(nodes, world, range(start, start + per_node))


class Lost(Exception):
    """Another node went away (or the head stopped) while this one was busy: ``word`` says how."""

    def __init__(self, word: Mapping[str, object]) -> None:
        super().__init__(dict(word))
        self.word = word


class NodeLink:
    """The connection to the other nodes, from the head or from a worker, and the log lines for it."""

    def __init__(
        self, span: Span, engine: str, env: Mapping[str, str], log: EngineLog, node: str = ""
    ) -> None:
        self.span = span
        self.log = log
        self.timeout = join_timeout(engine, env, span.nodes.timeout_s)
        nodes = span.nodes
        self.head: Head | None = None
        self.worker: Worker | None = None
        if nodes.head:
            self.head = Head(nodes.host, nodes.port, nodes.nnodes, len(span.ranks), span.world)
        else:
            self.worker = Worker(nodes.host, nodes.port, node)

    async def meet(self) -> int | None:
        """Wait until every node joined: None then, else the exit code after the engine's words."""
        if self.head is not None:
            return await self._gather(self.head)
        assert self.worker is not None
        hello = {
            "node_rank": self.span.nodes.node_rank,
            "ranks": len(self.span.ranks),
            "world": self.span.world,
        }
        if not await self.worker.join(hello, self.timeout):
            self.log.unreachable(self.span, self.timeout)
            return 1
        word = await self.worker.hear()
        if word.get("go"):
            return None
        if "error" in word:  # the head turned this node away (cockpit's words: no engine has them)
            self.log.out(f"cockpit sim: the head refused this node: {word['error']}")
            return 1
        return self.ended(word)

    async def _gather(self, head: Head) -> int | None:
        try:
            await head.open()
        except OSError as exc:
            code = exc.errno or errno.EADDRINUSE
            message = (exc.strerror or os.strerror(code)).lower()
            name = errno.errorcode.get(code, "EADDRINUSE")
            self.log.out(
                STORE_CANNOT_LISTEN.format(port=self.span.nodes.port, code=code, name=name, message=message)
            )
            return 1
        if await head.all_joined(self.timeout):
            head.go()
            return None
        if head.lost is not None:
            return self.ended({"lost": True})
        self.log.rank_timeout(self.span, self.timeout, head.joined_ranks)
        await head.close(bye=False)
        return 1

    async def guard(self, work: Awaitable[T]) -> T:
        """``work``, unless another node goes first: then Lost (the work is cancelled)."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self._news())
        try:
            done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            watch.cancel()
            raise
        if task in done:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise Lost(watch.result())

    async def _news(self) -> Mapping[str, object]:
        """The next thing the other nodes do: the head hears a node gone, a worker its head's word."""
        if self.head is not None:
            await self.head.wait_lost()
            return {"lost": True}
        assert self.worker is not None
        return await self.worker.hear()

    async def all_loaded(self) -> None:
        """The head waits for every node's weights (Lost when one goes away first)."""
        if self.head is not None and not await self.head.all_loaded():
            raise Lost({"lost": True})

    def loaded(self) -> None:
        if self.worker is not None:
            self.worker.loaded()

    def ended(self, word: Mapping[str, object]) -> int:
        """The other side's end, in the engine's words; the exit code it leaves this node with."""
        if self.head is not None:
            peer = self.head.lost
            host, port = (peer.host, peer.port) if peer is not None else ("?", 0)
            self.log.peer_lost(self.span, host, port)
            return 1
        assert self.worker is not None
        if word.get("bye"):
            self.log.head_stopped(self.span)
            return 0
        self.log.head_lost(self.span, self.worker.local_address)
        return 1

    async def follow(self) -> int:
        """A worker, loaded, stays up while the head lives: it leaves with the head, or on a signal."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        news = asyncio.ensure_future(self._news())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({news, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            stopped.cancel()
        if news.done():
            return self.ended(news.result())
        news.cancel()
        self.log.head_stopped(self.span)
        return 0

    async def close(self, bye: bool) -> None:
        """Let the other nodes go: the head says bye on a clean stop, else just closes."""
        if self.head is not None:
            await self.head.close(bye)
        if self.worker is not None:
            self.worker.close()
