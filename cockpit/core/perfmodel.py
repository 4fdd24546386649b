"""How fast a layout decodes: an analytic step-time model (docs/performance.md#the-decode-step).

Decode on these boxes is bound by bandwidth and latency, not FLOPs: a step costs the bytes the
busiest GPU reads (dense parts in full, routed experts by how many a batch touches, KV cache by
context) over its achieved bandwidth, plus the collectives of every layer on the link, plus
fixed per-layer and per-step floors. Pipeline stages run in series for one sequence and overlap
for many. Every constant lives in one ``Calibration``, keyed by GPU type, link and engine, and a
profile can override any of them for its own box.

What a benchmark measures is a workload, not pure decode: ``closed_loop`` adds the prefill of the
prompts, cut into chunks by the engine's step token budget, closed-loop rounds and queueing
(docs/performance.md#the-workload); every prediction cockpit shows comes from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from cockpit.core.errors import CockpitError, shown
from cockpit.core.hardware import Hardware
from cockpit.core.model import ModelArch
from cockpit.core.planner import FAILS, MemoryEstimate, Setup, Verdict, knob_server_args, stage_weights
from cockpit.core.speed import ANALYTIC_SOURCE, KernelTimes, SpeedSource
from cockpit.engines import ENGINES, Engine, Placement, ServerArgs


@dataclass(frozen=True)
class Calibration:
    """The model's free parameters and their defaults (docs/performance.md#calibration)."""

    eta_bw: float = 0.8  # achieved share of peak memory bandwidth in decode
    eta_f: float = 0.5  # achieved share of dense tensor FLOP/s
    eta_moe_sliced: float = 0.85  # grouped-GEMM efficiency of expert slices (MoE-TP >= 4) at batch
    skew: float = 1.3  # routing skew: how far the busiest EP rank sits above the mean
    eta_pp: float = 0.5  # pipeline efficiency with several microbatches in flight
    t_layer_us: float = 60.0  # per-layer floor per step: kernel launches, small ops, syncs
    # The same floor without a CUDA graph (eager mode, or a batch above the largest captured
    # size): every kernel launched from the CPU (docs/performance.md#calibration).
    eager_layer_factor: float = 3.0
    t_sched_ms: float = 2.0  # per-step scheduler, sampling, detokenisation
    alpha_p2p_us: float = 10.0  # one pipeline hop
    bw_p2p_gbs: float = 25.0
    ar_latency_scale: float = 1.0  # multiplies the link's all-reduce latency (topology, NCCL env)
    ar_bw_scale: float = 1.0  # multiplies the link's all-reduce bus bandwidth (topology, NCCL env)
    # Routed experts' reads take this many times what their bytes say, times (tokens per expert)
    # to the power -moe_batch_exp: grouped-GEMM kernels that read their experts slowly while each
    # expert sees a token or two (exponent above 0) or that lose pace as tokens pile up (below 0).
    moe_scale: float = 1.0
    moe_batch_exp: float = 0.0
    # A residual the parts above do not explain, fitted across layouts: every decode step times
    # (batch / RESIDUAL_BATCH) to the power step_batch_exp.
    step_batch_exp: float = 0.0
    prefill_scale: float = 1.0  # multiplies a prompt's modelled prefill time
    t_prefill_ms: float = 0.0  # added to every prefill step: its own scheduling and launches
    max_running: int = 0  # engine cap on running requests; 0: the engine's default
    # Per-layout floor under every step, measured on a box: a step never takes less. Models a
    # launch-bound engine (no CUDA graphs, slow NCCL path) whose CPU time hides the GPU's at
    # small batch; e.g. SGLang TP8 Kimi ran 38 ms steps at C=1 on the reference box where the bytes
    # say 15 (docs/performance.md#reference-measurements).
    t_floor_ms: Mapping[str, float] = field(default_factory=dict)
    # Measured kernels' step times times this (cockpit.core.speed): what the box's runs say of
    # the kernel tables' GPU and engine version against its own.
    kernel_scale: float = 1.0

    def overridden(
        self, overrides: Mapping[str, Any], source: str = "calibration", fix: str = "fix the profile"
    ) -> Calibration:
        """A copy with a profile's overrides; unknown names and absurd values are errors, not ignored.
        ``fix`` ends each error: what the person should do where these overrides came from."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise CockpitError(
                    f"{source}: unknown calibration {shown(key)}: known are {', '.join(sorted(known))}; {fix}"
                )
            if key == "t_floor_ms":
                if not isinstance(value, Mapping):
                    raise CockpitError(
                        f"{source}: t_floor_ms maps layouts to milliseconds, e.g. {{tp8: 38}}: {fix}"
                    )
                floors = {
                    str(k): _calibration_number(f"t_floor_ms {k}", v, source, fix, zero=True)
                    for k, v in value.items()
                }
                changes[key] = {**self.t_floor_ms, **floors}
            elif key == "max_running":
                changes[key] = _calibration_count(key, value, source, fix)
            elif key in _EXPONENTS:
                changes[key] = _calibration_exponent(key, value, source, fix)
            else:
                high = 1.0 if key.startswith("eta_") else MAX_CALIBRATION
                changes[key] = _calibration_number(key, value, source, fix, high, zero=key in _ADDED_TERMS)
        return replace(self, **changes)


MAX_CALIBRATION = 1e6  # far above any time (us, ms), bandwidth (GB/s) or factor a box measures
# Exponents of a batch dependence: 0 is none; beyond +-2 a term would swing 1000x over a sweep.
MAX_EXPONENT = 2.0
_EXPONENTS = frozenset({"moe_batch_exp", "step_batch_exp"})
RESIDUAL_BATCH = 32  # the batch at which the residual is 1
# Overheads added to a step: 0 means "none" (shares, factors and bandwidths divide or multiply).
_ADDED_TERMS = frozenset({"t_layer_us", "t_sched_ms", "alpha_p2p_us", "t_prefill_ms"})


def _calibration_number(
    key: str, value: Any, source: str, fix: str, high: float = MAX_CALIBRATION, zero: bool = False
) -> float:
    """A calibration constant: a real number above 0 (or 0 for an added overhead) and at most
    ``high`` (1 for the eta_ shares)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CockpitError(f"{source}: calibration '{key}' needs a number, got {shown(value)}: {fix}")
    low_ok = value >= 0 if zero else value > 0
    if not (low_ok and value <= high):  # also refuses nan and inf
        least = "0 or more" if zero else "above 0"
        raise CockpitError(
            f"{source}: calibration '{key}' must be {least} and at most {high:g} (got {shown(value)}): {fix}"
        )
    return float(value)


