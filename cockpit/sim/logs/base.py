"""What both engines' simulated logs share: the line writers, the traceback frames, the hooks
the simulated engine calls in order (docs/simulator.md#log-texts)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cockpit.core.planner import MemoryEstimate, Reason, Setup, Verdict
from cockpit.engines import Placement
from cockpit.sim.flags import EngineArgs, MultiNode
from cockpit.sim.sitepackages import SITE

Out = Callable[[str], None]


# "ValueError: ...", "torch.OutOfMemoryError: ...", a bare "AssertionError".
EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b")


# pydantic's line for a ValueError or an assert raised while a config is built ("Value error, <text>").
PYDANTIC_KINDS = {"Value error, ": "ValueError", "Assertion failed, ": "AssertionError"}


def exception_line(message: str, exception: str = "ValueError") -> str:
    """The traceback's last line: the rule's text names its exception, or it is `exception`."""
    for prefix, name in PYDANTIC_KINDS.items():
        if message.startswith(prefix):
            return f"{name}: {message.removeprefix(prefix)}"
    return message if EXCEPTION.match(message) else f"{exception}: {message}"


def bare(message: str) -> str:
    """The engine's sentence alone, without its exception class or pydantic's "Value error, "."""
    line = exception_line(message)
    return line.split(": ", 1)[1] if ": " in line and EXCEPTION.match(line) else line


UNMODELLED_GRAPH_GIB = 0.5  # what the graphs take where the memory estimate does not model them


def graph_gib(memory: MemoryEstimate) -> float:
    """The memory the simulated engine's CUDA graphs take, as both engines report it after the
    capture: the planner's model of them (docs/memory.md), or half a GiB where it has none (SGLang
    keeps its graphs in the memory it leaves free, so the estimate does not size them)."""
    return memory.graph_gib or UNMODELLED_GRAPH_GIB


def gb(value: float) -> str:
    """GiB as vLLM's format_gib writes them (vllm/utils/mem_utils.py): round to 2 places, no padding."""
    return f"{round(value, 2)}"


def clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


def shards_bar(done: int, total: int, elapsed: float) -> str:
    """The weight loaders' tqdm bar (vllm and sglang model_loader/weight_utils.py), on stderr, no prefix."""
    percent = int(100 * done / total) if total else 100
    rate = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / rate if rate else 0.0
    return (
        f"Loading safetensors checkpoint shards: {percent:3d}% Completed | {done}/{total} "
        f"[{clock(elapsed)}<{clock(left)}, {rate:5.2f}it/s]"
    )


@dataclass(frozen=True)
class Frame:
    """One traceback frame: file (under the site folder), line, function, source line."""

    file: str
    line: int
    function: str
    code: str

    def lines(self) -> list[str]:
        return [f'  File "{SITE}/{self.file}", line {self.line}, in {self.function}', f"    {self.code}"]


@dataclass(frozen=True)
class Raise:
    """Where the engine raises a startup error, and what it raises."""

    frame: Frame
    config: str | None = None  # vLLM: the config being validated, VllmConfig or ParallelConfig
    exception: str = "ValueError"  # when the rule's text does not name it


def raises(
    file: str, line: int, function: str, config: str | None = None, exception: str = "ValueError"
) -> Raise:
    return Raise(Frame(file, line, function, f"raise {exception}("), config, exception)


@dataclass(frozen=True)
class Span:
    """This node's share of an engine across nodes: the node's flags, the world size and the
    global ranks this node runs (docs/simulator.md#nodes)."""

    nodes: MultiNode
    world: int
    ranks: range

    @property
    def init_method(self) -> str:
        return f"tcp://{self.nodes.address}"


# torch's TCPStore and socket words (torch/csrc/distributed/c10d/TCPStore.cpp, socket.cpp), as
# cockpit/engines/surface.py reads them: the head gives up after the timeout plus one second.
def store_timeout_text(seconds: float, joined: int, world: int) -> str:
    return (
        f"torch.distributed.DistStoreError: Timed out after {int(seconds) + 1} seconds waiting for clients. "
        f"{joined}/{world} clients joined."
    )


