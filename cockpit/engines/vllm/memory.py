"""vLLM's memory rules: what it takes of each GPU, how it sizes the KV cache and a hybrid model's
block pool, and the words it refuses a layout in (docs/memory.md).

KV = total x --gpu-memory-utilization - weights - what the profile run keeps
(Worker.determine_available_memory, vllm/v1/worker/gpu_worker.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cockpit.core.hardware import Hardware
from cockpit.core.model import GATED_DELTANET, SLIDING, LinearAttention, ModelArch
from cockpit.engines.base import Placement, Rule, ServerArgs
from cockpit.engines.estimate import CachePool, GiB, MemoryBudget, MemoryEstimate, StateArgs, StateMemory
from cockpit.engines.memory import (
    DSA_FAMILIES,
    MEASURED_COLLECTIVE_LINKS,
    STATE_DTYPE_BYTES,
    collective_group,
    longer_than_trained,
    max_model_len,
    no_kv_memory,
    round_down_tokens,
)
from cockpit.engines.options import version_key

# The performance model's defaults on vLLM, by GPU type (docs/performance.md#calibration).
CALIBRATION: dict[str, dict[str, Any]] = {
    # SM120 on PCIe: fitted to the reference measurements, lower achieved bandwidth and slower
    # launches than Hopper.
    "rtx-pro-6000": {"eta_bw": 0.62, "t_layer_us": 70.0, "t_sched_ms": 2.0},
    "h100": {"t_layer_us": 30.0},
    "h200": {"t_layer_us": 30.0},
    "b200": {"t_layer_us": 25.0},
    # vLLM's CPU build (eager) on a 2-core guest, the real-engine tier's tiny MoE: a step is
    # Python's scheduling and sampling more than bytes: 8-11 ms a token at C=1 (ITL p50), 88 tok/s
    # measured where these give 81; C=4 measured 225-230 where these give 320 (the client shares
    # the two cores). A box learns its own (docs/performance.md#what-a-box-teaches).
    "cpu": {"t_layer_us": 1000.0, "t_sched_ms": 6.0},
}


def _at_least(version: str, since: tuple[int, ...]) -> bool:
    return version_key(version) >= since


# ---------------------------------------------------------------------------------------------
# Batch defaults and CUDA graphs

DEFAULT_GRAPH_MAX_BS = 512  # max_cudagraph_capture_size's default: min(2 x max_num_seqs, 512)
GPT_OSS_ARCHITECTURES = frozenset({"GptOssForCausalLM"})  # captures up to 1024, OAI MXFP4 kernels


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


def batched_tokens(server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
    """The most tokens one vLLM forward pass runs, which sets the activation peak: the chunk size
    (its defaults by card in vllm/engine/arg_utils.py, get_batch_defaults); without chunked
    prefill a whole prompt of the longest length."""
    if not server.chunked_prefill:
        return max(server.max_num_batched_tokens or 0, max_model_len(model, server))
    if server.max_num_batched_tokens:
        return server.max_num_batched_tokens
    if hw.memory_gib >= 160:
        return 16384
    return 8192 if _large_card(hw) else 2048


def max_num_seqs(server: ServerArgs, hw: Hardware) -> int:
    """--max-num-seqs, or vLLM's default: 1024 on cards of 70 GB and more except the A100, 256 below
    (get_batch_defaults, vllm/engine/arg_utils.py)."""
    if server.max_num_seqs:
        return server.max_num_seqs
    return 1024 if _large_card(hw) else 256


def _large_card(hw: Hardware) -> bool:
    """vLLM's larger batch defaults: 70 GB and more, but not an A100 (get_batch_defaults)."""
    return hw.memory_gib >= 70 and hw.gpu.key != "a100"


# ---------------------------------------------------------------------------------------------
# What vLLM keeps besides weights (docs/memory.md#what-the-engine-keeps-besides-weights)

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
# vLLM subtracts its CUDA graph estimate before sizing the KV cache since 0.21
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, 1 by default in vllm/envs.py; "default since v0.21.0"
# in Worker.determine_available_memory's log line).
GRAPHS_BEFORE_KV_SINCE = (0, 21)


def capture_sizes(largest: int) -> int:
    """How many batch sizes vLLM captures: 1, 2, 4, every 8 to 248, every 16 from 256
    (vllm/config/vllm.py, _set_cudagraph_sizes)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return len([size for size in sizes if size <= largest])


def graph_gib(model: ModelArch, server: ServerArgs, hw: Hardware, layers: int) -> float:
    """vLLM's estimate of its CUDA graphs on one GPU of a stage of ``layers`` layers (0 in eager mode)."""
    largest = graph_max_bs(server, hw, model)
    if not largest:
        return 0.0
    return GRAPH_BASE_GIB + GRAPH_LAYER_GIB * layers * capture_sizes(largest) / GRAPH_DEFAULT_SIZES


