"""Where an engine is in its startup, read from its log one line at a time.

vLLM and SGLang print the same milestones in different words (docs/simulator.md#log-texts);
the tracker turns both into the phases of `cockpit.runner.events.Phase`, so the screen
can show "loading 45%" and the diagnosis can say what the engine was doing when it died.
"""

from __future__ import annotations

import re

from cockpit.engines import surface, surfaces
from cockpit.engines.surface import any_of
from cockpit.runner.events import Phase

PHASES = ("starting", "loading", "loaded", "kv_cache", "cuda_graphs", "serving")

# CSI sequences (colours: "\x1b[1;36m"), OSC sequences (titles, links) and two-byte escapes.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# What precedes the engine's words, in any combination: "(EngineCore_DP0 pid=12) ",
# "(VllmWorker rank=0 pid=3) ", vLLM's "ERROR 11-29 20:38:32 [core.py:100] " (older builds:
# "INFO 12-18 10:02:11 llm_engine.py:73] "), uvicorn's
# "INFO:     ", SGLang's "[2026-11-29 20:38:47 DP0 TP0 EP0] ", torch.distributed's "[rank3]: "
# and glog's "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] "; on a cluster, the node's
# "[node 2 127.0.0.3] " that cockpit puts before each of its lines (cockpit/runner/cluster.py).
LOG_PREFIX = re.compile(
    r"""^(?:
        \s*\[node\s\d+\s[^\]\s]+\]\s*
      | \s*\([^()]*\bpid=\d+\)\s*
      | \s*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s*
      | \s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+
      | \s*\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\]\s*
      | \s*\[rank\d+\]:\s*
      | \s*\[[EWIF]\d{4}\s+[\d:.]+\s+[^\]]*\]\s*
    )+""",
    re.VERBOSE,
)

# Each milestone in every engine's wordings (cockpit/engines/<engine>/surface.py); the log tells
# its engine only now and then, so a line is read in every engine's words.
SURFACES = surfaces()
ENGINE_STARTING = any_of(p for s in SURFACES for p in s.starting)
LOAD_BEGIN = any_of(p for s in SURFACES for p in s.load_begin)
SHARD_PROGRESS = re.compile(
    r"(?:checkpoint shards|loading shards):\s*(?P<percent>\d{1,3})% Completed(?: \| (?P<done>\d+)/(?P<total>\d+))?",
    re.IGNORECASE,
)
WEIGHTS_LOADED = tuple(p for s in SURFACES for p in s.weights_loaded)
KV_MEMORY_LINES = tuple(p for s in SURFACES for p in s.kv_memory)
KV_TOKENS = tuple(p for s in SURFACES for p in s.kv_tokens)
CUDA_GRAPHS = any_of(p for s in SURFACES for p in s.cuda_graphs)
# Across nodes (docs/simulator.md#nodes): a node waits at the rendezvous, a rank joins (searched in
# the whole line: SGLang names the rank in its prefix only), every rank joined.
JOIN_WAITING = tuple(p for s in SURFACES for p in s.join_waiting)
RANK_JOINED = tuple(p for s in SURFACES for p in s.rank_joined)
ALL_JOINED = tuple(p for s in SURFACES for p in s.all_joined)
# SGLang's resolved arguments name the address every node meets at (sglang/srt/entrypoints/engine.py
# logs server_args as a dict, older releases as ServerArgs(...)); its join lines do not.
DIST_INIT_ADDR = re.compile(r"'dist_init_addr': '(?P<address>[^']+)'|dist_init_addr='(?P<old>[^']+)'")


def _engine_of(line: str) -> str | None:
    """The engine whose log this line can only come from, if any."""
    return next((s.name for s in SURFACES if s.signature is not None and s.signature.search(line)), None)


def strip_ansi(text: str) -> str:
    """Plain text: colour codes split the words the patterns look for."""
    return ANSI_ESCAPE.sub("", text)


def last_drawing(line: str) -> str:
    """The line as the terminal shows it, without colour: tqdm redraws its bar with carriage
    returns, so a line may hold many bars, and the last counts."""
    segments = [part for part in strip_ansi(line).split("\r") if part.strip()]
    return segments[-1] if segments else ""


def log_message(line: str) -> str:
    """The engine's own words, without colour, process tag, level, time or source."""
    return LOG_PREFIX.sub("", last_drawing(line), count=1).strip()


