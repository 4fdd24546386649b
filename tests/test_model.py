"""Reading config.json: families, quantization, where configs are found, and every error."""

from __future__ import annotations

import json

import pytest
from conftest import MODELS

from cockpit.core.archs import parse_config
from cockpit.core.errors import CockpitError
from cockpit.core.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
)
from cockpit.store.modelfiles import find_config, load_model, read_config

GB = 1e9


def test_minimax_m2_reads_expert_width_from_intermediate_size(minimax):
    assert minimax.family == "minimax-m2"
    assert minimax.moe.experts == 256 and minimax.moe.expert_intermediate == 1536
    assert minimax.moe.experts_per_token == 8 and minimax.moe.shared_experts == 0
    assert (minimax.heads, minimax.kv_heads, minimax.head_dim, minimax.layers) == (48, 8, 128, 62)
    assert minimax.quant.method == "fp8-block" and minimax.quant.block == (128, 128)
    # Experts 224.7 B params, ~228.6 B in all, ~230 GB on disk (docs/memory.md#worked-numbers).
    assert minimax.params[ROUTED_EXPERTS] / 1e9 == pytest.approx(224.7, rel=0.01)
    assert minimax.total_params / 1e9 == pytest.approx(228.6, rel=0.01)
    assert minimax.total_bytes / GB == pytest.approx(230.1, rel=0.01)
    # The router and lm_head stay unquantized (modules_to_not_convert).
    assert minimax.quant.bytes_per_param(ROUTER) == 2
    assert minimax.quant.bytes_per_param(LM_HEAD) == 2


def test_kimi_nests_text_config_and_keeps_attention_and_shared_experts_bf16(kimi):
    assert kimi.family == "deepseek-v3" and kimi.mla is not None
    assert kimi.moe.experts == 384 and kimi.moe.shared_experts == 1 and kimi.dense_layers == 1
    assert kimi.quant.method == "int4" and kimi.quant.group_size == 32
    assert kimi.quant.bytes_per_param(ROUTED_EXPERTS) == pytest.approx(0.5625)
    for cls in (ATTN_SHARDED, ATTN_REPLICATED, SHARED_EXPERTS, DENSE_MLP, EMBEDDING, LM_HEAD):
        assert kimi.quant.bytes_per_param(cls) == 2, cls
    # Routed 1,014.7 B, attention 6.17 B; ~594.5 GB with INT4 experts (docs/memory.md#worked-numbers).
    assert kimi.params[ROUTED_EXPERTS] / 1e9 == pytest.approx(1014.7, rel=0.005)
    assert (kimi.params[ATTN_SHARDED] + kimi.params[ATTN_REPLICATED]) / 1e9 == pytest.approx(6.17, rel=0.01)
    assert kimi.total_bytes / GB == pytest.approx(594.5, rel=0.01)
    assert kimi.active_params / 1e9 == pytest.approx(32.9, rel=0.03)


def test_mla_kv_cache_is_one_latent_per_token_on_every_rank(kimi, minimax):
    assert kimi.kv_bytes_per_token(2, attn_tp=8) == 61 * 576 * 2 == kimi.kv_bytes_per_token(2, attn_tp=1)
    assert minimax.kv_bytes_per_token(2, attn_tp=1) == 253_952
    assert minimax.kv_bytes_per_token(2, attn_tp=8) == 31_744
    assert minimax.kv_bytes_per_token(2, attn_tp=16) == 31_744  # one KV head per rank, replicated


@pytest.mark.parametrize(
    "name, family, method, experts",
    [
        ("deepseek-v3.json", "deepseek-v3", "fp8-block", 256),
        ("kimi-k2-instruct.json", "deepseek-v3", "fp8-block", 384),
        ("qwen3-235b-a22b-fp8.json", "qwen3-moe", "fp8-block", 128),
        ("glm-4.5-fp8.json", "glm4-moe", "fp8", 160),
        ("kimi-k2.6-nvfp4.json", "deepseek-v3", "nvfp4", 384),
        ("qwen2.5-72b-instruct.json", "dense", "bf16", None),
    ],
)
def test_families_and_quantizations(name, family, method, experts):
    model = read_config(MODELS / name)
    assert model.family == family
    assert model.quant.method == method
    assert (model.moe.experts if model.moe else None) == experts
    assert model.name == name.removesuffix(".json")


