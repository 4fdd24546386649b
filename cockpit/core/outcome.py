"""How a launch ended: the outcome names the journal stores, and the diagnosis of a failure.

They sit at the bottom of the package so that storage, the runner, the reports and the screens
name an outcome the same way without importing one another. The names are plain strings, as
the journal stores them and as `cockpit results --format json` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Outcome = Literal["launching", "ready", "failed", "stopped"]

LAUNCHING: Final = "launching"  # journaled before the process starts, so a crash still leaves a record
READY: Final = "ready"  # the server answered
FAILED: Final = "failed"  # it died or never served: a Diagnosis says why
STOPPED: Final = "stopped"  # stopped before it served; a server stopped once ready stays ready, with an end

OUTCOMES: Final[tuple[Outcome, ...]] = (LAUNCHING, READY, FAILED, STOPPED)


@dataclass(frozen=True)
class Diagnosis:
    """Why a launch failed: one line of cause, one line of what to try next."""

    kind: str  # oom, fp8-block, attention-heads, kv-heads, kv-cache, world-size, nccl, port-in-use, ...
    cause: str
    next_step: str = ""
    phase: str | None = None  # what the engine was doing: loading, kv_cache, cuda_graphs, serving
    gpu: int | None = None
    evidence: str = ""  # the log line it was read from

    def __str__(self) -> str:
        return self.cause + (f" -> {self.next_step}" if self.next_step else "")
