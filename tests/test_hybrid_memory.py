"""A hybrid model's linear-attention state in the memory plan, as each engine keeps it
(docs/placement.md#hybrid-attention-qwen3-next): Qwen3-Next-80B-A3B at TP 4 on 8 x H100.

The expected numbers are worked out here from the engines' rules, not read from the planner:
vLLM 0.33 shares its KV block pool with the state (vllm/platforms/interface.py
_align_hybrid_block_size, vllm/v1/core/kv_cache_planning.py, vllm/v1/kv_cache_interface.py
MambaSpec, vllm/v1/core/kv_cache_utils.py get_kv_cache_capacity); SGLang 0.5.23 takes a pool of
state slots from the budget before the KV cache (sglang/srt/mem_cache/kv_cache_configurator.py
_handle_max_mamba_cache and resolve_max_num_reqs).
"""

from __future__ import annotations

import math

import pytest
from conftest import MODELS

from cockpit.core.hardware import hardware
from cockpit.core.planner import FAILS, FITS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import read_config

GiB = 2**30
REQUEST = 2048  # Setup's default request length
CONTEXT = 262_144  # Qwen3-Next's max_position_embeddings: the default max model length

# Qwen3-Next at TP 4: two KV heads over four ranks keep one each (head dim 256, bf16) in 12
# full-attention layers; 36 Gated DeltaNet layers keep a convolution window of
# (2 x 16 x 128 + 32 x 128) / 4 channels x 3 steps and 32 / 4 heads of 128 x 128 recurrent state.
ATTENTION_PAGE = 2 * 1 * 256 * 2  # one layer, one token: 1,024 bytes
KV_PER_TOKEN = 12 * ATTENTION_PAGE
CONV, RECURRENT = 8192 // 4 * 3, 8 * 128 * 128  # elements per layer and request
VLLM_STATE_PAGE = (CONV + RECURRENT) * 2  # bf16, the model dtype: 274,432 bytes
SGLANG_STATE = 36 * (CONV * 2 + RECURRENT * 4)  # conv bf16, recurrent float32: 19,316,736 bytes


@pytest.fixture(scope="module")
def qwen3_next():
    return read_config(MODELS / "qwen3-next-80b-a3b-instruct.json")


def plan(model, engine, *args, layout="tp4", gpu="h100"):
    return plan_layout(Setup(model, hardware(gpu, 8), get_engine(engine), server_args=args), layout)