def _calibration_exponent(key: str, value: Any, source: str, fix: str) -> float:
    """A batch dependence's exponent: a real number from -MAX_EXPONENT to MAX_EXPONENT."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CockpitError(f"{source}: calibration '{key}' needs a number, got {shown(value)}: {fix}")
    if not -MAX_EXPONENT <= value <= MAX_EXPONENT:  # also refuses nan and inf
        raise CockpitError(
            f"{source}: calibration '{key}' must be from {-MAX_EXPONENT:g} to {MAX_EXPONENT:g} "
            f"(got {shown(value)}): {fix}"
        )
    return float(value)


def _calibration_count(key: str, value: Any, source: str, fix: str) -> int:
    """max_running: a whole number of requests; 0 keeps the engine's default."""
    if isinstance(value, float) and value.is_integer():
        value = int(value) if abs(value) < 2**53 else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise CockpitError(f"{source}: calibration '{key}' needs a number, got {shown(value)}: {fix}")
    if not 0 <= value <= 10_000_000:
        raise CockpitError(
            f"{source}: calibration '{key}' must be 0 (the engine's default) to 10,000,000 (got {shown(value)}): {fix}"
        )
    return value


# Each engine's overrides of the defaults, by GPU type, are its adapter's ``calibration``. Links are
# read from the hardware catalog (all-reduce latency and bus bandwidth by group size,
# docs/performance.md#collectives).


def default_calibration(gpu_key: str, engine: str) -> Calibration:
    """The defaults for a GPU type and engine: the engine's overrides of Calibration's own."""
    adapter = ENGINES.get(engine)
    return Calibration().overridden(adapter.calibration.get(gpu_key, {}) if adapter else {})


def calibration_for(hw: Hardware, engine: str, overrides: Mapping[str, Any] | None = None) -> Calibration:
    base = default_calibration(hw.gpu.key, engine)
    return base.overridden(overrides or {}, "profile calibration") if overrides else base


