"""KV by layer kind: windowed layers hold at most their window per request; stages hold the
layers of each kind they have.

gpt-oss-120b alternates 18 full-attention layers with 18 layers of a 128-token sliding window
(its config.json's layer_types and sliding_window). The expected numbers are worked out here from
the engines' rules, not read from the planner:
- vLLM 0.33 gives the window layers a KV cache group of their own, in which a request holds the
  window less one token plus the tokens in flight, and one block more
  (SlidingWindowSpec.max_admission_blocks_per_request, vllm/v1/kv_cache_interface.py; groups:
  _get_kv_cache_groups_uniform_page_size, vllm/v1/core/kv_cache_planning.py); in flight:
  max_concurrent_batches (2 with async scheduling) x max_num_batched_tokens (vllm/config/vllm.py).
  `--disable-hybrid-kv-cache-manager` charges every layer the whole request again.
- SGLang 0.5.23 keeps gpt-oss's window layers in a pool of their own, sized at
  --swa-full-tokens-ratio (0.8) of the full pool's tokens (is_hybrid_swa_model,
  sglang/srt/configs/model_config.py; _recompute_cell_size,
  sglang/srt/model_executor/pool_configurator.py); Gemma 3 is not on that list.
"""

from __future__ import annotations

import math

import pytest

from cockpit.core.hardware import hardware
from cockpit.core.model import SLIDING, WindowedLayers
from cockpit.core.planner import FAILS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import bundled_dir, read_config

GiB = 2**30
CONTEXT = 131_072  # gpt-oss's max_position_embeddings: vLLM's default max model length
PAGE = 2 * 8 * 64 * 2  # one layer, one token at TP1: K and V of 8 heads of 64, bf16
BLOCK = 16  # vLLM's default block size
IN_FLIGHT = 2 * 8192  # two batches of an H100's default 8,192 batched tokens
WINDOW_TOKENS = 128 - 1 + IN_FLIGHT


@pytest.fixture(scope="module")
def gpt_oss():
    return read_config(bundled_dir() / "gpt-oss-120b.json")


def test_gpt_oss_is_read_as_half_full_half_sliding(gpt_oss):
    assert gpt_oss.windowed == WindowedLayers(SLIDING, 18, 128)
    assert gpt_oss.full_attention_layers() == 18 and gpt_oss.kv_layers() == 36
    # A request of the whole context: 18 full layers hold it all, 18 window layers 127 tokens.
    per_request = gpt_oss.kv_bytes_per_request(CONTEXT, 2.0)
    assert per_request == 18 * CONTEXT * PAGE + 18 * 127 * PAGE
    assert per_request / (36 * CONTEXT * PAGE) == pytest.approx(0.5, abs=0.001)


def plan(model, engine: str, *args: str, gpu: str = "h100", layout: str = "tp1"):
    setup = Setup(model, hardware(gpu, 8), get_engine(engine, "0.33.0" if engine == "vllm" else None), args)
    return plan_layout(setup, layout)


def test_gpt_oss_at_its_default_context_fits_one_h100_on_vllm(gpt_oss):
    """Charged as full attention in every layer, one 131,072-token request needs 9.0 GiB of KV and
    the layout failed; vLLM's own accounting needs about half, and the layout fits."""
    verdict = plan(gpt_oss, "vllm")
    assert verdict.verdict != FAILS, verdict.headline
    pool = verdict.memory.state
    assert pool.block_tokens == BLOCK and pool.attention_groups == 1 and pool.window_groups == 1
    assert pool.block_bytes == 18 * BLOCK * PAGE  # a group spans 18 layers
    blocks = math.ceil(CONTEXT / BLOCK) + math.ceil(WINDOW_TOKENS / BLOCK) + 1
    assert pool.blocks_per_request(CONTEXT) == blocks
    needed = blocks * pool.block_bytes / GiB
    assert needed == pytest.approx(4.5 * (1 + WINDOW_TOKENS / CONTEXT), rel=0.01)
    # vLLM's "GPU KV cache size": the requests of the context that fit, times the context.
    assert verdict.memory.kv_tokens == int(pool.blocks / blocks * CONTEXT)


def test_without_the_hybrid_manager_every_layer_keeps_the_whole_request(gpt_oss):
    verdict = plan(gpt_oss, "vllm", "--disable-hybrid-kv-cache-manager")
    assert verdict.verdict == FAILS
    assert verdict.reasons[0].rule == "kv-max-len"
    needed = 36 * CONTEXT * PAGE / GiB
    assert f"({round(needed, 2)} GiB KV cache is needed" in verdict.reasons[0].message


def test_sglang_sizes_the_window_pool_at_its_ratio_of_the_full_one(gpt_oss):
    hybrid = plan(gpt_oss, "sglang", gpu="h200")
    whole = plan(gpt_oss, "sglang", "--disable-hybrid-swa-memory", gpu="h200")
    assert hybrid.memory.kv_bytes_per_token == 18 * PAGE + 0.8 * 18 * PAGE
    assert whole.memory.kv_bytes_per_token == 36 * PAGE
    assert hybrid.memory.kv_tokens / whole.memory.kv_tokens == pytest.approx(36 / 32.4, rel=0.001)
    ratio = plan(gpt_oss, "sglang", "--swa-full-tokens-ratio", "0.5", gpu="h200")
    assert ratio.memory.kv_bytes_per_token == 18 * PAGE + 0.5 * 18 * PAGE


