"""An experiment's life as plain events. The TUI turns them into messages; `cockpit run` prints them.

Every event names its experiment and prints itself in one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cockpit.bench.result import LevelSummary
from cockpit.core.outcome import Diagnosis  # defined below the runner, so the journal can store one
from cockpit.core.records import LaunchFacts
from cockpit.core.secrets import redact_argv, redact_env


@dataclass(frozen=True)
class Planned:
    experiment: int
    layout: str
    verdict: str
    placement: str
    gpus: tuple[int, ...]

    def __str__(self) -> str:
        gpus = ",".join(map(str, self.gpus)) or "-"
        return f"planned   {self.layout}: {self.verdict}; {self.placement}; GPUs {gpus}"


@dataclass(frozen=True)
class Launching:
    """The engine started. Its argv and env are held redacted (``Launching.redacted`` makes one),
    so no screen or log that shows the event can show a secret."""

    experiment: int
    argv: tuple[str, ...]
    pid: int
    log_path: str
    env: dict[str, str] = field(default_factory=dict)  # what cockpit set: CUDA_VISIBLE_DEVICES, ...

    @classmethod
    def redacted(
        cls, experiment: int, argv: Sequence[str], pid: int, log_path: str, env: Mapping[str, str]
    ) -> Launching:
        return cls(experiment, redact_argv(argv), pid, log_path, redact_env(env))

    def __str__(self) -> str:
        """`VAR=value ... argv`, shell-quoted: pasting it runs that command."""
        pinned = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"launching pid {self.pid}: {pinned + ' ' if pinned else ''}{shlex.join(self.argv)}"


@dataclass(frozen=True)
class LogLine:
    experiment: int
    text: str

    def __str__(self) -> str:
        return f"log       {self.text}"


@dataclass(frozen=True)
class Phase:
    experiment: int
    name: str  # starting, loading, loaded, kv_cache, cuda_graphs, serving
    progress: float | None = None  # 0..1 where the engine tells (weights loading)
    detail: str = ""

    def __str__(self) -> str:
        pct = f" {self.progress:.0%}" if self.progress is not None else ""
        return f"phase     {self.name}{pct}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Ready:
    experiment: int
    url: str
    load_seconds: float
    started: float | None = None  # wall-clock time the server started: ready since started + load_seconds
    # What the engine logged about its own launch (cockpit.runner.launchfacts): weights, KV cache,
    # graphs, times. A failed launch's numbers are true all the same.
    facts: LaunchFacts = field(default_factory=LaunchFacts)

    @property
    def ready_at(self) -> float | None:
        return None if self.started is None else self.started + self.load_seconds

    def __str__(self) -> str:
        return f"ready     {self.url} after {self.load_seconds:.1f} s"


@dataclass(frozen=True)
class Failed:
    experiment: int
    diagnosis: Diagnosis
    # What the engine logged about its own launch (cockpit.runner.launchfacts): weights, KV cache,
    # graphs, times. A failed launch's numbers are true all the same.
    facts: LaunchFacts = field(default_factory=LaunchFacts)

    def __str__(self) -> str:
        text = f"failed    {self.diagnosis.cause}"
        if self.diagnosis.next_step:
            text += f"\nnext      {self.diagnosis.next_step}"
        return text


@dataclass(frozen=True)
class Stopped:
    """The server is gone: stopped by cockpit (``reason`` says why and how), or ended without it
    (``ended``: the header's few words, "ended (exit code 1)", "killed (SIGKILL)")."""

    experiment: int
    reason: str
    ended: str = ""

    def __str__(self) -> str:
        return f"stopped   {self.reason}"


@dataclass(frozen=True)
class BenchTick:
    experiment: int
    concurrency: int
    elapsed_s: float
    tok_s: float

    def __str__(self) -> str:
        return f"bench     C={self.concurrency} {self.elapsed_s:4.0f} s {self.tok_s:10,.1f} tok/s"


@dataclass(frozen=True)
class BenchLevel:
    """A finished concurrency level: what the bench measured of it."""

    experiment: int
    concurrency: int
    result: LevelSummary
    summary: str

    def __str__(self) -> str:
        return f"level     {self.summary}"


@dataclass(frozen=True)
class BenchDone:
    experiment: int
    levels: int
    interrupted: bool = False
    error: str = ""  # why the bench itself failed, one line

    def __str__(self) -> str:
        if self.error:
            return f"bench     failed: {self.error}"
        how = "interrupted" if self.interrupted else "done"
        return f"bench     {how}: {self.levels} level(s) journaled"


Event = Planned | Launching | LogLine | Phase | Ready | Failed | Stopped | BenchTick | BenchLevel | BenchDone
