"""What every engine adapter answers: flags, placement, startup rules, memory rules.

The same layout words mean different things on vLLM and SGLang (SGLang's ``--ep-size`` adds no
GPUs; vLLM has no EP size at all), so each adapter turns a typed ``Layout`` into a
``Placement`` that says plainly how many GPUs run and how every tensor is split. The planner and
the performance model ask an adapter, never an engine's name, how it sizes memory and batches: each
engine's rules live in its package (engines/<engine>/memory.py).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cockpit.core.cluster import Node, NodeLaunch, Rendezvous
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.layout import Layout
from cockpit.core.model import ModelArch
from cockpit.engines.arguments import check_args, refuse_owned
from cockpit.engines.estimate import CachePool, MemoryBudget, MemoryEstimate, StateArgs
from cockpit.engines.nodes import NodeShare, check_cluster, node_env, node_shares
from cockpit.engines.options import CheckedArgs, OptionTable, option_table, size_value, table_version
from cockpit.engines.surface import EngineSurface


@dataclass(frozen=True)
class Rule:
    """A startup check the engine would fail, in the engine's own words."""

    rule: str  # short id: "attention-heads", "fp8-block-gate-up", ...
    message: str  # what the engine prints (verbatim where the engine has a message)
    detail: str = ""  # the same in plain words, with the numbers

    def to_json(self) -> dict:
        return {"rule": self.rule, "message": self.message, "detail": self.detail}


class Inexpressible(CockpitError):
    """The layout cannot be said in this engine's flags; ``alternatives`` can."""

    def __init__(self, message: str, alternatives: Sequence[Layout] = ()):
        super().__init__(message)
        self.alternatives = tuple(alternatives)


@dataclass(frozen=True)
class ServerArgs:
    """The server arguments that move memory or speed, by meaning rather than by spelling.

    Read from the checked argument list (``server_args``), so both engines' names land here:
    vLLM's --max-model-len and SGLang's --context-length are both ``max_model_len``. ``None``
    means the engine picks (docs/memory.md#server-arguments-the-planner-models)."""

    gpu_memory_utilization: float = 0.92  # vLLM (vllm/config/cache.py default)
    mem_fraction_static: float | None = None  # SGLang (None: the engine derives it)
    max_model_len: int | None = None  # vLLM --max-model-len / SGLang --context-length
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None  # vLLM --max-num-seqs / SGLang --max-running-requests
    max_num_batched_tokens: int | None = None  # vLLM --max-num-batched-tokens / SGLang --chunked-prefill-size
    chunked_prefill: bool = True  # SGLang --chunked-prefill-size -1 / vLLM --no-enable-chunked-prefill
    cuda_graphs: bool = True  # False: vLLM --enforce-eager / SGLang --disable-cuda-graph
    cuda_graph_max_bs: int | None = None  # the largest batch captured in a CUDA graph
    enable_eplb: bool = False
    redundant_experts: int = 0  # EPLB's extra expert copies over the EP group
    enable_dp_lm_head: bool = False  # SGLang: lm_head over the attention TP group only
    max_total_tokens: int | None = None  # SGLang --max-total-tokens: caps the KV pool
    kv_cache_memory_bytes: int | None = None  # vLLM --kv-cache-memory-bytes: the KV cache, set outright
    # Windowed layers keep only their window: off with vLLM --disable-hybrid-kv-cache-manager or
    # SGLang --disable-hybrid-swa-memory, when every layer keeps the whole request's KV.
    hybrid_kv_cache: bool = True
    swa_full_tokens_ratio: float | None = None  # SGLang --swa-full-tokens-ratio
    notes: tuple[str, ...] = ()  # what the engine would warn about

    def kv_bytes(self, model_dtype_bytes: float = 2.0) -> float:
        """Bytes per KV element of the cache dtype (its scales left out); "auto" is the model's."""
        return KV_DTYPE_BITS.get(self.kv_cache_dtype.lower(), model_dtype_bytes * 8) / 8