def test_a_pipeline_stage_keeps_its_share_of_each_kind(gpt_oss):
    """PP2 puts 18 layers on each stage: 9 of each kind, each stage with its own pool."""
    assert gpt_oss.full_attention_layers(18) == 9 and gpt_oss.windowed_layers(18) == 9
    verdict = plan(gpt_oss, "vllm", layout="pp2")
    assert verdict.memory.state.block_bytes == 9 * BLOCK * PAGE


@pytest.mark.parametrize(
    ("kind", "window", "tokens", "in_flight", "held"),
    [
        ("sliding, short request", 128, 100, 0, 100),
        ("sliding, long request", 128, 10_000, 0, 127),
        ("sliding, in flight", 128, 10_000, 2048, 127 + 2048),
        ("chunked, long request", 8192, 100_000, 0, 8192),
        ("chunked, in flight", 8192, 100_000, 4096, 8192 + 4096),
    ],
)
def test_a_windowed_layer_holds_at_most_its_window(kind, window, tokens, in_flight, held):
    layers = WindowedLayers(kind.split(",")[0], 10, window)
    assert layers.tokens_held(tokens, in_flight) == held


def test_interleaved_moe_layers_are_held_by_the_stage_that_has_them():
    """Llama 4 Maverick alternates dense and MoE layers (interleave_moe_layer_step 2), so each of
    two pipeline stages holds half the experts: ~800 GB of bf16 weights over 8 GPUs is ~93 GiB a
    GPU whether split tp8 or tp4 pp2 (Meta's model card: 400B parameters)."""
    model = read_config(bundled_dir() / "llama-4-maverick-17b-128e.json")
    assert model.moe_layer_ids == tuple(range(1, 48, 2))
    tp8 = plan(model, "vllm", gpu="h200", layout="tp8")
    split = plan(model, "vllm", gpu="h200", layout="tp4 pp2")
    assert split.memory.weights_gib == pytest.approx(tp8.memory.weights_gib, rel=0.02)
    assert split.verdict != FAILS, split.headline


def test_nemotron_h_counts_every_layer_of_its_pattern_and_keeps_kv_in_six():
    """Nemotron 3 Nano's hybrid_override_pattern has 52 layers: 23 Mamba-2, 6 attention, 23 MoE
    (its config.json); the engines split all 52 over pipeline stages, and only the 6 attention
    layers keep per-token KV."""
    model = read_config(bundled_dir() / "nemotron-3-nano-30b-a3b.json")
    assert model.layers == 52 and model.linear_attention.layers == 23
    assert model.mixer_free_layers == 23 and model.kv_layers() == 6
    assert plan(model, "vllm", layout="pp2").placement.stage_layers == (26, 26)
    # vLLM keeps Nemotron-H's recurrent state in float32 unless the config says otherwise
    # (NemotronHForCausalLMConfig, vllm/model_executor/models/config.py).
    assert model.linear_attention.ssm_dtype_bytes == 4


@pytest.mark.parametrize(
    ("case", "model", "engine", "args", "gpu", "expected"),
    [
        # vLLM: a quantized cache of a DSA model is fp8_ds_mla, 656 bytes for 576 values
        # (_canonicalize_sparse_mla_kv_cache_dtype, mla_attention.py).
        ("V3.2 fp8 on vLLM", "deepseek-v3.2", "vllm", ("--kv-cache-dtype", "fp8"), "h200", 656 / 576),
        ("V3.2 auto on vLLM, Hopper", "deepseek-v3.2", "vllm", (), "h200", 2.0),
        # DeepSeek-V4's auto is fp8_ds_mla (_resolve_dsv4_kv_cache_dtype).
        ("V4 auto on vLLM", "deepseek-v4-flash", "vllm", (), "h200", 656 / 576),
        # SGLang's DSA auto: fp8_e4m3 on SM 10+, bf16 below (_dsa_kv_cache_dtype_default).
        ("V3.2 auto on SGLang, Blackwell", "deepseek-v3.2", "sglang", (), "b200", 1.0),
        ("V3.2 auto on SGLang, Hopper", "deepseek-v3.2", "sglang", (), "h200", 2.0),
        ("gpt-oss fp8 on vLLM", "gpt-oss-120b", "vllm", ("--kv-cache-dtype", "fp8"), "h200", 1.0),
    ],
)
def test_the_cache_dtype_is_the_one_the_engine_picks(case, model, engine, args, gpu, expected):
    arch = read_config(bundled_dir() / f"{model}.json")
    setup = Setup(arch, hardware(gpu, 8), get_engine(engine), args)
    assert setup.engine.cache_dtype_bytes(arch, setup.server, setup.hardware) == pytest.approx(expected)
