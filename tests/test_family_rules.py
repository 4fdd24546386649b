"""What vLLM 0.33.0 and SGLang 0.5.23 refuse for the current families: pipeline support and the
splits of their linear-attention layers (cockpit/engines/support.py), read from bundled configs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.core.archs import parse_config
from cockpit.core.layout import parse_layout
from cockpit.core.model import ModelArch
from cockpit.engines import get_engine
from cockpit.engines.base import ServerArgs
from cockpit.engines.support import VLLM_PP_MESSAGE

BUNDLED = Path(__file__).resolve().parent.parent / "layouts" / "models"
VLLM = get_engine("vllm")
SGLANG = get_engine("sglang")


def bundled(stem: str) -> ModelArch:
    path = BUNDLED / f"{stem}.json"
    return parse_config(json.loads(path.read_text()), str(path), stem)


def rules(engine, model: ModelArch, layout: str, gpus: int = 16) -> dict[str, str]:
    """Rule id -> message, straight from the adapter."""
    placement = engine.placement(parse_layout(layout), gpus, model, ServerArgs())
    return {r.rule: r.message for r in engine.startup_rules(model, placement, ServerArgs())}


def test_vllm_pp_without_supports_pp_is_refused_in_its_words():
    # The text as vLLM printed it for `--tensor-parallel-size 8 --pipeline-parallel-size 2` on a
    # model class without SupportsPP: https://github.com/vllm-project/vllm/issues/16231
    # (raised by ModelConfig.verify_with_parallel_config, vllm/config/model.py).
    issue_text = (
        "NotImplementedError: Pipeline parallelism is not supported for this model. "
        "Supported models implement the `SupportsPP` interface."
    )
    assert issue_text == VLLM_PP_MESSAGE
    # Zamba2ForCausalLM(nn.Module, HasInnerState, IsHybrid): no SupportsPP
    # (vllm/model_executor/models/zamba2.py).
    model = replace(bundled("llama-3.1-70b"), architecture="Zamba2ForCausalLM")
    assert rules(VLLM, model, "tp8 pp2")["pp-unsupported"] == issue_text
    assert "pp-unsupported" not in rules(VLLM, model, "tp8")


def test_llama4_maverick_pp2_plans_on_vllm_and_is_refused_by_sglang():
    # The layout of https://github.com/vllm-project/vllm/issues/16231 (Maverick, TP8 x PP2 on 16
    # H100s): closed once Llama4ForConditionalGeneration implemented SupportsPP
    # (vllm/model_executor/models/mllama4.py). SGLang's Llama4ForConditionalGeneration.forward takes
    # no pp_proxy_tensors (sglang/srt/models/mllama4.py), so ModelRunner asserts.
    maverick = bundled("llama-4-maverick-17b-128e")
    assert maverick.architecture == "Llama4ForConditionalGeneration"
    assert "pp-unsupported" not in rules(VLLM, maverick, "tp8 pp2")
    assert rules(SGLANG, maverick, "tp8 pp2")["pp-unsupported"] == (
        "AssertionError: Pipeline Parallel is not compatible with this model."
    )


@pytest.mark.parametrize(
    "stem",
    ["qwen3.5-397b-a17b", "nemotron-3-super-120b-a12b-fp8", "kimi-linear-48b-a3b", "gpt-oss-120b"],
)
def test_families_with_pipeline_support_plan_pp2(stem):
    # Each model class implements SupportsPP in vLLM (qwen3_5.py via Qwen3VLForConditionalGeneration,
    # nemotron_h.py, vllm/models/kimi_k3/nvidia/model.py, gpt_oss.py) and takes pp_proxy_tensors in
    # SGLang (qwen3_5.py via qwen3_vl.py, nemotron_h.py, kimi_linear.py, gpt_oss.py).
    model = bundled(stem)
    for engine in (VLLM, SGLANG):
        assert "pp-unsupported" not in rules(engine, model, "tp4 pp2")


def test_qwen3_5_397b_gdn_key_heads_bound_tp():
    # Qwen/Qwen3.5-397B-A17B config (bundled, layouts/models/SOURCES.md): 32 attention heads, 16
    # GDN key heads, 64 value heads. TP8 splits them all. At TP32 the attention heads split, the key
    # heads do not: vLLM's GDN layer takes num_k_heads // tp_size and views the query as
    # (..., -1, head_k_dim) (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py), with
    # no words of its own.
    model = bundled("qwen3.5-397b-a17b")
    assert (model.heads, model.linear_attention.key_heads) == (32, 16)
    for engine in (VLLM, SGLANG):
        assert rules(engine, model, "tp8") == {}
        failed = rules(engine, model, "tp32", gpus=32)
        assert list(failed) == ["gdn-key-heads"]


def test_nemotron_super_mamba_groups_in_the_engines_words():
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8 config: 128 Mamba heads in 8 groups. MambaMixer2
    # asserts (vllm/model_executor/layers/mamba/mamba_mixer2.py, and the same text in
    # sglang/srt/layers/attention/mamba/mamba.py) that TP divides the groups unless there is one.
    model = bundled("nemotron-3-super-120b-a12b-fp8")
    assert (model.linear_attention.value_heads, model.linear_attention.key_heads) == (128, 8)
    text = (
        "AssertionError: If tensor parallel world size does not divide num_groups, then num_groups "
        "must equal 1."
    )
    for engine in (VLLM, SGLANG):
        assert "mamba-groups" not in rules(engine, model, "tp8")
        assert rules(engine, model, "tp16")["mamba-groups"] == text


def test_mamba_heads_rule_comes_first_for_the_nano():
    # Nemotron-3-Nano: 64 Mamba heads, 8 groups; its first layer is Mamba ("M...", the config's
    # hybrid_override_pattern), so at TP128 SGLang's first words are MambaMixer2's heads assert.
    model = bundled("nemotron-3-nano-30b-a3b")
    first = next(iter(rules(SGLANG, model, "tp128", gpus=128).items()))
    assert first == ("mamba-heads", "AssertionError: Tensor parallel world size must divide num heads.")


def test_kimi_linear_kda_heads_on_vllm():
    # moonshotai/Kimi-Linear-48B-A3B-Instruct: 32 KDA heads (linear_attn_config.num_heads).
    # KimiK3DeltaAttention asserts num_heads % tp_size == 0 (vllm/models/kimi_k3/nvidia/kda.py),
    # after VllmConfig's heads check (vllm/config/model.py) has already refused TP64.
    model = bundled("kimi-linear-48b-a3b")
    failed = rules(VLLM, model, "tp64", gpus=64)
    assert list(failed)[:2] == ["attention-heads", "kda-heads"]
    assert rules(VLLM, model, "tp4") == {}


def test_cli_plan_says_the_gdn_refusal():
    """The real CLI, on the bundled config: one refusal at TP32, the plan at TP8."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cockpit",
            "plan",
            "--model",
            str(BUNDLED / "qwen3.5-397b-a17b.json"),
            "--engine",
            "vllm",
            "--gpus",
            "32",
            "--gpu",
            "h200",
            "--layout",
            "tp32",
            "--layout",
            "tp8",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    verdicts = {row["layout"]: row for row in json.loads(out.stdout)}
    assert [r["rule"] for r in verdicts["tp32"]["reasons"]] == ["gdn-key-heads"]
    assert not any(r["rule"] == "gdn-key-heads" for r in verdicts["tp8"]["reasons"])


def test_glm5_fp8_expert_width_bounds_tp_and_deepseek_v4_pads_its_shared_expert():
    # zai-org/GLM-5-FP8: moe_intermediate_size 2048 in 128x128 FP8 blocks. At TP32 each rank would
    # hold 64 columns: half a block. The text is vLLM's validate_fp8_block_shape
    # (vllm/model_executor/layers/quantization/utils/fp8_utils.py).
    glm5 = bundled("glm-5-fp8")
    assert rules(VLLM, glm5, "tp8") == {}
    assert rules(VLLM, glm5, "tp32", gpus=32)["fp8-block-gate-up"] == (
        "ValueError: The output_size of gate's and up's weight = 64 is not divisible by weight "
        "quantization block_n = 128."
    )
    # deepseek-ai/DeepSeek-V4-Pro: shared expert 3072 wide; vLLM's DeepseekV4MLP rounds each
    # rank's share up to whole blocks (vllm/models/deepseek_v4/nvidia/model.py), so TP16 (192 per
    # rank) is no block failure on vLLM.
    pro = bundled("deepseek-v4-pro")
    assert not any(r.startswith("fp8-block") for r in rules(VLLM, pro, "tp16"))