class PhaseTracker:
    """Follows one server's startup; `feed` answers a Phase whenever there is news for people.

    ``nodes`` above 1: the server spans nodes and its log holds every node's lines; the tracker
    then also counts the ranks that joined the rendezvous (``ranks_joined``, ``world``) and notes
    when every rank is in (``all_joined``): a cluster is ready only when its head serves and every
    rank joined. On one box the join lines are not read (SGLang's "Init parallel begin." is one)."""

    def __init__(self, experiment: int, engine: str | None = None, nodes: int = 1):
        self.experiment = experiment
        self.engine = engine  # the engine's name; guessed from the log when not given
        self.nodes = nodes
        self.phase: str | None = None
        self.progress: float | None = None
        self.detail = ""
        self.ready_line_seen = False
        self.weights_gib: float | None = None  # the busiest rank's, when ranks differ
        self.kv_tokens: int | None = None  # the smallest rank's: the engine takes the minimum
        self.ranks_joined: set[str] = set()  # the ranks seen entering the rendezvous
        self.world: int | None = None  # the ranks the rendezvous waits for, where a line said
        self.rendezvous: str | None = None  # where the ranks meet (HOST:PORT), where a line said
        self.all_joined = False

    def feed(self, line: str) -> Phase | None:
        if self.engine is None:
            self.engine = _engine_of(strip_ansi(line).lstrip())
        message = log_message(line)
        if self.nodes > 1 and message:
            joined = self._joining(last_drawing(line), message)
            if joined is not None:
                return joined
        return self._read(message) if message else None

    def _joining(self, line: str, message: str) -> Phase | None:
        """The rendezvous across nodes: who waits, which ranks joined, whether all did."""
        for pattern in ALL_JOINED:
            if match := pattern.search(message):
                self._note(match)
                if self.all_joined:
                    return None
                self.all_joined = True
                every = f"all {self.world} ranks" if self.world else "every rank"
                return self._advance("starting", detail=f"{every} joined")
        for pattern in RANK_JOINED:
            if match := pattern.search(line):
                self._note(match)
                self.ranks_joined.add(" ".join(match["rank"].split()))
                return self._advance("starting", detail=self._join_detail())
        for pattern in JOIN_WAITING:
            if match := pattern.search(message):
                self._note(match)
                return self._advance("starting", detail=self._join_detail())
        if match := DIST_INIT_ADDR.search(message):
            self.rendezvous = match["address"] or match["old"]
        return None

    def _note(self, match: re.Match[str]) -> None:
        found = match.groupdict()
        if found.get("world"):
            self.world = int(found["world"])
        if found.get("address"):
            self.rendezvous = found["address"].removeprefix("tcp://")

    def _join_detail(self) -> str:
        at = f" at {self.rendezvous}" if self.rendezvous else ""
        if not self.ranks_joined:
            return f"waiting for the other nodes{at}"
        of = f"/{self.world}" if self.world else ""
        return f"{len(self.ranks_joined)}{of} ranks joined{at}"

    def _read(self, message: str) -> Phase | None:
        if match := SHARD_PROGRESS.search(message):
            shards = f"{match['done']}/{match['total']} shards" if match["done"] else ""
            return self._advance("loading", progress=int(match["percent"]) / 100, detail=shards)
        if ENGINE_STARTING.search(message):
            return self._advance("starting")
        if LOAD_BEGIN.search(message):
            return self._advance("loading")
        for pattern in WEIGHTS_LOADED:
            if match := pattern.search(message):
                found = match.groupdict()
                if found.get("gib"):
                    self.weights_gib = max(self.weights_gib or 0.0, float(found["gib"]))
                if self.weights_gib:
                    weights = f"{self.weights_gib:.2f} GiB of weights per GPU"
                elif found.get("seconds"):  # CPU: the time alone, no memory
                    weights = f"weights loaded in {found['seconds']} s"
                else:
                    weights = ""
                return self._advance("loaded", detail=weights)
        for pattern in KV_MEMORY_LINES:
            if match := pattern.search(message):
                return self._advance("kv_cache", detail=f"{match['gib']} GiB for the KV cache")
        for pattern in KV_TOKENS:
            if match := pattern.search(message):
                tokens = int(match["tokens"].replace(",", ""))
                self.kv_tokens = tokens if self.kv_tokens is None else min(self.kv_tokens, tokens)
                return self._advance("kv_cache", detail=f"{self.kv_tokens:,} tokens of KV cache")
        if CUDA_GRAPHS.search(message):
            return self._advance("cuda_graphs")
        if self._is_ready(message):
            self.ready_line_seen = True
            return self._advance("serving")
        return None

    def _is_ready(self, message: str) -> bool:
        """An engine's ready line, unless the engine followed prints it before it is ready."""
        not_ready = surface(self.engine).not_ready_lines if self.engine else ()
        return any(s.ready_line in message and s.ready_line not in not_ready for s in SURFACES)

    def _advance(self, name: str, progress: float | None = None, detail: str = "") -> Phase | None:
        """Move forward only: every rank repeats the milestones, and a late one must not rewind."""
        rank = PHASES.index(name)
        current = PHASES.index(self.phase) if self.phase else -1
        if rank < current:
            return None
        if rank == current:
            rises = progress is not None and (self.progress is None or progress > self.progress)
            if not rises and (progress is not None or not detail or detail == self.detail):
                return None
            progress = progress if rises else self.progress
        self.phase, self.progress, self.detail = name, progress, detail
        return Phase(self.experiment, name, progress, detail)
