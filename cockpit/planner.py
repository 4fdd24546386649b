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
from cockpit.engines.options import refuse_owned
from cockpit.errors import CockpitError
from cockpit.hardware import Hardware
from cockpit.layout import Layout, enumerate_layouts, parse_layout
from cockpit.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    ModelArch,
)
from cockpit.secrets import redact_argv

GiB = 2**30
FITS, TIGHT, FAILS = "fits", "tight", "fails"
VERDICT_ORDER = {FITS: 0, TIGHT: 1, FAILS: 2}

CUDA_CONTEXT_GIB = 0.5  # driver context on every GPU before any tensor
NON_TORCH_GIB = 1.0  # NCCL buffers, cuBLAS workspaces (vLLM counts them as non-KV)
CUDA_GRAPH_GIB = 1.0  # captured graphs at the default largest capture size (vLLM estimates them)
DEFAULT_GRAPH_MAX_BS = 512  # vLLM's max_cudagraph_capture_size default: min(2 x max_num_seqs, 512)
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32  # peak activation ~ batched tokens x hidden x 32 B
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

    @property
    def is_default(self) -> bool:
        return self.runs == 0 and not self.calibration and not self.reserve_offset_gib and self.weights_factor == 1.0


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
        first = self.message.splitlines()[0] if self.message else ""
        if self.rule == "oom-at-load":
            return f"CUDA OOM at load: {self.detail}"
        if first in ("AssertionError", "") and self.detail:
            return f"{first}: {self.detail}" if first else self.detail
        return first


