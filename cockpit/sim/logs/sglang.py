"""SGLang 0.5.23's startup log, as the simulated engine prints it (docs/simulator.md#log-texts)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence

from cockpit.core.layout import Layout
from cockpit.core.planner import MemoryEstimate, Reason, Setup, Verdict
from cockpit.engines import Placement
from cockpit.engines.sglang.memory import static_share
from cockpit.engines.sglang.surface import (
    CHILD_DIED,
    INIT_PARALLEL_BEGIN,
    INIT_PARALLEL_ENDS,
    LOAD_WEIGHT_BEGIN,
    SCHEDULER_EXCEPTION,
    SURFACE,
    UVICORN_STARTUP_COMPLETE,
)
from cockpit.sim.flags import EngineArgs, MultiNode
from cockpit.sim.logs.base import (
    EngineLog,
    Frame,
    Out,
    Raise,
    Span,
    client_timeout_text,
    exception_line,
    graph_gib,
    peer_closed_text,
    raises,
    store_lost_text,
    store_timeout_text,
)

_SCHEDULER = "sglang/srt/managers/scheduler.py"
_SGLANG_SCHEDULER = Frame(
    _SCHEDULER,
    6362,
    "run_scheduler_process",
    "scheduler = Scheduler(server_args, port_args)",
)
_MOE_EP_SETUP = "sglang/srt/model_executor/model_runner_components/moe_ep_setup.py"
_KV_CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
# SGLang 0.5.23 sizes the KV pool after loading: the scheduler asks the model runner for it, the
# KV cache configurator profiles the free memory and turns it into a pool config.
_POOL_SIZING = (
    _SGLANG_SCHEDULER,
    Frame(_SCHEDULER, 568, "__init__", "self.init_model_worker()"),
    Frame(_SCHEDULER, 1137, "init_model_worker", "self.init_memory_pools()"),
    Frame(_SCHEDULER, 1100, "init_memory_pools", "self.init_target_memory_pool()"),
    Frame(_SCHEDULER, 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
    Frame(
        "sglang/srt/managers/tp_worker.py", 409, "alloc_memory_pool", "self.model_runner.alloc_memory_pool("
    ),
    Frame(
        "sglang/srt/model_executor/model_runner.py",
        982,
        "alloc_memory_pool",
        "result = self.kv_cache_configurator.configure(",
    ),
    Frame(
        _KV_CONFIGURATOR, 476, "configure", "config = self._resolve_memory_pool_config(pre_model_load_memory)"
    ),
)
# The weights leave the static share no room: KVCacheConfigurator._profile_available_bytes.
_NO_ROOM = (
    Frame(
        _KV_CONFIGURATOR,
        3182,
        "_resolve_memory_pool_config",
        "available_bytes = self._profile_available_bytes(pre_model_load_memory)",
    ),
    Frame(_KV_CONFIGURATOR, 3050, "_profile_available_bytes", "raise ValueError("),
)
# The pool holds no token: DefaultPoolConfigurator.calculate_pool_sizes builds a MemoryPoolConfig
# that refuses it (sglang/srt/model_executor/pool_configurator.py; the dataclass's own __init__
# frame between them is left out).
_NO_TOKEN = (
    Frame(
        _KV_CONFIGURATOR,
        3183,
        "_resolve_memory_pool_config",
        "config = self.config_from_budget(available_bytes)",
    ),
    Frame(_KV_CONFIGURATOR, 3204, "config_from_budget", "config = configurator.calculate_pool_sizes("),
    Frame(
        "sglang/srt/model_executor/pool_configurator.py",
        647,
        "calculate_pool_sizes",
        "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)",
    ),
    Frame("sglang/srt/model_executor/pool_configurator.py", 99, "__post_init__", "raise RuntimeError(msg)"),
)
# Each error by the words cockpit's diagnosis reads it by (cockpit/engines/sglang/surface.py), so
# what the simulated engine raises is what the diagnosis explains.
_SGLANG_BY_TEXT: tuple[tuple[re.Pattern[str], Raise], ...] = (
    # moe_ep_setup.py: check_quantized_moe_compatibility, after a block-quantized MoE model loads
    (SURFACE.failures["ep-divides-tp"], raises(_MOE_EP_SETUP, 151, "check_quantized_moe_compatibility")),
    (SURFACE.failures["moe-tp"], raises(_MOE_EP_SETUP, 163, "check_quantized_moe_compatibility")),
    (SURFACE.failures["moe-block"], raises(_MOE_EP_SETUP, 172, "check_quantized_moe_compatibility")),
    (  # sglang/srt/model_executor/model_runner.py: ModelRunner.__init__
        SURFACE.failures["pp-unsupported"],
        Raise(
            Frame("sglang/srt/model_executor/model_runner.py", 514, "__init__", "assert self.support_pp, ("),
            exception="AssertionError",
        ),
    ),
)

# What SGLang prints for each deprecated flag: DeprecatedStoreTrueAction and DeprecatedStoreConstAction
# (sglang/srt/arg_groups/argparse_actions.py, the new flags from sglang/srt/server_args.py) in yellow,
# the others from handle_deprecated_args (sglang/srt/arg_groups/serving_hook.py). Both print before
# logging is configured, so the message stands alone on its line.
_YELLOW, _RESET = "\033[1;33m", "\033[0m"
_SGLANG_REPLACEMENTS = {
    "--disable-cuda-graph": "--cuda-graph-backend-{decode,prefill}=disabled",
    "--enable-dp-attention": "--attn-dp-size <dp-size>",
    "--monokernel-backend": "--enable-amd-monokernel",
}
_SGLANG_RESOLUTION_WARNINGS = {
    "--disable-fast-image-processor": "--disable-fast-image-processor is deprecated; use "
    "--image-processor-backend=pil instead.",
    "--enable-flashinfer-allreduce-fusion": "--enable-flashinfer-allreduce-fusion is deprecated. "
    "Please use --flashinfer-allreduce-fusion-backend=auto instead.",
    "--grpc-mode": "--grpc-mode is deprecated and will be removed in a future version. Use --smg-grpc-mode "
    "for the legacy SMG gRPC server, or --grpc-port for the native gRPC server.",
}


def capture_sizes(most: int | None) -> list[int]:
    """A sketch of the batch sizes captured: 1, 2, 4, 8, then every 8, up to the largest."""
    top = most or 256
    return [b for b in (1, 2, 4) if b < top] + list(range(8, top + 1, 8))


def _sglang_flag(spelling: str) -> str:
    """The flag argparse matched: a unique prefix stands for the whole flag, as in argparse."""
    flag = spelling.split("=", 1)[0]
    known = [f for f in (*_SGLANG_REPLACEMENTS, *_SGLANG_RESOLUTION_WARNINGS) if f.startswith(flag)]
    return known[0] if len(known) == 1 else flag


def _sglang_deprecation(spelling: str) -> str:
    flag = _sglang_flag(spelling)
    if flag in _SGLANG_REPLACEMENTS:
        return (
            f"{_YELLOW}'{flag}' is deprecated and will be removed in a future release. "
            f"Use '{_SGLANG_REPLACEMENTS[flag]}' instead.{_RESET}"
        )
    if flag in _SGLANG_RESOLUTION_WARNINGS:
        return _SGLANG_RESOLUTION_WARNINGS[flag]
    return (  # DeprecatedAction's words for a flag without a registered replacement
        f"{_YELLOW}The command line argument '{flag}' is deprecated and will be removed in future versions.{_RESET}"
    )


def _sglang_kv_dtype(kv_cache_dtype: str) -> str:
    """The torch dtype SGLang's memory pool reports (sglang/srt/model_executor/model_runner.py)."""
    return {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}.get(
        kv_cache_dtype.lower(), "torch.bfloat16"
    )


