"""SGLang's memory rules: the static share it derives, how it sizes the KV pool and a hybrid
model's state pool, and the words it refuses a layout in (docs/memory.md).

pool = --mem-fraction-static x (free memory before the weights load) - weights; activations and
CUDA graphs live in the rest (KVCacheConfigurator._profile_available_bytes,
sglang/srt/mem_cache/kv_cache_configurator.py).
"""

from __future__ import annotations

import math
from typing import Any

from cockpit.core.hardware import Hardware
from cockpit.core.model import ModelArch
from cockpit.engines.base import Placement, Rule, ServerArgs
from cockpit.engines.estimate import CachePool, GiB, MemoryBudget, MemoryEstimate, StateArgs, StateMemory
from cockpit.engines.memory import (
    DSA_FAMILIES,
    MEASURED_COLLECTIVE_LINKS,
    STATE_DTYPE_BYTES,
    collective_group,
    longer_than_trained,
    no_kv_memory,
)

# The performance model's defaults on SGLang, by GPU type (docs/performance.md#calibration).
CALIBRATION: dict[str, dict[str, Any]] = {
    # SM120 on PCIe: fitted to the reference measurements.
    "rtx-pro-6000": {"eta_bw": 0.78, "t_layer_us": 60.0, "t_sched_ms": 2.0, "eta_moe_sliced": 0.7},
    "h100": {"t_layer_us": 30.0},
    "h200": {"t_layer_us": 30.0},
    "b200": {"t_layer_us": 25.0},
}


# ---------------------------------------------------------------------------------------------
# The static memory share SGLang derives when --mem-fraction-static is absent
# (handle_gpu_memory_settings and reserve_for_graph_mb, sglang/srt/arg_groups/memory_hook.py).

# GPU memory below (MiB): (chunked prefill size, decode CUDA-graph max batch at TP < 4, at TP >= 4)
_GPU_TIERS = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 4096, 48, 160),
    (60 * 1024, 4096, 32, 160),
    (90 * 1024, 8192, 256, 512),
    (160 * 1024, 8192, 256, 512),
)
_LARGEST_TIER = (16384, 512, 512)
UNKNOWN_GPU_FRACTION = 0.95  # SGLang's share when it cannot read the GPU's memory
MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens default: the activation size without chunking


def gpu_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked prefill size, decode CUDA-graph max batch) SGLang picks for a GPU of this size."""
    tier = next((t[1:] for t in _GPU_TIERS if gpu_mib < t[0]), _LARGEST_TIER)
    chunk, small_tp_bs, large_tp_bs = tier
    return chunk, small_tp_bs if tp < 4 else large_tp_bs


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """generate_prefill_cuda_graph_batch_sizes (sglang/srt/arg_groups/cuda_graph_hook.py)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [s for s in sizes if s <= max_bs]


def decode_graph_max_bs(server: ServerArgs, gpu_mib: float, tp: int) -> int:
    """SGLang's largest decode batch captured in a CUDA graph: --cuda-graph-max-bs-decode, else its
    default for the card and TP (gpu_defaults), no more than --max-running-requests."""
    _, default_bs = gpu_defaults(gpu_mib, tp)
    decode_bs = server.cuda_graph_max_bs or default_bs
    if server.cuda_graph_max_bs is None and server.max_num_seqs is not None:
        decode_bs = min(decode_bs, server.max_num_seqs)
    return decode_bs


def derived_mem_fraction(
    server: ServerArgs, gpu_mib: float, *, tp: int, pp: int, attn_dp: int, mla: bool, model_name: str = ""
) -> float:
    """round((GPU - reserve) / GPU, 3), the reserve in MiB being 512 + 1.5 per activation token +
    1 GiB per 8 GPUs of TP x PP + the CUDA graphs' share, at least 10 GiB on GPUs above 60 GiB.

    Not modelled: multimodal models (SGLang lowers the share by 5-20% for the vision tower and turns
    prefill graphs off unless --language-only), disaggregated serving, DeepEP and post-capture sizing."""
    if gpu_mib <= 0:
        return UNKNOWN_GPU_FRACTION
    default_chunk, _ = gpu_defaults(gpu_mib, tp)
    chunk = (server.max_num_batched_tokens or default_chunk) if server.chunked_prefill else -1
    decode_bs = decode_graph_max_bs(server, gpu_mib, tp)
    activation_tokens = max(chunk if chunk > 0 else MAX_PREFILL_TOKENS, 2048)
    reserve = 512 + activation_tokens * 1.5 + tp * pp / 8 * 1024
    reserve += _graph_reserve_mib(
        server, decode_bs, chunk, pp=pp, attn_dp=attn_dp, mla=mla, model_name=model_name
    )
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    return round((gpu_mib - reserve) / gpu_mib, 3)