# Bits per KV element of each cache dtype both engines name (vllm/config/cache.py CacheDType,
# SGLang's --kv-cache-dtype choices); a K/V pair of widths averages them (turboquant_k8v4: 8 and 4).
KV_DTYPE_BITS = {
    "float16": 16,
    "fp16": 16,
    "bfloat16": 16,
    "bf16": 16,
    "fp8": 8,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "fp8_inc": 8,
    "fp8_ds_mla": 8,
    "fp8_per_token_head": 8,
    "mxfp8": 8,
    "int8_per_token_head": 8,
    "turboquant_k8v4": 6,
    "turboquant_4bit_nc": 4,
    "turboquant_k3v4_nc": 3.5,
    "turboquant_3bit_nc": 3,
    "octave_k3v4": 3.5,
    "octave_k3v3": 3,
    "octave_k3v3_compact": 3,
    "ultraquant_4bit": 4,
    "int4_per_token_head": 4,
    "nvfp4": 4,
    "nvfp4_ds_mla": 4,
    "nvfp4_4over6": 4,
    "fp4_mx_block16": 4,
}


MAX_TOKENS_ARG = 1_000_000_000  # token counts above this are typos, not settings
MAX_BYTES_ARG = 2**50  # a petabyte of KV cache is a typo


def parse_server_args(args: Sequence[str], table: OptionTable | None = None) -> ServerArgs:
    """Check an argument list against the engine's table (vLLM's newest when none is given) and
    read what moves memory or speed. A bad argument is a one-line CockpitError; values the engine
    would refuse at startup (a memory share above 1, a zero length) are refused here too."""
    return server_args(check_args(table or option_table("vllm"), args))


def server_args(checked: CheckedArgs) -> ServerArgs:
    """The memory- and speed-moving values of a checked argument list."""
    engine = checked.table.engine
    values = checked.values
    get = checked.get
    out: dict = {"notes": checked.notes}
    if engine == "vllm":
        out["gpu_memory_utilization"] = _fraction(
            "--gpu-memory-utilization", get("gpu_memory_utilization", 0.92)
        )
        # vLLM reads `--max-model-len auto` as -1: fit the context to the KV cache
        # (vllm/engine/arg_utils.py human_readable_int_or_auto); no other count has an auto
        out["max_model_len"] = _tokens("--max-model-len", values.get("max_model_len"), auto=True)
        out["max_num_seqs"] = _tokens("--max-num-seqs", values.get("max_num_seqs"))
        out["max_num_batched_tokens"] = _tokens(
            "--max-num-batched-tokens", values.get("max_num_batched_tokens")
        )
        out["chunked_prefill"] = values.get("enable_chunked_prefill") is not False
        out["hybrid_kv_cache"] = not values.get("disable_hybrid_kv_cache_manager")
        compile_config = values.get("compilation_config")
        graph_mode = values.get("compilation_config.cudagraph_mode") or (
            compile_config.get("cudagraph_mode") if isinstance(compile_config, dict) else None
        )
        # -O0 captures no graphs (vllm/config/vllm.py OptimizationLevel), nor does cudagraph_mode NONE
        out["cuda_graphs"] = not (
            values.get("enforce_eager")
            or str(values.get("optimization_level")) == "0"
            or (graph_mode is not None and str(graph_mode).upper() == "NONE")
        )
        out["cuda_graph_max_bs"] = _largest_batch(
            "--max-cudagraph-capture-size",
            values.get("max_cudagraph_capture_size"),
            values.get("cudagraph_capture_sizes"),
        )
        out["redundant_experts"] = _redundant(
            values.get("eplb_config"), values.get("eplb_config.num_redundant_experts")
        )
        out["kv_cache_memory_bytes"] = _bytes("--kv-cache-memory-bytes", values.get("kv_cache_memory_bytes"))
    else:
        share = values.get("mem_fraction_static")
        out["mem_fraction_static"] = None if share is None else _fraction("--mem-fraction-static", share)
        out["max_model_len"] = _tokens("--context-length", values.get("context_length"))
        out["max_num_seqs"] = _tokens("--max-running-requests", values.get("max_running_requests"))
        chunk = values.get("chunked_prefill_size")
        if chunk == -1:
            out["chunked_prefill"] = False
        else:
            out["max_num_batched_tokens"] = _tokens("--chunked-prefill-size", chunk)
        out["cuda_graphs"] = not (
            values.get("disable_cuda_graph")
            or values.get("disable_decode_cuda_graph")
            or values.get("cuda_graph_backend_decode") == "disabled"
        )
        out["cuda_graph_max_bs"] = _largest_batch(
            "--cuda-graph-max-bs-decode",
            values.get("cuda_graph_max_bs_decode"),
            values.get("cuda_graph_bs_decode"),
        )
        out["redundant_experts"] = _count(
            "--ep-num-redundant-experts", values.get("ep_num_redundant_experts", 0)
        )
        out["enable_dp_lm_head"] = bool(values.get("enable_dp_lm_head"))
        out["max_total_tokens"] = _tokens("--max-total-tokens", values.get("max_total_tokens"))
        out["hybrid_kv_cache"] = not values.get("disable_hybrid_swa_memory")
        ratio = values.get("swa_full_tokens_ratio")
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio <= 1:
            out["swa_full_tokens_ratio"] = float(ratio)
    out["kv_cache_dtype"] = str(values.get("kv_cache_dtype", "auto"))
    out["enable_eplb"] = bool(values.get("enable_eplb"))
    return ServerArgs(**out)


