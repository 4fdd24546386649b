"""The bundled config.json files: each one real JSON, listed with its source, launched by its repository id.

Sources and checksums: layouts/models/SOURCES.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.engines import get_engine
from cockpit.store.modelfiles import (
    _BUNDLED_ALIASES,
    BUNDLED_REPO_IDS,
    bundled_dir,
    bundled_names,
    find_config,
    model_argv_path,
)

# The Hugging Face repository of each family added with its reader (SOURCES.md names where each file
# was copied from).
NEW_FAMILIES = {
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
    "glm-5-fp8": "zai-org/GLM-5-FP8",
    "kimi-linear-48b-a3b": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    "llama-4-maverick-17b-128e": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "llama-4-scout-17b-16e": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "nemotron-3-nano-30b-a3b": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "nemotron-3-super-120b-a12b-fp8": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
    "qwen3.5-35b-a3b": "Qwen/Qwen3.5-35B-A3B",
    "qwen3.5-397b-a17b": "Qwen/Qwen3.5-397B-A17B",
}
NO_CACHE = {"HOME": "/nonexistent"}  # resolve repo ids from the bundle, never a local HF cache


def _sources() -> dict[str, tuple[str, str]]:
    """file name -> (repo id, sha256), from the table rows of SOURCES.md."""
    rows = {}
    for line in (bundled_dir() / "SOURCES.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0]] = (cells[1], cells[4])
    return rows


def _config(name: str) -> dict:
    return json.loads((bundled_dir() / f"{name}.json").read_text())


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_file_is_a_config_with_a_model_type(name):
    config = _config(name)
    assert isinstance(config, dict) and isinstance(config.get("model_type"), str) and config["model_type"]
    assert config.get("architectures"), name


def test_every_bundled_file_is_listed_with_its_source_and_bytes():
    rows = _sources()
    assert set(rows) == {f"{n}.json" for n in bundled_names()}
    for file, (repo, sha) in rows.items():
        assert BUNDLED_REPO_IDS[file.removesuffix(".json")] == repo
        assert hashlib.sha256((bundled_dir() / file).read_bytes()).hexdigest() == sha, f"{file} was edited"


def test_every_bundled_file_has_a_repository_id():
    assert set(BUNDLED_REPO_IDS) == set(bundled_names())
    assert NEW_FAMILIES.items() <= BUNDLED_REPO_IDS.items()


@pytest.mark.parametrize(("name", "repo"), sorted(NEW_FAMILIES.items()))
def test_a_new_family_is_launched_by_its_repository_id(name, repo):
    assert model_argv_path(name) == repo and model_argv_path(repo) == repo
    assert find_config(repo, env=NO_CACHE) == find_config(name) == bundled_dir() / f"{name}.json"
    assert get_engine("vllm").model_args(model_argv_path(name)) == [repo]
    assert get_engine("sglang").model_args(model_argv_path(name)) == ["--model-path", repo]


def test_aliases_name_a_bundled_file_of_the_same_precision():
    """A repo id read from another repository's file: the same weights' precision, never an
    FP8 checkpoint sized from a BF16 config or the reverse."""
    for repo, stem in _BUNDLED_ALIASES.items():
        assert repo == repo.lower() and re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo)
        assert find_config(repo, env=NO_CACHE) == bundled_dir() / f"{stem}.json"
        assert ("fp8" in repo) == ("fp8" in stem), repo
        assert ("bf16" in repo) <= (_config(stem).get("quantization_config") is None), repo


def test_kimi_linear_is_the_48b_checkpoints_config():
    """The published shape of Kimi-Linear-48B-A3B: 27 layers of hidden 2304, KDA in three of every
    four layers and MLA in the rest (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct,
    "Hybrid Architecture: A 3:1 KDA-to-global MLA ratio"), 256 routed experts, 8 per token, one
    shared, a dense first layer; the checkpoint's tensors (model.safetensors.index.json) hold
    embed_tokens [163840, 2304] and experts w1 [1024, 2304] on layers 1-26."""
    config = _config("kimi-linear-48b-a3b")
    linear = config["linear_attn_config"]
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == (
        "kimi_linear",
        2304,
        27,
    )
    assert linear["full_attn_layers"] == [4, 8, 12, 16, 20, 24, 27]
    assert sorted(linear["kda_layers"] + linear["full_attn_layers"]) == list(range(1, 28))
    assert (config["num_experts"], config["num_experts_per_token"], config["num_shared_experts"]) == (
        256,
        8,
        1,
    )
    assert (config["vocab_size"], config["moe_intermediate_size"], config["first_k_dense_replace"]) == (
        163840,
        1024,
        1,
    )


def test_the_cli_lists_the_new_families_when_a_model_is_not_found():
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "plan", "--model", "no-such-model"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": "/nonexistent", "HF_HOME": "/nonexistent", "HF_HUB_CACHE": "/nonexistent"},
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode != 0
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and all(name in message[0] for name in NEW_FAMILIES)


@pytest.mark.parametrize(("name", "repo"), sorted(NEW_FAMILIES.items()))
def test_cockpit_plan_launches_a_bundled_name_by_its_repository_id(name, repo):
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "plan", "--model", name, "--gpus", "8", "--gpu", "h200"]
        + ["--layout", "tp8", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": "/nonexistent", "HF_HOME": "/nonexistent", "HF_HUB_CACHE": "/nonexistent"},
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["argv"][:3] == ["vllm", "serve", repo]


def test_a_modelopt_checkpoint_keeps_its_fp8_in_hf_quant_config(tmp_path):
    """NVIDIA's Nemotron 3 Super FP8 repository says FP8 in hf_quant_config.json, not config.json;
    vLLM reads that file when config.json has no quantization_config
    (vllm/transformers_utils/config.py), and so does cockpit, bundled or in a model folder."""
    from cockpit.core.errors import CockpitError
    from cockpit.store.modelfiles import read_config

    bundled = read_config(bundled_dir() / "nemotron-3-super-120b-a12b-fp8.json")
    assert bundled.quant.method == "fp8"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text((bundled_dir() / "nemotron-3-super-120b-a12b-fp8.json").read_text())
    assert read_config(folder / "config.json").quant.method == "bf16"  # nothing beside it: as the file says
    (folder / "hf_quant_config.json").write_text(
        (bundled_dir() / "nemotron-3-super-120b-a12b-fp8.hf_quant_config").read_text()
    )
    model = read_config(folder / "config.json")
    assert model.quant.method == "fp8" and model.total_bytes < 0.6 * 2 * model.total_params
    (folder / "hf_quant_config.json").write_text('{"producer": {}}')
    with pytest.raises(CockpitError, match="has no 'quantization' object") as err:
        read_config(folder / "config.json")
    assert "\n" not in str(err.value)