def _graph_reserve_mib(
    server: ServerArgs, decode_bs: int, chunk: int, *, pp: int, attn_dp: int, mla: bool, model_name: str
) -> float:
    """reserve_for_graph_mb: decode graphs 2 MiB per batch slot, DP attention's padding, and the
    breakable prefill graphs (on by default on CUDA, off under PP: apply_cuda_graph_compatibility)."""
    reserve = 0.0
    if server.cuda_graphs:
        reserve += decode_bs * 2
    if attn_dp > 1:
        reserve += decode_bs * attn_dp * 3
        if decode_bs > 300:
            reserve += decode_bs * attn_dp * 1.5
    if server.cuda_graphs and pp == 1:
        if mla:
            reserve += 1.5 * 1024
        else:
            max_bs = chunk
            if server.max_total_tokens is not None:
                max_bs = min(max_bs, server.max_total_tokens)
            if "llama-2" in model_name.lower():
                max_bs = min(max_bs, 4096)
            reserve += len(prefill_graph_sizes(max_bs)) * 8
    return reserve


def step_tokens(server: ServerArgs, hw: Hardware) -> int:
    """--chunked-prefill-size, else its default by GPU memory (as the memory share reads it; not by
    TP: under DP attention each rank takes a share of it, the step's total stays the same)."""
    chunk, _ = gpu_defaults(hw.smi_total_gib * 1024, tp=1)
    return server.max_num_batched_tokens or chunk


# ---------------------------------------------------------------------------------------------
# The pool

# SGLang sizes its pool as mem_fraction_static x (free memory before the weights load) - weights
# (ModelRunner: rest_memory = available - pre_model_load_memory x (1 - mem_fraction_static),
# sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes). Before the load the CUDA
# context, and with TP the communicators, are already taken: public H100 logs show 0.6-0.7 GiB on
# one GPU ("Load weight begin. avail mem=78.48 GB" of about 79.2); 2.2 GiB at TP 4 on H100 fits the
# public Qwen3-235B log (docs/memory.md#public-logs).
PRELOAD_SINGLE_GIB = 0.7
PRELOAD_COLLECTIVE_GIB = 2.2  # H100 NVLink, TP 4
PRELOAD_PCIE_GIB = 1.2  # not measured (an estimate)


def preload_gib(placement: Placement, hw: Hardware) -> float:
    """What is gone from a GPU before SGLang loads the weights (PRELOAD_* above)."""
    if not collective_group(placement):
        return PRELOAD_SINGLE_GIB
    return PRELOAD_COLLECTIVE_GIB if hw.gpu.link in MEASURED_COLLECTIVE_LINKS else PRELOAD_PCIE_GIB


def memory_budget(
    placement: Placement, hw: Hardware, *, fraction: float, weights_gib: float, reserve_offset_gib: float
) -> MemoryBudget:
    """pool = fraction x (free before the load) - weights; activations and graphs live in the rest.
    ``reserve_offset_gib``: what a box measured beyond the modelled reserve."""
    capacity = hw.memory_gib
    kv_budget = fraction * (capacity - preload_gib(placement, hw)) - weights_gib
    kv_budget -= reserve_offset_gib
    return MemoryBudget(
        budget_gib=capacity * fraction,
        kv_budget_gib=kv_budget,
        reserve_gib=capacity - weights_gib - kv_budget,
    )


