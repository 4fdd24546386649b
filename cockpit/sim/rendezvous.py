"""Where the nodes of a simulated engine meet: a real TCP rendezvous on the head's address.

A real engine that spans nodes meets at the head: vLLM's and SGLang's ranks open torch's process
group at ``tcp://HEAD:PORT``, whose store (rank 0's, on the head) waits until every rank has
connected (torch/csrc/distributed/c10d/TCPStore.cpp), and vLLM's data-parallel engines shake
hands with the head's front end at its RPC port (vllm/v1/engine/utils.py:
wait_for_engine_startup). The simulator keeps that shape with one connection per node: the head
listens on HEAD:PORT; each other node connects once it has started, says its rank and how many
ranks it brings, and waits for the word to load. A connection that closes is a node gone: the
head fails with the engine's words for a lost peer, a worker whose head went away exits.

The protocol is JSON lines, one object each way per event (docs/simulator.md#nodes):

    worker -> head  {"node_rank": 1, "ranks": 8, "world": 16}   a node joins
    head -> worker  {"go": true}                                 every node joined: load
    worker -> head  {"loaded": true}                             its weights are in
    head -> worker  {"bye": true}                                the head stops cleanly
    head -> worker  {"error": "..."}                             the head refuses the node
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cockpit.core.errors import CockpitError
from cockpit.engines import surface

JOIN_TIMEOUT_ENV = "COCKPIT_SIM_JOIN_TIMEOUT_S"
CONNECT_RETRY_S = 0.1  # a worker tries again this often until the head listens, as torch's client does
LINE_LIMIT = 2**16


def join_timeout(engine: str, env: Mapping[str, str], given: float | None = None) -> float:
    """Seconds the head waits for the other nodes (and a worker for the head): the env's
    COCKPIT_SIM_JOIN_TIMEOUT_S (tests set a few seconds), the engine's own flag, or its default
    (its surface's join_timeout_s: vLLM 600 s, SGLang 1800 s)."""
    raw = env.get(JOIN_TIMEOUT_ENV, "").strip()
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            raise CockpitError(f"{JOIN_TIMEOUT_ENV} must be seconds, like 5, got '{raw}'") from None
        if not 0 < seconds < math.inf:
            raise CockpitError(f"{JOIN_TIMEOUT_ENV} must be above 0 seconds, got '{raw}'")
        return seconds
    if given:
        return float(given)
    return surface(engine).join_timeout_s


@dataclass
class Peer:
    """A node that joined the head: its rank, the ranks it brings, where its connection comes from."""

    node_rank: int
    ranks: int
    host: str
    port: int
    writer: asyncio.StreamWriter = field(repr=False)
    loaded: bool = False


class Head:
    """The head's side: it listens, counts the nodes in, tells them to load, and notices a loss."""

    def __init__(self, host: str, port: int, nnodes: int, local_ranks: int, world: int) -> None:
        self.host, self.port = host, port
        self.nnodes, self.local_ranks, self.world = nnodes, local_ranks, world
        self.peers: dict[int, Peer] = {}
        self.lost: Peer | None = None
        self.refused: list[str] = []  # nodes turned away, in the head's words
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._closing = False

    async def open(self) -> None:
        """Listen on HEAD:PORT (an OSError when the port is taken, as the store's bind fails)."""
        self._server = await asyncio.start_server(
            self._welcome, self.host, self.port, reuse_address=True, limit=LINE_LIMIT
        )

    @property
    def joined_ranks(self) -> int:
        return self.local_ranks + sum(p.ranks for p in self.peers.values())

    @property
    def missing(self) -> list[int]:
        """The node ranks not in yet."""
        return [r for r in range(1, self.nnodes) if r not in self.peers]

    async def _welcome(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername") or ("?", 0)
        try:
            hello = await _read(reader)
            peer = self._admit(hello, writer, str(address[0]), int(address[1]))
            if peer is None:
                writer.close()
                return
            while (message := await _read(reader)) is not None:
                if message.get("loaded"):
                    peer.loaded = True
                    self._changed.set()
        except (OSError, ValueError):  # a reset or garbled peer: lost, as `finally` records
            pass
        finally:
            # Only a node that had joined can be lost; a refused one was never in.
            peer_now = next((p for p in self.peers.values() if p.writer is writer), None)
            if peer_now is not None and not self._closing and self.lost is None:
                self.lost = peer_now
                self._changed.set()

    def _admit(self, hello: dict | None, writer: asyncio.StreamWriter, host: str, port: int) -> Peer | None:
        if (
            not hello
            or not isinstance(hello.get("node_rank"), int)
            or not isinstance(hello.get("ranks"), int)
        ):
            return None
        rank, world = hello["node_rank"], hello.get("world")
        problem = None
        if not 0 < rank < self.nnodes:
            problem = f"node rank {rank} is not one of 1 to {self.nnodes - 1}"
        elif rank in self.peers:
            problem = f"node rank {rank} joined twice"
        elif world != self.world:
            problem = f"node rank {rank} has world size {world}, the head {self.world}"
        if problem is not None:
            self.refused.append(problem)
            _send(writer, {"error": problem})
            self._changed.set()
            return None
        peer = Peer(rank, hello["ranks"], host, port, writer)
        self.peers[rank] = peer
        self._changed.set()
        return peer

    async def _until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            if self.lost is not None:
                return False
            self._changed.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    async def all_joined(self, timeout: float) -> bool:
        """Every node in within ``timeout`` seconds (False: timed out, or one joined and left)."""
        return await self._until(lambda: not self.missing, timeout)

    def go(self) -> None:
        for peer in self.peers.values():
            _send(peer.writer, {"go": True})

    async def all_loaded(self) -> bool:
        """Every node's weights in (False: a node went away first)."""
        return await self._until(lambda: all(p.loaded for p in self.peers.values()), None)

    async def wait_lost(self) -> Peer:
        await self._until(lambda: False, None)
        assert self.lost is not None
        return self.lost

    async def close(self, bye: bool) -> None:
        """Stop listening and let the nodes go: with a word (a clean stop) or by closing alone."""
        self._closing = True
        for peer in self.peers.values():
            if bye:
                _send(peer.writer, {"bye": True})
            peer.writer.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


class Worker:
    """A node that is not the head: it connects (retrying until the head listens), says who it
    is, and hears the head's words."""

    def __init__(self, host: str, port: int, node: str = "") -> None:
        self.host, self.port, self.node = host, port, node
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def join(self, hello: dict, timeout: float) -> bool:
        """Connect within ``timeout`` seconds and say hello; False when the head never listened."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.reader, self.writer = await self._connect()
                break
            except OSError:
                if time.monotonic() + CONNECT_RETRY_S >= deadline:
                    return False
                await asyncio.sleep(CONNECT_RETRY_S)
        _send(self.writer, hello)
        return True

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """From the node's own address where this machine has it (127.0.0.3 on a simulated
        cluster), so the head sees the node it came from; else from wherever the system picks."""
        if self.node:
            with contextlib.suppress(OSError):
                return await asyncio.open_connection(
                    self.host, self.port, local_addr=(self.node, 0), limit=LINE_LIMIT
                )
        return await asyncio.open_connection(self.host, self.port, limit=LINE_LIMIT)

    async def hear(self) -> dict:
        """The head's next word; {"lost": True} when the connection closed without one."""
        assert self.reader is not None
        try:
            message = await _read(self.reader)
        except (OSError, ValueError):
            message = None
        return message if message is not None else {"lost": True}

    def loaded(self) -> None:
        if self.writer is not None:
            _send(self.writer, {"loaded": True})

    @property
    def local_address(self) -> tuple[str, int]:
        name = self.writer.get_extra_info("sockname") if self.writer is not None else None
        return (str(name[0]), int(name[1])) if name else ("?", 0)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _read(reader: asyncio.StreamReader) -> dict | None:
    """One JSON object from a line; None at the end of the stream."""
    line = await reader.readline()
    if not line:
        return None
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


def _send(writer: asyncio.StreamWriter, message: dict) -> None:
    if not writer.is_closing():
        writer.write(json.dumps(message).encode() + b"\n")