def client_timeout_text(host: str, port: int, seconds: float) -> str:
    return (
        f"torch.distributed.DistNetworkError: The client socket has timed out after {int(seconds * 1000)}ms "
        f"while trying to connect to ({host}, {port})."
    )


def peer_closed_text(host: str, port: int) -> str:
    """Gloo's, when a peer's process goes away during a collective (gloo/transport/tcp/pair.cc)."""
    return f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [{host}]:{port}"


def store_lost_text(rank: int, local: tuple[str, int], remote: str) -> str:
    """torch's warning when the head's store goes away under a rank (vllm-project/vllm#32136)."""
    stamp = time.strftime("%m%d %H:%M:%S")
    return (
        f"[rank{rank}]:[W{stamp}.000000000 TCPStore.cpp:125] [c10d] recvValue failed on "
        f"SocketImpl(fd=99, addr={local[0]}:{local[1]}, remote={remote}): Failed to recv, got 0 bytes. "
        "Connection was likely closed. Did the remote server shutdown or crash?"
    )


class EngineLog:
    """The hooks the simulated engine calls, in order; each engine prints them in its own words."""

    name = "engine"
    access_lines = False  # uvicorn's access line for each request (cockpit/sim/server.py writes them)
    periodic_stats = False  # a throughput line every few seconds while serving (``stats``)

    def __init__(self, out: Out):
        self.out = out
        self.started = time.monotonic()

    def argument_warnings(self, deprecated: Sequence[str]) -> None:
        """The engine's warning for each deprecated argument used, spelled as the user typed it."""

    def starting(
        self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span | None = None
    ) -> None: ...

    def shard_progress(self, done: int, total: int, elapsed: float) -> None:
        self.out(shards_bar(done, total, elapsed))

    def startup_failure(self, reasons: Sequence[Reason]) -> None: ...
    def oom(self, text: str, rank: int = 0) -> None: ...
    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None: ...
    def kv_failure(self, reason: Reason) -> None: ...
    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None: ...
    def ready(self, args: EngineArgs) -> None: ...

    def stats(
        self,
        prompt_tps: float,
        generation_tps: float,
        running: int,
        waiting: int,
        kv_usage: float,
        prefix_hit_rate: float | None,
    ) -> None:
        """The engine's periodic throughput line, where it prints one (vLLM)."""

    # -- across nodes (docs/simulator.md#nodes) -------------------------------------------------------

    def headless(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span) -> None:
        """A node without the API server starts and goes to the head."""

    def joined(self, args: EngineArgs, setup: Setup, span: Span) -> None:
        """Every rank joined: this node's ranks build their groups and load."""

    def rank_timeout(self, span: Span, seconds: float, joined: int) -> None:
        """The head's store gave up on the ranks that never came."""

    def unreachable(self, span: Span, seconds: float) -> None:
        """A node never reached the head's store."""

    def peer_lost(self, span: Span, host: str, port: int) -> None:
        """The head lost a node: the next collective fails."""

    def head_lost(self, span: Span, local: tuple[str, int]) -> None:
        """A node lost its head."""

    def head_stopped(self, span: Span) -> None:
        """A node's head stopped cleanly: the node stops too."""

    def bind_failure(self, host: str, port: int, exc: OSError) -> None:
        self.out(
            f"ERROR:    [Errno {exc.errno or 98}] error while attempting to bind on address ('{host}', {port}): "
            "address already in use"
        )

    def shutdown(self, in_flight: int = 0) -> None:
        """What the engine prints on SIGTERM; ``in_flight``: requests it still had."""
        self.out("INFO:     Shutting down")
        self.out("INFO:     Application shutdown complete.")

    def elapsed(self) -> float:
        return time.monotonic() - self.started