def cache_dtype_bytes(model: ModelArch, server: ServerArgs, hw: Hardware) -> float:
    """Bytes per cached value as SGLang picks them: --kv-cache-dtype's, except that "auto" for a
    DSA model is fp8_e4m3 on SM 10 and newer, bf16 below (_dsa_kv_cache_dtype_default,
    sglang/srt/arg_groups/overrides.py)."""
    asked = server.kv_cache_dtype.lower()
    if model.family in DSA_FAMILIES and asked == "auto" and hw.gpu.capability[0] >= 10:
        return 1.0
    return server.kv_bytes(2.0)


# Architectures SGLang gives a sliding-window pool beside the full one (is_hybrid_swa_model,
# sglang/srt/configs/model_config.py); others, Gemma 3 among them, keep every layer's KV whole.
HYBRID_SWA_ARCHITECTURES = frozenset(
    {"GptOssForCausalLM", "Llama4ForConditionalGeneration", "DeepseekV4ForCausalLM"}
)
# --swa-full-tokens-ratio's default: SWA tokens per full-attention token
# (sglang/srt/arg_groups/fields/schedule.py).
SWA_FULL_TOKENS_RATIO = 0.8


def swa_pool(model: ModelArch) -> bool:
    """Whether SGLang keeps the model's windowed layers in a pool of their own."""
    return model.windowed is not None and model.architecture in HYBRID_SWA_ARCHITECTURES


def swa_cell_bytes(model: ModelArch, kv_dtype: float, attn_tp: int, layers: int, server: ServerArgs) -> float:
    """Bytes SGLang budgets per token of its full pool when windowed layers have a pool of their
    own: the full layers' KV plus the ratio's share of the windowed layers' (cell size of the
    hybrid case, _recompute_cell_size, sglang/srt/model_executor/pool_configurator.py)."""
    per_layer = model.kv_bytes_per_layer_token(kv_dtype, attn_tp)
    full = model.full_attention_layers(layers) * (per_layer + model.index_bytes_per_token)
    ratio = server.swa_full_tokens_ratio or SWA_FULL_TOKENS_RATIO
    return full + ratio * model.windowed_layers(layers) * per_layer


# State slots per running request with the radix cache on, before the extra buffer's
# (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, sglang/srt/mem_cache/kv_cache_configurator.py).
SLOTS_PER_REQUEST = 3


def slots_per_request(state: StateArgs, pp: int) -> int:
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
    return SLOTS_PER_REQUEST + tracking


def state_pool(
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
        slots_per_request=slots_per_request(state, placement.pp),
    )


def cache_pool(
    model: ModelArch,
    placement: Placement,
    server: ServerArgs,
    state: StateArgs,
    kv_dtype: float,
    kv_budget_gib: float,
    layers: int,
) -> CachePool:
    """The KV pool of a stage of ``layers`` layers on one GPU: its cell counts the windowed layers
    at the SWA ratio where they have a pool of their own, and a hybrid model's state pool is taken
    from the budget first."""
    if swa_pool(model):
        kv_token = swa_cell_bytes(model, kv_dtype, placement.attn_tp, layers, server)
    else:
        kv_token = model.kv_bytes_per_token(kv_dtype, placement.attn_tp, layers=layers)
    if model.linear_attention is None:
        return CachePool(kv_token, kv_budget_gib)
    pool = state_pool(model, placement, server, state, kv_budget_gib)
    return CachePool(kv_token, kv_budget_gib - pool.pool_gib, pool)


# ---------------------------------------------------------------------------------------------
# Refusals, in SGLang's words

# sglang/srt/configs/model_config.py _derive_context_length
LONG_CONTEXT_MESSAGE = (
    "ValueError: Warning: User-specified context_length ({asked}) is greater than the derived "
    "context_length ({trained}). This may lead to incorrect model outputs or CUDA errors. "
    "Note that the derived context_length may differ from max_position_embeddings in the model's "
    "config. To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
)
# SGLang 0.5.23 when the pool rounds down to no token (MemoryPoolConfig.__post_init__,
# sglang/srt/model_executor/pool_configurator.py; the pool configurators build the config without
# mem_fraction_static, so the "Current value" suffix of older versions is not printed).
NO_TOKENS_TEXT = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def context_length_refusal(model: ModelArch, server: ServerArgs) -> Rule | None:
    """A --context-length above the model's own."""
    message = LONG_CONTEXT_MESSAGE.format(asked=server.max_model_len, trained=model.max_context)
    return longer_than_trained(model, server, message, "--context-length")


