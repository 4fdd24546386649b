"""Hybrid families planned from config.json alone: Qwen3.5 MoE (Gated DeltaNet and gated
attention), Nemotron-H (Mamba-2, attention, MoE), Kimi Linear (KDA and MLA), checked against their
published sizes, the per-token KV of their attention layers only, and launches that run."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.archs import parse_config
from cockpit.core.errors import CockpitError
from cockpit.core.model import KIMI_DELTA, MAMBA2
from cockpit.store.modelfiles import bundled_dir, read_config

BUNDLED = bundled_dir()
QWEN35_397B = BUNDLED / "qwen3.5-397b-a17b.json"
QWEN35_35B = BUNDLED / "qwen3.5-35b-a3b.json"
NANO = BUNDLED / "nemotron-3-nano-30b-a3b.json"
SUPER = BUNDLED / "nemotron-3-super-120b-a12b-fp8.json"
KIMI_LINEAR_BUNDLED = BUNDLED / "kimi-linear-48b-a3b.json"

# moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json
# (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json), the
# settings the planner reads.
KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "hidden_size": 2304,
    "num_hidden_layers": 27,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 72,
    "vocab_size": 163840,
    "tie_word_embeddings": False,
    "max_position_embeddings": 1048576,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mla_use_nope": True,
    "intermediate_size": 9216,
    "moe_intermediate_size": 1024,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "head_dim": 128,
        "num_heads": 32,
        "short_conv_kernel_size": 4,
    },
}


@pytest.fixture(scope="module")
def kimi_linear_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kimi") / "kimi-linear-48b-a3b.json"
    path.write_text(json.dumps(KIMI_LINEAR))
    return path


def billions(n: float) -> float:
    return n / 1e9


# --- Published sizes ------------------------------------------------------------------------


def test_qwen3_5_397b_is_397b_with_17b_active():
    # "397B total / 17B active parameters" (https://recipes.vllm.ai/Qwen/Qwen3.5-397B-A17B and the
    # model card https://huggingface.co/Qwen/Qwen3.5-397B-A17B); the vision tower is loaded and counted.
    model = read_config(QWEN35_397B)
    assert model.family == "qwen3.5-moe"
    assert 396.0 < billions(model.total_params) < 398.0
    assert 16.5 < billions(model.active_params) < 18.5
    assert any("--language-model-only" in note for note in model.notes)


def test_qwen3_5_35b_is_35b_with_3b_active():
    # "35B in total and 3B activated" (https://huggingface.co/Qwen/Qwen3.5-35B-A3B); active here
    # counts the embeddings, the lm_head and the vision tower too.
    model = read_config(QWEN35_35B)
    assert 34.5 < billions(model.total_params) < 35.8
    assert 3.0 < billions(model.active_params) < 4.5


def test_nemotron_3_nano_is_31_6b_with_3_6b_active_with_embeddings():
    # "31.6B total parameters, approximately 3.2B active (3.6B including embeddings)"
    # (https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16).
    model = read_config(NANO)
    assert model.family == "nemotron-h"
    assert 31.4 < billions(model.total_params) < 31.8
    assert 3.4 < billions(model.active_params) < 3.8


def test_nemotron_3_super_is_120b_with_12b_active():
    # "120B total, 12B active" (https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8);
    # its MoE runs on a 1024-wide latent (moe_latent_size).
    model = read_config(SUPER)
    assert 119.0 < billions(model.total_params) < 122.0
    assert 12.0 < billions(model.active_params) < 13.5


def test_kimi_linear_is_48b_with_3b_active(kimi_linear_file):
    # "48B total parameters and 3B activated" (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct,
    # whose safetensors hold 49.1B with embeddings and lm_head).
    model = read_config(kimi_linear_file)
    assert model.family == "kimi-linear"
    assert 47.5 < billions(model.total_params) < 49.5
    assert 2.5 < billions(model.active_params) < 4.0


def test_bundled_kimi_linear_matches_the_card():
    if not KIMI_LINEAR_BUNDLED.exists():
        pytest.skip("no bundled Kimi Linear config")
    model = read_config(KIMI_LINEAR_BUNDLED)
    assert model.family == "kimi-linear"
    assert 47.5 < billions(model.total_params) < 49.5


# --- KV only in attention layers, a fixed state in the others ---------------------------------


def test_qwen3_5_kv_is_its_15_full_attention_layers():
    # layer_types lists 15 full_attention among 60 layers; each keeps K and V of 2 KV heads of 256
    # (num_key_value_heads, head_dim) per token; the 45 Gated DeltaNet layers keep none.
    raw = json.loads(QWEN35_397B.read_text())["text_config"]
    full = raw["layer_types"].count("full_attention")
    assert full == 15
    model = read_config(QWEN35_397B)
    assert model.kv_bytes_per_token(2) == full * 2 * 2 * 256 * 2
    assert model.linear_attention is not None and model.linear_attention.layers == 45


def test_nemotron_kv_is_its_attention_layers_and_mamba_keeps_a_state():
    # hybrid_override_pattern: 6 "*" attention layers (2 KV heads of 128) among 52; 23 "M" Mamba-2
    # layers keep a convolution window and an SSM state as vLLM's mamba2_state_shape sizes them
    # (vllm/model_executor/layers/mamba/mamba_utils.py): conv (64 x 64 + 2 x 8 x 128) x 3 steps and
    # 64 heads x 64 x 128; the 23 MoE layers keep nothing.
    pattern = json.loads(NANO.read_text())["hybrid_override_pattern"]
    assert (pattern.count("*"), pattern.count("M"), pattern.count("E")) == (6, 23, 23)
    model = read_config(NANO)
    assert model.kv_bytes_per_token(2) == 6 * 2 * 2 * 128 * 2
    linear = model.linear_attention
    assert linear is not None and linear.kind == MAMBA2 and linear.layers == 23
    per_layer = (64 * 64 + 2 * 8 * 128) * 3 + 64 * 64 * 128
    assert model.state_bytes_per_request(1, conv_bytes=2, ssm_bytes=2) == 23 * per_layer * 2


def test_kimi_linear_kv_is_the_mla_latent_of_its_7_full_layers(kimi_linear_file):
    # full_attn_layers lists 7 MLA layers, each keeping kv_lora_rank + qk_rope_head_dim per token;
    # the 20 KDA layers keep 32 heads x 128 x 128 of state and a 3 x 4096-channel convolution window
    # (kda_state_shape, vllm/model_executor/layers/mamba/mamba_utils.py).
    model = read_config(kimi_linear_file)
    assert model.kv_bytes_per_token(2) == 7 * (512 + 64) * 2
    linear = model.linear_attention
    assert linear is not None and linear.kind == KIMI_DELTA and linear.layers == 20
    assert model.state_bytes_per_request(1, conv_bytes=2, ssm_bytes=4) == 20 * (
        3 * 4096 * 3 * 2 + 32 * 128 * 128 * 4
    )


# --- The real CLI -------------------------------------------------------------------------------


def plan_json(model: Path, engine: str, gpus: int, gpu: str, layout: str) -> dict:
    env = {**os.environ, "COLUMNS": "400"}
    args = ["plan", "--model", str(model), "--engine", engine, "--gpus", str(gpus), "--gpu", gpu]
    result = subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args, "--layout", layout, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (verdict,) = json.loads(result.stdout)
    return verdict


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_qwen3_5_397b_fits_8_h200_at_tp8(engine):
    # vLLM's recipe serves Qwen/Qwen3.5-397B-A17B with --tensor-parallel-size 8, "verified on 8x
    # H200 GPUs" (https://recipes.vllm.ai/Qwen/Qwen3.5-397B-A17B).
    verdict = plan_json(QWEN35_397B, engine, 8, "h200", "tp8")
    assert verdict["verdict"] == "fits", verdict["reasons"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_nemotron_3_nano_bf16_runs_on_one_h100(engine):
    # SGLang's cookbook launches nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 with --tp 1
    # (https://cookbook-sg-lang.vercel.app/docs/NVIDIA/Nemotron3-Nano); vLLM's guide runs it on one GPU
    # (https://docs.vllm.ai/projects/recipes/en/stable/NVIDIA/Nemotron-3-Nano-30B-A3B.html).
    verdict = plan_json(NANO, engine, 1, "h100", "tp1")
    assert verdict["verdict"] != "fails", verdict["reasons"]
    assert verdict["memory"]["kv_bytes_per_token"] == 6 * 2 * 2 * 128 * 2
    if engine == "vllm":
        assert verdict["verdict"] == "fits"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("which", ["qwen3.5-35b", "super", "kimi-linear"])
def test_every_hybrid_family_gets_a_verdict(engine, which, kimi_linear_file):
    model = {"qwen3.5-35b": QWEN35_35B, "super": SUPER, "kimi-linear": kimi_linear_file}[which]
    verdict = plan_json(model, engine, 8, "h200", "tp8")
    assert verdict["verdict"] in ("fits", "tight", "fails")
    assert verdict["weights_gib_per_gpu"] > 0


# --- One-line errors ----------------------------------------------------------------------------


def nano_raw() -> dict:
    return json.loads(NANO.read_text())


def test_an_unknown_layer_kind_in_the_pattern_is_one_line():
    raw = nano_raw()
    raw["hybrid_override_pattern"] = raw["hybrid_override_pattern"][:-1] + "X"
    with pytest.raises(CockpitError, match=r"hybrid_override_pattern has 'X'.*fix the config.json") as err:
        parse_config(raw, "nano.json")
    assert "\n" not in str(err.value)


def test_a_pattern_shorter_than_the_layers_is_one_line():
    raw = nano_raw()
    raw["hybrid_override_pattern"] = raw["hybrid_override_pattern"][:-2]
    with pytest.raises(CockpitError, match=r"num_hidden_layers \(52\) differs from the 50 layers"):
        parse_config(raw, "nano.json")


def test_kda_layers_out_of_range_are_one_line():
    raw = copy.deepcopy(KIMI_LINEAR)
    raw["linear_attn_config"]["kda_layers"] = [0, 1, 2]
    with pytest.raises(
        CockpitError, match=r"linear_attn_config.kda_layers must be a whole number from 1 to 27"
    ):
        parse_config(raw, "kimi.json")


def test_qwen3_5_layer_types_of_another_length_are_one_line():
    raw = json.loads(QWEN35_35B.read_text())
    raw["text_config"]["layer_types"] = raw["text_config"]["layer_types"][:-1]
    with pytest.raises(CockpitError, match=r"layer_types must list one kind per layer \(40"):
        parse_config(raw, "qwen.json")