def _sglang_rank(layout: Layout, rank: int = 0) -> str:
    """A scheduler's log prefix (sglang/srt/managers/scheduler.py): DP, PP, TP, EP when used. Its
    rank counts TP fastest, then PP; attention DP and EP split the TP group."""
    pp_rank, tp_rank = divmod(rank, max(1, layout.tp))
    replicas = layout.dp if layout.dp > 1 or layout.dpa else 1
    prefix = f" DP{tp_rank * replicas // max(1, layout.tp)}" if replicas > 1 else ""
    prefix += f" PP{pp_rank}" if layout.pp > 1 else ""
    prefix += f" TP{tp_rank}" if layout.tp > 1 else ""
    prefix += f" EP{tp_rank}" if (layout.ep or 1) > 1 else ""
    return prefix.strip()


# Where a scheduler opens the process group (sglang/srt/distributed/parallel_state.py:
# init_distributed_environment, torch's init_process_group) and meets a lost peer (Gloo's CPU group).
_INIT_PARALLEL = (
    Frame(_SCHEDULER, 568, "__init__", "self.init_model_worker()"),
    Frame(
        "sglang/srt/distributed/bootstrap.py",
        145,
        "init_parallel_runtime",
        "_init_parallel_groups(",
    ),
    Frame(
        "torch/distributed/distributed_c10d.py",
        1831,
        "init_process_group",
        "store, rank, world_size = next(rendezvous_iterator)",
    ),
)
_COLLECTIVE = Frame("torch/distributed/distributed_c10d.py", 2815, "all_reduce", "work.wait()")