def static_share(server: ServerArgs, memory: MemoryEstimate) -> float:
    """--mem-fraction-static as SGLang holds it once resolved: the flag, or the share it derives,
    rounded to 3 places (sglang/srt/arg_groups/memory_hook.py), which the estimate's budget carries."""
    if server.mem_fraction_static is not None:
        return server.mem_fraction_static
    return round(memory.budget_gib / memory.capacity_gib, 3) if memory.capacity_gib else 0.0


def no_kv_text(server: ServerArgs, memory: MemoryEstimate) -> str:
    """SGLang 0.5.23's words when the loaded weights leave the static share no room for the pool
    (KVCacheConfigurator._profile_available_bytes, sglang/srt/mem_cache/kv_cache_configurator.py):
    the pool is available - pre x (1 - F) with ``pre`` the free memory before the weights load and
    ``available`` after it, so the least share that leaves one is 1 - available/pre. The estimate's
    pool, with a hybrid model's state pool taken from it first, is F x pre - weights
    (memory_budget), which gives pre back, and available = pre - weights."""
    share = memory.budget_gib / memory.capacity_gib if memory.capacity_gib else 0.0
    pre = (memory.kv_budget_gib + memory.state_pool_gib + memory.weights_gib) / share if share else 0.0
    available = pre - memory.weights_gib
    minimum = 1 - available / pre if pre > 0 else 1.0
    suggested = math.ceil(minimum * 1000) / 1000
    return (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={static_share(server, memory)}. "
        f"Raise --mem-fraction-static above {suggested:.3f} "
        f"(minimum viable = 1 - available/pre = {minimum:.4f}). "
        "If using speculative decoding, draft weights are now counted."
    )


def no_state_refusal(memory: MemoryEstimate, state: StateMemory) -> Rule:
    """SGLang 0.5.23 when the state pool has no slot (_handle_max_mamba_cache) or too few for one
    running request (resolve_max_num_reqs), both in sglang/srt/mem_cache/kv_cache_configurator.py."""
    per_request_mib = state.bytes_per_request / 2**20
    if state.pool_slots <= 0:
        rest = memory.kv_budget_gib + memory.state_pool_gib
        return Rule(
            "no-state-memory",
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={state.pool_slots} (total_rest_memory={rest:.2f} GB, "
            f"mamba_cache_per_req={per_request_mib:.2f} MB). Try: (1) reduce --max-running-requests, "
            "(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs "
            "with more memory.",
            f"the {rest:.1f} GiB the weights leave hold no linear-attention state slot of "
            f"{per_request_mib:.1f} MiB: raise --mem-fraction-static or use more GPUs",
        )
    return Rule(
        "no-state-memory",
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        f"max_mamba_cache_size={state.pool_slots}, mamba_ratio={state.slots_per_request}, resulting "
        "max_num_reqs=0. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
        "(3) use GPUs with more memory.",
        f"{state.pool_slots} state slots, {state.slots_per_request} per running request: "
        "raise --max-mamba-cache-size",
    )


def memory_refusal(memory: MemoryEstimate, server: ServerArgs) -> Rule | None:
    """No state slot, no pool (or one that rounds down to no token), or too few state slots for
    one running request, in the order SGLang meets them."""
    state = memory.state
    if state is not None and state.pool_slots <= 0:
        return no_state_refusal(memory, state)
    if memory.kv_budget_gib <= 0:
        return no_kv_memory(no_kv_text(server, memory), memory)
    # A pool above zero bytes that rounds down to no token (one page: one token here) fails too.
    if memory.kv_bytes_per_token > 0 and memory.kv_tokens == 0:
        return no_kv_memory(NO_TOKENS_TEXT, memory)
    if state is not None and state.running_cap <= 0:
        return no_state_refusal(memory, state)
    return None