def vllm_pool(kv_budget_gib, alignment, copies):
    """(block, blocks, blocks of one request of REQUEST tokens, of one of CONTEXT tokens): blocks
    grow in steps of ``alignment`` until an attention page holds a state page; a block spans 12
    layers (one group of the 12 full-attention layers, three of the 36 linear ones); a request holds
    its tokens' blocks and ``copies`` state blocks per linear group."""
    block = alignment * math.ceil(VLLM_STATE_PAGE / (alignment * ATTENTION_PAGE))
    blocks = int(kv_budget_gib * GiB // (12 * block * ATTENTION_PAGE))
    return block, blocks, math.ceil(REQUEST / block) + 3 * copies, math.ceil(CONTEXT / block) + 3 * copies


# --- vLLM: one block pool ---------------------------------------------------------------------


def test_vllm_shares_the_block_pool_with_the_state(qwen3_next):
    v = plan(qwen3_next, "vllm")
    assert v.verdict == FITS, [str(r) for r in v.reasons]
    m = v.memory
    # Hopper runs FlashInfer's GDN prefill, whose checkpoints every 64 tokens make blocks
    # multiples of 64 and keep a third state block per group with prefix caching (on by default).
    block, blocks, per_request, per_context = vllm_pool(m.kv_budget_gib, 64, 3)
    assert (block, per_request) == (320, 7 + 9)
    assert m.kv_bytes_per_token == KV_PER_TOKEN
    assert m.state_bytes_per_request == 36 * VLLM_STATE_PAGE == 9_879_552
    assert m.state.block_tokens == block and m.state.blocks == blocks
    assert m.kv_tokens == int(blocks / per_context * CONTEXT)  # "GPU KV cache size: N tokens"
    assert m.max_concurrency == pytest.approx(blocks / per_request)
    assert m.state_slots == 0  # no cap of its own: the state competes for blocks
    assert m.requests_fitting(8192) == pytest.approx(blocks / (math.ceil(8192 / block) + 9))
    # per-token KV alone would have put ~2.5 times as many requests in the same memory
    per_token_only = m.kv_budget_gib * GiB / KV_PER_TOKEN / REQUEST
    assert m.max_concurrency < 0.45 * per_token_only
    assert m.to_json()["state"] == {
        "bytes_per_request": 9_879_552,
        "block_tokens": 320,
        "blocks": blocks,
        "state_blocks": 9,
    }


def test_vllm_without_prefix_caching_keeps_one_state_block(qwen3_next):
    with_cache = plan(qwen3_next, "vllm").memory
    m = plan(qwen3_next, "vllm", "--no-enable-prefix-caching").memory
    block, blocks, per_request, per_context = vllm_pool(m.kv_budget_gib, 16, 1)
    assert (block, per_request) == (272, 8 + 3)  # 16-token steps: no checkpoints to align to
    assert m.kv_budget_gib == with_cache.kv_budget_gib  # the same pool, cut differently
    assert m.kv_tokens == int(blocks / per_context * CONTEXT)
    assert m.max_concurrency == pytest.approx(blocks / per_request)
    assert m.max_concurrency > with_cache.max_concurrency


@pytest.mark.parametrize(
    ("gpu", "args"),
    [("h100", ("--gdn-prefill-backend", "triton")), ("a100", ())],  # Triton's GDN prefill: no checkpoints
)
def test_vllm_prefix_caching_without_flashinfer_checkpoints(qwen3_next, gpu, args):
    m = plan(qwen3_next, "vllm", *args, gpu=gpu).memory
    block, blocks, per_request, per_context = vllm_pool(m.kv_budget_gib, 16, 2)
    assert (m.state.block_tokens, m.state.state_blocks) == (272, 6)
    assert m.kv_tokens == int(blocks / per_context * CONTEXT)
    assert m.max_concurrency == pytest.approx(blocks / per_request)


def test_vllm_block_size_argument_sets_the_step(qwen3_next):
    m = plan(qwen3_next, "vllm", "--no-enable-prefix-caching", "--block-size", "128").memory
    assert m.state.block_tokens == 128 * math.ceil(VLLM_STATE_PAGE / (128 * ATTENTION_PAGE)) == 384


def test_vllm_refuses_a_context_whose_blocks_do_not_fit(qwen3_next):
    v = plan(qwen3_next, "vllm", "--gpu-memory-utilization", "0.57")
    assert v.verdict == FAILS
    (reason,) = v.reasons
    m = v.memory
    block, blocks, _, per_context = vllm_pool(m.kv_budget_gib, 64, 3)
    usable = blocks - 1  # the null block the pool holds back
    assert per_context > usable
    longest = (usable - 9) * block
    assert reason.rule == "kv-max-len"
    assert reason.message.startswith(
        f"ValueError: To serve at least one request with the model's max seq len ({CONTEXT}), "
        f"({round(per_context * 12 * block * ATTENTION_PAGE / GiB, 2)} GiB KV cache is needed"
    )
    assert f"the estimated maximum model length is {longest}. " in reason.message
    assert f"set --max-model-len {longest // 1024 * 1024} or less" in reason.detail


# --- SGLang: a state pool of its own --------------------------------------------------------------


def sglang_rest_gib(memory):
    """What the weights leave of the static share, before the state pool takes its part."""
    return memory.capacity_gib - memory.weights_gib - memory.reserve_gib


def test_sglang_takes_the_state_pool_first_by_the_default_ratio(qwen3_next):
    v = plan(qwen3_next, "sglang")
    assert v.verdict == FITS, [str(r) for r in v.reasons]
    m = v.memory
    rest = sglang_rest_gib(m)
    slots = int((rest * GiB * 0.9 / 1.9 - SGLANG_STATE) // SGLANG_STATE)
    assert m.state_bytes_per_request == SGLANG_STATE == 19_316_736
    assert m.state.pool_slots == slots
    assert m.state_pool_gib == pytest.approx((slots + 1) * SGLANG_STATE / GiB)
    assert m.kv_budget_gib == pytest.approx(rest - (slots + 1) * SGLANG_STATE / GiB)
    assert m.kv_tokens == int(m.kv_budget_gib * GiB // KV_PER_TOKEN)
    assert m.kv_tokens < 0.55 * rest * GiB / KV_PER_TOKEN  # per-token KV alone would keep all of rest
    # the extra-buffer radix cache (the overlap scheduler is on) keeps 3 + 2 slots per running request
    assert m.state_slots == slots // 5
    assert m.max_concurrency == min(m.kv_tokens / REQUEST, slots // 5)
    assert m.to_json()["state"]["running_cap"] == slots // 5


def test_sglang_max_mamba_cache_size_sets_the_pool(qwen3_next):
    default = plan(qwen3_next, "sglang").memory
    m = plan(qwen3_next, "sglang", "--max-mamba-cache-size", "200").memory
    rest = sglang_rest_gib(m)
    assert rest == pytest.approx(sglang_rest_gib(default))
    assert m.state_pool_gib == pytest.approx(201 * SGLANG_STATE / GiB)  # one padding slot more
    assert m.kv_budget_gib == pytest.approx(rest - 201 * SGLANG_STATE / GiB)
    assert m.kv_tokens == int(m.kv_budget_gib * GiB // KV_PER_TOKEN)
    assert m.state_slots == 200 // 5 and m.max_concurrency == 40


@pytest.mark.parametrize(
    ("args", "pool_slots", "per_request"),
    [
        (("--disable-radix-cache", "--max-running-requests", "64"), 64, 1),
        (("--disable-overlap-schedule", "--max-mamba-cache-size", "300"), 300, 3),
        (("--mamba-radix-cache-strategy", "extra_buffer_lazy", "--max-mamba-cache-size", "300"), 300, 4),
    ],
)
def test_sglang_slots_per_running_request(qwen3_next, args, pool_slots, per_request):
    m = plan(qwen3_next, "sglang", *args).memory
    assert m.state.pool_slots == pool_slots
    assert m.state_pool_gib == pytest.approx((pool_slots + 1) * SGLANG_STATE / GiB)
    assert m.state_slots == pool_slots // per_request


def test_sglang_ratio_and_state_dtype_arguments(qwen3_next):
    m = plan(qwen3_next, "sglang", "--mamba-full-memory-ratio", "0.5", "--mamba-ssm-dtype", "bfloat16").memory
    state = 36 * (CONV + RECURRENT) * 2
    slots = int((sglang_rest_gib(m) * GiB * 0.5 / 1.5 - state) // state)
    assert m.state_bytes_per_request == state and m.state.pool_slots == slots


def test_sglang_refuses_a_state_pool_without_room(qwen3_next):
    too_big = plan(qwen3_next, "sglang", "--max-mamba-cache-size", "5000")
    assert too_big.verdict == FAILS
    assert too_big.reasons[0].rule == "no-kv-memory"
    # SGLang's text speaks of the memory before and after the weights, which the pool leaves alone
    default = plan(qwen3_next, "sglang").memory
    share = default.budget_gib / default.capacity_gib
    pre = (sglang_rest_gib(default) + default.weights_gib) / share
    minimum = 1 - (pre - default.weights_gib) / pre
    assert f"(minimum viable = 1 - available/pre = {minimum:.4f})" in too_big.reasons[0].message
    # a share that leaves less than the weights: the state pool is sized (and fails) first
    no_room = plan(qwen3_next, "sglang", "--mem-fraction-static", "0.45")
    assert no_room.verdict == FAILS
    assert no_room.reasons[0].rule == "no-state-memory"
    rest = no_room.memory.kv_budget_gib
    assert rest < 0 and no_room.memory.state_pool_gib == 0
    slots = int((rest * GiB * 0.9 / 1.9 - SGLANG_STATE) // SGLANG_STATE)
    assert no_room.reasons[0].message == (
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        f"Computed max_mamba_cache_size={slots} (total_rest_memory={rest:.2f} GB, mamba_cache_per_req=18.42 MB). "
        "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
        "--speculative-num-draft-tokens, or (4) use GPUs with more memory."
    )
    too_few = plan(qwen3_next, "sglang", "--max-mamba-cache-size", "4")
    assert too_few.verdict == FAILS
    assert too_few.reasons[0].rule == "no-state-memory"
    assert too_few.reasons[0].message.startswith(
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0."
    )


def test_sglang_attention_dp_splits_the_slots(qwen3_next):
    m = plan(qwen3_next, "sglang", "--max-mamba-cache-size", "200", layout="tp8 dp2 dpa").memory
    assert m.state.pool_slots == 100 and m.state.replicas == 2
    assert m.state_slots == 2 * (100 // 5)


# --- Models without state plan as before ----------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_models_without_state_are_unchanged(engine):
    model = read_config(MODELS / "qwen3-235b-a22b-fp8.json")
    plain = plan(model, engine, layout="tp8").memory
    assert plain.state is None and plain.state_bytes_per_request == 0 and plain.state_slots == 0
    assert plain.max_concurrency == plain.kv_tokens / REQUEST
    assert plain.requests_fitting(4096) == plain.kv_tokens / 4096
    assert "state" not in plain.to_json()
    flag = "--no-enable-prefix-caching" if engine == "vllm" else "--disable-radix-cache"
    assert plan(model, engine, flag, layout="tp8").memory == plain


def test_the_simulator_admits_as_many_hybrid_requests_as_the_planner_fits(qwen3_next):
    """The simulated vLLM charges each request whole blocks for its tokens plus its state's blocks,
    so it runs at once what MemoryEstimate.requests_fitting says, not what tokens alone would."""
    import asyncio

    from cockpit.core.perfmodel import for_verdict
    from cockpit.sim.batcher import Batcher, VirtualClock
    from cockpit.sim.pacers import PerfPacer

    setup = Setup(qwen3_next, hardware("h100", 8), get_engine("vllm"), server_args=("--max-num-seqs", "4096"))
    verdict = plan_layout(setup, "tp4")
    perf = for_verdict(setup, verdict)
    assert verdict.memory is not None and perf is not None
    life = 65_536  # tokens of one request: few enough fit to count them
    fitting = int(verdict.memory.requests_fitting(life))
    assert 0 < fitting < perf.max_running and fitting < perf.kv_limit // life  # the state costs requests
    pacer = PerfPacer(perf)

    async def running_after_first_token() -> int:
        batcher = Batcher(pacer, clock=VirtualClock())
        sequences = [batcher.submit(life - 8, 8) for _ in range(fitting + 20)]
        async with sequences[0] as first:
            await first.__anext__()
            running = batcher.running
        await batcher.close()
        return running

    assert asyncio.run(running_after_first_token()) == fitting
