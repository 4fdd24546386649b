"""The engine's own numbers about a launch, read from its log one line at a time.

vLLM and SGLang print what the weights took, the memory left for the KV cache, the tokens it
holds, what the CUDA graphs took and how long each step was. Those lines are the truth the
planner's prediction is compared with and learned from (docs/launchfacts.md lists every line,
both engines, current and previous wordings, with the upstream file that prints it).

Who prints them differs. SGLang and older vLLM print them on every rank: the weights are the
busiest rank's (the GPU that fills first), the KV cache the smallest rank's (the engine sizes
every rank's pool to it). vLLM 0.33 prints its weights, KV memory and graph lines with
`info_once`, whose default scope lets only local rank 0 print (vllm/logger.py): on one node
they are GPU 0's, the first stage of a pipeline; `weights_ranks` says how many ranks spoke.

vLLM's CPU build says less: no memory for the weights (its model runner measures none), the time
of the loader alone, and the KV cache's GiB in a line of its own; what it does not say stays absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cockpit.core.records import LaunchFacts
from cockpit.engines.vllm.surface import CPU_KV_MEMORY, KV_MEMORY, LOADING_WEIGHTS_TOOK
from cockpit.runner.phases import KV_TOKENS, last_drawing, log_message

# -- who says it ---------------------------------------------------------------------------------

# vLLM's process tag "(Worker_TP1 pid=12)", "(Worker_PP1_TP0 pid=5)", "(VllmWorker rank=1 pid=3)",
# "(EngineCore_DP0 pid=9)" (vllm/v1/executor/multiproc_executor.py names the workers). The pid
# tells apart older vLLM's "(VllmWorkerProcess pid=N)", which all carry the same name.
# SGLang's logger writes "[%(asctime)s{prefix}] " (sglang/srt/utils/common.py: configure_logger),
# the prefix " DP0 PP0 ATTN_CP0 MOE_DP0 TP1 EP1" or part of it (sglang/srt/managers/scheduler.py:
# configure_scheduler_process; as in sgl-project/sglang#29600): the rank is all of it, whatever
# tags a version adds. A line without a tag is the main process's.
_RANK_TAG = re.compile(
    r"^\s*\((?P<process>[^()]*\bpid=\d+)\)"
    r"|^\s*\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?P<ranks>[^\]]*)\]"
)

# -- vLLM ----------------------------------------------------------------------------------------
# In 0.33 the weights, KV memory, KV size and graph lines are `logger.info_once` (scope "local":
# vllm/logger.py, is_local_first_rank in vllm/distributed/parallel_state.py), printed by the worker
# of local rank 0 (gpu_model_runner.py, gpu_worker.py) or by the engine core (kv_cache_utils.py).

# vllm/v1/worker/gpu_model_runner.py: "Model loading took %s GiB memory and %.6f seconds" (0.33);
# "Model loading took 11.4384 GiB and 5.338305 seconds" (0.8, 0.9); V0 and early V1 print
# "Loading model weights took %.4f GB" (vllm/worker/model_runner.py), bytes / 2**30 in fact: GiB.
_VLLM_WEIGHTS = re.compile(
    r"(?:Model loading|Loading model weights) took (?P<gib>[\d.]+) Gi?B(?: memory)?"
    r"(?: and (?P<seconds>[\d.]+) seconds?)?"
)
# vllm/v1/core/kv_cache_utils.py: update_kv_cache_capacity, on the size's line in 0.33, on a line
# of its own in older versions (0.26 and before).
_VLLM_CONCURRENCY = re.compile(
    r"Maximum concurrency for (?P<length>[\d,]+) tokens per request: (?P<x>[\d.]+)x"
)
# vllm/v1/worker/gpu_model_runner.py: capture_model, "Graph capturing finished in %.0f secs, took
# %.2f GiB"; the oldest print the time alone ("Graph capturing finished in 5 secs.").
_VLLM_GRAPHS = re.compile(
    r"Graph capturing finished in (?P<seconds>[\d.]+) secs?(?:, took (?P<gib>-?[\d.]+) GiB)?"
)
# vllm/v1/worker/gpu_model_runner.py: profile_cudagraph_memory, the estimate vLLM takes off the KV
# cache before it captures (by default since 0.21).
_VLLM_GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: (?P<gib>[\d.]+) GiB total")
# vllm/v1/engine/core.py: "... took %.2f s" (V1); V0's llm_engine.py says "seconds".
_VLLM_INIT = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s(?:econds)?\b"
)
# V0 only: vllm/worker/worker.py said how much memory was left for the KV cache in words.
_VLLM_V0_KV_MEMORY = (
    re.compile(r"Memory profiling results: .*\bkv_cache_size=(?P<gib>[\d.]+)GiB"),
    re.compile(r"the rest of the memory reserved for KV Cache is (?P<gib>[\d.]+)\s?GiB"),
)
_VLLM_VERSION = (
    # vllm/entrypoints/common/startup.py (0.33: "vLLM server version %s, serving model %s"),
    # vllm/entrypoints/openai/api_server.py before ("vLLM API server version %s").
    re.compile(r"\bvLLM (?:API )?server version (?P<version>\d[\w.+-]*)"),
    # vllm/entrypoints/common/startup.py: the logo's "version" row, when logs are coloured or plain.
    re.compile(r"█\s+version\s+(?P<version>\d[\w.+-]*)"),
    # vllm/v1/engine/core.py and V0's llm_engine.py: "Initializing a V1 LLM engine (v0.33.0) with config".
    re.compile(r"Initializing an? (?:V\d )?LLM engine \(v(?P<version>\d[\w.+-]*)\)"),
)

# -- SGLang --------------------------------------------------------------------------------------
# SGLang's "GB" is GiB everywhere these lines come from: get_available_gpu_memory returns
# free bytes / (1 << 30) (sglang/srt/utils/common.py), and the KV pool's sizes are bytes / GB
# with GB = 1024 * 1024 * 1024 (sglang/srt/mem_cache/memory_pool.py).

# sglang/srt/model_executor/model_runner.py: load_model, "Load weight end. elapsed=%.2f s,
# type=X, [quant=..., ]avail mem=%.2f GB, mem usage=%.2f GB." (older: no elapsed; the oldest:
# no mem usage). Each model runner prints its own: the target's, then on the same rank the draft
# model's of speculative decoding (scheduler.py: init_model_worker loads the target worker, then
# maybe_init_draft_worker), whose class tells nothing for sure (LlamaForCausalLMEagle3,
# DeepseekV3ForCausalLMNextN, MiMoMTP, a plain LlamaForCausalLM for STANDALONE): the first load
# of a rank is its target. The overlapped load's "Load weight end. Committed real weights ..."
# (startup_weight_load.py; never with speculative decoding) names no type and counts for none.
_SGLANG_WEIGHTS = re.compile(r"Load weight end\..*\btype=\w")
_ELAPSED = re.compile(r"\b(?:elapsed=|Time elapsed: )(?P<seconds>[\d.]+) s\b")
_AVAIL = re.compile(r"\bavail mem=(?P<gib>[\d.]+) GB")
_MEM_USAGE = re.compile(r"\bmem usage=(?P<gib>-?[\d.]+) GB")
# sglang/srt/mem_cache/memory_pool.py: _finalize_allocation_log, "K size: %.2f GB, V size: %.2f GB"
# or one "KV size" (MLA, and kv_pool_runtime.py's post-capture resize).
_KV_SIZES = re.compile(r"\bK size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|\bKV size: (?P<kv>[\d.]+) GB")
# sglang/srt/managers/scheduler.py: the pool the scheduler runs with, after every resize.
_SGLANG_SCHEDULER_TOKENS = re.compile(r"^max_total_num_tokens=(?P<tokens>\d+)")
# sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py (0.5.23): "Capture target
# decode CUDA graph end. bs=[...], elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB." and the
# same for "target prefill", "target verify", "draft decode"; older: "Capture cuda graph end. Time
# elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB." and "Capture piecewise CUDA graph end. ...".
# Each capture keeps its own memory: a rank's graphs are the sum of its captures.
_SGLANG_GRAPHS = re.compile(r"^Capture (?P<name>[\w ]*?) ?(?:cuda|CUDA) graph end\.")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class _PerRank:
    """One number per rank and part (a draft model, one graph capture); the last line of each
    wins, so a line printed twice counts once."""

    values: dict[tuple[str, str], float] = field(default_factory=dict)

    def set(self, rank: str, value: float, part: str = "") -> None:
        self.values[(rank, part)] = value

    def per_rank(self) -> dict[str, float]:
        """Each rank's parts added up: what that GPU holds."""
        totals: dict[str, float] = {}
        for (rank, _), value in self.values.items():
            totals[rank] = totals.get(rank, 0.0) + value
        return totals

    def pick(self, choose: Callable[[list[float]], float]) -> float | None:
        totals = list(self.per_rank().values())
        return choose(totals) if totals else None