_ONE_BOX = MultiNode(1, 0, "127.0.0.1", 0, serves=True)


class SGLangLog(EngineLog):
    """The SGLang logger: "[YYYY-MM-DD HH:MM:SS TP0] text" in a scheduler, no rank in the main
    process (sglang/srt/utils/common.py: configure_logger)."""

    name = SURFACE.name

    def __init__(self, out: Out, env: Mapping[str, str] | None = None):
        super().__init__(out)
        self.rank = "TP0"

    def line(self, text: str, rank: str | None = None) -> None:
        where = self.rank if rank is None else rank
        self.out(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{' ' + where if where else ''}] {text}")

    def main_line(self, text: str) -> None:
        self.line(text, rank="")

    def argument_warnings(self, deprecated: Sequence[str]) -> None:
        for spelling in deprecated:
            self.out(_sglang_deprecation(spelling))

    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span | None = None) -> None:
        """The main process's arguments, then the schedulers up to the load; across nodes
        (``span``) up to the rendezvous, each of this node's schedulers opening the group."""
        layout = args.layout
        self.rank = _sglang_rank(layout)
        attn_dp = layout.dp if layout.dpa else 1
        server = setup.server
        # sglang/srt/entrypoints/engine.py: the resolved arguments as a dict (abridged); resolution
        # turns --enable-dp-attention --dp-size N into attn_dp_size N (arg_groups/parallel_hook.py).
        settings = {
            "model_path": args.model,
            "tokenizer_path": args.model,
            "context_length": server.max_model_len,
            "dtype": "auto",
            "kv_cache_dtype": server.kv_cache_dtype,
            "tp_size": layout.tp,
            "pp_size": layout.pp,
            "dp_size": 1 if layout.dpa else layout.dp,
            "attn_dp_size": attn_dp,
            "enable_dp_attention": attn_dp > 1,
            "ep_size": layout.ep or 1,
            # resolved: the flag, or the share SGLang derived (None only before any memory estimate)
            "mem_fraction_static": (
                server.mem_fraction_static if verdict.memory is None else static_share(server, verdict.memory)
            ),
            "host": args.host,
            "port": args.port,
        }
        if span is not None:
            settings.update(
                nnodes=span.nodes.nnodes, node_rank=span.nodes.node_rank, dist_init_addr=span.nodes.address
            )
        self.main_line(f"server_args={settings}")
        if span is None:
            self.line(INIT_PARALLEL_BEGIN)
            self.joined(args, setup, Span(_ONE_BOX, 1, range(1)))
            return
        self.rank = _sglang_rank(layout, span.ranks.start)
        for rank in span.ranks:
            self.line(INIT_PARALLEL_BEGIN, _sglang_rank(layout, rank))

    def joined(self, args: EngineArgs, setup: Setup, span: Span) -> None:
        """The group holds every rank: the schedulers go on to load (model_runner.py: load_model)."""
        took = 0.5 if span.nodes.nnodes == 1 else max(0.5, self.elapsed())  # across nodes: the wait too
        self.line(f"{INIT_PARALLEL_ENDS} elapsed={took:.2f} s")
        self.line(f"{LOAD_WEIGHT_BEGIN} avail mem={setup.hardware.memory_gib - 0.5:.2f} GB")

    # -- across nodes ----------------------------------------------------------------------------

    def headless(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span) -> None:
        """A node other than 0 starts as the head does, its schedulers only (no HTTP server:
        sglang/srt/entrypoints/http_server.py returns for node_rank >= 1)."""
        self.starting(args, setup, verdict, span)

    def rank_timeout(self, span: Span, seconds: float, joined: int) -> None:
        """Rank 0's store gives up: its scheduler dies, and the main process with it."""
        self._scheduler_died(
            [_SGLANG_SCHEDULER, *_INIT_PARALLEL], store_timeout_text(seconds, joined, span.world)
        )

    def unreachable(self, span: Span, seconds: float) -> None:
        nodes = span.nodes
        self._scheduler_died(
            [_SGLANG_SCHEDULER, *_INIT_PARALLEL], client_timeout_text(nodes.host, nodes.port, seconds)
        )

    def peer_lost(self, span: Span, host: str, port: int) -> None:
        self._scheduler_died([_SGLANG_SCHEDULER, _COLLECTIVE], peer_closed_text(host, port))

    def head_lost(self, span: Span, local: tuple[str, int]) -> None:
        for rank in span.ranks:
            self.out(store_lost_text(rank, local, span.nodes.address))
        self._scheduler_died(
            [_SGLANG_SCHEDULER, _COLLECTIVE], peer_closed_text(span.nodes.host, span.nodes.port)
        )

    def head_stopped(self, span: Span) -> None:
        """The head's schedulers are gone: this node's exit with them (no line of their own)."""

    def startup_failure(self, reasons: Sequence[Reason]) -> None:
        """The scheduler logs the traceback (its first line beside the prefix), the main process
        the signal (sglang/srt/managers/scheduler.py, sglang/srt/entrypoints/engine.py)."""
        message = reasons[0].message
        raised = next((r for pattern, r in _SGLANG_BY_TEXT if pattern.search(message)), None)
        if raised is None:
            self._scheduler_died([_SGLANG_SCHEDULER], exception_line(message))
        else:
            self._scheduler_died([_SGLANG_SCHEDULER, raised.frame], exception_line(message, raised.exception))

    def _scheduler_died(self, frames: Sequence[Frame], error: str) -> None:
        self.line(SCHEDULER_EXCEPTION)
        for frame in frames:
            for text in frame.lines():
                self.out(text)
        for text in error.splitlines():
            self.out(text)
        self.out("")
        self.main_line(CHILD_DIED)

    def oom(self, text: str, rank: int = 0) -> None:
        loader = Frame(
            "sglang/srt/model_loader/loader.py",
            1063,
            "load_weights_and_postprocess",
            "model.load_weights(weights)",
        )
        self._scheduler_died([_SGLANG_SCHEDULER, loader], text)

    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None:
        used = memory.weights_gib + 0.5
        quant = {"fp8-block": "quant=fp8, ", "fp8": "quant=fp8, ", "mxfp4": "quant=mxfp4, "}
        self.line(  # sglang/srt/model_executor/model_runner.py: load_model
            f"Load weight end. elapsed={self.elapsed():.2f} s, type={setup.model.architecture}, "
            f"{quant.get(setup.model.quant.method, '')}"
            f"avail mem={memory.capacity_gib - used:.2f} GB, mem usage={memory.weights_gib:.2f} GB."
        )

    def kv_failure(self, reason: Reason) -> None:
        """SGLang 0.5.23 raises a ValueError when the weights leave no room for the pool, a
        RuntimeError when the pool holds no token: the text says which."""
        if exception_line(reason.message, "RuntimeError").startswith("RuntimeError"):
            frames = [*_POOL_SIZING, *_NO_TOKEN]
        else:
            frames = [*_POOL_SIZING, *_NO_ROOM]
        self._scheduler_died(frames, exception_line(reason.message, "RuntimeError"))

    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None:
        per_replica = memory.kv_tokens // max(1, placement.attn_replicas)
        size = memory.kv_budget_gib
        dtype = _sglang_kv_dtype(setup.server.kv_cache_dtype)
        # sglang/srt/mem_cache/memory_pool.py: _finalize_allocation_log (one size for MLA's latent cache)
        if setup.model.mla is not None:
            self.line(
                f"KV Cache is allocated. dtype: {dtype}, #tokens: {per_replica}, KV size: {size:.2f} GB"
            )
        else:
            self.line(
                f"KV Cache is allocated. dtype: {dtype}, #tokens: {per_replica}, "
                f"K size: {size / 2:.2f} GB, V size: {size / 2:.2f} GB"
            )
        avail = memory.capacity_gib - memory.weights_gib - size - 0.5
        # sglang/srt/mem_cache/kv_cache_configurator.py
        self.line(f"Memory pool end. avail mem={avail:.2f} GB")
        graphs = 0.0
        if setup.server.cuda_graphs:  # sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py
            graphs = graph_gib(memory)
            self.line(
                f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem={avail:.2f} GB"
            )
            self.line(
                f"Capture target decode CUDA graph end. bs={capture_sizes(setup.server.cuda_graph_max_bs)}, "
                f"elapsed=1.00 s, mem usage={graphs:.2f} GB, avail mem={avail - graphs:.2f} GB."
            )
        length = setup.server.max_model_len or setup.model.max_context
        self.line(  # sglang/srt/managers/scheduler.py
            f"max_total_num_tokens={per_replica}, chunked_prefill_size={setup.server.max_num_batched_tokens or 8192}, "
            f"max_prefill_tokens=16384, max_running_requests={setup.server.max_num_seqs or 4096}, "
            f"context_len={length}, available_gpu_mem={avail - graphs:.2f} GB"
        )

    def ready(self, args: EngineArgs) -> None:
        # uvicorn, then the warm-up requests and the main process's line (sglang/srt/entrypoints/http_server.py)
        self.out(f"INFO:     Started server process [{os.getpid()}]")
        self.out("INFO:     Waiting for application startup.")
        self.out(f"INFO:     {UVICORN_STARTUP_COMPLETE}")
        self.out(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        self.out('INFO:     127.0.0.1:0 - "GET /model_info HTTP/1.1" 200 OK')
        self.out('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        self.main_line(SURFACE.ready_line)
