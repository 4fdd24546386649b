"""Preflight: will this layout start on this box, what will each GPU hold, and why not.

A verdict is ``fits``, ``tight`` or ``fails`` with every reason in the engine's own words. The
memory estimate follows docs/memory.md: weights on the busiest GPU by tensor class,
a runtime reserve, and the KV budget that is left, in tokens and in concurrent requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from cockpit.engines import Engine, Inexpressible, Placement, Rule, ServerArgs, check_args
from cockpit.engines.options import refuse_owned, version_key
from cockpit.errors import CockpitError
from cockpit.hardware import Hardware
from cockpit.layout import Layout, enumerate_layouts, parse_layout
from cockpit.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    GATED_DELTANET,
    LM_HEAD,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    SLIDING,
    LinearAttention,
    ModelArch,
)
from cockpit.secrets import redact_argv

GiB = 2**30
FITS, TIGHT, FAILS = "fits", "tight", "fails"
VERDICT_ORDER = {FITS: 0, TIGHT: 1, FAILS: 2}

CUDA_CONTEXT_GIB = 0.5  # driver context on every GPU before any tensor
DEFAULT_GRAPH_MAX_BS = 512  # vLLM's max_cudagraph_capture_size default: min(2 x max_num_seqs, 512)
TIGHT_KV_FRACTION = 0.05  # KV budget under 5% of the card ...
TIGHT_MIN_REQUESTS = 4  # ... or room for fewer than 4 requests: "tight"


@dataclass(frozen=True)
class Learned:
    """What a box taught the planner about itself: fitted from the journal by
    `cockpit.calibrate`, kept per (GPU type, engine, version) in the user's data folder.

    The defaults change nothing, so a box with no history plans from the model alone.
    """

    runs: int = 0  # experiments the fit used; 0: nothing learned, the defaults
    calibration: Mapping[str, Any] = field(default_factory=dict)  # performance-model overrides
    reserve_offset_gib: float = 0.0  # what the engine keeps besides weights, beyond the modelled reserve
    weights_factor: float = 1.0  # measured over predicted weights (a layout the kernels repack)


@dataclass(frozen=True)
class StateArgs:
    """The server arguments that size a hybrid model's linear-attention state, by meaning
    (docs/placement.md#hybrid-attention-qwen3-next). Read only for models that keep such a state;
    the defaults are the engines' own."""

    # vLLM --enable-prefix-caching (on by default for hybrid models, is_prefix_caching_supported in
    # vllm/config/model.py); SGLang's radix cache (off with --disable-radix-cache)
    prefix_caching: bool = True
    block_size: int | None = None  # vLLM --block-size
    conv_dtype: str = "auto"  # vLLM --mamba-cache-dtype ("auto": the model's)
    ssm_dtype: str = "auto"  # vLLM --mamba-ssm-cache-dtype, SGLang --mamba-ssm-dtype ("auto": each default)
    gdn_prefill_backend: str = "auto"  # vLLM --gdn-prefill-backend
    max_state_slots: int | None = None  # SGLang --max-mamba-cache-size
    state_memory_ratio: float = 0.9  # SGLang --mamba-full-memory-ratio (its fallback, fields/schedule.py)
    radix_strategy: str = "auto"  # SGLang --mamba-radix-cache-strategy
    overlap_schedule: bool = True  # SGLang: off with --disable-overlap-schedule


def read_state_args(engine: Engine, args: Sequence[str]) -> StateArgs:
    """The state-sizing arguments of an argument list already checked by ``engine.check``."""
    values = check_args(engine.options, args, strict=engine.strict).values

    def word(dest: str, default: str) -> str:
        value = values.get(dest)
        return value if isinstance(value, str) else default

    def whole(dest: str) -> int | None:
        value = values.get(dest)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    ratio = values.get("mamba_full_memory_ratio")
    if engine.name == "vllm":
        prefix_caching = values.get("enable_prefix_caching") is not False
    else:
        prefix_caching = not values.get("disable_radix_cache")
    return StateArgs(
        prefix_caching=prefix_caching,
        block_size=whole("block_size"),
        conv_dtype=word("mamba_cache_dtype", "auto"),
        ssm_dtype=word("mamba_ssm_cache_dtype" if engine.name == "vllm" else "mamba_ssm_dtype", "auto"),
        gdn_prefill_backend=word("gdn_prefill_backend", "auto"),
        max_state_slots=whole("max_mamba_cache_size"),
        state_memory_ratio=float(ratio) if isinstance(ratio, (int, float)) and ratio >= 0 else 0.9,
        radix_strategy=word("mamba_radix_cache_strategy", "auto"),
        overlap_schedule=not values.get("disable_overlap_schedule"),
    )


@dataclass(frozen=True)
class Setup:
    """Everything a verdict depends on besides the layout."""

    model: ModelArch
    hardware: Hardware
    engine: Engine
    server_args: tuple[str, ...] = ()
    request_len: int = 2048  # tokens of one benchmark request (input + output)
    model_path: str = ""  # what goes into the engine's argv
    port: int = 8000
    command: tuple[str, ...] = ()  # the launcher words; empty: the engine's default (see Engine.argv)
    calibration: Mapping[str, Any] = field(default_factory=dict)  # performance-model overrides
    learned: Learned = field(default_factory=Learned)  # what this box taught the planner

    @cached_property
    def server(self) -> ServerArgs:
        """The profile's arguments, checked once per setup."""
        return self.engine.check(self.server_args)

    @cached_property
    def state_args(self) -> StateArgs:
        """The profile's state-sizing arguments (the defaults for a model without such a state)."""
        if self.model.linear_attention is None and self.model.windowed is None:
            return StateArgs()
        return read_state_args(self.engine, self.server_args)


@dataclass(frozen=True)
class Reason:
    rule: str
    message: str  # the engine's words
    detail: str = ""

    @classmethod
    def from_rule(cls, rule: Rule) -> Reason:
        return cls(rule.rule, rule.message, rule.detail)

    def to_json(self) -> dict:
        return {"rule": self.rule, "message": self.message, "detail": self.detail}

    def __str__(self) -> str:
        """The engine's words on one line: a message of several lines (vLLM's world size, with
        its list of fixes) is joined, never cut, for a table or a status line to wrap."""
        words = " ".join(line.strip() for line in self.message.splitlines() if line.strip())
        if self.rule == "oom-at-load":
            return f"CUDA OOM at load: {self.detail}"
        if words in ("AssertionError", "") and self.detail:
            return f"{words}: {self.detail}" if words else self.detail
        return words


@dataclass(frozen=True)
class StateMemory:
    """A hybrid model's cache on one GPU, laid out as its engine lays it out
    (docs/memory.md#kv-and-state-by-layer-kind): on vLLM one block pool shared by full attention,
    windowed attention and linear-attention state (the ``block`` and ``window`` fields); on SGLang
    a pool of state slots taken from the budget before the KV cache (the ``pool`` and ``slots``
    fields)."""

    bytes_per_request: float  # one request's state on one GPU, in the engine's dtypes
    replicas: int = 1  # attention replicas, each with a pool of its own
    # vLLM: full attention and state share one pool of equal-sized blocks
    block_tokens: int = 0  # attention tokens per block, raised until a block holds a state page
    block_bytes: int = 0  # one block over the layers of a group on one GPU
    blocks: int = 0  # blocks in one replica's pool
    attention_groups: int = 0  # full-attention groups, each holding ceil(tokens / block) blocks
    state_blocks: int = 0  # blocks one request's state holds: linear groups x state copies
    # SGLang: a pool of state slots
    pool_gib: float = 0.0
    pool_slots: int = 0  # --max-mamba-cache-size as resolved, one replica (plus one padding slot)
    slots_per_request: int = 0  # slots a running request may hold (SGLang's mamba ratio)

    window_groups: int = 0  # windowed-attention groups
    window_tokens: int = 0  # tokens a windowed layer holds at most for one request (in flight too)
    window_extra_blocks: int = 0  # 1 for a sliding window, which may start inside a block

    def blocks_per_request(self, tokens: int) -> int:
        """vLLM: blocks one request of ``tokens`` holds over all groups."""
        windowed = 0
        if self.window_groups:
            held = min(tokens, self.window_tokens)
            windowed = self.window_groups * (-(-held // self.block_tokens) + self.window_extra_blocks)
        return self.attention_groups * -(-tokens // self.block_tokens) + windowed + self.state_blocks

    def logged_tokens(self, max_len: int) -> int:
        """vLLM's "GPU KV cache size" of one replica: the requests of ``max_len`` that fit, times
        ``max_len`` (get_kv_cache_capacity, vllm/v1/core/kv_cache_utils.py)."""
        return int(self.blocks / self.blocks_per_request(max_len) * max_len)

    @property
    def running_cap(self) -> int:
        """Running requests the state pool admits over the whole server: SGLang caps
        max_running_requests at max_mamba_cache_size // ratio (resolve_max_num_reqs,
        sglang/srt/mem_cache/kv_cache_configurator.py). 0 on vLLM, whose state competes for blocks."""
        if not self.slots_per_request:
            return 0
        return max(0, self.pool_slots // self.slots_per_request) * self.replicas

    def requests_fitting(self, request_len: int, kv_tokens: int) -> float:
        """Requests of ``request_len`` tokens that fit at once over the whole server."""
        if self.block_tokens:
            return self.replicas * self.blocks / self.blocks_per_request(request_len)
        return min(kv_tokens / request_len, self.running_cap)

    def to_json(self) -> dict:
        layout: dict[str, float]
        if self.block_tokens:
            layout = {
                "block_tokens": self.block_tokens,
                "blocks": self.blocks,
                "state_blocks": self.state_blocks,
            }
        else:
            layout = {
                "pool_gib": round(self.pool_gib, 2),
                "pool_slots": self.pool_slots,
                "running_cap": self.running_cap,
            }
        return {"bytes_per_request": round(self.bytes_per_request), **layout}


@dataclass(frozen=True)
class MemoryEstimate:
    """One GPU's memory, on the busiest GPU of the layout."""

    capacity_gib: float
    weights_by_group: dict[str, float]  # GiB: attention, experts, dense+shared, embeddings, other
    weights_gib: float
    reserve_gib: float
    budget_gib: float  # what the engine takes for itself (fraction x capacity)
    kv_budget_gib: float  # the KV cache pool (vLLM: with a hybrid model's state, which shares it)
    kv_bytes_per_token: float
    kv_tokens: int  # over the whole server (all attention replicas)
    max_concurrency: float  # requests of request_len that fit the KV cache (and any state) at once
    busiest_gpu: int
    expert_layer_bytes: float  # one MoE layer's experts on one GPU: the size of a load step
    # What the engine keeps besides weights and KV (docs/memory.md#what-the-engine-keeps-besides-weights),
    # each already inside reserve_gib where the engine takes it from the KV budget:
    activation_gib: float = 0.0  # vLLM's profile-run peak: MoE workspace + max(forward, sampler)
    graph_gib: float = 0.0  # CUDA graphs (vLLM >= 0.21 subtracts its estimate before sizing KV)
    non_torch_gib: float = 0.0  # memory outside torch's allocator that grows after vLLM's snapshot
    # A hybrid model's linear-attention state: inside kv_budget_gib on vLLM (one block pool), beside
    # it on SGLang (a pool of its own, taken first); None for a model without one
    state: StateMemory | None = None

    @property
    def state_bytes_per_request(self) -> float:
        """One request's linear-attention state on one GPU, in the engine's dtypes; 0: no state."""
        return self.state.bytes_per_request if self.state else 0.0

    @property
    def state_slots(self) -> int:
        """Running requests the engine admits for lack of state slots, over the whole server
        (SGLang); 0: no such cap."""
        return self.state.running_cap if self.state else 0

    @property
    def state_pool_gib(self) -> float:
        """SGLang's state pool on one GPU, beside the KV budget; 0 on vLLM and without state."""
        return self.state.pool_gib if self.state else 0.0

    def requests_fitting(self, request_len: int) -> float:
        """Requests of ``request_len`` tokens (input + output) the KV cache, and a hybrid model's
        state, hold at once over the whole server."""
        if not request_len:
            return 0.0
        if self.state is None:
            return self.kv_tokens / request_len
        return self.state.requests_fitting(request_len, self.kv_tokens)

    def to_json(self) -> dict:
        state = {"state": self.state.to_json()} if self.state else {}
        return {
            "capacity_gib": round(self.capacity_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "weights_by_group_gib": {k: round(v, 2) for k, v in self.weights_by_group.items()},
            "reserve_gib": round(self.reserve_gib, 2),
            "budget_gib": round(self.budget_gib, 2),
            "kv_budget_gib": round(self.kv_budget_gib, 2),
            "kv_bytes_per_token": round(self.kv_bytes_per_token),
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "busiest_gpu": self.busiest_gpu,
            "expert_layer_bytes": round(self.expert_layer_bytes),
            "activation_gib": round(self.activation_gib, 2),
            "graph_gib": round(self.graph_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
        } | state


@dataclass(frozen=True)
class Verdict:
    layout: Layout
    engine: str
    verdict: str
    reasons: tuple[Reason, ...]
    placement: Placement | None = None
    memory: MemoryEstimate | None = None
    argv: tuple[str, ...] = ()
    alternatives: tuple[Layout, ...] = ()
    predicted_tok_s: dict[int, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # what the engine would warn about (a deprecated spelling), not a failure
    server: ServerArgs | None = None  # the arguments it was planned with (profile's and knobs), once checked

    @property
    def gpus_used(self) -> int:
        return self.placement.gpus_used if self.placement else 0

    @property
    def headline(self) -> str:
        """The one reason to show in a table cell."""
        if self.reasons:
            return str(self.reasons[0])
        if self.memory:
            return f"room for ~{self.memory.max_concurrency:,.0f} requests in KV cache"
        return ""

    def to_json(self) -> dict:
        return {
            "layout": str(self.layout),
            "engine": self.engine,
            "argv": list(redact_argv(self.argv)),
            "gpus_used": self.gpus_used,
            "verdict": self.verdict,
            "reasons": [r.to_json() for r in self.reasons],
            "weights_gib_per_gpu": round(self.memory.weights_gib, 2) if self.memory else None,
            "kv_tokens": self.memory.kv_tokens if self.memory else 0,
            "memory": self.memory.to_json() if self.memory else None,
            "placement": self.placement.to_json() if self.placement else None,
            "placement_text": str(self.placement) if self.placement else "",
            "alternatives": [str(a) for a in self.alternatives],
            "predicted_tok_s": {str(c): round(v, 1) for c, v in self.predicted_tok_s.items()},
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        return f"{self.layout} on {self.engine}: {self.verdict}" + (
            f" ({self.headline})" if self.headline else ""
        )


# ---------------------------------------------------------------------------------------------


def plan_layout(setup: Setup, layout: Layout | str) -> Verdict:
    """The verdict for one layout: its server arguments first, then engine rules, then memory."""
    if isinstance(layout, str):  # planned, never launched: a blanked secret (`--api-key ***`) plans as any
        layout = parse_layout(layout, stored=True)
    engine, model, hw = setup.engine, setup.model, setup.hardware
    try:
        server = knob_server_args(setup, layout)
    except CockpitError as exc:
        return Verdict(layout, engine.name, FAILS, (Reason("server-args", str(exc)),))
    try:
        placement = engine.placement(layout.parallel, hw.count, model, server)
    except Inexpressible as exc:
        return Verdict(
            layout, engine.name, FAILS, (Reason("inexpressible", str(exc)),), alternatives=exc.alternatives
        )
    placement = replace(placement, layout=layout)
    args = (*setup.server_args, *layout.knobs)
    argv = tuple(engine.argv(placement, setup.model_path or model.name, setup.port, args, setup.command))
    reasons = [Reason.from_rule(r) for r in engine.startup_rules(model, placement, server)]
    reasons += length_reasons(model, engine, server)
    state_args = knob_state_args(setup, layout)
    memory = estimate_memory(
        model, hw, engine, placement, server, setup.request_len, setup.learned, state_args
    )
    reasons += memory_reasons(model, engine, placement, memory, server, setup.request_len)
    verdict = FITS
    if any(r.rule != "kv-thin" for r in reasons):
        verdict = FAILS
    elif reasons:
        verdict = TIGHT
    return Verdict(
        layout,
        engine.name,
        verdict,
        tuple(reasons),
        placement,
        memory,
        argv,
        warnings=server.notes,
        server=server,
    )


def knob_server_args(setup: Setup, layout: Layout) -> ServerArgs:
    """The profile's arguments and the layout's knobs, checked against the engine's table."""
    engine = setup.engine
    if not layout.knobs:
        return setup.server
    refuse_owned(check_args(engine.options, layout.knobs, "knob", strict=engine.strict), "knob")
    return engine.check((*setup.server_args, *layout.knobs))


def knob_state_args(setup: Setup, layout: Layout) -> StateArgs:
    """The state-sizing arguments of the profile and the layout's knobs (defaults for a model
    without linear-attention state)."""
    if not layout.knobs or (setup.model.linear_attention is None and setup.model.windowed is None):
        return setup.state_args
    return read_state_args(setup.engine, (*setup.server_args, *layout.knobs))


def plan_all(setup: Setup, layouts: Iterable[Layout | str] | None = None) -> list[Verdict]:
    """Verdicts for the given layouts, or every layout the engine can run on the box; fits first."""
    if layouts is None:
        layouts = enumerate_layouts(setup.hardware.count, moe=setup.model.is_moe, engine=setup.engine.name)
    verdicts = [plan_layout(setup, x) for x in layouts]
    return sorted(verdicts, key=lambda v: (VERDICT_ORDER[v.verdict], -v.gpus_used))


def nearest_fitting(failed: Verdict, verdicts: Sequence[Verdict], limit: int = 3) -> list[Layout]:
    """Layouts that fit, closest to a failed one first (same GPU count, then same TP)."""
    fitting = [v for v in verdicts if v.verdict != FAILS]
    target = failed.gpus_used or failed.layout.tp * failed.layout.pp * failed.layout.dp

    def distance(v: Verdict) -> tuple:
        return (v.verdict != FITS, abs(v.gpus_used - target), v.layout.tp != failed.layout.tp, -v.gpus_used)

    return [v.layout for v in sorted(fitting, key=distance)[:limit]]


# ---------------------------------------------------------------------------------------------
# Memory


def _layer_kinds(model: ModelArch, layers: range) -> tuple[int, int]:
    """(dense layers, MoE layers) among ``layers``: the model's own list of MoE layers where it
    interleaves them, else dense layers first (DeepSeek's first_k_dense_replace)."""
    if model.moe_layer_ids:
        moe = len([i for i in layers if i in model.moe_layer_ids])
        return len(layers) - moe, moe
    dense = len([i for i in layers if i < model.dense_layers])
    return dense, len(layers) - dense


def _per_layer(model: ModelArch, cls: str, count: int) -> float:
    return model.class_bytes(cls) / count if count else 0.0


def stage_weights(
    model: ModelArch, placement: Placement, redundant_experts: int = 0
) -> list[dict[str, float]]:
    """Bytes on one GPU of each pipeline stage, by display group. EPLB's redundant experts add
    copies spread over the EP group: (experts + redundant) / EP per GPU."""
    moe_layers = model.moe.moe_layers if model.moe else 0
    attn = _per_layer(model, ATTN_SHARDED, model.layers) / placement.attn_tp + _per_layer(
        model, ATTN_REPLICATED, model.layers
    )
    norms = _per_layer(model, NORMS, model.layers)
    dense = _per_layer(model, DENSE_MLP, model.dense_layers) / placement.dense_tp
    shared = _per_layer(model, SHARED_EXPERTS, moe_layers) / placement.dense_tp
    router = _per_layer(model, ROUTER, moe_layers)
    experts = 0.0
    if model.moe:
        per_expert = _per_layer(model, ROUTED_EXPERTS, moe_layers) / model.moe.experts
        held = placement.experts_per_gpu
        if redundant_experts and placement.moe_ep > 1:
            held = math.ceil((model.moe.experts + redundant_experts) / placement.moe_ep)
        experts = held * per_expert / placement.moe_tp
    stages = []
    start = 0
    for index, count in enumerate(placement.stage_layers):
        n_dense, n_moe = _layer_kinds(model, range(start, start + count))
        start += count
        embeddings = 0.0
        if index == 0:
            embeddings += model.class_bytes(EMBEDDING) / placement.vocab_tp
        if index == len(placement.stage_layers) - 1:
            embeddings += model.class_bytes(LM_HEAD) / placement.lm_head_tp
        stages.append(
            {
                "attention": attn * count,
                "experts": experts * n_moe,
                "dense+shared": dense * n_dense + shared * n_moe,
                "embeddings": embeddings,
                "other": norms * count + router * n_moe,
                "_stage_layers": count,
                "_expert_layer": experts,
            }
        )
    return stages


def graph_max_bs(server: ServerArgs, hw: Hardware | None = None, model: ModelArch | None = None) -> int:
    """The largest batch vLLM captures in a CUDA graph (0: eager mode): min(2 x max_num_seqs, 512),
    1024 on data-center Blackwell (vllm/config/vllm.py, _set_cudagraph_sizes), and 1024 for gpt-oss
    whatever the card (GptOssForCausalLMConfig, vllm/model_executor/models/config.py)."""
    if not server.cuda_graphs:
        return 0
    if server.cuda_graph_max_bs:
        return server.cuda_graph_max_bs
    if model is not None and model.architecture in GPT_OSS_ARCHITECTURES:
        return 1024
    default = 1024 if hw is not None and hw.gpu.capability[0] == 10 else DEFAULT_GRAPH_MAX_BS
    return min(2 * server.max_num_seqs, default) if server.max_num_seqs else default


def vllm_batched_tokens(server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
    """The most tokens one vLLM forward pass runs, which sets the activation peak: the chunk size
    (its defaults by card in vllm/engine/arg_utils.py, get_batch_defaults); without chunked
    prefill a whole prompt of the longest length. (SGLang's share is derived in its adapter.)"""
    if not server.chunked_prefill:
        return max(server.max_num_batched_tokens or 0, max_model_len(model, server))
    if server.max_num_batched_tokens:
        return server.max_num_batched_tokens
    if hw.memory_gib >= 160:
        return 16384
    return 8192 if _vllm_large_card(hw) else 2048


def vllm_max_num_seqs(server: ServerArgs, hw: Hardware) -> int:
    """--max-num-seqs, or vLLM's default: 1024 on cards of 70 GB and more except the A100, 256 below
    (get_batch_defaults, vllm/engine/arg_utils.py)."""
    if server.max_num_seqs:
        return server.max_num_seqs
    return 1024 if _vllm_large_card(hw) else 256


def _vllm_large_card(hw: Hardware) -> bool:
    """vLLM's larger batch defaults: 70 GB and more, but not an A100 (get_batch_defaults)."""
    return hw.memory_gib >= 70 and hw.gpu.key != "a100"


# ---------------------------------------------------------------------------------------------
# What the engine keeps besides weights (docs/memory.md#what-the-engine-keeps-besides-weights)

ACTIVATION_BYTES = 2  # activations in the model dtype (BF16)
# Hidden-sized tensors alive at once in one layer's forward (residual, norm output, attention
# input and output, ...); fitted so that dense models' profile peaks match public vLLM 0.19
# profiles within ~10% (docs/memory.md#public-logs).
FORWARD_HIDDEN_COPIES = 6
# vLLM's sampler warm-up, per dummy request and vocabulary entry: the logits in the model dtype (2),
# their float32 copy (4), the probabilities (4) and the exponential noise (4) of forward_native,
# plus the top-k/top-p kernel's scratch (vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run,
# vllm/v1/sample/sampler.py, vllm/v1/sample/ops/topk_topp_sampler.py). Public 0.19 profiles of
# dense models, whose peak is the sampler's, show 14.9-15.4 B for vocabularies of 128 k to 256 k.
SAMPLER_BYTES_PER_LOGIT = 15.0
# Before the Triton top-k/top-p kernels (vllm-project/vllm#33538, merged February 2026) the sampler
# sorted the whole vocabulary: values, int64 indices and a cumulative sum besides the copies above.
# vllm-project/vllm#32558 measures the sort at ~37 B per logit; two public logs fit 34 B.
SORTING_SAMPLER_BYTES_PER_LOGIT = 34.0
TRITON_TOP_K_TOP_P_SINCE = (0, 16)
# Memory outside torch's allocator that grows after vLLM's startup snapshot (the snapshot is taken
# after the CUDA context and NCCL's communicators, vllm/v1/worker/gpu_worker.py init_device):
# cuBLAS and attention workspaces, and the buffers collectives allocate on first use. Public vLLM
# 0.19 profiles on H100 boxes: 0.24-0.27 GiB on one GPU, 2.06-2.21 GiB with TP 2 or 4.
NON_TORCH_SINGLE_GIB = 0.25
NON_TORCH_COLLECTIVE_GIB = 2.1  # measured on H100 NVLink boxes
NON_TORCH_PCIE_GIB = 0.5  # not measured (an estimate for PCIe and older NVLink boxes)
# CUDA graphs, as vLLM's profiler estimates them (Worker.determine_available_memory and
# GPUModelRunner.profile_cudagraph_memory): a base plus a share per layer (piecewise graphs split
# at every attention layer) at vLLM's default 51 capture sizes; fitted to public 0.19 estimates
# (0.52-1.92 GiB for 16 to 80 layers).
GRAPH_BASE_GIB = 0.25
GRAPH_LAYER_GIB = 0.018
GRAPH_DEFAULT_SIZES = 51
GPT_OSS_ARCHITECTURES = frozenset({"GptOssForCausalLM"})  # captures up to 1024, OAI MXFP4 kernels
# vLLM subtracts its CUDA graph estimate before sizing the KV cache since 0.21
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, 1 by default in vllm/envs.py; "default since v0.21.0"
# in Worker.determine_available_memory's log line).
VLLM_GRAPHS_BEFORE_KV_SINCE = (0, 21)
# SGLang sizes its pool as mem_fraction_static x (free memory before the weights load) - weights
# (ModelRunner: rest_memory = available - pre_model_load_memory x (1 - mem_fraction_static),
# sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes). Before the load the CUDA
# context, and with TP the communicators, are already taken: public H100 logs show 0.6-0.7 GiB on
# one GPU ("Load weight begin. avail mem=78.48 GB" of about 79.2); 2.2 GiB at TP 4 on H100 fits the
# public Qwen3-235B log (docs/memory.md#public-logs).
SGLANG_PRELOAD_SINGLE_GIB = 0.7
SGLANG_PRELOAD_COLLECTIVE_GIB = 2.2  # H100 NVLink, TP 4
SGLANG_PRELOAD_PCIE_GIB = 1.2  # not measured (an estimate)
# The links the collective figures were measured on (NVLink 4, H100) and the newer one assumed alike.
MEASURED_COLLECTIVE_LINKS = frozenset({"nvlink4", "nvlink5"})


def vllm_capture_sizes(largest: int) -> int:
    """How many batch sizes vLLM captures: 1, 2, 4, every 8 to 248, every 16 from 256
    (vllm/config/vllm.py, _set_cudagraph_sizes)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return len([size for size in sizes if size <= largest])


def vllm_graph_gib(model: ModelArch, server: ServerArgs, hw: Hardware, layers: int) -> float:
    """vLLM's estimate of its CUDA graphs on one GPU of a stage of ``layers`` layers (0 in eager mode)."""
    largest = graph_max_bs(server, hw, model)
    if not largest:
        return 0.0
    return GRAPH_BASE_GIB + GRAPH_LAYER_GIB * layers * vllm_capture_sizes(largest) / GRAPH_DEFAULT_SIZES


def _collective_group(placement: Placement) -> bool:
    """Whether the GPU takes part in all-reduces or all-gathers (TP, or MoE over DP ranks)."""
    return placement.attn_tp > 1 or placement.dense_tp > 1 or placement.moe_ep > 1 or placement.moe_tp > 1


def vllm_non_torch_gib(placement: Placement, hw: Hardware) -> float:
    """What grows outside torch after vLLM's snapshot, on one GPU (NON_TORCH_* above)."""
    if not _collective_group(placement):
        return NON_TORCH_SINGLE_GIB
    return NON_TORCH_COLLECTIVE_GIB if hw.gpu.link in MEASURED_COLLECTIVE_LINKS else NON_TORCH_PCIE_GIB


def sglang_preload_gib(placement: Placement, hw: Hardware) -> float:
    """What is gone from a GPU before SGLang loads the weights (SGLANG_PRELOAD_* above)."""
    if not _collective_group(placement):
        return SGLANG_PRELOAD_SINGLE_GIB
    return (
        SGLANG_PRELOAD_COLLECTIVE_GIB if hw.gpu.link in MEASURED_COLLECTIVE_LINKS else SGLANG_PRELOAD_PCIE_GIB
    )


def _version_at_least(engine: Engine, since: tuple[int, ...]) -> bool:
    return version_key(engine.version) >= since


def moe_workspace_bytes(model: ModelArch, placement: Placement, tokens: int, oai_triton: bool) -> float:
    """The fused-MoE workspace vLLM's profile run leaves allocated: two buffers the workspace manager
    keeps at their high-water mark (FusedMoEKernelModularImpl._allocate_buffers,
    vllm/model_executor/layers/fused_moe/modular_kernel.py). Triton experts size them
    M x top_k x max(I, H) and M x top_k x max(2I, H) (TritonExperts.workspace_shapes, experts/triton_moe.py);
    the OAI Triton kernels of MXFP4 on Hopper M x H and M x top_k x I
    (OAITritonExperts.workspace_shapes, experts/gpt_oss_triton_kernels_moe.py). M is every token of the
    step, from every DP rank when experts span DP ranks (the allgather_reducescatter dispatcher);
    I is one expert's width on this GPU."""
    moe = model.moe
    if moe is None:
        return 0.0
    rows = tokens * placement.attn_replicas
    width = moe.expert_intermediate / placement.moe_tp
    hidden, top_k = model.hidden, moe.experts_per_token
    if oai_triton:
        elements = rows * hidden + rows * top_k * width
    else:
        elements = rows * top_k * (max(width, hidden) + max(2 * width, hidden))
    return elements * ACTIVATION_BYTES


def forward_peak_bytes(model: ModelArch, placement: Placement, tokens: int) -> float:
    """The largest transient of one layer's forward over ``tokens`` tokens: the gate/up output, its
    activation and a few hidden-sized tensors (FORWARD_HIDDEN_COPIES), plus the router logits."""
    width = 0.0
    if model.dense_layers:
        width = model.dense_intermediate / placement.dense_tp
    if model.moe and model.moe.shared_intermediate:
        width = max(width, model.moe.shared_intermediate / placement.dense_tp)
    per_token = (3 * width + FORWARD_HIDDEN_COPIES * model.hidden) * ACTIVATION_BYTES
    router = model.moe.experts * 4 * placement.attn_replicas if model.moe else 0  # float32 logits
    return tokens * (per_token + router)


def sampler_peak_bytes(model: ModelArch, requests: int, tokens: int, sorting: bool) -> float:
    """The sampler warm-up on ``requests`` dummy requests over the whole vocabulary, while the
    forward's hidden states are still alive (GPUModelRunner.profile_run)."""
    per_logit = SORTING_SAMPLER_BYTES_PER_LOGIT if sorting else SAMPLER_BYTES_PER_LOGIT
    return requests * model.vocab * per_logit + tokens * model.hidden * ACTIVATION_BYTES


def vllm_activation_gib(
    model: ModelArch, engine: Engine, placement: Placement, server: ServerArgs, hw: Hardware, last_stage: bool
) -> float:
    """vLLM's profile run (GPUModelRunner.profile_run, one forward of max_num_batched_tokens tokens,
    then the sampler on min(max_num_seqs, tokens) dummy requests on the last pipeline stage): the MoE
    workspace it keeps plus the larger of the two transients."""
    tokens = vllm_batched_tokens(server, hw, model)
    oai_triton = mxfp4_backend(model, hw, engine) == "triton"
    workspace = moe_workspace_bytes(model, placement, tokens, oai_triton)
    transient = forward_peak_bytes(model, placement, tokens)
    if last_stage:
        requests = min(vllm_max_num_seqs(server, hw), tokens)
        sorting = not _version_at_least(engine, TRITON_TOP_K_TOP_P_SINCE)
        transient = max(transient, sampler_peak_bytes(model, requests, tokens, sorting))
    return (workspace + transient) / GiB


@dataclass(frozen=True)
class VllmKept:
    """What vLLM keeps on one GPU besides weights and KV (GiB), and whether it takes its CUDA graph
    estimate from the KV budget (since 0.21) or captures the graphs afterwards in what
    --gpu-memory-utilization leaves free."""

    activation_gib: float = 0.0
    non_torch_gib: float = 0.0
    graph_gib: float = 0.0
    graphs_before_kv: bool = False

    @property
    def counted_gib(self) -> float:
        return self.activation_gib + self.non_torch_gib + (self.graph_gib if self.graphs_before_kv else 0.0)


def vllm_kept(
    model: ModelArch,
    engine: Engine,
    placement: Placement,
    server: ServerArgs,
    hw: Hardware,
    layers: int,
    last_stage: bool,
) -> VllmKept:
    """The profile run's peak, non-torch growth and CUDA graphs on a GPU of a stage of ``layers`` layers."""
    return VllmKept(
        activation_gib=vllm_activation_gib(model, engine, placement, server, hw, last_stage),
        non_torch_gib=vllm_non_torch_gib(placement, hw),
        graph_gib=vllm_graph_gib(model, server, hw, layers),
        graphs_before_kv=_version_at_least(engine, VLLM_GRAPHS_BEFORE_KV_SINCE),
    )


# ---------------------------------------------------------------------------------------------
# MXFP4 experts on GPUs without native FP4 (docs/memory.md#mxfp4-experts-on-gpus-without-native-fp4)

# vLLM 0.10 ran gpt-oss on Hopper through Marlin (a public 0.10.1 log warns "... leveraging the
# Marlin kernel"); 0.14.1 logs "Using Triton backend" and loads 64.38 GiB, the hidden size padded
# to 3072; 0.33's Triton path pads only the width (oracle/mxfp4.py).
MARLIN_BEFORE = (0, 11)
TRITON_PADS_HIDDEN_BEFORE = (0, 33)
# Humming outranks Marlin on SM90 in vLLM 0.33 (the oldest release cockpit has read; humming/priority.py).
HUMMING_SINCE = (0, 33)


def mxfp4_backend(model: ModelArch, hw: Hardware, engine: Engine) -> str:
    """Which vLLM kernels run a checkpoint's MXFP4 experts: "" (not MXFP4, or SGLang), "trtllm"
    (data-center Blackwell), "cutlass" (gpt-oss on consumer Blackwell), "triton" (gpt-oss on Hopper,
    the OAI Triton kernels), "humming" (other MXFP4 models on Hopper from vLLM 0.33, where Humming
    is moved ahead of Marlin: prioritize_humming, vllm/model_executor/layers/quantization/utils/
    humming/priority.py) or "marlin" (weight-only: the rest, and Hopper before vLLM 0.11). In the
    order of _get_priority_backends_for_gpt_oss and _get_priority_backends
    (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py)."""
    if model.quant.method != "mxfp4" or engine.name != "vllm":
        return ""
    major = hw.gpu.capability[0]
    gpt_oss = model.architecture in GPT_OSS_ARCHITECTURES
    if major == 10:
        return "trtllm"
    if major >= 12 and gpt_oss:
        return "cutlass"
    if major == 9 and gpt_oss and _version_at_least(engine, MARLIN_BEFORE):
        return "triton"
    if major == 9 and not gpt_oss and _version_at_least(engine, HUMMING_SINCE):
        return "humming"
    return "marlin"


def _round_up(value: float, multiple: int) -> float:
    return math.ceil(value / multiple) * multiple


def mxfp4_expert_factor(model: ModelArch, hw: Hardware, engine: Engine, moe_tp: int) -> float:
    """Loaded over checkpoint bytes of MXFP4 routed experts: the kernels pad each expert's hidden
    size and its width per GPU (mxfp4_round_up_hidden_size_and_intermediate_size, oracle/mxfp4.py):
    Marlin and TRT-LLM to 256 and 128, FlashInfer CUTLASS to 128 and 128, Triton and Humming (the
    function's last branch) the width to 64. 1.0 for anything else."""
    backend = mxfp4_backend(model, hw, engine)
    if not backend or model.moe is None:
        return 1.0
    hidden_to, width_to = {"trtllm": (256, 128), "marlin": (256, 128), "cutlass": (128, 128)}.get(
        backend, (1, 64)
    )
    if backend == "triton" and not _version_at_least(engine, TRITON_PADS_HIDDEN_BEFORE):
        hidden_to = 256
    hidden, width = model.hidden, model.moe.expert_intermediate / moe_tp
    return _round_up(hidden, hidden_to) * _round_up(width, width_to) / (hidden * width)


# ---------------------------------------------------------------------------------------------
# The linear-attention state of hybrid models (docs/placement.md#hybrid-attention-qwen3-next)

STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# vLLM's default block size (CacheConfig.DEFAULT_BLOCK_SIZE, vllm/config/cache.py), which is also
# FlashAttention's kernel block (MultipleOf(16), vllm/v1/attention/backends/flash_attn.py).
VLLM_BLOCK_ALIGNMENT = 16
# FlashInfer's GDN prefill checkpoints land every 64 tokens, and with prefix caching vLLM makes
# blocks multiples of that (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, vllm/v1/attention/backends/gdn_attn.py).
VLLM_GDN_CHECKPOINT_ALIGNMENT = 64
# SGLang: state slots per running request with the radix cache on, before the extra buffer's
# (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, sglang/srt/mem_cache/kv_cache_configurator.py).
SGLANG_SLOTS_PER_REQUEST = 3


def vllm_gdn_checkpoints(linear: LinearAttention, hw: Hardware, state: StateArgs) -> bool:
    """Whether vLLM's Gated DeltaNet layers export prefill checkpoints, which makes blocks whole
    multiples of 64 tokens and keeps one more state block per request and group: with prefix
    caching (mamba cache mode "align") and FlashInfer's GDN prefill kernel, which "auto" picks on
    Hopper and, for 128-wide key heads, on Blackwell (_resolve_gdn_prefill_backend and
    QwenGatedDeltaNetAttention.get_kv_cache_spec,
    vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py). On Blackwell the kernel also
    needs a CUDA 13 runtime, which cockpit assumes."""
    if linear.kind != GATED_DELTANET:
        return False
    if not state.prefix_caching or state.gdn_prefill_backend not in ("auto", "flashinfer"):
        return False
    major = hw.gpu.capability[0]
    return hw.gpu.capability == (9, 0) or (major in (10, 12) and linear.key_head_dim == 128)


def vllm_concurrent_batches(placement: Placement) -> int:
    """Batches vLLM keeps in flight at once: 2 with async scheduling (its default) on one stage,
    one per stage with pipeline parallelism (VllmConfig.max_concurrent_batches, vllm/config/vllm.py)."""
    return max(2, placement.pp)


def vllm_hybrid_pool(
    model: ModelArch,
    hw: Hardware,
    placement: Placement,
    kv_token: float,
    state: StateArgs,
    kv_budget_gib: float,
    layers: int,
    in_flight: int,
) -> StateMemory:
    """vLLM 0.33's one block pool for a model with more than one kind of layer: full attention,
    windowed attention (sliding window, chunked local) and linear-attention state.

    Layers are grouped by the smaller count of any kind (the larger when no kind has 1.5 times
    another's), and a block spans one group's layers (_get_kv_cache_groups_uniform_page_size and
    _get_kv_cache_bytes_per_block, vllm/v1/core/kv_cache_planning.py). A request holds
    ceil(tokens / block) blocks per full-attention group; per windowed group the window (less one
    token for a sliding one) plus the tokens in flight, and one block more for a sliding window
    (max_admission_blocks_per_request of SlidingWindowSpec and ChunkedLocalAttentionSpec,
    vllm/v1/kv_cache_interface.py); per linear group 2 state blocks with prefix caching (3 with
    FlashInfer's checkpoints) or 1 without (MambaSpec.max_memory_usage_bytes). With state layers
    the attention block grows until one layer's attention page holds one layer's state, whose page
    is padded to it (Platform._align_hybrid_block_size, vllm/platforms/interface.py).
    ``kv_token``: KV bytes per token over the stage's attention layers on one GPU."""
    linear, windowed = model.linear_attention, model.windowed
    attention_page = kv_token / max(1, model.kv_layers(layers))  # one layer, one token
    alignment = max(VLLM_BLOCK_ALIGNMENT, state.block_size or 0)
    state_page = 0.0
    checkpoints = False
    if linear is not None:
        conv = STATE_DTYPE_BYTES.get(state.conv_dtype, linear.dtype_bytes)  # "auto": the model's
        # "auto": the model's own state dtype where it names one, else the convolution's
        ssm = STATE_DTYPE_BYTES.get(state.ssm_dtype, linear.ssm_dtype_bytes or conv)
        state_page = linear.state_bytes(placement.attn_tp, conv, ssm)
        checkpoints = vllm_gdn_checkpoints(linear, hw, state)
        if checkpoints:
            alignment = math.lcm(alignment, VLLM_GDN_CHECKPOINT_ALIGNMENT)
        block = alignment * math.ceil(state_page / (alignment * attention_page))
        block = VLLM_BLOCK_ALIGNMENT * math.ceil(block / VLLM_BLOCK_ALIGNMENT)
    else:
        block = alignment
    counts = {
        "full": model.full_attention_layers(),
        "windowed": windowed.layers if windowed else 0,
        "linear": linear.layers if linear else 0,
    }
    present = [c for c in counts.values() if c]
    group = min(present)
    if max(present) < 1.5 * group:
        group = max(present)
    groups = {kind: math.ceil(count / group) for kind, count in counts.items()}
    stage = {
        "full": model.full_attention_layers(layers),
        "windowed": model.windowed_layers(layers),
        "linear": model.layer_share(counts["linear"], layers),
    }
    group_layers = max(math.ceil(stage[k] / groups[k]) for k in counts if groups[k])
    block_bytes = int(group_layers * block * attention_page)
    copies = (2 + checkpoints) if state.prefix_caching else 1
    window_tokens, window_extra = 0, 0
    if windowed is not None:
        window_tokens = windowed.tokens_held(10**12, in_flight)
        window_extra = 1 if windowed.kind == SLIDING else 0
    return StateMemory(
        bytes_per_request=stage["linear"] * state_page,
        replicas=placement.attn_replicas,
        block_tokens=block,
        block_bytes=block_bytes,
        blocks=max(0, int(kv_budget_gib * GiB // block_bytes)),
        attention_groups=groups["full"],
        state_blocks=groups["linear"] * copies,
        window_groups=groups["windowed"],
        window_tokens=window_tokens,
        window_extra_blocks=window_extra,
    )


# Architectures SGLang gives a sliding-window pool beside the full one (is_hybrid_swa_model,
# sglang/srt/configs/model_config.py); others, Gemma 3 among them, keep every layer's KV whole.
SGLANG_HYBRID_SWA_ARCHITECTURES = frozenset(
    {"GptOssForCausalLM", "Llama4ForConditionalGeneration", "DeepseekV4ForCausalLM"}
)
# --swa-full-tokens-ratio's default: SWA tokens per full-attention token
# (sglang/srt/arg_groups/fields/schedule.py).
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8


def sglang_swa_pool(model: ModelArch) -> bool:
    """Whether SGLang keeps the model's windowed layers in a pool of their own."""
    return model.windowed is not None and model.architecture in SGLANG_HYBRID_SWA_ARCHITECTURES


def sglang_swa_cell_bytes(
    model: ModelArch, kv_dtype: float, attn_tp: int, layers: int, server: ServerArgs
) -> float:
    """Bytes SGLang budgets per token of its full pool when windowed layers have a pool of their
    own: the full layers' KV plus the ratio's share of the windowed layers' (cell size of the
    hybrid case, _recompute_cell_size, sglang/srt/model_executor/pool_configurator.py)."""
    per_layer = model.kv_bytes_per_layer_token(kv_dtype, attn_tp)
    full = model.full_attention_layers(layers) * (per_layer + model.index_bytes_per_token)
    ratio = server.swa_full_tokens_ratio or SGLANG_SWA_FULL_TOKENS_RATIO
    return full + ratio * model.windowed_layers(layers) * per_layer


def sglang_slots_per_request(state: StateArgs, pp: int) -> int:
    """State slots a running request may hold on SGLang (_calculate_mamba_ratio,
    sglang/srt/mem_cache/kv_cache_configurator.py): 1 without the radix cache, else 3 plus the
    extra buffer's tracking slots, 2 with the overlap scheduler and 1 without or lazy
    (get_mamba_tracking_slots, sglang/srt/mem_cache/allocation_sizing.py). Qwen3-Next's "auto"
    strategy is the extra buffer unless --disable-overlap-schedule (_mamba_radix_cache_resolution,
    sglang/srt/arg_groups/overrides.py); pipeline stages turn the overlap scheduler off after
    that choice (_pipeline_parallel_overlap_disable, registered later in the same file)."""
    if not state.prefix_caching:
        return 1
    strategy = state.radix_strategy
    if strategy == "auto":
        strategy = "extra_buffer" if state.overlap_schedule else "no_buffer"
    overlap = state.overlap_schedule and pp == 1
    tracking = {"extra_buffer": 2 if overlap else 1, "extra_buffer_lazy": 1}.get(strategy, 0)
    return SGLANG_SLOTS_PER_REQUEST + tracking


def sglang_state_pool(
    model: ModelArch, placement: Placement, server: ServerArgs, state: StateArgs, rest_gib: float
) -> StateMemory:
    """SGLang 0.5.23 sizes a pool of state slots from what the weights leave, before the KV cache
    (_handle_max_mamba_cache, sglang/srt/mem_cache/kv_cache_configurator.py): --max-mamba-cache-size
    slots; else, with the radix cache off, --max-running-requests; else as many as fit in
    rest x ratio / (1 + ratio), ratio --mamba-full-memory-ratio. The pool keeps one padding slot
    more. The convolution is bf16 and the recurrent state float32 unless --mamba-ssm-dtype says
    (mamba2_state_dtype, sglang/srt/configs/mamba_utils.py); a pipeline stage is charged its share
    of the layers."""
    ssm = STATE_DTYPE_BYTES.get(state.ssm_dtype, 4)
    per_request = int(
        model.state_bytes_per_request(
            placement.attn_tp, conv_bytes=2, ssm_bytes=ssm, layers=max(placement.stage_layers)
        )
    )
    dp = placement.attn_replicas if placement.layout.dpa else 1  # SGLang's attention DP shards
    if state.max_state_slots is not None:
        slots = state.max_state_slots // dp
    elif not state.prefix_caching and server.max_num_seqs:
        slots = max(1, server.max_num_seqs // dp)
    else:
        ratio = state.state_memory_ratio
        slots = int((rest_gib * GiB * ratio / (1 + ratio) - per_request) // per_request)
    return StateMemory(
        bytes_per_request=per_request,
        replicas=placement.attn_replicas,
        pool_gib=(slots + 1) * per_request / GiB if slots > 0 else 0.0,
        pool_slots=slots,
        slots_per_request=sglang_slots_per_request(state, placement.pp),
    )


# ---------------------------------------------------------------------------------------------


def estimate_memory(
    model: ModelArch,
    hw: Hardware,
    engine: Engine,
    placement: Placement,
    server: ServerArgs,
    request_len: int,
    learned: Learned | None = None,
    state_args: StateArgs | None = None,
) -> MemoryEstimate:
    """One GPU's memory on the busiest GPU: weights by group, what the engine keeps besides them,
    and the KV budget left (docs/memory.md), with a hybrid model's state as ``state_args`` size it
    (docs/placement.md#hybrid-attention-qwen3-next)."""
    capacity = hw.memory_gib
    model = cached_model(model, engine, server)
    stages = stage_weights(model, placement, server.redundant_experts if server.enable_eplb else 0)
    expert_factor = mxfp4_expert_factor(model, hw, engine, placement.moe_tp)
    if expert_factor != 1.0:
        stages = [{**stage, "experts": stage["experts"] * expert_factor} for stage in stages]

    def weights(stage: dict[str, float]) -> float:
        return sum(v for k, v in stage.items() if not k.startswith("_"))

    busiest = max(range(len(stages)), key=lambda i: weights(stages[i]))
    stage = stages[busiest]
    layers = int(stage["_stage_layers"])
    learned = learned or Learned()
    weights_gib = weights(stage) * learned.weights_factor / GiB
    fraction = engine.memory_fraction(server, hw.smi_total_gib, placement, model)
    budget = capacity * fraction
    kept = VllmKept()
    if engine.name == "vllm":
        # KV = total x --gpu-memory-utilization - weights - what the profile keeps
        # (Worker.determine_available_memory, vllm/v1/worker/gpu_worker.py)
        kept = vllm_kept(model, engine, placement, server, hw, layers, last_stage=busiest == len(stages) - 1)
        reserve = kept.counted_gib + learned.reserve_offset_gib
        kv_budget = budget - weights_gib - reserve
        if server.kv_cache_memory_bytes is not None:
            # --kv-cache-memory-bytes is the KV cache outright: no share of the card, no profiling
            # (gpu_worker.py and cpu_worker.py: determine_available_memory); what would be left
            # over the card after it is an OOM, not a smaller cache.
            kv_budget = server.kv_cache_memory_bytes / GiB
            budget = weights_gib + reserve + kv_budget
    else:
        # pool = fraction x (free before the load) - weights; activations and graphs live in the rest
        kv_budget = fraction * (capacity - sglang_preload_gib(placement, hw)) - weights_gib
        kv_budget -= learned.reserve_offset_gib
        reserve = capacity - weights_gib - kv_budget
    kv_dtype = cache_dtype_bytes(model, engine, server, hw)
    kv_token = model.kv_bytes_per_token(kv_dtype, placement.attn_tp, layers=layers)
    state: StateMemory | None = None
    linear = model.linear_attention
    if engine.name == "vllm" and (linear is not None or model.windowed is not None):
        in_flight = vllm_concurrent_batches(placement) * vllm_batched_tokens(server, hw, model)
        state = vllm_hybrid_pool(
            model, hw, placement, kv_token, state_args or StateArgs(), kv_budget, layers, in_flight
        )
    elif engine.name == "sglang" and sglang_swa_pool(model):
        kv_token = sglang_swa_cell_bytes(model, kv_dtype, placement.attn_tp, layers, server)
    if engine.name == "sglang" and linear is not None:
        state = sglang_state_pool(model, placement, server, state_args or StateArgs(), kv_budget)
        kv_budget -= state.pool_gib
    if state is not None and state.block_tokens:  # what vLLM logs as its KV cache size
        per_replica = state.logged_tokens(max_model_len(model, server))
    else:
        per_replica = max(0, int(kv_budget * GiB // kv_token)) if kv_token else 0
    if server.max_total_tokens:  # SGLang: the pool is capped by --max-total-tokens
        per_replica = min(per_replica, server.max_total_tokens)
    kv_tokens = per_replica * placement.attn_replicas
    estimate = MemoryEstimate(
        capacity_gib=capacity,
        weights_by_group={
            k: v * learned.weights_factor / GiB for k, v in stage.items() if not k.startswith("_")
        },
        weights_gib=weights_gib,
        reserve_gib=reserve,
        budget_gib=budget,
        kv_budget_gib=kv_budget,
        kv_bytes_per_token=kv_token,
        kv_tokens=kv_tokens,
        max_concurrency=0.0,  # requests_fitting(request_len), below; perfmodel caps the batch
        busiest_gpu=busiest * placement.attn_tp,
        expert_layer_bytes=stage["_expert_layer"] * expert_factor,
        activation_gib=kept.activation_gib,
        graph_gib=kept.graph_gib,
        non_torch_gib=kept.non_torch_gib,
        state=state,
    )
    return replace(estimate, max_concurrency=estimate.requests_fitting(request_len))


DSA_FAMILIES = frozenset({"deepseek-v32", "glm-moe-dsa"})
# vLLM's fp8_ds_mla row: 512 fp8 latent values, 4 float32 scales and 64 bf16 RoPE values, 656
# bytes for the 576 values of one token (MLAAttention.get_kv_cache_spec,
# vllm/model_executor/layers/attention/mla_attention.py).
FP8_DS_MLA_BYTES = 656 / 576


def cache_dtype_bytes(model: ModelArch, engine: Engine, server: ServerArgs, hw: Hardware) -> float:
    """Bytes per cached value as the engine picks them, which for the sparse-attention families
    is not always what --kv-cache-dtype says:
    - vLLM turns any quantized cache of a DSA model into fp8_ds_mla
      (_canonicalize_sparse_mla_kv_cache_dtype, mla_attention.py); GLM-5's "auto" is fp8 on
      Blackwell (GlmMoeDsaForCausalLM.verify_and_update_config, vllm/model_executor/models/config.py);
      DeepSeek-V4's "auto" is fp8_ds_mla (_resolve_dsv4_kv_cache_dtype, vllm/models/deepseek_v4/attention.py).
    - SGLang's "auto" for a DSA model is fp8_e4m3 on SM 10 and newer, bf16 below
      (_dsa_kv_cache_dtype_default, sglang/srt/arg_groups/overrides.py)."""
    asked = server.kv_cache_dtype.lower()
    chosen = server.kv_bytes(2.0)
    blackwell = hw.gpu.capability[0] >= 10
    if engine.name == "vllm":
        if model.family == "deepseek-v4" and asked == "auto":
            return FP8_DS_MLA_BYTES
        if model.family == "glm-moe-dsa" and asked == "auto" and hw.gpu.capability[0] == 10:
            return FP8_DS_MLA_BYTES
        if model.family in DSA_FAMILIES and chosen < 2:
            return FP8_DS_MLA_BYTES
    elif model.family in DSA_FAMILIES and asked == "auto" and blackwell:
        return 1.0
    return chosen


def cached_model(model: ModelArch, engine: Engine, server: ServerArgs) -> ModelArch:
    """The model as the engine's cache sees it: windowed layers keep the whole request's KV when
    the engine gives them no pool of their own (vLLM --disable-hybrid-kv-cache-manager; SGLang
    --disable-hybrid-swa-memory, or an architecture outside its hybrid-SWA list)."""
    if model.windowed is None:
        return model
    if not server.hybrid_kv_cache or (engine.name == "sglang" and not sglang_swa_pool(model)):
        return replace(model, windowed=None)
    return model


def max_model_len(model: ModelArch, server: ServerArgs) -> int:
    return server.max_model_len or model.max_context


def length_reasons(model: ModelArch, engine: Engine, server: ServerArgs) -> list[Reason]:
    """A context length above the model's own is refused at startup by both engines unless an
    environment variable allows it (vllm/config/model.py _get_and_verify_max_len; SGLang
    sglang/srt/configs/model_config.py _derive_context_length)."""
    asked = server.max_model_len
    if not asked or asked <= model.max_context:
        return []
    if engine.name == "vllm":  # raised while ModelConfig (a pydantic dataclass) is built: wrapped
        message = (
            f"Value error, User-specified max_model_len ({asked}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model.max_context} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
            "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
            "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
            "array out-of-bounds error."
        )
        flag = "--max-model-len"
    else:
        message = (
            f"ValueError: Warning: User-specified context_length ({asked}) is greater than the derived "
            f"context_length ({model.max_context}). This may lead to incorrect model outputs or CUDA errors. "
            "Note that the derived context_length may differ from max_position_embeddings in the model's "
            "config. To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
        flag = "--context-length"
    return [
        Reason(
            "max-model-len",
            message,
            f"{model.name} was trained for {model.max_context:,} tokens: set {flag} {model.max_context} or less",
        )
    ]


def memory_reasons(
    model: ModelArch,
    engine: Engine,
    placement: Placement,
    memory: MemoryEstimate,
    server: ServerArgs,
    request_len: int,
) -> list[Reason]:
    capacity = memory.capacity_gib
    if memory.weights_gib > capacity - CUDA_CONTEXT_GIB:
        return [
            Reason(
                "oom-at-load",
                oom_text(memory),
                f"weights need {memory.weights_gib:.1f} GiB per GPU on {gpu_count(placement.gpus_used)}, "
                f"each GPU has {capacity:.2f} GiB",
            )
        ]
    state = memory.state
    if engine.name == "sglang" and state is not None and state.pool_slots <= 0:
        return [sglang_no_state_reason(memory, state)]
    # SGLang: a pool above zero bytes that rounds down to no token (one page: one token here) fails too.
    pool_under_a_token = engine.name == "sglang" and memory.kv_bytes_per_token > 0 and memory.kv_tokens == 0
    if memory.kv_budget_gib <= 0 or pool_under_a_token:
        if engine.name == "vllm":
            message = (  # vllm/v1/core/kv_cache_planning.py
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
                "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                "details."
            )
        elif memory.kv_budget_gib <= 0:
            message = sglang_no_kv_text(server, memory)
        else:
            message = SGLANG_NO_TOKENS_TEXT
        pool = f" + linear-attention state {memory.state_pool_gib:.1f} GiB" if memory.state_pool_gib else ""
        return [
            Reason(
                "no-kv-memory",
                message,
                f"weights {memory.weights_gib:.1f} GiB + reserve {memory.reserve_gib:.1f} GiB{pool} leave no KV "
                f"cache in {memory.budget_gib:.1f} GiB",
            )
        ]
    length = max_model_len(model, server)
    per_replica_tokens = memory.kv_tokens // max(1, placement.attn_replicas)
    if engine.name == "vllm" and state is not None and state.block_tokens:
        too_long = vllm_state_max_len_reason(memory, state, length)
        if too_long is not None:
            return [too_long]
    elif engine.name == "vllm" and per_replica_tokens < length:
        needed = length * memory.kv_bytes_per_token / GiB
        return [
            Reason(
                "kv-max-len",
                f"ValueError: To serve at least one request with the model's max seq len ({length}), "
                f"({round(needed, 2)} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({round(memory.kv_budget_gib, 2)} GiB). Based on the available memory, the estimated maximum "
                f"model length is {per_replica_tokens}. Try increasing `gpu_memory_utilization` (which also "
                "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
                "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                f"set --max-model-len {_round_down(per_replica_tokens)} or less in the profile's server args",
            )
        ]
    if engine.name == "sglang" and state is not None and state.running_cap <= 0:
        return [sglang_no_state_reason(memory, state)]
    if memory.kv_budget_gib < TIGHT_KV_FRACTION * capacity or memory.max_concurrency < TIGHT_MIN_REQUESTS:
        return [
            Reason(
                "kv-thin",
                f"KV cache {memory.kv_budget_gib:.1f} GiB: {memory.kv_tokens:,} tokens, "
                f"~{memory.max_concurrency:.1f} requests of {request_len} tokens",
                "little room for concurrency: raise the memory fraction or use fp8 KV cache",
            )
        ]
    return []


def _longest_fitting(state: StateMemory, usable: int, length: int) -> int:
    """The longest request whose blocks fit ``usable``, found as vLLM finds it: a binary search
    over lengths (_estimate_max_model_len_from_groups, vllm/v1/core/kv_cache_planning.py); 0 when
    not even one token fits."""
    low, high, best = 1, length, 0
    while low <= high:
        mid = (low + high) // 2
        if state.blocks_per_request(mid) <= usable:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def vllm_state_max_len_reason(memory: MemoryEstimate, state: StateMemory, length: int) -> Reason | None:
    """vLLM's check that one request of the context length fits a hybrid model's block pool, less
    the null block the pool holds back, and the longest that would (get_kv_cache_configs,
    _check_enough_kv_cache_memory and _estimate_max_model_len_from_groups,
    vllm/v1/core/kv_cache_planning.py)."""
    usable = state.blocks - 1
    needed_blocks = state.blocks_per_request(length)
    if needed_blocks <= usable:
        return None
    longest = _longest_fitting(state, usable, length)
    estimated = (
        f"Based on the available memory, the estimated maximum model length is {longest}. " if longest else ""
    )
    available = memory.kv_budget_gib - state.block_bytes / GiB
    return Reason(
        "kv-max-len",
        f"ValueError: To serve at least one request with the model's max seq len ({length}), "
        f"({round(needed_blocks * state.block_bytes / GiB, 2)} GiB KV cache is needed, which is larger than "
        f"the available KV cache memory ({round(available, 2)} GiB). {estimated}Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        f"a request of {length:,} tokens needs {needed_blocks:,} blocks of {state.block_tokens} tokens "
        f"(with {state.state_blocks} for its linear-attention state), the pool has {usable:,}: "
        f"set --max-model-len {_round_down(longest)} or less in the profile's server args",
    )


def sglang_no_state_reason(memory: MemoryEstimate, state: StateMemory) -> Reason:
    """SGLang 0.5.23 when the state pool has no slot (_handle_max_mamba_cache) or too few for one
    running request (resolve_max_num_reqs), both in sglang/srt/mem_cache/kv_cache_configurator.py."""
    per_request_mib = state.bytes_per_request / 2**20
    if state.pool_slots <= 0:
        rest = memory.kv_budget_gib + memory.state_pool_gib
        return Reason(
            "no-state-memory",
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={state.pool_slots} (total_rest_memory={rest:.2f} GB, "
            f"mamba_cache_per_req={per_request_mib:.2f} MB). Try: (1) reduce --max-running-requests, "
            "(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs "
            "with more memory.",
            f"the {rest:.1f} GiB the weights leave hold no linear-attention state slot of "
            f"{per_request_mib:.1f} MiB: raise --mem-fraction-static or use more GPUs",
        )
    return Reason(
        "no-state-memory",
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        f"max_mamba_cache_size={state.pool_slots}, mamba_ratio={state.slots_per_request}, resulting "
        "max_num_reqs=0. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
        "(3) use GPUs with more memory.",
        f"{state.pool_slots} state slots, {state.slots_per_request} per running request: "
        "raise --max-mamba-cache-size",
    )


# SGLang 0.5.23 when the pool rounds down to no token (MemoryPoolConfig.__post_init__,
# sglang/srt/model_executor/pool_configurator.py; the pool configurators build the config without
# mem_fraction_static, so the "Current value" suffix of older versions is not printed).
SGLANG_NO_TOKENS_TEXT = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def sglang_static_share(server: ServerArgs, memory: MemoryEstimate) -> float:
    """--mem-fraction-static as SGLang holds it once resolved: the flag, or the share it derives,
    rounded to 3 places (sglang/srt/arg_groups/memory_hook.py), which the estimate's budget carries."""
    if server.mem_fraction_static is not None:
        return server.mem_fraction_static
    return round(memory.budget_gib / memory.capacity_gib, 3) if memory.capacity_gib else 0.0


def sglang_no_kv_text(server: ServerArgs, memory: MemoryEstimate) -> str:
    """SGLang 0.5.23's words when the loaded weights leave the static share no room for the pool
    (KVCacheConfigurator._profile_available_bytes, sglang/srt/mem_cache/kv_cache_configurator.py):
    the pool is available - pre x (1 - F) with ``pre`` the free memory before the weights load and
    ``available`` after it, so the least share that leaves one is 1 - available/pre. The estimate's
    pool, with a hybrid model's state pool taken from it first, is F x pre - weights
    (estimate_memory), which gives pre back, and available = pre - weights."""
    share = memory.budget_gib / memory.capacity_gib if memory.capacity_gib else 0.0
    pre = (memory.kv_budget_gib + memory.state_pool_gib + memory.weights_gib) / share if share else 0.0
    available = pre - memory.weights_gib
    minimum = 1 - available / pre if pre > 0 else 1.0
    suggested = math.ceil(minimum * 1000) / 1000
    return (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={sglang_static_share(server, memory)}. "
        f"Raise --mem-fraction-static above {suggested:.3f} "
        f"(minimum viable = 1 - available/pre = {minimum:.4f}). "
        "If using speculative decoding, draft weights are now counted."
    )


def _round_down(tokens: int) -> int:
    return max(256, tokens // 1024 * 1024)


def oom_text(memory: MemoryEstimate) -> str:
    """torch's CUDA OOM message (torch >= 2.2 format) for the load step that does not fit, on the
    busiest GPU: the first rank of the stage that holds the most, which the simulated engine
    reports too (every rank of a stage loads alike)."""
    capacity = memory.capacity_gib
    step = memory.expert_layer_bytes * 2 / 3 or 512 * 2**20  # the fused gate/up of one layer
    usable = (capacity - CUDA_CONTEXT_GIB) * GiB
    loaded = usable - step * (1 + (usable % step) / step) if usable > step else 0
    loaded = max(0.0, min(loaded, memory.weights_gib * GiB))
    free = capacity * GiB - CUDA_CONTEXT_GIB * GiB - loaded
    free = min(free, step * 0.9)
    in_use = capacity * GiB - free
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_mib(step)}. "
        f"GPU {memory.busiest_gpu} has a total capacity of {capacity:.2f} GiB of which "
        f"{_mib(free)} is free. Including non-PyTorch memory, this process has {in_use / GiB:.2f} GiB memory in use."
    )


def gpu_count(count: int) -> str:
    """`1 GPU`, `8 GPUs`."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.2f} MiB"
