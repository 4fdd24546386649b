"""DeepSeek Sparse Attention families planned from their config.json alone: DeepSeek-V3.2
(deepseek_v32), GLM-5 (glm_moe_dsa) and DeepSeek-V4 Flash and Pro (deepseek_v4).

Public facts checked here:
- Sizes. DeepSeek-V3.2 is DeepSeek-V3's 671B / 37B active plus the lightning indexer (the Hugging
  Face card's 685B adds the 14B multi-token-prediction module, which the engines load only for
  speculative decoding; https://huggingface.co/deepseek-ai/DeepSeek-V3.2,
  https://huggingface.co/deepseek-ai/DeepSeek-V3). GLM-5: "744B parameters (40B active)"
  (https://huggingface.co/zai-org/GLM-5). DeepSeek-V4-Flash: 284B total / 13B active, FP4 experts
  and FP8 elsewhere, ~160 GB on disk; DeepSeek-V4-Pro: 1.6T / 49B active
  (https://recipes.vllm.ai/deepseek-ai/DeepSeek-V4-Flash, https://huggingface.co/deepseek-ai/DeepSeek-V4-Pro;
  the disk size from github.com/ai-dynamo/dynamo recipes/deepseek-v4-flash/README.md).
- Layouts that run: `vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8` on 8xH200
  (https://docs.vllm.ai/projects/recipes/en/latest/DeepSeek/DeepSeek-V3_2.html); GLM-5-FP8 with
  --tensor-parallel-size 8 on 8xH200 (https://docs.vllm.ai/projects/recipes/en/latest/GLM/GLM5.html),
  ~89 GB of weights per GPU at TP=8 (https://docs.vultr.com/inference-cookbook/cuda/model-guides/glm5);
  DeepSeek-V4-Flash on four GPUs,
  vLLM DP=4 with expert parallel and SGLang TP=4 (github.com/ai-dynamo/dynamo
  recipes/deepseek-v4/deepseek-v4-flash, on 4xB200, whose ~36 GiB of weights per GPU an H200
  holds as well).
- The indexer's key cache: 128 FP8 values and one float32 scale per token and layer, 132 bytes
  (DeepseekV32Indexer, vllm/models/deepseek_v32/attention.py; IndexKeyCache,
  sglang/srt/mem_cache/index_key_cache.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.archs import parse_config
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.model import ATTN_REPLICATED, ROUTED_EXPERTS, SLIDING
from cockpit.core.planner import FAILS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import bundled_dir

V32 = bundled_dir() / "deepseek-v3.2.json"
GLM5 = bundled_dir() / "glm-5-fp8.json"
FLASH = bundled_dir() / "deepseek-v4-flash.json"
PRO = bundled_dir() / "deepseek-v4-pro.json"


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


def arch(path: Path, **top):
    return parse_config({**raw(path), **top}, source=str(path), name=path.stem)


def plan(model, engine: str, gpus: int, layout: str, *args: str):
    version = "0.33.0" if engine == "vllm" else None
    return plan_layout(Setup(model, hardware("h200", gpus), get_engine(engine, version), args), layout)


@pytest.mark.parametrize(
    ("path", "family", "total", "active", "active_rel"),
    [
        (V32, "deepseek-v32", 671e9, 37e9, 0.05),
        (GLM5, "glm-moe-dsa", 744e9, 40e9, 0.06),
        (FLASH, "deepseek-v4", 284e9, 13e9, 0.07),
        (PRO, "deepseek-v4", 1.6e12, 49e9, 0.03),
    ],
)
def test_sizes_match_the_published_ones(path, family, total, active, active_rel):
    model = arch(path)
    assert model.family == family
    assert model.total_params == pytest.approx(total, rel=0.02)
    assert model.active_params == pytest.approx(active, rel=active_rel)


def test_the_indexer_adds_its_weights_and_its_132_byte_key_per_layer():
    v32 = arch(V32)
    assert v32.index_bytes_per_token == 132
    assert v32.mla is not None and v32.kv_heads == 1
    # MLA's latent (512 + 64) in bf16 and the indexer's key, in every one of the 61 layers.
    assert v32.kv_bytes_per_token(2.0) == 61 * ((512 + 64) * 2 + 132)
    # Without its indexer the model is DeepSeek-V3: wq_b (1536 -> 64 x 128) per layer is replicated.
    v3 = parse_config({**raw(V32), "model_type": "deepseek_v3"}, str(V32), "v3")
    assert v32.params[ATTN_REPLICATED] - v3.params[ATTN_REPLICATED] == 61 * 1536 * 64 * 128


def test_glm5_reads_its_own_head_widths_and_keeps_the_router_unquantized():
    model = arch(GLM5)
    assert model.mla is not None
    assert (model.mla.qk_nope_head_dim, model.mla.v_head_dim, model.mla.q_lora_rank) == (192, 256, 2048)
    assert model.quant.block == (128, 128)
    assert model.quant.bytes_per_param(ROUTED_EXPERTS) < 1.01


def test_v4_sizes_fp4_experts_and_a_window_on_window_only_layers():
    flash = arch(FLASH)
    assert flash.quant.bytes_per_param(ROUTED_EXPERTS) == 0.5 + 1 / 32
    assert ROUTED_EXPERTS not in flash.quant.blocked_classes
    assert 145e9 < flash.total_bytes < 165e9  # ~160 GB on disk, with the MTP layer
    assert flash.windowed is not None and flash.windowed.kind == SLIDING
    assert (flash.windowed.layers, flash.windowed.window) == (2, 128)  # compress_ratios 0, 0 at the start
    assert flash.notes and "approximated" in flash.notes[0]
    # fp8 experts (the -Base checkpoints) stay block-FP8.
    base = arch(FLASH, expert_dtype="fp8")
    assert base.quant.bytes_per_param(ROUTED_EXPERTS) > 1
    # A 1M-token request keeps far less KV than V3.2's (the recipe: ~10% of V3.2's at 1M context).
    tokens = 1_000_000
    ratio = flash.kv_bytes_per_request(tokens, 1.0) / arch(V32).kv_bytes_per_request(tokens, 1.0)
    assert ratio < 0.15


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"compress_ratios": [4, 128]}, "compress_ratios must list one ratio per layer"),
        ({"compress_ratios": [8] * 44}, "compress_ratios may hold only 0, 4 and 128"),
        ({"expert_dtype": "int2"}, "expert_dtype must be"),
        ({"o_groups": 7}, "multiple of o_groups"),
    ],
)
def test_a_broken_v4_config_is_one_line_that_says_what_to_fix(bad, says):
    with pytest.raises(CockpitError) as caught:
        arch(FLASH, **bad)
    message = str(caught.value)
    assert says in message and "\n" not in message and "fix the config.json" in message


@pytest.mark.parametrize(
    ("path", "engine", "gpus", "layout"),
    [
        (V32, "vllm", 8, "tp8"),
        (V32, "sglang", 8, "tp8"),
        (GLM5, "vllm", 8, "tp8"),
        (GLM5, "sglang", 8, "tp8"),
        (FLASH, "vllm", 4, "dp4 ep"),
        (FLASH, "sglang", 4, "tp4"),
    ],
)
def test_recipe_layouts_fit(path, engine, gpus, layout):
    verdict = plan(arch(path), engine, gpus, layout)
    assert verdict.verdict != FAILS, verdict.reasons


def test_glm5_weights_per_gpu_at_tp8_match_the_published_figure():
    verdict = plan(arch(GLM5), "vllm", 8, "tp8")
    assert verdict.memory is not None
    assert verdict.memory.weights_gib == pytest.approx(89, rel=0.05)


def test_v4_pro_needs_more_than_four_h200():
    """1.6T parameters at FP4/FP8 are ~850 GB, more than 4 x 141 GB."""
    assert plan(arch(PRO), "vllm", 4, "tp4").verdict == FAILS


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_cockpit_plan_gives_a_verdict(engine):
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "plan", "--model", str(V32), "--engine", engine]
        + ["--gpus", "8", "--gpu", "h200", "--layout", "tp8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "deepseek-v32" in done.stdout and "fits" in done.stdout