def step_token_budget(engine: Engine, server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
    """The most tokens one step computes, which is how prompts are cut into chunks; 0 when
    chunked prefill is off (whole prompts)."""
    if not server.chunked_prefill:
        return 0
    return engine.step_tokens(server, hw, model)


@dataclass(frozen=True)
class ClosedLoop:
    """A closed loop of fixed-length requests in steady state (docs/performance.md#the-workload).

    ``running`` sequences are served at once and the other clients queue; a round is the time in
    which each running sequence finishes one request: its prompt, in chunks, and its decode steps.
    """

    concurrency: int
    running: int
    input_len: int
    output_len: int
    round_s: float
    prefill_s: float  # the round's time spent computing prompts
    ttft_s: float  # mean time to first token, queueing for a place in the batch included
    staggered: bool  # prompts cut into chunks that share steps with other sequences' decodes

    @property
    def tok_s(self) -> float:
        """Output tokens per second of the whole server."""
        return self.running * self.output_len / self.round_s if self.round_s > 0 else 0.0


@dataclass(frozen=True)
class StepBreakdown:
    """Where one decode step's time goes, on the busiest GPU (seconds)."""

    memory: float
    compute: float
    collectives: float
    floors: float  # per-layer and per-step runtime floors

    @property
    def total(self) -> float:
        return max(self.memory, self.compute) + self.collectives + self.floors


@dataclass(frozen=True)
class PerfModel:
    """Step times and throughput for one (model, box, engine, placement)."""

    model: ModelArch
    hardware: Hardware
    placement: Placement
    memory: MemoryEstimate
    calibration: Calibration
    max_running: int
    graph_max_bs: int = 512  # batches above this run without a CUDA graph; 0: eager mode
    step_tokens: int = 0  # the most tokens one step computes (step_token_budget); 0: whole prompts
    # Measured kernels for this layout (cockpit.core.speed); None: the analytic model predicts.
    kernels: KernelTimes | None = None
    analytic_note: str = ""  # why the analytic model stands in where kernels were asked for

    @property
    def source(self) -> SpeedSource:
        """Which backend and data predict this model's numbers."""
        if self.kernels is not None:
            return self.kernels.source
        return replace(ANALYTIC_SOURCE, note=self.analytic_note) if self.analytic_note else ANALYTIC_SOURCE

    # -- shape of the work ---------------------------------------------------------------------

    @property
    def independent_replicas(self) -> int:
        """Replicas that share nothing (SGLang plain DP, or DP of a dense model)."""
        p = self.placement
        if p.attn_replicas <= 1:
            return 1
        if self.model.moe is None or p.moe_ep * p.moe_tp < p.attn_tp * p.attn_replicas:
            return p.attn_replicas
        return 1

    @property
    def kv_limit(self) -> int:
        return self.memory.kv_tokens

    def effective_concurrency(self, concurrency: int, request_len: int) -> int:
        """Requests that run at once: capped by the engine and by KV cache capacity."""
        # A hybrid model's fixed state per request counts too (MemoryEstimate.requests_fitting).
        kv_cap = int(self.memory.requests_fitting(request_len)) if request_len else concurrency
        return max(1, min(concurrency, self.max_running, max(1, kv_cap)))

    # -- one decode step -----------------------------------------------------------------------

    def step(self, batch: int, context: float, with_lm_head: bool = True) -> StepBreakdown:
        """One decode step of one replica serving ``batch`` sequences at mean ``context`` tokens.

        For a pipeline it is one stage's step for a microbatch of ``batch``.
        """
        p, cal = self.placement, self.calibration
        replicas = max(1, p.attn_replicas // self.independent_replicas)  # attention groups sharing MoE
        local = math.ceil(batch / replicas)  # sequences on one attention replica
        stage = self._busiest_stage
        layers = int(stage["_stage_layers"])
        dense_bytes = stage["attention"] + stage["dense+shared"] + stage["other"]
        expert_bytes = stage["experts"] * self._coverage(batch) * self._moe_factor(batch)
        kv_bytes = local * context * self.memory.kv_bytes_per_token
        t_mem = (dense_bytes + expert_bytes + kv_bytes) / self._bandwidth + (
            self._lm_head_s if with_lm_head else 0.0
        )
        t_cmp = self._compute_time(batch, layers)
        t_coll = layers * self._layer_collectives(batch, local)
        launch = cal.t_layer_us * (cal.eager_layer_factor if local > self.graph_max_bs else 1.0)
        floors = layers * launch * 1e-6 + cal.t_sched_ms * 1e-3 / max(1, p.pp)
        return StepBreakdown(t_mem, t_cmp, t_coll, floors)

    def step_time_s(self, batch: int, context: float) -> float:
        """Seconds between tokens when ``batch`` sequences decode together on this server."""
        if batch <= 0:
            return 0.0
        p = self.placement
        floor = self.calibration.t_floor_ms.get(str(p.layout), 0.0) * 1e-3
        per_replica = math.ceil(batch / self.independent_replicas)
        if self.kernels is not None:
            return max(
                floor, self.kernels.decode_step_s(per_replica, context) * self.calibration.kernel_scale
            )
        if p.pp == 1:
            return max(floor, self.step(per_replica, context).total * self._residual(per_replica))
        # Stages run in series for one microbatch; with several in flight they overlap, less
        # than ideally (eta_pp). The last stage also reads lm_head for every microbatch.
        microbatches = min(per_replica, p.pp)
        micro = math.ceil(per_replica / microbatches)
        t_stage = self.step(micro, context, with_lm_head=False).total
        t_lm = self._lm_head_s
        hops = self._hops(micro)
        residual = self._residual(per_replica)
        if microbatches == 1:
            return max(floor, (p.pp * t_stage + t_lm + hops) * residual)
        return max(
            floor, (max(microbatches, p.pp) * (t_stage + t_lm) / self.calibration.eta_pp + hops) * residual
        )

    def decode_tok_s(self, concurrency: int, input_len: int = 1024, output_len: int = 1024) -> float:
        """Steady-state output tokens per second of the whole server at a closed-loop concurrency."""
        running = self.effective_concurrency(concurrency, input_len + output_len)
        context = input_len + output_len / 2
        return running / self.step_time_s(running, context)

    def closed_loop(self, concurrency: int, input_len: int, output_len: int) -> ClosedLoop:
        """``concurrency`` clients each sending its next request as soon as its last one ends,
        every request ``input_len`` prompt tokens and ``output_len`` output tokens, as a
        continuous batcher with a step token budget serves them (docs/performance.md#the-workload)."""
        out = max(1, output_len)
        running = self.effective_concurrency(concurrency, input_len + out)
        context = input_len + out / 2
        prompts = running * input_len  # prompt tokens of one round
        # Replicas (DP, DP attention) compute their own requests' prompts side by side.
        side_by_side = max(1, min(self.placement.attn_replicas, running))

        def prefill_s(tokens: int) -> float:
            return self.prefill_time_s(tokens) / side_by_side

        budget = self.step_tokens or max(1, prompts)
        staggered = running > 1 and prompts > budget
        if not staggered:
            # Waves: the round's prompts go first, in budget-sized steps with nothing to decode
            # beside them; the step that finishes them emits every first token, then the whole
            # batch decodes together, and finishes together.
            full, rest = divmod(prompts, budget)
            prefill = full * prefill_s(budget) + prefill_s(rest)
            step = self.step_time_s(running, context)
            round_s = prefill + out * step
            first_token = prefill + self.step_time_s(running, input_len)
        else:
            # Staggered: chunks finish a few prompts per step, those sequences finish that many
            # steps apart, and from then on every step that computes prompt tokens also decodes.
            chunk = max(1, budget - (running - 1))  # each decode takes one token of the budget
            prefill_steps = prompts / chunk
            steps = max(out, math.ceil(prefill_steps))  # per round; nearly all of them decode
            step = self.step_time_s(max(1, round(running * out / steps)), context)
            prefill = prefill_steps * prefill_s(chunk)
            round_s = prefill + steps * step
            # A request arriving at the end of a step waits for the step already scheduled (in a
            # burst of prefill steps, all but the first carry a chunk), then for its own chunks;
            # when prompts are the bottleneck, every step carries a chunk and it waits its turn.
            chunk_s = prefill_s(chunk)
            burst = math.ceil(prefill_steps)
            in_flight = step + (burst - 1) / burst * chunk_s
            own = math.ceil(input_len / chunk) * (step + chunk_s)
            first_token = max(in_flight + own, round_s - (out - 1) * (step + chunk_s))
        queueing = (concurrency - running) / running * round_s if concurrency > running else 0.0
        return ClosedLoop(
            concurrency=concurrency,
            running=running,
            input_len=input_len,
            output_len=out,
            round_s=round_s,
            prefill_s=prefill,
            ttft_s=queueing + first_token,
            staggered=staggered,
        )

    def workload_tok_s(self, concurrency: int, input_len: int, output_len: int) -> float:
        """Output tokens per second a closed-loop benchmark measures: prefill included."""
        return self.closed_loop(concurrency, input_len, output_len).tok_s

    def workload_ttft_s(self, concurrency: int, input_len: int, output_len: int) -> float:
        """Mean time to first token in that benchmark, queueing included."""
        return self.closed_loop(concurrency, input_len, output_len).ttft_s

    def prefill_time_s(self, tokens: int) -> float:
        """One prompt's prefill: compute-bound at length, bytes-bound when short."""
        if tokens <= 0:
            return 0.0
        if self.kernels is not None:
            return self.kernels.prefill_s(tokens) * self.calibration.kernel_scale
        p, hw, cal = self.placement, self.hardware, self.calibration
        flops = 2 * self._active_params_per_gpu() * tokens * p.pp  # stages run in series
        peak = hw.gpu.flops_tflops.get(self._compute_dtype(), hw.gpu.flops_tflops.get("bf16", 100.0)) * 1e12
        t_cmp = flops / (peak * cal.eta_f)
        t_mem = self.step(1, tokens / 2).memory * p.pp
        t_coll = 2 * self._all_reduce(p.attn_tp, tokens * self.model.hidden * 2) * self.model.layers
        floors = self.model.layers * cal.t_layer_us * 1e-6 + cal.t_prefill_ms * 1e-3
        return (max(t_cmp, t_mem) + t_coll) * cal.prefill_scale + floors

    def ttft_s(self, input_len: int, concurrency: int = 1) -> float:
        """Time to first token for a request arriving at a server running ``concurrency``."""
        running = self.effective_concurrency(concurrency, input_len)
        return self.prefill_time_s(input_len) + self.step_time_s(running, input_len)

    # -- pieces --------------------------------------------------------------------------------

    @cached_property
    def _busiest_stage(self) -> dict[str, float]:
        """One GPU of the heaviest pipeline stage, by byte group (fixed for a placement: computed once,
        since the simulated engine asks for a step time every decode step)."""
        return max(
            stage_weights(self.model, self.placement),
            key=lambda s: sum(v for k, v in s.items() if not k.startswith("_")),
        )

    @cached_property
    def _bandwidth(self) -> float:
        return self.hardware.gpu.mem_bw_gbs * 1e9 * self.calibration.eta_bw

    @cached_property
    def _lm_head_s(self) -> float:
        """Reading lm_head once a step (on the last stage)."""
        return self.model.class_bytes("lm_head") / self.placement.lm_head_tp / self._bandwidth

    def _moe_factor(self, batch: int) -> float:
        """How many times its bytes' time the routed experts' reads take at ``batch`` tokens:
        the sliced-GEMM penalty below and the box's ``moe_scale`` and ``moe_batch_exp``."""
        moe, cal = self.model.moe, self.calibration
        factor = 1 / self._moe_efficiency(batch)
        if moe is None or (cal.moe_scale == 1.0 and cal.moe_batch_exp == 0.0):
            return factor
        per_expert = max(1, batch) * moe.experts_per_token / moe.experts
        return factor * cal.moe_scale * per_expert ** (-cal.moe_batch_exp)

    def _residual(self, batch: int) -> float:
        """The fitted residual of a decode step at ``batch`` sequences (1 by default)."""
        exponent = self.calibration.step_batch_exp
        return (max(1, batch) / RESIDUAL_BATCH) ** exponent if exponent else 1.0

    def _moe_efficiency(self, batch: int) -> float:
        """Expert slices (MoE-TP >= 4) run less efficient GEMMs once each expert sees tokens.

        AIConfigurator's measured SGLang INT4 MoE tables (docs/performance.md#expert-coverage): TP8
        ahead of EP8 at 32 tokens, EP8 13-15% ahead from 256; the penalty grows with tokens per
        expert up to 2.
        """
        moe = self.model.moe
        if moe is None or self.placement.moe_tp < 4:
            return 1.0
        per_expert = batch * moe.experts_per_token / moe.experts
        return 1 - (1 - self.calibration.eta_moe_sliced) * min(1.0, per_expert / 2)

    def _coverage(self, batch: int) -> float:
        """Share of the busiest GPU's expert bytes one step reads (docs/performance.md#expert-coverage)."""
        moe = self.model.moe
        if moe is None:
            return 0.0
        e = self.placement.moe_ep
        touched = moe.experts * (1 - (1 - moe.experts_per_token / moe.experts) ** batch)
        if e <= 1:
            return touched / moe.experts
        mu = touched / e
        z = math.sqrt(2) * self.calibration.skew
        busiest = mu + z * math.sqrt(mu * math.log(e))
        return min(1.0, busiest / (moe.experts / e))

    def _layer_collectives(self, batch: int, local: int) -> float:
        p, h = self.placement, self.model.hidden
        t = 0.0
        if p.attn_tp > 1:
            t += 2 * self._all_reduce(p.attn_tp, local * h * 2)
        moe_group = p.moe_ep * p.moe_tp
        if self.model.moe and moe_group > p.attn_tp:
            # DP attention: tokens are gathered to the MoE group and scattered back.
            t += 2 * self._all_reduce(moe_group, batch * h * 2)
        return t

    def _all_reduce(self, n: int, nbytes: float) -> float:
        if n <= 1:
            return 0.0
        if self._spans_nodes(n):
            return self._all_reduce_across_nodes(n, nbytes)
        link = self.hardware.link
        alpha = link.allreduce_latency(n) * 1e-6 * self.calibration.ar_latency_scale
        return alpha + nbytes / (link.allreduce_busbw(n) * 1e9 * self.calibration.ar_bw_scale)

    def _hop(self, batch: int) -> float:
        cal = self.calibration
        return cal.alpha_p2p_us * 1e-6 + batch * self.model.hidden * 2 / (cal.bw_p2p_gbs * 1e9)

    # -- across nodes (cockpit.core.cluster) -----------------------------------------------------
    # A group whose ranks sit on several nodes meets the network between them (hw.inter_link, per
    # GPU: each GPU's share of its node's NICs). Ranks lie on the nodes in order, a run of
    # ``node_gpus`` each (engines/nodes.py), so a group of n consecutive ranks spans nodes when it
    # is wider than a node's run or does not tile it.

    def _spans_nodes(self, n: int) -> bool:
        p = self.placement
        return (
            p.nodes > 1 and self.hardware.inter_link is not None and (n > p.node_gpus or p.node_gpus % n != 0)
        )

    def _all_reduce_across_nodes(self, n: int, nbytes: float) -> float:
        """A group of n ranks, ``local`` on each of k nodes, reduces in two levels, as NCCL's
        rings do when each ring crosses the nodes through its own NIC: a reduce-scatter inside the
        node, an all-reduce of each GPU's 1/local shard across the k nodes over that GPU's share of
        the NICs (a ring's 2(k-1)/k of the bytes, the bus bandwidth of nccl-tests,
        https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md), and an all-gather
        inside the node. Each level pays its latency: at decode's small messages the network's
        latency, twice a layer, is what TP across nodes costs. The same form stands for the MoE
        group's exchange across nodes: vLLM's default all2all backend is an all-gather then a
        reduce-scatter (`all2all_backend = "allgather_reducescatter"`, vllm/config/parallel.py),
        the bytes of one all-reduce, and SGLang's DP attention gathers and scatters alike."""
        link, inside, cal = self.hardware.inter_link, self.hardware.link, self.calibration
        assert link is not None
        local = max(1, min(n, self.placement.node_gpus))
        k = math.ceil(n / local)
        t_inside = 0.0
        if local > 1:  # reduce-scatter and all-gather: an all-reduce's bytes and two latencies
            t_inside = 2 * inside.allreduce_latency(local) * 1e-6 * cal.ar_latency_scale + (
                2 * (local - 1) / local * nbytes / (inside.allreduce_busbw(local) * 1e9 * cal.ar_bw_scale)
            )
        t_across = link.latency_us * 1e-6 + 2 * (k - 1) / k * (nbytes / local) / (link.bandwidth_gbs * 1e9)
        return t_inside + t_across

    def _hops(self, batch: int) -> float:
        """Every pipeline boundary's send of a microbatch's activations (hidden x 2 bytes a token):
        on one node at the box's point-to-point figures, between nodes over the network, no faster
        than inside a node, with its latency added."""
        p = self.placement
        crossing = 0
        if p.nodes > 1 and self.hardware.inter_link is not None and p.node_gpus:
            # a stage is the layout's TP group (SGLang's DP attention lives inside it)
            node_of = [s * p.layout.tp // p.node_gpus for s in range(p.pp)]
            crossing = sum(1 for a, b in zip(node_of, node_of[1:]) if a != b)
        inside = (p.pp - 1 - crossing) * self._hop(batch)
        if not crossing:
            return inside
        link, cal = self.hardware.inter_link, self.calibration
        assert link is not None
        bandwidth = min(cal.bw_p2p_gbs, link.bandwidth_gbs) * 1e9
        across = (cal.alpha_p2p_us + link.latency_us) * 1e-6 + batch * self.model.hidden * 2 / bandwidth
        return inside + crossing * across

    def _active_params_per_gpu(self) -> float:
        p = self.placement
        gpus_per_replica = max(1, p.attn_tp * p.pp)
        return self.model.active_params / gpus_per_replica

    def _compute_dtype(self) -> str:
        method = self.model.quant.method
        return "fp8" if method.startswith("fp8") else ("fp4" if method in ("nvfp4", "mxfp4") else "bf16")

    def _compute_time(self, batch: int, layers: int) -> float:
        peak = self.hardware.gpu.flops_tflops.get(
            self._compute_dtype()
        ) or self.hardware.gpu.flops_tflops.get("bf16", 100.0)
        flops = 2 * self._active_params_per_gpu() * batch * layers / self.model.layers
        return flops / (peak * 1e12 * self.calibration.eta_f)


def perf_model(
    model: ModelArch,
    hardware: Hardware,
    engine: Engine,
    placement: Placement,
    memory: MemoryEstimate,
    calibration: Calibration | None = None,
    max_running: int | None = None,
    graph_max_bs: int = 512,
    step_tokens: int = 0,
) -> PerfModel:
    cal = calibration or calibration_for(hardware, engine.name)
    cap = max_running or cal.max_running or engine.default_max_running(hardware)
    if memory.state_slots:  # SGLang admits no more requests than its state pool has slots for
        cap = min(cap, memory.state_slots)
    return PerfModel(model, hardware, placement, memory, cal, cap, graph_max_bs, step_tokens)


def for_verdict(setup: Setup, verdict: Verdict) -> PerfModel | None:
    """The performance model of a planned layout, or None when it cannot start: measured kernels
    where the setup's speed backend covers the layout, else the analytic model."""
    if verdict.placement is None or verdict.memory is None or verdict.verdict == FAILS:
        return None
    engine = setup.engine
    # The profile's own overrides win over what the box taught (cockpit.core.fitting).
    cal = calibration_for(setup.hardware, engine.name, {**setup.learned.calibration, **setup.calibration})
    server = verdict.server or knob_server_args(setup, verdict.layout)
    model = perf_model(
        setup.model,
        setup.hardware,
        engine,
        verdict.placement,
        verdict.memory,
        cal,
        server.max_num_seqs,
        engine.graph_max_bs(server, setup.hardware, setup.model, verdict.placement),
        step_token_budget(engine, server, setup.hardware, setup.model),
    )
    if setup.speed is None:
        return model
    if verdict.placement.nodes > 1:
        # The measured kernel tables time one box's collectives (NVLink); across nodes the
        # network's part is the analytic model's.
        return replace(
            model,
            analytic_note=f"measured kernels cover one node; {verdict.layout} spans {verdict.placement.nodes} nodes",
        )
    kernels = setup.speed.kernels(setup.model, setup.hardware, engine.name, verdict.placement)
    if isinstance(kernels, SpeedSource):
        return replace(model, analytic_note=kernels.note)
    return replace(model, kernels=kernels)


def predict_tok_s(
    setup: Setup, verdict: Verdict, levels: Sequence[int], input_len: int, output_len: int
) -> dict[int, float]:
    return with_prediction(setup, verdict, levels, input_len, output_len).predicted_tok_s


def with_prediction(
    setup: Setup, verdict: Verdict, levels: Sequence[int], input_len: int, output_len: int
) -> Verdict:
    """The verdict with its predicted tok/s at ``levels`` and the source that predicted them, from
    one performance model (no prediction for a layout that cannot start)."""
    model = for_verdict(setup, verdict)
    if model is None:
        return replace(verdict, predicted_tok_s={}, predicted_by=None)
    tok_s = {c: model.workload_tok_s(c, input_len, output_len) for c in levels}
    return replace(verdict, predicted_tok_s=tok_s, predicted_by=model.source)