def test_bundled_families(tmp_path):
    gpt = load_model("gpt-oss-120b", env={})
    assert gpt.quant.method == "mxfp4" and gpt.quant.bytes_per_param(ATTN_SHARDED) == 2
    assert gpt.total_bytes / GB == pytest.approx(65, rel=0.05)  # ~65 GB checkpoint
    mixtral = load_model("mixtral-8x7b-v0.1", env={})
    assert mixtral.total_params / 1e9 == pytest.approx(46.7, rel=0.01)
    llama = load_model("llama-3.1-70b", env={})
    assert llama.moe is None and llama.total_params / 1e9 == pytest.approx(70.6, rel=0.01)
    qwen = load_model("qwen3-30b-a3b-fp8", env={})
    assert qwen.total_params / 1e9 == pytest.approx(30.5, rel=0.01)


def test_nvfp4_ignore_list_keeps_attention_bf16():
    model = read_config(MODELS / "kimi-k2.6-nvfp4.json")
    assert model.quant.bytes_per_param(ROUTED_EXPERTS) == pytest.approx(0.5625)
    assert model.quant.bytes_per_param(ATTN_SHARDED) == 2
    assert model.quant.bytes_per_param(SHARED_EXPERTS) == 2


def test_glm_fp8_is_per_channel_so_no_block_rules():
    model = read_config(MODELS / "glm-4.5-fp8.json")
    assert model.quant.block is None and model.moe.shared_experts == 1 and model.dense_layers == 3


def test_unknown_family_is_planned_approximate_not_treated_as_dense(tmp_path):
    # A config of a family cockpit does not know, with no checkpoint beside it, is planned from the
    # common names: its experts are read, and the plan says it is approximate and what it left out.
    config = json.loads((MODELS / "qwen3-next-80b-a3b-instruct.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "model_type": "qwen9_next"}))
    model = read_config(path)
    assert model.approximate and model.moe is not None and model.moe.experts == 512
    assert any("linear_num_value_heads" in note for note in model.notes)


def test_missing_key_names_the_key_and_the_file(tmp_path):
    config = json.loads((MODELS / "deepseek-v3.json").read_text())
    del config["n_routed_experts"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(CockpitError) as err:
        read_config(path)
    assert "'n_routed_experts'" in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_json_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",')
    with pytest.raises(CockpitError, match="not valid JSON .*line 1"):
        read_config(path)


def test_json_that_is_not_an_object(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(CockpitError, match="no JSON object"):
        read_config(path)


def test_unsupported_quantization_is_named():
    with pytest.raises(CockpitError, match="quantization 'awq'"):
        parse_config(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "intermediate_size": 128,
                "quantization_config": {"quant_method": "awq"},
            }
        )


def test_config_from_file_folder_hf_cache_and_bundle(tmp_path):
    folder = tmp_path / "MyModel"
    folder.mkdir()
    (folder / "config.json").write_text((MODELS / "deepseek-v3.json").read_text())
    assert find_config(str(folder)) == folder / "config.json"
    assert load_model(str(folder)).name == "MyModel"
    assert find_config(str(folder / "config.json")) == folder / "config.json"

    cache = tmp_path / "hub" / "models--acme--Tiny-MoE"
    snapshot = cache / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((MODELS / "qwen3-235b-a22b-fp8.json").read_text())
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("abc123")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    assert find_config("acme/Tiny-MoE", env) == snapshot / "config.json"
    assert load_model("acme/Tiny-MoE", env).family == "qwen3-moe"
    # HF_HOME/hub is searched too.
    assert find_config("acme/Tiny-MoE", {"HF_HOME": str(tmp_path)}) == snapshot / "config.json"
    # Not cached but bundled: a laptop can still plan the real model.
    assert find_config("MiniMaxAI/MiniMax-M2.5", env).name == "minimax-m2.5.json"
    assert find_config("moonshotai/Kimi-K2.5", env).name == "kimi-k2.6.json"


def test_cached_config_wins_over_the_bundle(tmp_path):
    snapshot = tmp_path / "hub" / "models--MiniMaxAI--MiniMax-M2.5" / "snapshots" / "x"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((MODELS / "deepseek-v3.json").read_text())
    assert (
        find_config("MiniMaxAI/MiniMax-M2.5", {"HF_HUB_CACHE": str(tmp_path / "hub")})
        == snapshot / "config.json"
    )


def test_not_found_lists_what_would_work(tmp_path):
    with pytest.raises(CockpitError, match="not found.*minimax-m2.5"):
        find_config("nobody/NoSuchModel", {"HF_HUB_CACHE": str(tmp_path)})
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(CockpitError, match="has no config.json"):
        find_config(str(folder))


def test_model_prints_one_line(minimax):
    text = str(minimax)
    assert "\n" not in text and "FP8 block 128x128" in text and "256 experts top-8" in text


def test_unreadable_config_is_one_line(tmp_path):
    folder = tmp_path / "odd.json"
    folder.mkdir()
    with pytest.raises(CockpitError, match="odd.json is a folder, not a file: point --model"):
        read_config(folder)


def test_compressed_tensors_without_weights_is_named():
    with pytest.raises(CockpitError, match="no config_groups weights"):
        parse_config(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "intermediate_size": 128,
                "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {}},
            }
        )


# --- Absurd values: one line that names the file, the key and the value -----------------------

_LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "intermediate_size": 128,
}


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"num_hidden_layers": "2"}, ["num_hidden_layers", "'2'"]),
        ({"num_hidden_layers": float("nan")}, ["num_hidden_layers", "nan"]),
        ({"num_hidden_layers": 10**400}, ["num_hidden_layers", "from 1 to 10,000"]),
        ({"num_hidden_layers": 1e308}, ["num_hidden_layers"]),
        ({"num_hidden_layers": 10_001}, ["num_hidden_layers"]),
        ({"num_hidden_layers": True}, ["num_hidden_layers", "True"]),
        ({"hidden_size": -64}, ["hidden_size"]),
        ({"num_attention_heads": 0}, ["num_attention_heads"]),
        ({"num_key_value_heads": 8}, ["num_key_value_heads (8) is more than num_attention_heads (4)"]),
        (
            {"hidden_size": 2, "num_attention_heads": 4, "num_key_value_heads": 4},
            ["hidden_size (2) is smaller"],
        ),
        ({"vocab_size": 0}, ["vocab_size"]),
        ({"intermediate_size": [128]}, ["intermediate_size", "[128]"]),
        ({"max_position_embeddings": -1}, ["max_position_embeddings"]),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]}},
            ["weight_block_size"],
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, "x"]}},
            ["weight_block_size"],
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": 5}},
            ["modules_to_not_convert"],
        ),
        (
            {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 0}},
            ["group_size"],
        ),
        (
            {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}},
            ["config_groups"],
        ),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"g": {"weights": 4}},
                }
            },
            ["weights"],
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["re:("]}},
            ["wrong type or size"],
        ),
        ({"architectures": 5}, None),  # an odd spelling of a name only: still plans
    ],
)
def test_absurd_values_are_one_line(changes, words):
    config = {**_LLAMA, **changes}
    if words is None:
        assert parse_config(config, source="c.json").architecture == "?"
        return
    with pytest.raises(CockpitError) as err:
        parse_config(config, source="c.json")
    message = str(err.value)
    assert message.startswith("c.json") and "\n" not in message and len(message) < 300
    for word in words:
        assert word in message


