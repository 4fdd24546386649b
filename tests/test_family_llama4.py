"""Llama 4 Scout and Maverick planned from their config.json alone.

Public facts checked here:
- Sizes: Scout ~109B total, Maverick ~400B (402B), both 17B active
  (https://huggingface.co/blog/llama4-release; https://huggingface.co/docs/transformers/model_doc/llama4).
  Those totals include the vision tower, which cockpit leaves out of the planned weights (SGLang
  loads it only with --enable-multimodal): it is checked on its own from the published
  vision_config (https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json).
- Layouts that run: vLLM serves Scout on 8xH100 with -tp 8 and up to 1M context
  (https://docs.vllm.ai/projects/recipes/en/latest/Llama/Llama4-Scout.html; vLLM PR #16104:
  `--tensor-parallel-size 8 --max-model-len 1280000`), Maverick FP8 on 8xH100 with
  `--max-model-len 430000` and on 8xH200 at its full context (same PR); SGLang serves Scout with
  `--tp 8 --context-length 1000000` on 8xH100 and Maverick on 8xH200 without setting the context
  length (https://docs.sglang.io/basic_usage/llama4.html). Maverick in bf16 is about 800 GB,
  more than 8 x 80 GB.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.archs import parse_config
from cockpit.core.hardware import hardware
from cockpit.core.model import (
    ATTN_SHARDED,
    CHUNKED,
    DENSE_MLP,
    ROUTED_EXPERTS,
    SHARED_EXPERTS,
    WindowedLayers,
)
from cockpit.core.planner import FAILS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import bundled_dir

SCOUT = bundled_dir() / "llama-4-scout-17b-16e.json"
MAVERICK = bundled_dir() / "llama-4-maverick-17b-128e.json"

# vision_config of meta-llama/Llama-4-Scout-17B-16E-Instruct (Maverick's is the same).
VISION = {
    "hidden_size": 1408,
    "intermediate_size": 5632,
    "num_hidden_layers": 34,
    "num_attention_heads": 16,
    "num_channels": 3,
    "image_size": 336,
    "patch_size": 14,
    "vision_output_dim": 4096,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "pixel_shuffle_ratio": 0.5,
    "multi_modal_projector_bias": False,
}


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


def arch(path: Path, **top):
    config = {**raw(path), **top}
    return parse_config(config, source=str(path), name=path.stem)


def plan(model, engine: str, gpu: str, layout: str, *args: str):
    version = "0.33.0" if engine == "vllm" else None
    return plan_layout(Setup(model, hardware(gpu, 8), get_engine(engine, version), args), layout)


@pytest.mark.parametrize(("path", "total", "moe_layers"), [(SCOUT, 109e9, 48), (MAVERICK, 400e9, 24)])
def test_sizes_match_the_published_ones(path, total, moe_layers):
    from cockpit.core.archs.llama4 import vision_params

    model = arch(path, vision_config=VISION)
    vision = vision_params({"vision_config": VISION}, model.hidden)
    assert 0.8e9 < vision < 0.95e9
    assert model.family == "llama4" and model.moe is not None
    assert model.moe.moe_layers == moe_layers and model.dense_layers == 48 - moe_layers
    assert model.total_params + vision == pytest.approx(total, rel=0.01)
    assert model.active_params == pytest.approx(17e9, rel=0.02)
    assert any("vision tower" in note for note in model.notes)


def test_parameters_by_tensor_class():
    scout, maverick = arch(SCOUT), arch(MAVERICK)
    # Same attention and shared expert width in both; Maverick's odd layers are MoE, even dense.
    assert scout.params[ATTN_SHARDED] == maverick.params[ATTN_SHARDED]
    assert scout.params[DENSE_MLP] == 0 and maverick.params[DENSE_MLP] > 0
    assert maverick.params[SHARED_EXPERTS] * 2 == scout.params[SHARED_EXPERTS]
    assert maverick.params[ROUTED_EXPERTS] / scout.params[ROUTED_EXPERTS] == pytest.approx(128 / 16 / 2)


def test_three_in_four_layers_attend_within_an_8192_token_chunk():
    """iRoPE: every fourth layer has no positional encoding and sees the whole context."""
    for model in (arch(SCOUT), arch(MAVERICK)):
        assert model.windowed == WindowedLayers(CHUNKED, 36, 8192)
        assert model.full_attention_layers() == 12
    assert arch(SCOUT).max_context == 10_485_760 and arch(MAVERICK).max_context == 1_048_576


def test_no_chunk_means_every_layer_full_attention():
    config = raw(SCOUT)
    config["text_config"]["attention_chunk_size"] = None
    assert parse_config(config).windowed is None


@pytest.mark.parametrize(
    ("engine", "args"),
    [("vllm", ("--max-model-len", "1000000")), ("vllm", ("--max-model-len", "1280000"))]
    + [("sglang", ("--context-length", "1000000"))],
)
def test_scout_at_a_million_tokens_on_eight_h100(engine, args):
    verdict = plan(arch(SCOUT), engine, "h100", "tp8", *args)
    assert verdict.verdict != FAILS, verdict.headline


def test_scout_chunked_layers_keep_one_chunk_per_request():
    """At a 1M-token request and TP8 (one KV head per GPU), 12 full layers hold every token and
    36 chunked ones at most a chunk: about a quarter of the all-full-attention KV."""
    model = arch(SCOUT)
    full_only = 48 * 1_000_000 * 2 * 128 * 2
    assert model.kv_bytes_per_request(1_000_000, 2, attn_tp=8) / full_only == pytest.approx(0.25, abs=0.01)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_maverick_bf16_fits_eight_h200_not_eight_h100(engine):
    model = arch(MAVERICK)
    assert model.total_bytes > 8 * 80e9
    fits = plan(model, engine, "h200", "tp8")
    assert fits.verdict != FAILS, fits.headline
    fails = plan(model, engine, "h100", "tp8")
    assert fails.verdict == FAILS and "out of memory" in fails.reasons[0].message.lower()


# A Maverick FP8 checkpoint's quantization_config as the engines read it: FP8 per-channel weights,
# attention, router, vision and lm_head left in bf16, named as Llama 4 names its modules.
FP8_IGNORE = [
    "re:.*self_attn.*",
    "re:.*router.*",
    "re:.*vision_model.*",
    "re:.*multi_modal_projector.*",
    "lm_head",
]
COMPRESSED_FP8 = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
        }
    },
    "ignore": FP8_IGNORE,
}
FBGEMM_FP8 = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": FP8_IGNORE}


@pytest.mark.parametrize("quant", [COMPRESSED_FP8, FBGEMM_FP8], ids=["compressed-tensors", "fbgemm_fp8"])
def test_maverick_fp8_is_sized_and_fits_eight_h100_at_430k(quant):
    model = arch(MAVERICK, quantization_config=copy.deepcopy(quant))
    for cls in (ROUTED_EXPERTS, SHARED_EXPERTS, DENSE_MLP):
        assert model.quant.bytes_per_param(cls) == 1.0
    assert model.quant.bytes_per_param(ATTN_SHARDED) == 2.0  # self_attn is ignored
    assert model.total_bytes / 1e9 == pytest.approx(400.7 + 3.0 + 2 * 1.03, rel=0.01)
    verdict = plan(model, "vllm", "h100", "tp8", "--max-model-len", "430000")
    assert verdict.verdict != FAILS, verdict.headline
    assert plan(model, "vllm", "h200", "tp8").verdict != FAILS


@pytest.mark.parametrize("path", [SCOUT, MAVERICK])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_cockpit_plan_gives_a_verdict(path, engine):
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "plan", "--model", str(path), "--engine", engine]
        + ["--gpus", "8", "--gpu", "h200", "--layout", "tp8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "llama4" in done.stdout and "fits" in done.stdout


def test_an_ignore_list_in_llama4_module_names_keeps_those_classes():
    """Llama 4 names its MLPs feed_forward (vllm/model_executor/models/llama4.py)."""
    quant = copy.deepcopy(COMPRESSED_FP8)
    quant["ignore"] = [*FP8_IGNORE, "re:.*feed_forward.shared_expert.*", "re:.*layers.0.feed_forward.*"]
    model = arch(MAVERICK, quantization_config=quant)
    assert model.quant.bytes_per_param(SHARED_EXPERTS) == 2.0
    assert model.quant.bytes_per_param(DENSE_MLP) == 2.0  # layer 0 is one of Maverick's dense layers
    assert model.quant.bytes_per_param(ROUTED_EXPERTS) == 1.0
