"""Startup logs in each engine's own style (docs/simulator.md#log-texts).

The lines cockpit's diagnosis reads (progress, "Model loading took", the KV lines, the ready
line, errors) are printed exactly as the engines print them; the rest is a short sketch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from cockpit.engines import Placement
from cockpit.planner import MemoryEstimate, Reason, Setup, Verdict
from cockpit.sim.flags import EngineArgs

Out = Callable[[str], None]


def _tqdm(done: int, total: int, elapsed: float) -> str:
    percent = int(100 * done / total) if total else 100
    rate = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / rate if rate else 0.0
    return (
        f"Loading safetensors checkpoint shards: {percent:3d}% Completed | {done}/{total} "
        f"[{_clock(elapsed)}<{_clock(left)}, {rate:5.2f}it/s]"
    )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class EngineLog:
    name = "engine"

    def __init__(self, out: Out):
        self.out = out
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        self.out(text)

    # Hooks the engine calls, in order.
    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict) -> None: ...
    def shard_progress(self, done: int, total: int, elapsed: float) -> None:
        self.line(_tqdm(done, total, elapsed))

    def startup_failure(self, reasons: Sequence[Reason]) -> None: ...
    def oom(self, text: str) -> None: ...
    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None: ...
    def kv_failure(self, reason: Reason) -> None: ...
    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None: ...
    def ready(self, args: EngineArgs) -> None: ...

    def bind_failure(self, host: str, port: int, exc: OSError) -> None:
        self.out(
            f"ERROR:    [Errno {exc.errno or 98}] error while attempting to bind on address ('{host}', {port}): "
            "address already in use"
        )

    def shutdown(self) -> None:
        self.out("INFO:     Shutting down")
        self.out("INFO:     Application shutdown complete.")

    def traceback(self, where: str, error: str, frame: str = "<module>", code: str = "") -> None:
        self.out("Traceback (most recent call last):")
        self.out(f'  File "{where}", line 1, in {frame}')
        if code:
            self.out(f"    {code}")
        for text in error.splitlines():
            self.out(text)


class VLLMLog(EngineLog):
    name = "vllm"

    def line(self, text: str, source: str = "core.py:100") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.out(f"INFO {stamp} [{source}] {text}")

    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict) -> None:
        layout = args.layout
        self.line("vLLM API server version 0.11.0 (cockpit simulator)", "api_server.py:1800")
        self.line(f"non-default args: {dict(args.non_default)}", "utils.py:233")
        self.line(
            "Initializing a V1 LLM engine (v0.11.0) with config: "
            f"model='{args.model}', tensor_parallel_size={layout.tp}, pipeline_parallel_size={layout.pp}, "
            f"data_parallel_size={layout.dp}, enable_expert_parallel={layout.expert_parallel}, "
            f"quantization={setup.model.quant.method}"
        )
        placement = verdict.placement
        if placement is not None and not [r for r in verdict.reasons if r.rule == "gpus-available"]:
            ep = placement.moe_ep > 1
            for rank in range(placement.gpus_used):
                tp_rank, rest = rank % layout.tp, rank // layout.tp
                pp_rank, dp_rank = rest % layout.pp, rest // layout.pp
                self.line(
                    f"rank {rank} in world size {placement.gpus_used} is assigned as DP rank {dp_rank}, "
                    f"PP rank {pp_rank}, TP rank {tp_rank}, EP rank {rank if ep else 0}",
                    "parallel_state.py:1200",
                )
        self.line(f"Starting to load model {args.model}...", "gpu_model_runner.py:2600")

    def startup_failure(self, reasons: Sequence[Reason]) -> None:
        first = reasons[0]
        where, frame, code = _VLLM_FRAMES.get(first.rule, _VLLM_FRAMES["default"])
        if first.rule in ("attention-heads", "gpus-available"):
            self.traceback(where, _error(first), frame, code)
            return
        self.out(
            f"(Worker_TP0 pid={os.getpid()}) ERROR {time.strftime('%m-%d %H:%M:%S')} [multiproc_executor.py:600] WorkerProc failed to start."
        )
        self.traceback(where, _error(first), frame, code)
        self._engine_died()

    def _engine_died(self) -> None:
        self.out(f"ERROR {time.strftime('%m-%d %H:%M:%S')} [core.py:700] EngineCore failed to start.")
        self.out(
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
        )

    def oom(self, text: str) -> None:
        self.traceback(
            "/usr/local/lib/python3.12/site-packages/vllm/model_executor/model_loader/default_loader.py", text
        )
        self._engine_died()

    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None:
        seconds = time.monotonic() - self.started
        self.line(
            f"Model loading took {memory.weights_gib:.4f} GiB memory and {seconds:.6f} seconds",
            "gpu_model_runner.py:2650",
        )

    def kv_failure(self, reason: Reason) -> None:
        self.traceback(
            "/usr/local/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", reason.message
        )
        self._engine_died()

    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None:
        per_replica = memory.kv_tokens // max(1, placement.attn_replicas)
        length = setup.server.max_model_len or setup.model.max_context
        self.line(f"Available KV cache memory: {memory.kv_budget_gib:.2f} GiB", "gpu_worker.py:300")
        self.line(f"GPU KV cache size: {per_replica:,} tokens", "kv_cache_utils.py:1100")
        self.line(
            f"Maximum concurrency for {length:,} tokens per request: {per_replica / length:.2f}x",
            "kv_cache_utils.py:1104",
        )
        self.line("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%", "gpu_model_runner.py:3400")
        self.line("Graph capturing finished in 1 secs, took 0.50 GiB", "gpu_model_runner.py:3480")
        self.line(
            f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - self.started:.2f} seconds",
            "core.py:210",
        )

    def ready(self, args: EngineArgs) -> None:
        self.line(f"Starting vLLM API server 0 on http://{args.host}:{args.port}", "api_server.py:1900")
        self.line(
            "Available routes are: /health, /v1/models, /v1/completions, /v1/chat/completions",
            "launcher.py:40",
        )
        self.out(f"INFO:     Started server process [{os.getpid()}]")
        self.out("INFO:     Waiting for application startup.")
        self.out("INFO:     Application startup complete.")


class SGLangLog(EngineLog):
    name = "sglang"

    def line(self, text: str, rank: str = "TP0") -> None:
        self.out(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} {rank}] {text}")

    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict) -> None:
        layout = args.layout
        self.line(
            f"server_args=ServerArgs(model_path='{args.model}', tp_size={layout.tp}, pp_size={layout.pp}, "
            f"dp_size={layout.dp}, ep_size={layout.ep or 1}, enable_dp_attention={layout.dpa}, port={args.port})",
            rank="",
        )
        self.line("Init torch distributed begin.")
        self.line("Init torch distributed ends. mem usage=0.50 GB")
        self.line(f"Load weight begin. avail mem={setup.hardware.memory_gib - 0.5:.2f} GB")

    def startup_failure(self, reasons: Sequence[Reason]) -> None:
        self.line("Scheduler hit an exception:")
        self.traceback(
            "/usr/local/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", _error(reasons[0])
        )
        self.out("Received sigquit from a child process. It usually means the child failed.")

    def oom(self, text: str) -> None:
        self.startup_failure([Reason("oom-at-load", text)])

    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None:
        used = memory.weights_gib + 0.5
        self.line(
            f"Load weight end. type={setup.model.architecture}, dtype=torch.bfloat16, "
            f"avail mem={memory.capacity_gib - used:.2f} GB, mem usage={memory.weights_gib:.2f} GB."
        )

    def kv_failure(self, reason: Reason) -> None:
        self.startup_failure([reason])

    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None:
        per_replica = memory.kv_tokens // max(1, placement.attn_replicas)
        size = memory.kv_budget_gib
        if setup.model.mla is not None:
            self.line(f"KV Cache is allocated. #tokens: {per_replica}, KV size: {size:.2f} GB")
        else:
            self.line(
                f"KV Cache is allocated. #tokens: {per_replica}, K size: {size / 2:.2f} GB, V size: {size / 2:.2f} GB"
            )
        avail = memory.capacity_gib - memory.weights_gib - size - 0.5
        self.line(f"Memory pool end. avail mem={avail:.2f} GB")
        self.line(f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
        self.line(
            f"Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.50 GB. avail mem={avail - 0.5:.2f} GB."
        )
        length = setup.server.max_model_len or setup.model.max_context
        self.line(
            f"max_total_num_tokens={per_replica}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests={setup.server.max_num_seqs or 4096}, context_len={length}, "
            f"available_gpu_mem={avail - 0.5:.2f} GB"
        )

    def ready(self, args: EngineArgs) -> None:
        self.out(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        self.out('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        self.line("The server is fired up and ready to roll!")


_SITE = "/usr/local/lib/python3.12/site-packages/vllm"
# Where vLLM raises each startup failure: (file, function, source line), as in its tracebacks.
_VLLM_FRAMES = {
    "attention-heads": (f"{_SITE}/config/model.py", "verify_with_parallel_config", "raise ValueError("),
    "gpus-available": (f"{_SITE}/config/parallel.py", "__post_init__", "raise ValueError("),
    "kv-heads": (
        f"{_SITE}/model_executor/models/minimax_m2.py",
        "__init__",
        "assert self.total_num_kv_heads % tp_size == 0",
    ),
    "moe-width": (
        f"{_SITE}/model_executor/layers/fused_moe/config.py",
        "__post_init__",
        "assert self.intermediate_size % tp_size == 0",
    ),
    "fp8-block-gate-up": (
        f"{_SITE}/model_executor/layers/quantization/fp8.py",
        "create_weights",
        "raise ValueError(",
    ),
    "fp8-block-down": (
        f"{_SITE}/model_executor/layers/quantization/fp8.py",
        "create_weights",
        "raise ValueError(",
    ),
    "fp8-block-linear": (
        f"{_SITE}/model_executor/layers/quantization/utils/fp8_utils.py",
        "validate_fp8_block_shape",
        "raise ValueError(",
    ),
    "default": (f"{_SITE}/v1/executor/multiproc_executor.py", "worker_main", ""),
}


def _error(reason: Reason) -> str:
    if reason.message == "AssertionError":
        return "AssertionError"
    return reason.message


def for_engine(engine: str, out: Out) -> EngineLog:
    return VLLMLog(out) if engine == "vllm" else SGLangLog(out)