@dataclass
class FactsReader:
    """Feed it the server's log lines in order; `facts` says what the engine reported."""

    weights_gib: _PerRank = field(default_factory=_PerRank)
    weights_seconds: _PerRank = field(default_factory=_PerRank)
    # vLLM's loader alone ("Loading weights took"): the weights' time where no "Model loading took
    # ... seconds" gives it, as on CPU; on a GPU that line comes after and counts instead.
    loader_seconds: _PerRank = field(default_factory=_PerRank)
    draft_weights_gib: _PerRank = field(default_factory=_PerRank)
    kv_memory_gib: _PerRank = field(default_factory=_PerRank)
    draft_kv_memory_gib: _PerRank = field(default_factory=_PerRank)
    kv_tokens: _PerRank = field(default_factory=_PerRank)
    max_concurrency: _PerRank = field(default_factory=_PerRank)
    max_concurrency_len: int | None = None
    graph_gib: _PerRank = field(default_factory=_PerRank)
    graph_seconds: _PerRank = field(default_factory=_PerRank)
    graph_estimate_gib: _PerRank = field(default_factory=_PerRank)
    avail_after_load_gib: _PerRank = field(default_factory=_PerRank)
    engine_init_seconds: _PerRank = field(default_factory=_PerRank)
    engine_version: str | None = None
    # SGLang: the distinct load and pool lines of each rank, in order: the first is the target's.
    _sglang_loads: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)
    _sglang_pools: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)

    def feed(self, line: str) -> None:
        drawn = last_drawing(line)
        message = log_message(drawn)
        if message:
            self._read(_rank(drawn), message)

    def _read(self, rank: str, message: str) -> None:
        if self._read_vllm(rank, message):
            return
        self._read_sglang(rank, message)

    def _read_vllm(self, rank: str, message: str) -> bool:
        if match := _VLLM_WEIGHTS.search(message):
            self.weights_gib.set(rank, float(match["gib"]))
            if match["seconds"]:
                self.weights_seconds.set(rank, float(match["seconds"]))
            return True
        if match := LOADING_WEIGHTS_TOOK.search(message):
            self.loader_seconds.set(rank, float(match["seconds"]))
            return True
        # "Available KV cache memory" on a GPU; on CPU each worker's "Explicitly set (1.0/7.46) GiB
        # for KV cache" or "Auto set (...)" (vllm/v1/worker/cpu_worker.py), whose weights no line says.
        if match := KV_MEMORY.search(message) or CPU_KV_MEMORY.search(message):
            self.kv_memory_gib.set(rank, float(match["gib"]))
            return True
        for pattern in _VLLM_V0_KV_MEMORY:
            if match := pattern.search(message):
                self.kv_memory_gib.set(rank, float(match["gib"]))
                return True
        found = False
        if match := KV_TOKENS[0].search(message):  # vLLM's "GPU KV cache size: N tokens"
            self.kv_tokens.set(rank, _number(match["tokens"]))
            found = True
        if match := _VLLM_CONCURRENCY.search(message):  # on the same line in 0.33
            self.max_concurrency.set(rank, float(match["x"]))
            self.max_concurrency_len = int(_number(match["length"]))
            found = True
        if found:
            return True
        if match := _VLLM_GRAPHS.search(message):
            self.graph_seconds.set(rank, float(match["seconds"]))
            if match["gib"]:
                self.graph_gib.set(rank, float(match["gib"]))
            return True
        if match := _VLLM_GRAPH_ESTIMATE.search(message):
            self.graph_estimate_gib.set(rank, float(match["gib"]))
            return True
        if match := _VLLM_INIT.search(message):
            self.engine_init_seconds.set(rank, float(match["seconds"]))
            return True
        if self.engine_version is None:
            for pattern in _VLLM_VERSION:
                if match := pattern.search(message):
                    self.engine_version = match["version"]
                    return True
        return False

    def _read_sglang(self, rank: str, message: str) -> None:
        if _SGLANG_WEIGHTS.search(message):
            self._sglang_load(rank, message)
            return
        if match := KV_TOKENS[1].search(message):  # "KV Cache is allocated"
            self._sglang_pool(rank, message, match["tokens"])
            return
        for pattern in (KV_TOKENS[2], _SGLANG_SCHEDULER_TOKENS):  # the target's pool, resized or in use
            if match := pattern.search(message):
                self._target_pool(rank, message, match["tokens"])
                return
        if match := _SGLANG_GRAPHS.match(message):
            capture = match["name"]
            if usage := _MEM_USAGE.search(message):
                self.graph_gib.set(rank, float(usage["gib"]), capture)
            if elapsed := _ELAPSED.search(message):
                self.graph_seconds.set(rank, float(elapsed["seconds"]), capture)

    def _sglang_load(self, rank: str, message: str) -> None:
        """The target's weights, or a draft model's apart: the planner does not model drafts."""
        usage = _MEM_USAGE.search(message)
        if draft := _order(self._sglang_loads, rank, message):
            if usage:
                self.draft_weights_gib.set(rank, float(usage["gib"]), str(draft))
            return
        if usage:
            self.weights_gib.set(rank, float(usage["gib"]))
        if match := _ELAPSED.search(message):
            self.weights_seconds.set(rank, float(match["seconds"]))
        if match := _AVAIL.search(message):
            self.avail_after_load_gib.set(rank, float(match["gib"]))

    def _sglang_pool(self, rank: str, message: str, tokens: str) -> None:
        """A rank's first pool is the target's; once a draft model has loaded there, a later one
        is the draft's, with the same tokens and its own layers (scheduler.py: init_memory_pools
        allocates the target's, then the draft worker's; older versions loaded and allocated the
        target, then the draft: sgl-project/sglang#6875)."""
        later = _order(self._sglang_pools, rank, message)
        if later and len(self._sglang_loads.get(rank, ())) > 1:
            if sizes := _KV_SIZES.search(message):
                self.draft_kv_memory_gib.set(rank, _pool_gib(sizes), str(later))
            return
        self._target_pool(rank, message, tokens)

    def _target_pool(self, rank: str, message: str, tokens: str) -> None:
        self.kv_tokens.set(rank, _number(tokens))
        if sizes := _KV_SIZES.search(message):
            self.kv_memory_gib.set(rank, _pool_gib(sizes))

    def facts(self) -> LaunchFacts:
        """Only what the engine said (docs/launchfacts.md names every figure)."""
        facts: dict[str, float | int | str] = {}
        busiest = {
            "weights_gib": self.weights_gib,
            "weights_seconds": self.weights_seconds if self.weights_seconds.values else self.loader_seconds,
            "draft_weights_gib": self.draft_weights_gib,
            "graph_gib": self.graph_gib,
            "graph_seconds": self.graph_seconds,
            "graph_estimate_gib": self.graph_estimate_gib,
            "engine_init_seconds": self.engine_init_seconds,
        }
        smallest = {
            "kv_memory_gib": self.kv_memory_gib,
            "draft_kv_memory_gib": self.draft_kv_memory_gib,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "avail_after_load_gib": self.avail_after_load_gib,
        }
        for name, ranks in busiest.items():
            _put(facts, name, ranks.pick(max))
        for name, ranks in smallest.items():
            _put(facts, name, ranks.pick(min))
        if "kv_tokens" in facts:
            facts["kv_tokens"] = int(facts["kv_tokens"])
        if weighed := len(self.weights_gib.per_rank()):
            facts["weights_ranks"] = weighed  # 1 where vLLM 0.33 lets local rank 0 alone say it
        if self.max_concurrency_len is not None and "max_concurrency" in facts:
            facts["max_concurrency_len"] = self.max_concurrency_len
        if self.engine_version:
            facts["engine_version"] = self.engine_version
        return LaunchFacts.from_json(facts)


def _put(facts: dict[str, float | int | str], name: str, value: float | None) -> None:
    if value is not None:
        facts[name] = round(value, 4)


def _order(seen: dict[str, list[str]], rank: str, message: str) -> int:
    """Where ``message`` stands among the distinct lines of its kind that ``rank`` printed, 0 for
    the first: a line printed twice stands where it first did."""
    lines = seen.setdefault(rank, [])
    if message not in lines:
        lines.append(message)
    return lines.index(message)


def _pool_gib(sizes: re.Match[str]) -> float:
    return float(sizes["kv"]) if sizes["kv"] else float(sizes["k"]) + float(sizes["v"])


def _rank(line: str) -> str:
    """Which process said it: vLLM's process tag, SGLang's rank list, "" for the main process."""
    match = _RANK_TAG.match(line)
    if match is None:
        return ""
    return (match["process"] or match["ranks"] or "").strip()


def read_facts(lines: Iterable[str]) -> LaunchFacts:
    """The facts of a whole log at once (a log read after the fact, tests)."""
    reader = FactsReader()
    for line in lines:
        reader.feed(line)
    return reader.facts()