def api_keys(engine: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys a server will require of its clients, read as the engines read them:
    `--api-key K [K ...]` or `--api-key=K` (vLLM takes several, SGLang one); else, for vLLM,
    VLLM_API_KEY (vllm/entrypoints/openai/api_server.py: `args.api_key or envs.VLLM_API_KEY`).
    Given twice (the profile's args, then a layout's knobs), the last one counts, as argparse
    reads it. Empty: the server is open."""
    args = list(args)
    keys: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--api-key="):
            keys = [arg.split("=", 1)[1]]
        elif arg == "--api-key":
            values = args[i + 1 :]
            end = next((j for j, value in enumerate(values) if value.startswith("-")), len(values))
            keys = values[: end if engine == "vllm" else min(end, 1)]
    if engine == "vllm" and not keys:
        keys = [env.get("VLLM_API_KEY", "")]
    return tuple(k for k in keys if k)


def _fraction(name: str, value: object) -> float:
    """--gpu-memory-utilization / --mem-fraction-static: a share of each GPU, above 0 and at most 1."""
    if not isinstance(value, (int, float)) or not 0 < value <= 1:  # also refuses nan and inf
        raise CockpitError(
            f"server argument {name} must be above 0 and at most 1, a share of each GPU's memory "
            f"(got {value}): fix the server args, e.g. {name} 0.9"
        )
    return float(value)


def _tokens(name: str, value: object, *, auto: bool = False) -> int | None:
    """A token or request count; None (or, where the engine has one, -1 for auto) leaves it to
    the engine. -1 anywhere else is refused as 0 is: `--max-num-seqs -1` would not start."""
    if value is None or (auto and value == -1):
        return None
    if not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_ARG:
        raise CockpitError(
            f"server argument {name} must be a whole number from 1 to {MAX_TOKENS_ARG:,} (got {value}): "
            "fix the server args"
        )
    return value


def _bytes(name: str, value: object) -> int | None:
    """A size in bytes as vLLM reads it (``1G`` = 2**30, ``1g`` = 10**9), above 0; None: unset."""
    if value is None:
        return None
    try:
        size = value if isinstance(value, int) else size_value(str(value), "vllm")
    except ValueError:
        size = 0
    if not 0 < size <= MAX_BYTES_ARG:
        raise CockpitError(
            f"server argument {name} must be a size in bytes above 0, like 4G or 4294967296 (got {value}): "
            "fix the server args"
        )
    return size


def _largest_batch(name: str, largest: object, sizes: object) -> int | None:
    """The largest batch captured in a CUDA graph: given outright, or the top of a size list."""
    return _tokens(name, largest or (max(sizes) if isinstance(sizes, list) and sizes else None))


def _count(name: str, value: object) -> int:
    if not isinstance(value, int) or value < 0:
        raise CockpitError(f"server argument {name} must be 0 or more (got {value})")
    return value


def _redundant(config: object, dotted: object) -> int:
    """vLLM's EPLB redundant experts: --eplb-config '{"num_redundant_experts": 32}' or the dotted key."""
    if dotted is not None:
        try:
            return _count("--eplb-config.num_redundant_experts", int(str(dotted)))
        except ValueError:
            raise CockpitError(
                f"server argument --eplb-config.num_redundant_experts needs a whole number (got {dotted})"
            ) from None
    if isinstance(config, dict):
        return _count("--eplb-config num_redundant_experts", config.get("num_redundant_experts", 0))
    return 0


@dataclass(frozen=True)
class Placement:
    """What a layout means on one engine and one box."""

    engine: str
    layout: Layout
    gpus_total: int
    gpus_used: int
    attn_tp: int  # attention heads split this many ways
    attn_replicas: int  # independent attention groups (DP ranks), each with its own KV cache
    dense_tp: int  # dense MLP and shared experts split this many ways
    vocab_tp: int  # the input embedding split this many ways
    lm_head_tp: int  # the lm_head (output vocabulary) split this many ways
    pp: int
    stage_layers: tuple[int, ...]  # layers per pipeline stage
    moe_ep: int = 1  # expert-parallel group size (1: EP off)
    moe_tp: int = 1  # each expert's width split this many ways
    experts_per_gpu: int = 0  # on the busiest GPU
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    # A cluster (cockpit.core.cluster): the nodes the layout runs on, ranks spread evenly, and
    # the GPUs each node has. One box: 1 node of every GPU.
    nodes: int = 1
    gpus_per_node: int = 0  # 0: gpus_total (one box)

    @property
    def gpus_idle(self) -> int:
        return max(0, self.gpus_total - self.gpus_used)

    @property
    def node_gpus(self) -> int:
        """GPUs each node the layout runs on holds."""
        return self.gpus_used // self.nodes if self.nodes > 1 else self.gpus_used

    @property
    def per_node(self) -> int:
        """GPUs one node of the box or cluster has."""
        return self.gpus_per_node or self.gpus_total

    def __str__(self) -> str:
        parts = [f"{self.gpus_used} of {self.gpus_total} GPU{'' if self.gpus_total == 1 else 's'}"]
        attn = f"attention TP{self.attn_tp}"
        if self.attn_replicas > 1:
            attn += f" x {self.attn_replicas} replicas"
        parts.append(attn)
        if self.experts_per_gpu and self.moe_ep > 1:
            parts.append(f"MoE EP{self.moe_ep} x TP{self.moe_tp} ({self.experts_per_gpu} experts/GPU)")
        elif self.experts_per_gpu:
            parts.append(
                f"MoE TP{self.moe_tp} (all {self.experts_per_gpu} experts, each sliced {self.moe_tp} ways)"
            )
        if self.pp > 1:
            parts.append(f"PP{self.pp} ({max(self.stage_layers)} layers/stage)")
        if self.nodes > 1:
            parts.append(f"over {self.nodes} nodes ({self.node_gpus} GPUs each)")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return {
            "gpus_used": self.gpus_used,
            "gpus_idle": self.gpus_idle,
            "attn_tp": self.attn_tp,
            "attn_replicas": self.attn_replicas,
            "dense_tp": self.dense_tp,
            "moe_ep": self.moe_ep,
            "moe_tp": self.moe_tp,
            "experts_per_gpu": self.experts_per_gpu,
            "vocab_tp": self.vocab_tp,
            "lm_head_tp": self.lm_head_tp,
            "pp": self.pp,
            "stage_layers": list(self.stage_layers),
            "notes": list(self.notes),
            **({"nodes": self.nodes, "gpus_per_node": self.node_gpus} if self.nodes > 1 else {}),
        }


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, split as vLLM's get_pp_indices does (extras before the last)."""
    base = layers // pp
    parts = [base] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def experts_per_gpu(model: ModelArch, moe_ep: int) -> int:
    return math.ceil(model.moe.experts / moe_ep) if model.moe else 0


class Engine(ABC):
    """One inference engine: how to say a layout in its flags, and what it checks at startup."""

    name: str
    label: str
    default_command: tuple[str, ...]
    ready_paths: tuple[str, ...]
    # Arguments every launch gets, whatever the profile says: what cockpit reads needs them.
    always_args: tuple[str, ...] = ()
    # The performance model's defaults on this engine, by GPU type (docs/performance.md#calibration).
    calibration: Mapping[str, Mapping[str, Any]] = {}
    ssm_dtype_dest: str  # the option that sets a linear-attention state's recurrent dtype
    surface: EngineSurface  # what the engine prints and serves: log lines, failures, metric names

    def __init__(self, version: str | None = None) -> None:
        """``version``: the engine on the box (None: unknown, spoken as the newest table's)."""
        self._table, note = table_version(self.name, version)
        self.version = version or self._table
        self.version_note = note  # said when the table is not this version's own
        # Another version's table may lack a flag the engine on the box has: then an unknown flag
        # is a warning, not a refusal.
        self.strict = not note

    @cached_property
    def options(self) -> OptionTable:
        """The option table, read the first time a flag is checked (not at import: the tables
        are ~30 ms of data that `cockpit --help` and the bench child never need)."""
        return option_table(self.name, self._table)

    def __eq__(self, other: object) -> bool:
        """Two adapters are the same engine when they speak the same version."""
        if not isinstance(other, Engine):
            return NotImplemented
        return type(other) is type(self) and (self.version, self._table) == (other.version, other._table)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    def check(self, args: Sequence[str], where: str = "server argument") -> ServerArgs:
        """Every argument checked against this version's table; what moves memory, read."""
        return server_args(check_args(self.options, args, where, strict=self.strict))

    @abstractmethod
    def placement(
        self,
        layout: Layout,
        gpus_total: int,
        model: ModelArch,
        server: ServerArgs | None = None,
        *,
        nodes: int = 1,
    ) -> Placement:
        """Raise ``Inexpressible`` when the flags cannot say this layout. ``server``: the arguments
        that move a tensor's split (SGLang's --enable-dp-lm-head); None reads as the defaults.
        ``nodes``: the nodes ``gpus_total`` sit in (a cluster), each holding the same share."""

    @abstractmethod
    def candidate_layouts(self, n_gpus: int, *, moe: bool, nodes: int = 1) -> list[Layout]:
        """What this engine can be asked to run on a box of n_gpus, fit or not, in listing order;
        on a cluster of ``nodes``, those that fit in one node or fill whole nodes."""

    @abstractmethod
    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        """Every startup check this placement fails, in order the engine meets them."""

    @abstractmethod
    def model_args(self, model_path: str, command: Sequence[str] = ()) -> list[str]:
        """The arguments that name the model (``serve M`` or ``--model-path M``) after the
        launcher words ``command`` (empty: the default launcher)."""

    @abstractmethod
    def memory_fraction(
        self, server: ServerArgs, capacity_gib: float, placement: Placement, model: ModelArch
    ) -> float:
        """The share of each GPU the engine takes for weights, activations and KV cache."""

    # -- memory (docs/memory.md) ----------------------------------------------------------------

    def state_args(self, args: Sequence[str]) -> StateArgs:
        """The state-sizing arguments of an argument list already checked by ``check``."""
        values = check_args(self.options, args, strict=self.strict).values

        def word(dest: str, default: str) -> str:
            value = values.get(dest)
            return value if isinstance(value, str) else default

        def whole(dest: str) -> int | None:
            value = values.get(dest)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        ratio = values.get("mamba_full_memory_ratio")
        return StateArgs(
            prefix_caching=self.prefix_caching(values),
            block_size=whole("block_size"),
            conv_dtype=word("mamba_cache_dtype", "auto"),
            ssm_dtype=word(self.ssm_dtype_dest, "auto"),
            gdn_prefill_backend=word("gdn_prefill_backend", "auto"),
            max_state_slots=whole("max_mamba_cache_size"),
            state_memory_ratio=float(ratio) if isinstance(ratio, (int, float)) and ratio >= 0 else 0.9,
            radix_strategy=word("mamba_radix_cache_strategy", "auto"),
            overlap_schedule=not values.get("disable_overlap_schedule"),
        )

    @abstractmethod
    def prefix_caching(self, values: Mapping[str, object]) -> bool:
        """Whether checked arguments (by the engine's own names) leave prefix caching on."""

    @abstractmethod
    def pools_windows(self, model: ModelArch, server: ServerArgs) -> bool:
        """Whether the model's windowed layers keep only their window (a pool of their own);
        else they keep the whole request's KV like any layer."""

    def expert_weight_factor(self, model: ModelArch, hw: Hardware, moe_tp: int) -> float:
        """Loaded over checkpoint bytes of the routed experts (kernels that pad them); 1.0: as stored."""
        return 1.0

    @abstractmethod
    def memory_budget(
        self,
        model: ModelArch,
        hw: Hardware,
        placement: Placement,
        server: ServerArgs,
        *,
        weights_gib: float,
        layers: int,
        last_stage: bool,
        reserve_offset_gib: float,
    ) -> MemoryBudget:
        """How the engine splits one GPU of a stage of ``layers`` layers holding ``weights_gib``;
        ``reserve_offset_gib``: what a box measured beyond the modelled reserve."""

    @abstractmethod
    def cache_dtype_bytes(self, model: ModelArch, server: ServerArgs, hw: Hardware) -> float:
        """Bytes per cached value as the engine picks them (not always what --kv-cache-dtype says)."""

    @abstractmethod
    def cache_pool(
        self,
        model: ModelArch,
        hw: Hardware,
        placement: Placement,
        server: ServerArgs,
        state: StateArgs,
        kv_dtype: float,
        kv_budget_gib: float,
        layers: int,
    ) -> CachePool:
        """The KV cache (and a hybrid model's state) on one GPU of a stage of ``layers`` layers."""

    @abstractmethod
    def context_length_refusal(self, model: ModelArch, server: ServerArgs) -> Rule | None:
        """A context length the engine refuses at startup for this model, in its words."""

    @abstractmethod
    def memory_refusal(
        self, model: ModelArch, placement: Placement, memory: MemoryEstimate, server: ServerArgs
    ) -> Rule | None:
        """The engine's refusal once the weights loaded (no cache, no room for a request), in its words."""

    # -- batches (docs/performance.md#the-workload) --------------------------------------------

    @abstractmethod
    def default_max_running(self, hw: Hardware) -> int:
        """Running requests the engine admits at most when nothing says otherwise."""

    @abstractmethod
    def step_tokens(self, server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
        """The most tokens one step computes with chunked prefill on: the chunk size."""

    @abstractmethod
    def graph_max_bs(self, server: ServerArgs, hw: Hardware, model: ModelArch, placement: Placement) -> int:
        """The largest decode batch captured in a CUDA graph; 0: eager mode."""

    # -- across nodes (cockpit.core.cluster) --------------------------------------------------

    host_ip_var: str = ""  # the variable that tells the engine its node's own address, if any

    def node_args(
        self, placement: Placement, rank: int, rendezvous: Rendezvous
    ) -> tuple[list[str], list[str]]:
        """The multi-node flags of node ``rank``: (said alike on every node, this node's own)."""
        raise Inexpressible(f"{self.label} has no multi-node launch in cockpit")

    def node_shares(self, placement: Placement) -> list[NodeShare]:
        """Which of the layout's ranks each node holds (one share on one node)."""
        layout = placement.layout
        return node_shares(layout.tp, layout.pp, layout.dp, placement.nodes)

    def node_launches(
        self,
        placement: Placement,
        hw: Hardware,
        nodes: Sequence[Node],
        rendezvous: Rendezvous,
        model_path: str,
        port: int,
        extra_args: Sequence[str] = (),
        command: Sequence[str] = (),
    ) -> list[NodeLaunch]:
        """What each node runs, the head first: the one argv of ``argv`` with the multi-node
        flags, arguments said alike on every node and only the node's rank, its local DP size and
        start rank and --headless differing; the head alone serves HTTP, on 127.0.0.1 as on one box.
        A layout that fits in one node runs on the head alone, with today's argv."""
        if len(nodes) != hw.nodes:
            raise CockpitError(
                f"the cluster lists {len(nodes)} nodes and the box was planned with {hw.nodes}"
            )
        if placement.nodes <= 1:
            check_cluster(nodes, 1, placement.gpus_used)
            head = nodes[0]
            argv = self.argv(placement, model_path, port, extra_args, command)
            return [
                NodeLaunch(0, head.host, tuple(argv), node_env(head), tuple(range(placement.gpus_used)), True)
            ]
        check_cluster(nodes, placement.nodes, placement.node_gpus)
        # where nodes meet and which node is which are cockpit's to say, once for all nodes
        refuse_owned(check_args(self.options, extra_args, strict=self.strict), "server argument")
        launcher = command or self.default_command
        launches = []
        for rank, node in enumerate(nodes[: placement.nodes]):
            shared, own = self.node_args(placement, rank, rendezvous)
            argv = [
                *launcher,
                *self.model_args(model_path, launcher),
                *placement.flags,
                *shared,
                *own,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *self.always_args,
                *extra_args,
            ]
            launches.append(
                NodeLaunch(
                    rank,
                    node.host,
                    tuple(argv),
                    node_env(node, self.host_ip_var),
                    tuple(range(placement.node_gpus)),
                    rank == 0,
                )
            )
        return launches

    def argv(
        self,
        placement: Placement,
        model_path: str,
        port: int,
        extra_args: Sequence[str] = (),
        command: Sequence[str] = (),
    ) -> list[str]:
        """The one argv of a layout, the same shown, journaled and launched: the launcher words
        (``command``: the profile's, the simulator's wrapper, or else the engine's default), the
        model, the parallel flags, the port, the profile's own args."""
        return [
            *(command or self.default_command),
            *self.model_args(model_path, command or self.default_command),
            *placement.flags,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *self.always_args,
            *extra_args,
        ]
