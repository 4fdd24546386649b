"""Preflight: will this layout start on this box, what will each GPU hold, and why not.

A verdict is ``fits``, ``tight`` or ``fails`` with every reason in the engine's own words. The
memory estimate follows docs/memory.md: weights on the busiest GPU by tensor class,
a runtime reserve, and the KV budget that is left, in tokens and in concurrent requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cockpit.engines import Engine, Inexpressible, Placement, Rule, ServerArgs, parse_server_args
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
CUDA_GRAPH_GIB = 1.0  # captured graphs (vLLM estimates them since v0.21)
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32  # peak activation ~ batched tokens x hidden x 32 B
TIGHT_KV_FRACTION = 0.05  # KV budget under 5% of the card ...
TIGHT_MIN_REQUESTS = 4  # ... or room for fewer than 4 requests: "tight"


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

    @property
    def server(self) -> ServerArgs:
        return parse_server_args(self.server_args)


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
        }

    def __str__(self) -> str:
        return f"{self.layout} on {self.engine}: {self.verdict}" + (
            f" ({self.headline})" if self.headline else ""
        )


# ---------------------------------------------------------------------------------------------


def plan_layout(setup: Setup, layout: Layout | str) -> Verdict:
    """The verdict for one layout: engine rules first, then memory."""
    if isinstance(layout, str):
        layout = parse_layout(layout)
    engine, model, hw = setup.engine, setup.model, setup.hardware
    try:
        placement = engine.placement(layout, hw.count, model)
    except Inexpressible as exc:
        return Verdict(
            layout, engine.name, FAILS, (Reason("inexpressible", str(exc)),), alternatives=exc.alternatives
        )
    server = setup.server
    argv = tuple(
        engine.argv(placement, setup.model_path or model.name, setup.port, setup.server_args, setup.command)
    )
    reasons = [Reason.from_rule(r) for r in engine.startup_rules(model, placement, server)]
    memory = estimate_memory(model, hw, engine, placement, server, setup.request_len)
    reasons += memory_reasons(model, engine, placement, memory, server, setup.request_len)
    verdict = FITS
    if any(r.rule != "kv-thin" for r in reasons):
        verdict = FAILS
    elif reasons:
        verdict = TIGHT
    return Verdict(layout, engine.name, verdict, tuple(reasons), placement, memory, argv)


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


def stage_weights(model: ModelArch, placement: Placement) -> list[dict[str, float]]:
    """Bytes on one GPU of each pipeline stage, by display group."""
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
        experts = placement.experts_per_gpu * per_expert / placement.moe_tp
    stages = []
    start = 0
    for index, count in enumerate(placement.stage_layers):
        n_dense, n_moe = _layer_kinds(model, range(start, start + count))
        start += count
        embeddings = 0.0
        if index == 0:
            embeddings += model.class_bytes(EMBEDDING) / placement.vocab_tp
        if index == len(placement.stage_layers) - 1:
            embeddings += model.class_bytes(LM_HEAD) / placement.vocab_tp
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


def estimate_memory(
    model: ModelArch, hw: Hardware, engine: Engine, placement: Placement, server: ServerArgs, request_len: int
) -> MemoryEstimate:
    capacity = hw.memory_gib
    stages = stage_weights(model, placement)

    def weights(stage: dict[str, float]) -> float:
        return sum(v for k, v in stage.items() if not k.startswith("_"))

    busiest = max(range(len(stages)), key=lambda i: weights(stages[i]))
    stage = stages[busiest]
    weights_gib = weights(stage) / GiB
    fraction = engine.memory_fraction(server, capacity)
    budget = capacity * fraction
    if engine.name == "vllm":
        activations = server.max_num_batched_tokens * model.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN / GiB
        reserve = NON_TORCH_GIB + CUDA_GRAPH_GIB + activations
    else:  # SGLang keeps activations and graphs in the (1 - mem_fraction_static) it leaves free
        reserve = capacity - budget
        budget = capacity
    kv_budget = budget - weights_gib - reserve
    kv_dtype = server.kv_bytes(2.0)
    kv_token = model.kv_bytes_per_token(kv_dtype, placement.attn_tp, layers=int(stage["_stage_layers"]))
    per_replica = max(0, int(kv_budget * GiB // kv_token)) if kv_token else 0
    kv_tokens = per_replica * placement.attn_replicas
    return MemoryEstimate(
        capacity_gib=capacity,
        weights_by_group={k: v / GiB for k, v in stage.items() if not k.startswith("_")},
        weights_gib=weights_gib,
        reserve_gib=reserve,
        budget_gib=budget if engine.name == "vllm" else capacity * fraction,
        kv_budget_gib=kv_budget,
        kv_bytes_per_token=kv_token,
        kv_tokens=kv_tokens,
        max_concurrency=kv_tokens / request_len if request_len else 0.0,
        busiest_gpu=busiest * placement.attn_tp,
        expert_layer_bytes=stage["_expert_layer"],
    )


def max_model_len(model: ModelArch, server: ServerArgs) -> int:
    return server.max_model_len or model.max_context


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
            message = (
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine."
            )
        else:
            message = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
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
                f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({memory.kv_budget_gib:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {per_replica_tokens}. Try increasing `gpu_memory_utilization` or decreasing "
                "`max_model_len` when initializing the engine.",
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