def non_torch_gib(placement: Placement, hw: Hardware) -> float:
    """What grows outside torch after vLLM's snapshot, on one GPU (NON_TORCH_* above)."""
    if not collective_group(placement):
        return NON_TORCH_SINGLE_GIB
    return NON_TORCH_COLLECTIVE_GIB if hw.gpu.link in MEASURED_COLLECTIVE_LINKS else NON_TORCH_PCIE_GIB


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


def activation_gib(
    model: ModelArch, version: str, placement: Placement, server: ServerArgs, hw: Hardware, last_stage: bool
) -> float:
    """vLLM's profile run (GPUModelRunner.profile_run, one forward of max_num_batched_tokens tokens,
    then the sampler on min(max_num_seqs, tokens) dummy requests on the last pipeline stage): the MoE
    workspace it keeps plus the larger of the two transients."""
    tokens = batched_tokens(server, hw, model)
    oai_triton = mxfp4_backend(model, hw, version) == "triton"
    workspace = moe_workspace_bytes(model, placement, tokens, oai_triton)
    transient = forward_peak_bytes(model, placement, tokens)
    if last_stage:
        requests = min(max_num_seqs(server, hw), tokens)
        sorting = not _at_least(version, TRITON_TOP_K_TOP_P_SINCE)
        transient = max(transient, sampler_peak_bytes(model, requests, tokens, sorting))
    return (workspace + transient) / GiB


@dataclass(frozen=True)
class Kept:
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


def kept(
    model: ModelArch,
    version: str,
    placement: Placement,
    server: ServerArgs,
    hw: Hardware,
    layers: int,
    last_stage: bool,
) -> Kept:
    """The profile run's peak, non-torch growth and CUDA graphs on a GPU of a stage of ``layers`` layers."""
    return Kept(
        activation_gib=activation_gib(model, version, placement, server, hw, last_stage),
        non_torch_gib=non_torch_gib(placement, hw),
        graph_gib=graph_gib(model, server, hw, layers),
        graphs_before_kv=_at_least(version, GRAPHS_BEFORE_KV_SINCE),
    )


