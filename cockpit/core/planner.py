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

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.layout import Layout, parse_layout
from cockpit.core.model import (
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
from cockpit.core.secrets import redact_argv
from cockpit.core.speed import SpeedBackend, SpeedSource
from cockpit.engines import Engine, Inexpressible, Placement, Rule, ServerArgs, check_args
from cockpit.engines.arguments import refuse_owned
from cockpit.engines.estimate import GiB, MemoryEstimate, StateArgs
from cockpit.engines.memory import max_model_len
from cockpit.engines.nodes import NodeShare, span_warnings, split_text

FITS, TIGHT, FAILS = "fits", "tight", "fails"
VERDICT_ORDER = {FITS: 0, TIGHT: 1, FAILS: 2}

CUDA_CONTEXT_GIB = 0.5  # driver context on every GPU before any tensor
TIGHT_KV_FRACTION = 0.05  # KV budget under 5% of the card ...
TIGHT_MIN_REQUESTS = 4  # ... or room for fewer than 4 requests: "tight"


@dataclass(frozen=True)
class Learned:
    """What a box taught the planner about itself: fitted from the journal by
    `cockpit.core.fitting`, kept per (GPU type, engine, version) in the user's data folder.

    The defaults change nothing, so a box with no history plans from the model alone.
    """

    runs: int = 0  # experiments the fit used; 0: nothing learned, the defaults
    calibration: Mapping[str, Any] = field(default_factory=dict)  # performance-model overrides
    reserve_offset_gib: float = 0.0  # what the engine keeps besides weights, beyond the modelled reserve
    weights_factor: float = 1.0  # measured over predicted weights (a layout the kernels repack)


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
    # Where step times come from besides the analytic model (cockpit.core.speed); None: the
    # analytic model alone. The edge that decides the box hands it in (cockpit.lab.box).
    speed: SpeedBackend | None = field(default=None, compare=False)

    @cached_property
    def server(self) -> ServerArgs:
        """The profile's arguments, checked once per setup."""
        return self.engine.check(self.server_args)

    @cached_property
    def state_args(self) -> StateArgs:
        """The profile's state-sizing arguments (the defaults for a model without such a state)."""
        if self.model.linear_attention is None and self.model.windowed is None:
            return StateArgs()
        return self.engine.state_args(self.server_args)


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
    predicted_by: SpeedSource | None = None  # which source predicted predicted_tok_s (cockpit.core.speed)
    warnings: tuple[str, ...] = ()  # what the engine would warn about (a deprecated spelling), not a failure
    server: ServerArgs | None = None  # the arguments it was planned with (profile's and knobs), once checked
    nodes: tuple[NodeShare, ...] = ()  # across a cluster's nodes: what each node holds; () one node

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
            **(
                {"nodes": [n.to_json() for n in self.nodes], "node_split": split_text(self.nodes)}
                if self.nodes
                else {}
            ),
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
        placement = engine.placement(layout.parallel, hw.count, model, server, nodes=hw.nodes)
    except Inexpressible as exc:
        return Verdict(
            layout, engine.name, FAILS, (Reason("inexpressible", str(exc)),), alternatives=exc.alternatives
        )
    placement = replace(placement, layout=layout)
    args = (*setup.server_args, *layout.knobs)
    argv = tuple(engine.argv(placement, setup.model_path or model.name, setup.port, args, setup.command))
    reasons = [Reason.from_rule(r) for r in engine.startup_rules(model, placement, server)]
    too_long = engine.context_length_refusal(model, server)
    reasons += [Reason.from_rule(too_long)] if too_long else []
    state_args = knob_state_args(setup, layout)
    memory = estimate_memory(
        model, hw, engine, placement, server, setup.request_len, setup.learned, state_args
    )
    reasons += memory_reasons(model, engine, placement, memory, server, setup.request_len)
    warnings = server.notes
    shares: tuple[NodeShare, ...] = ()
    node_rules = {"gpus-available", "nnodes", "pp-nodes", "dp-nodes"}
    if placement.nodes > 1 and not any(r.rule in node_rules for r in reasons):
        # Placement is symmetric, so the busiest GPU's estimate holds on every node.
        shares = tuple(engine.node_shares(placement))
        warnings += span_warnings(placement.attn_tp, hw.gpus_per_node, placement.nodes, hw.inter_link)
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
        warnings=warnings,
        server=server,
        nodes=shares,
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
    return setup.engine.state_args((*setup.server_args, *layout.knobs))


def plan_all(setup: Setup, layouts: Iterable[Layout | str] | None = None) -> list[Verdict]:
    """Verdicts for the given layouts, or every layout the engine can run on the box; fits first."""
    if layouts is None:
        hw = setup.hardware
        layouts = setup.engine.candidate_layouts(hw.count, moe=setup.model.is_moe, nodes=hw.nodes)
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
    (docs/placement.md#hybrid-attention-qwen3-next). The engine says how it splits the GPU and lays
    out its cache; the weights are the model's and the layout's."""
    capacity = hw.memory_gib
    model = cached_model(model, engine, server)
    stages = stage_weights(model, placement, server.redundant_experts if server.enable_eplb else 0)
    expert_factor = engine.expert_weight_factor(model, hw, placement.moe_tp)
    if expert_factor != 1.0:
        stages = [{**stage, "experts": stage["experts"] * expert_factor} for stage in stages]

    def weights(stage: dict[str, float]) -> float:
        return sum(v for k, v in stage.items() if not k.startswith("_"))

    busiest = max(range(len(stages)), key=lambda i: weights(stages[i]))
    stage = stages[busiest]
    layers = int(stage["_stage_layers"])
    learned = learned or Learned()
    weights_gib = weights(stage) * learned.weights_factor / GiB
    budget = engine.memory_budget(
        model,
        hw,
        placement,
        server,
        weights_gib=weights_gib,
        layers=layers,
        last_stage=busiest == len(stages) - 1,
        reserve_offset_gib=learned.reserve_offset_gib,
    )
    kv_dtype = engine.cache_dtype_bytes(model, server, hw)
    pool = engine.cache_pool(
        model, hw, placement, server, state_args or StateArgs(), kv_dtype, budget.kv_budget_gib, layers
    )
    state = pool.state
    if state is not None and state.block_tokens:  # what vLLM logs as its KV cache size
        per_replica = state.logged_tokens(max_model_len(model, server))
    else:
        kv_token = pool.kv_bytes_per_token
        per_replica = max(0, int(pool.kv_budget_gib * GiB // kv_token)) if kv_token else 0
    if server.max_total_tokens:  # SGLang: the pool is capped by --max-total-tokens
        per_replica = min(per_replica, server.max_total_tokens)
    kv_tokens = per_replica * placement.attn_replicas
    estimate = MemoryEstimate(
        capacity_gib=capacity,
        weights_by_group={
            k: v * learned.weights_factor / GiB for k, v in stage.items() if not k.startswith("_")
        },
        weights_gib=weights_gib,
        reserve_gib=budget.reserve_gib,
        budget_gib=budget.budget_gib,
        kv_budget_gib=pool.kv_budget_gib,
        kv_bytes_per_token=pool.kv_bytes_per_token,
        kv_tokens=kv_tokens,
        max_concurrency=0.0,  # requests_fitting(request_len), below; perfmodel caps the batch
        busiest_gpu=busiest * placement.attn_tp,
        expert_layer_bytes=stage["_expert_layer"] * expert_factor,
        activation_gib=budget.activation_gib,
        graph_gib=budget.graph_gib,
        non_torch_gib=budget.non_torch_gib,
        state=state,
    )
    return replace(estimate, max_concurrency=estimate.requests_fitting(request_len))


def cached_model(model: ModelArch, engine: Engine, server: ServerArgs) -> ModelArch:
    """The model as the engine's cache sees it: windowed layers keep the whole request's KV when
    the engine gives them no pool of their own (vLLM --disable-hybrid-kv-cache-manager; SGLang
    --disable-hybrid-swa-memory, or an architecture outside its hybrid-SWA list)."""
    if model.windowed is None or engine.pools_windows(model, server):
        return model
    return replace(model, windowed=None)


def memory_reasons(
    model: ModelArch,
    engine: Engine,
    placement: Placement,
    memory: MemoryEstimate,
    server: ServerArgs,
    request_len: int,
) -> list[Reason]:
    """Weights that do not load, then the engine's own refusal, then a KV cache too thin to be
    worth serving from."""
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
    refusal = engine.memory_refusal(model, placement, memory, server)
    if refusal is not None:
        return [Reason.from_rule(refusal)]
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