def test_moe_counts_are_checked_against_each_other():
    config = json.loads((MODELS / "qwen3-235b-a22b-fp8.json").read_text())
    with pytest.raises(CockpitError, match=r"num_experts_per_tok \(129\) is more than the 128 experts"):
        parse_config({**config, "num_experts_per_tok": 129})
    with pytest.raises(CockpitError, match="mlp_only_layers must be a list"):
        parse_config({**config, "mlp_only_layers": 3})
    deepseek = json.loads((MODELS / "deepseek-v3.json").read_text())
    with pytest.raises(CockpitError, match="first_k_dense_replace"):
        parse_config({**deepseek, "first_k_dense_replace": 62})
    with pytest.raises(CockpitError, match="n_routed_experts"):
        parse_config({**deepseek, "n_routed_experts": 10**6})


@pytest.mark.parametrize(
    "data, message",
    [
        (bytes(range(256)), "not UTF-8 text"),
        ('{"model_type": "llama"}'.encode("utf-16"), "UTF-16"),
        (b"[" * 100_000 + b"]" * 100_000, "too deeply"),
        (b'{"a": ' + b"9" * 5000 + b"}", "thousands of digits"),
    ],
)
def test_unreadable_bytes_are_one_line(tmp_path, data, message):
    path = tmp_path / "config.json"
    path.write_bytes(data)
    with pytest.raises(CockpitError, match=message) as err:
        read_config(path)
    assert "\n" not in str(err.value)


def test_a_utf8_bom_is_fine(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + (MODELS / "deepseek-v3.json").read_bytes())
    assert read_config(path).family == "deepseek-v3"


def test_whole_floats_are_counts():
    assert parse_config({**_LLAMA, "num_hidden_layers": 2.0}).layers == 2
