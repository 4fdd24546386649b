"""A family cockpit has not met, planned from the common config names (cockpit/core/archs/generic.py):
approximate, with what it assumed; refused, naming the keys, only when the config lacks them; and
planned from its checkpoint instead when the *.safetensors lie beside its config.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cockpit.core.archs import parse_config
from cockpit.core.errors import CockpitError
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
    SLIDING,
    NeedsCheckpoint,
)
from cockpit.faces.cli import main
from cockpit.store.modelfiles import load_model

# google/gemma-3-27b-it's config.json (https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json),
# its text_config verbatim. It leaves the vocabulary, the layer pattern and the context to
# transformers' Gemma3TextConfig defaults, so cockpit, which reads no model's code, lacks vocab_size.
GEMMA3_27B_GOOGLE = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "eos_token_id": [1, 106],
    "image_token_index": 262144,
    "initializer_range": 0.02,
    "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}
# The same config as transformers writes it back (save_pretrained writes every setting): the
# defaults of Gemma3TextConfig filled in. The embedding is 262,208 x 5,376
# (Gemma3TextScaledWordEmbedding(262208, 5376) in the model printout of
# https://developers.googleblog.com/en/gemma-explained-whats-new-in-gemma-3/), one global layer in
# six (the Gemma 3 Technical Report, https://arxiv.org/abs/2503.19786, section 2: "5 local layers
# for every global layer", local span 1024), a 128K context, embeddings tied.
GEMMA3_27B = {
    **GEMMA3_27B_GOOGLE,
    "text_config": {
        **GEMMA3_27B_GOOGLE["text_config"],
        "vocab_size": 262208,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    },
}

# An invented family with DeepSeek's MoE spellings: two dense layers first, then MoE layers of
# 32 routed experts (top-4) and 2 shared experts.
NIMBUS_MOE = {
    "model_type": "nimbus_moe",
    "architectures": ["NimbusMoeForCausalLM"],
    "num_hidden_layers": 8,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 32000,
    "intermediate_size": 4096,
    "moe_intermediate_size": 512,
    "n_routed_experts": 32,
    "num_experts_per_tok": 4,
    "n_shared_experts": 2,
    "first_k_dense_replace": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_gemma3_27b_is_planned_approximate_with_sliding_window_layers():
    model = parse_config(GEMMA3_27B, source="gemma-3-27b-it/config.json", name="gemma-3-27b-it")
    assert model.approximate and model.family == "generic"
    # 62 layers, every sixth global: layers 5, 11, ..., 59 are full attention (10), 52 slide over
    # 1024 tokens (Gemma 3 Technical Report, section 2).
    assert model.windowed is not None
    assert (model.windowed.kind, model.windowed.layers, model.windowed.window) == (SLIDING, 52, 1024)
    assert model.full_attention_layers() == 10
    assert any("sliding_window_pattern 6" in note for note in model.notes)
    assert any("gated MLP assumed" in note for note in model.notes)
    # The Gemma 3 Technical Report, Table 1: 27B has 25,600M non-embedding parameters (and 1,416M
    # embedding, 417M vision encoder, which vLLM loads beside the language model).
    non_embedding = model.total_params - model.params[EMBEDDING] - model.params[LM_HEAD]
    assert non_embedding == pytest.approx(25_600e6, rel=0.002)
    assert model.params[EMBEDDING] == 262208 * 5376 and model.params[LM_HEAD] == 0
    # A request at the full 128K context keeps every token only in the 10 global layers.
    full_kv = 62 * 131072 * 2 * 16 * 128 * 2
    assert model.kv_bytes_per_request(131072, 2) < full_kv / 5


def test_gemma3_27b_as_google_writes_it_is_refused_naming_the_vocabulary(tmp_path):
    folder = write_config(tmp_path / "gemma-3-27b-it", GEMMA3_27B_GOOGLE)
    with pytest.raises(CockpitError) as err:
        load_model(str(folder))
    text = str(err.value)
    assert "'gemma3_text' is not a family cockpit knows" in text and "lacks vocab_size" in text
    assert "no *.safetensors" in text and "\n" not in text


def test_an_invented_moe_family_is_planned_from_the_moe_keys():
    model = parse_config(NIMBUS_MOE, source="nimbus/config.json", name="nimbus")
    assert model.approximate and model.moe is not None
    assert (model.moe.experts, model.moe.experts_per_token, model.moe.moe_layers) == (32, 4, 6)
    assert model.dense_layers == 2 and model.dense_intermediate == 4096
    h = 1024
    # By hand, as a GQA decoder with gated MLPs builds them (q, k, v, o; gate, up, down):
    attention = 8 * (h * 16 * 64 + 2 * h * 4 * 64 + 16 * 64 * h)
    assert model.params[ATTN_SHARDED] == attention == 20_971_520
    assert model.params[ATTN_REPLICATED] == 0
    assert model.params[DENSE_MLP] == 2 * 3 * h * 4096 == 25_165_824
    assert model.params[ROUTED_EXPERTS] == 6 * 32 * 3 * h * 512 == 301_989_888
    assert model.params[SHARED_EXPERTS] == 6 * 3 * h * (2 * 512) == 18_874_368
    assert model.params[ROUTER] == 6 * 32 * h == 196_608
    assert model.params[EMBEDDING] == model.params[LM_HEAD] == 32000 * h
    # Two RMSNorms per layer and the final one, plus the q/k norms the reader assumes (Qwen3-like).
    assert 8 * 2 * h + h <= model.params[NORMS] <= 8 * (2 * h + 2 * 64) + h
    assert model.total_params - model.params[NORMS] == 432_734_208
    assert not any("MoE on every layer" in note for note in model.notes)
    assert not any("no expert count" in note for note in model.notes)


def test_moe_keys_of_other_families_and_what_was_assumed():
    # Qwen2-MoE's pattern: layer i has experts unless listed in mlp_only_layers, when (i + 1) %
    # decoder_sparse_step == 0 (Qwen2MoeDecoderLayer, vllm/model_executor/models/qwen2_moe.py).
    qwen_like = {
        **{k: v for k, v in NIMBUS_MOE.items() if k not in ("n_routed_experts", "first_k_dense_replace")},
        "n_shared_experts": None,
        "num_experts": 16,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [1],
        "shared_expert_intermediate_size": 1536,
    }
    model = parse_config(qwen_like, source="q.json")
    assert model.moe is not None and model.moe.moe_layers == 3  # layers 3, 5, 7
    assert (model.moe.shared_experts, model.moe.shared_intermediate) == (1, 1536)
    # Mixtral's spelling: experts in num_local_experts, their width in intermediate_size, no pattern.
    mixtral_like = {
        "model_type": "cirrus",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "vocab_size": 1000,
        "intermediate_size": 1024,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    model = parse_config(mixtral_like, source="m.json")
    assert model.moe is not None and model.moe.moe_layers == 4 and model.moe.expert_intermediate == 1024
    notes = " | ".join(model.notes)
    for assumed in (
        "MoE on every layer (no layer pattern found)",
        "expert width from intermediate_size",
        "head_dim from hidden_size / num_attention_heads",
        "(MHA) assumed",
        "tie_word_embeddings absent",
        "4096 assumed",
    ):
        assert assumed in notes


def test_a_config_lacking_the_layers_and_width_is_refused_naming_both(tmp_path):
    config = {k: v for k, v in NIMBUS_MOE.items() if k not in ("num_hidden_layers", "hidden_size")}
    with pytest.raises(NeedsCheckpoint) as err:
        parse_config(config, source="nimbus/config.json")
    assert "lacks num_hidden_layers and hidden_size" in str(err.value)
    folder = write_config(tmp_path / "nimbus", config)
    with pytest.raises(CockpitError) as err:
        load_model(str(folder))
    text = str(err.value)
    assert "lacks num_hidden_layers and hidden_size" in text and "\n" not in text
    assert f"download the checkpoint into {folder}" in text


def test_a_quantization_it_cannot_size_is_planned_as_the_dtype():
    config = {**NIMBUS_MOE, "quantization_config": {"quant_method": "awq", "bits": 4}}
    model = parse_config(config, source="nimbus/config.json")
    assert model.quant.label == "BF16" and model.approximate
    assert any("quantization 'awq' not sized" in note for note in model.notes)


# A dense model of an unknown family, small enough to write its checkpoint here: safetensors as the
# library writes it (8-byte little-endian header length, the JSON header, the data), the data a
# sparse hole since cockpit reads only headers.
TINY = {
    "model_type": "tinyfam",
    "architectures": ["TinyFamForCausalLM"],
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "intermediate_size": 96,
    "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def tiny_tensors() -> dict[str, tuple[int, ...]]:
    h, kv, ffn = 64, 2 * 16, 96
    tensors: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (128, h), "lm_head.weight": (128, h)}
    tensors["model.norm.weight"] = (h,)
    for i in range(2):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (ffn, h),
            p + "mlp.up_proj.weight": (ffn, h),
            p + "mlp.down_proj.weight": (h, ffn),
        }
    return tensors


def write_safetensors(path: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as file:
        file.write(len(raw).to_bytes(8, "little"))
        file.write(raw)
        file.truncate(8 + len(raw) + offset)


def test_a_checkpoint_beside_the_config_still_plans_from_the_tensors(tmp_path):
    folder = write_config(tmp_path / "tiny", TINY)
    approximate = load_model(str(folder))
    assert approximate.approximate and approximate.family == "generic"
    tensors = tiny_tensors()
    write_safetensors(folder / "model.safetensors", tensors)
    exact = load_model(str(folder))
    assert not exact.approximate and exact.family == "tinyfam"
    assert exact.total_params == sum(math.prod(shape) for shape in tensors.values())
    # The tensors say nothing of windows: the config's sliding-window layer stays.
    assert exact.windowed is not None and (exact.windowed.layers, exact.windowed.window) == (1, 16)
    assert any("sliding-window layers" in note for note in exact.notes)


def test_plan_shows_the_approximate_mark_once(tmp_path, capsys):
    folder = write_config(tmp_path / "gemma-3-27b-it", GEMMA3_27B)
    args = ["plan", "--model", str(folder / "config.json"), "--gpus", "2", "--gpu", "h100"]
    assert main([*args, "--layout", "tp2"]) == 0
    out = capsys.readouterr().out
    assert out.count(", approximate") == 1
    assert "gemma-3-27b-it (generic, 27.0B params, 10 of 62 layers full attention, BF16, approximate)" in out
    assert "✓ fits" in out
    assert main([*args, "--engine", "sglang", "--layout", "tp2"]) == 0
    assert capsys.readouterr().out.count(", approximate") == 1