def memory_budget(
    model: ModelArch,
    version: str,
    placement: Placement,
    server: ServerArgs,
    hw: Hardware,
    *,
    fraction: float,
    weights_gib: float,
    layers: int,
    last_stage: bool,
    reserve_offset_gib: float,
) -> MemoryBudget:
    """KV = total x --gpu-memory-utilization - weights - what the profile keeps
    (Worker.determine_available_memory, vllm/v1/worker/gpu_worker.py); ``reserve_offset_gib``: what
    a box measured beyond the modelled reserve."""
    budget = hw.memory_gib * fraction
    engine_kept = kept(model, version, placement, server, hw, layers, last_stage)
    reserve = engine_kept.counted_gib + reserve_offset_gib
    kv_budget = budget - weights_gib - reserve
    if server.kv_cache_memory_bytes is not None:
        # --kv-cache-memory-bytes is the KV cache outright: no share of the card, no profiling
        # (gpu_worker.py and cpu_worker.py: determine_available_memory); what would be left
        # over the card after it is an OOM, not a smaller cache.
        kv_budget = server.kv_cache_memory_bytes / GiB
        budget = weights_gib + reserve + kv_budget
    return MemoryBudget(
        budget_gib=budget,
        kv_budget_gib=kv_budget,
        reserve_gib=reserve,
        activation_gib=engine_kept.activation_gib,
        graph_gib=engine_kept.graph_gib,
        non_torch_gib=engine_kept.non_torch_gib,
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


def mxfp4_backend(model: ModelArch, hw: Hardware, version: str) -> str:
    """Which kernels vLLM ``version`` runs a checkpoint's MXFP4 experts with: "" (not MXFP4),
    "trtllm" (data-center Blackwell), "cutlass" (gpt-oss on consumer Blackwell), "triton" (gpt-oss
    on Hopper, the OAI Triton kernels), "humming" (other MXFP4 models on Hopper from vLLM 0.33,
    where Humming is moved ahead of Marlin: prioritize_humming, vllm/model_executor/layers/
    quantization/utils/humming/priority.py) or "marlin" (weight-only: the rest, and Hopper before
    vLLM 0.11). In the order of _get_priority_backends_for_gpt_oss and _get_priority_backends
    (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py)."""
    if model.quant.method != "mxfp4":
        return ""
    major = hw.gpu.capability[0]
    gpt_oss = model.architecture in GPT_OSS_ARCHITECTURES
    if major == 10:
        return "trtllm"
    if major >= 12 and gpt_oss:
        return "cutlass"
    if major == 9 and gpt_oss and _at_least(version, MARLIN_BEFORE):
        return "triton"
    if major == 9 and not gpt_oss and _at_least(version, HUMMING_SINCE):
        return "humming"
    return "marlin"


def _round_up(value: float, multiple: int) -> float:
    return math.ceil(value / multiple) * multiple


def mxfp4_expert_factor(model: ModelArch, hw: Hardware, version: str, moe_tp: int) -> float:
    """Loaded over checkpoint bytes of MXFP4 routed experts: the kernels pad each expert's hidden
    size and its width per GPU (mxfp4_round_up_hidden_size_and_intermediate_size, oracle/mxfp4.py):
    Marlin and TRT-LLM to 256 and 128, FlashInfer CUTLASS to 128 and 128, Triton and Humming (the
    function's last branch) the width to 64. 1.0 for anything else."""
    backend = mxfp4_backend(model, hw, version)
    if not backend or model.moe is None:
        return 1.0
    hidden_to, width_to = {"trtllm": (256, 128), "marlin": (256, 128), "cutlass": (128, 128)}.get(
        backend, (1, 64)
    )
    if backend == "triton" and not _at_least(version, TRITON_PADS_HIDDEN_BEFORE):
        hidden_to = 256
    hidden, width = model.hidden, model.moe.expert_intermediate / moe_tp
    return _round_up(hidden, hidden_to) * _round_up(width, width_to) / (hidden * width)


# ---------------------------------------------------------------------------------------------
# The KV cache and a hybrid model's one block pool (docs/placement.md#hybrid-attention-qwen3-next)

# vLLM's fp8_ds_mla row: 512 fp8 latent values, 4 float32 scales and 64 bf16 RoPE values, 656
# bytes for the 576 values of one token (MLAAttention.get_kv_cache_spec,
# vllm/model_executor/layers/attention/mla_attention.py).
FP8_DS_MLA_BYTES = 656 / 576
# vLLM's default block size (CacheConfig.DEFAULT_BLOCK_SIZE, vllm/config/cache.py), which is also
# FlashAttention's kernel block (MultipleOf(16), vllm/v1/attention/backends/flash_attn.py).
BLOCK_ALIGNMENT = 16
# FlashInfer's GDN prefill checkpoints land every 64 tokens, and with prefix caching vLLM makes
# blocks multiples of that (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, vllm/v1/attention/backends/gdn_attn.py).
GDN_CHECKPOINT_ALIGNMENT = 64


def cache_dtype_bytes(model: ModelArch, server: ServerArgs, hw: Hardware) -> float:
    """Bytes per cached value as vLLM picks them, which for the sparse-attention families is not
    always what --kv-cache-dtype says: any quantized cache of a DSA model becomes fp8_ds_mla
    (_canonicalize_sparse_mla_kv_cache_dtype, mla_attention.py); GLM-5's "auto" is fp8 on
    Blackwell (GlmMoeDsaForCausalLM.verify_and_update_config, vllm/model_executor/models/config.py);
    DeepSeek-V4's "auto" is fp8_ds_mla (_resolve_dsv4_kv_cache_dtype, vllm/models/deepseek_v4/attention.py)."""
    asked = server.kv_cache_dtype.lower()
    chosen = server.kv_bytes(2.0)
    if model.family == "deepseek-v4" and asked == "auto":
        return FP8_DS_MLA_BYTES
    if model.family == "glm-moe-dsa" and asked == "auto" and hw.gpu.capability[0] == 10:
        return FP8_DS_MLA_BYTES
    if model.family in DSA_FAMILIES and chosen < 2:
        return FP8_DS_MLA_BYTES
    return chosen


def gdn_checkpoints(linear: LinearAttention, hw: Hardware, state: StateArgs) -> bool:
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


def concurrent_batches(placement: Placement) -> int:
    """Batches vLLM keeps in flight at once: 2 with async scheduling (its default) on one stage,
    one per stage with pipeline parallelism (VllmConfig.max_concurrent_batches, vllm/config/vllm.py)."""
    return max(2, placement.pp)


def hybrid_pool(
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
    alignment = max(BLOCK_ALIGNMENT, state.block_size or 0)
    state_page = 0.0
    checkpoints = False
    if linear is not None:
        conv = STATE_DTYPE_BYTES.get(state.conv_dtype, linear.dtype_bytes)  # "auto": the model's
        # "auto": the model's own state dtype where it names one, else the convolution's
        ssm = STATE_DTYPE_BYTES.get(state.ssm_dtype, linear.ssm_dtype_bytes or conv)
        state_page = linear.state_bytes(placement.attn_tp, conv, ssm)
        checkpoints = gdn_checkpoints(linear, hw, state)
        if checkpoints:
            alignment = math.lcm(alignment, GDN_CHECKPOINT_ALIGNMENT)
        block = alignment * math.ceil(state_page / (alignment * attention_page))
        block = BLOCK_ALIGNMENT * math.ceil(block / BLOCK_ALIGNMENT)
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


def cache_pool(
    model: ModelArch,
    hw: Hardware,
    placement: Placement,
    server: ServerArgs,
    state: StateArgs,
    kv_dtype: float,
    kv_budget_gib: float,
    layers: int,
) -> CachePool:
    """The KV cache of a stage of ``layers`` layers on one GPU; a model with more than one kind of
    layer shares one block pool among them (``hybrid_pool``)."""
    kv_token = model.kv_bytes_per_token(kv_dtype, placement.attn_tp, layers=layers)
    if model.linear_attention is None and model.windowed is None:
        return CachePool(kv_token, kv_budget_gib)
    in_flight = concurrent_batches(placement) * batched_tokens(server, hw, model)
    pool = hybrid_pool(model, hw, placement, kv_token, state, kv_budget_gib, layers, in_flight)
    return CachePool(kv_token, kv_budget_gib, pool)


# ---------------------------------------------------------------------------------------------
# Refusals, in vLLM's words

# Raised while ModelConfig (a pydantic dataclass) is built: wrapped (vllm/config/model.py
# _get_and_verify_max_len).
LONG_CONTEXT_MESSAGE = (
    "Value error, User-specified max_model_len ({asked}) is greater than the derived max_model_len "
    "(max_position_embeddings={trained} or model_max_length=None in model's config.json). "
    "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
    "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
    "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
    "array out-of-bounds error."
)
NO_KV_MESSAGE = (  # vllm/v1/core/kv_cache_planning.py
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
    "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
    "details."
)


def context_length_refusal(model: ModelArch, server: ServerArgs) -> Rule | None:
    """A --max-model-len above the model's own, refused while ModelConfig is built."""
    message = LONG_CONTEXT_MESSAGE.format(asked=server.max_model_len, trained=model.max_context)
    return longer_than_trained(model, server, message, "--max-model-len")


def memory_refusal(
    model: ModelArch, placement: Placement, memory: MemoryEstimate, server: ServerArgs
) -> Rule | None:
    """No room for the cache blocks, or for one request of the context length."""
    if memory.kv_budget_gib <= 0:
        return no_kv_memory(NO_KV_MESSAGE, memory)
    length = max_model_len(model, server)
    state = memory.state
    if state is not None and state.block_tokens:
        return state_max_len_refusal(memory, state, length)
    per_replica_tokens = memory.kv_tokens // max(1, placement.attn_replicas)
    if per_replica_tokens >= length:
        return None
    needed = length * memory.kv_bytes_per_token / GiB
    return Rule(
        "kv-max-len",
        f"ValueError: To serve at least one request with the model's max seq len ({length}), "
        f"({round(needed, 2)} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({round(memory.kv_budget_gib, 2)} GiB). Based on the available memory, the estimated maximum "
        f"model length is {per_replica_tokens}. Try increasing `gpu_memory_utilization` (which also "
        "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
        "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        f"set --max-model-len {round_down_tokens(per_replica_tokens)} or less in the profile's server args",
    )


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


def state_max_len_refusal(memory: MemoryEstimate, state: StateMemory, length: int) -> Rule | None:
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
    return Rule(
        "kv-max-len",
        f"ValueError: To serve at least one request with the model's max seq len ({length}), "
        f"({round(needed_blocks * state.block_bytes / GiB, 2)} GiB KV cache is needed, which is larger than "
        f"the available KV cache memory ({round(available, 2)} GiB). {estimated}Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        f"a request of {length:,} tokens needs {needed_blocks:,} blocks of {state.block_tokens} tokens "
        f"(with {state.state_blocks} for its linear-attention state), the pool has {usable:,}: "
        f"set --max-model-len {round_down_tokens(longest)} or less in the profile's server args",
    )