@dataclass(frozen=True)
class MemoryEstimate:
    """One GPU's memory, on the busiest GPU of the layout."""

    capacity_gib: float
    weights_by_group: dict[str, float]  # GiB: attention, experts, dense+shared, embeddings, other
    weights_gib: float
    reserve_gib: float
    budget_gib: float  # what the engine takes for itself (fraction x capacity)
    kv_budget_gib: float
    kv_bytes_per_token: float
    kv_tokens: int  # over the whole server (all attention replicas)
    max_concurrency: float  # requests of request_len that fit the KV cache at once
    busiest_gpu: int
    expert_layer_bytes: float  # one MoE layer's experts on one GPU: the size of a load step

    def to_json(self) -> dict:
        return {
            "capacity_gib": round(self.capacity_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "weights_by_group_gib": {k: round(v, 2) for k, v in self.weights_by_group.items()},
            "reserve_gib": round(self.reserve_gib, 2),
            "kv_budget_gib": round(self.kv_budget_gib, 2),
            "kv_bytes_per_token": round(self.kv_bytes_per_token),
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "busiest_gpu": self.busiest_gpu,
        }


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
    if isinstance(layout, str):
        layout = parse_layout(layout)
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
    memory = estimate_memory(model, hw, engine, placement, server, setup.request_len, setup.learned)
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
    """(dense layers, MoE layers) among ``layers``; dense layers come first in every family."""
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


def graph_max_bs(server: ServerArgs) -> int:
    """The largest batch captured in a CUDA graph (0: eager mode). vLLM's default is
    min(2 x max_num_seqs, 512) (vllm/config/vllm.py, _set_cudagraph_sizes)."""
    if not server.cuda_graphs:
        return 0
    if server.cuda_graph_max_bs:
        return server.cuda_graph_max_bs
    return min(2 * server.max_num_seqs, DEFAULT_GRAPH_MAX_BS) if server.max_num_seqs else DEFAULT_GRAPH_MAX_BS


def graph_memory_gib(server: ServerArgs) -> float:
    """Captured CUDA graphs: none in eager mode; otherwise about CUDA_GRAPH_GIB at the default
    largest capture (512), scaling with the largest captured batch
    (docs/memory.md#server-arguments-the-planner-models)."""
    largest = graph_max_bs(server)
    return CUDA_GRAPH_GIB * min(2.0, max(0.1, largest / DEFAULT_GRAPH_MAX_BS)) if largest else 0.0


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
    return 8192 if hw.memory_gib >= 70 and hw.gpu.key != "a100" else 2048


def estimate_memory(
    model: ModelArch,
    hw: Hardware,
    engine: Engine,
    placement: Placement,
    server: ServerArgs,
    request_len: int,
    learned: Learned | None = None,
) -> MemoryEstimate:
    capacity = hw.memory_gib
    stages = stage_weights(model, placement, server.redundant_experts if server.enable_eplb else 0)

    def weights(stage: dict[str, float]) -> float:
        return sum(v for k, v in stage.items() if not k.startswith("_"))

    busiest = max(range(len(stages)), key=lambda i: weights(stages[i]))
    stage = stages[busiest]
    learned = learned or Learned()
    weights_gib = weights(stage) * learned.weights_factor / GiB
    fraction = engine.memory_fraction(server, capacity, placement, model)
    budget = capacity * fraction
    if engine.name == "vllm":
        tokens = vllm_batched_tokens(server, hw, model)
        activations = tokens * model.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN / GiB
        reserve = NON_TORCH_GIB + graph_memory_gib(server) + activations
    else:  # SGLang keeps activations and graphs in the (1 - mem_fraction_static) it leaves free
        reserve = capacity - budget
        budget = capacity
    reserve += learned.reserve_offset_gib
    kv_budget = budget - weights_gib - reserve
    kv_dtype = server.kv_bytes(2.0)
    kv_token = model.kv_bytes_per_token(kv_dtype, placement.attn_tp, layers=int(stage["_stage_layers"]))
    per_replica = max(0, int(kv_budget * GiB // kv_token)) if kv_token else 0
    if server.max_total_tokens:  # SGLang: the pool is capped by --max-total-tokens
        per_replica = min(per_replica, server.max_total_tokens)
    kv_tokens = per_replica * placement.attn_replicas
    return MemoryEstimate(
        capacity_gib=capacity,
        weights_by_group={k: v * learned.weights_factor / GiB for k, v in stage.items() if not k.startswith("_")},
        weights_gib=weights_gib,
        reserve_gib=reserve,
        budget_gib=budget if engine.name == "vllm" else capacity * fraction,
        kv_budget_gib=kv_budget,
        kv_bytes_per_token=kv_token,
        kv_tokens=kv_tokens,
        max_concurrency=kv_tokens / request_len if request_len else 0.0,  # KV-bound; perfmodel caps the batch
        busiest_gpu=busiest * placement.attn_tp,
        expert_layer_bytes=stage["_expert_layer"],
    )


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
                f"weights need {memory.weights_gib:.1f} GiB per GPU on {placement.gpus_used} GPUs, "
                f"each GPU has {capacity:.2f} GiB",
            )
        ]
    if memory.kv_budget_gib <= 0:
        if engine.name == "vllm":
            message = (  # vllm/v1/core/kv_cache_planning.py
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
                "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                "details."
            )
        else:  # sglang/srt/model_executor/pool_configurator.py
            message = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
            if server.mem_fraction_static is not None:
                message += f" Current value: mem_fraction_static={server.mem_fraction_static}"
        return [
            Reason(
                "no-kv-memory",
                message,
                f"weights {memory.weights_gib:.1f} GiB + reserve {memory.reserve_gib:.1f} GiB leave no KV cache "
                f"in {memory.budget_gib:.1f} GiB",
            )
        ]
    length = max_model_len(model, server)
    per_replica_tokens = memory.kv_tokens // max(1, placement.attn_replicas)
    if engine.name == "vllm" and per_replica_tokens < length:
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


def _round_down(tokens: int) -> int:
    return max(256, tokens // 1024 * 1024)


def oom_text(memory: MemoryEstimate, gpu: int | None = None) -> str:
    """torch's CUDA OOM message (torch >= 2.2 format) for the load step that does not fit."""
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
        f"GPU {memory.busiest_gpu if gpu is None else gpu} has a total capacity of {capacity:.2f} GiB of which "
        f"{_mib(free)} is free. Including non-PyTorch memory, this process has {in_use / GiB:.2f} GiB memory in use."
    )


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.2f} MiB"
