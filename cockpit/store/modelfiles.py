"""Finding and reading a model's config.json: a file, a folder, the Hugging Face cache, a bundled one.

The edge of `cockpit.core.model` and `cockpit.core.checkpoint`, which turn the parsed settings into an architecture
and read no files.
A config cockpit cannot size alone (a family it does not know, whose config lacks the common names)
is planned from the checkpoint beside it, read by `cockpit.store.safetensors`
(docs/placement.md#models-cockpit-reads-from-their-checkpoint). A config of such a family that does
use the common names gets an approximate plan, unless the checkpoint lies beside it: its tensors are
exact, so they win.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cockpit.core.archs import parse_config
from cockpit.core.checkpoint import arch_from_checkpoint
from cockpit.core.errors import CockpitError
from cockpit.core.model import ModelArch, NeedsCheckpoint
from cockpit.store.safetensors import read_checkpoint
from cockpit.store.textfile import read_text

_BUNDLED_DIR = Path(__file__).resolve().parent.parent / "layouts" / "models"
# Repo ids whose names differ from the bundled file's stem.
_BUNDLED_ALIASES = {
    "moonshotai/kimi-k2.5": "kimi-k2.6",
    "moonshotai/kimi-k2-thinking": "kimi-k2.6",
    "minimaxai/minimax-m2": "minimax-m2.5",
    "minimaxai/minimax-m2.1": "minimax-m2.5",
    "meta-llama/meta-llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b-v0.1",
    # Same structure as V3.2 (https://huggingface.co/deepseek-ai/DeepSeek-V3.2, model card).
    "deepseek-ai/deepseek-v3.2-exp": "deepseek-v3.2",
    "meta-llama/llama-4-scout-17b-16e-instruct": "llama-4-scout-17b-16e",
    "meta-llama/llama-4-scout-17b-16e": "llama-4-scout-17b-16e",
    "meta-llama/llama-4-maverick-17b-128e-instruct": "llama-4-maverick-17b-128e",
    "meta-llama/llama-4-maverick-17b-128e": "llama-4-maverick-17b-128e",
    "nvidia/nvidia-nemotron-3-nano-30b-a3b-bf16": "nemotron-3-nano-30b-a3b",
    "nvidia/nvidia-nemotron-3-super-120b-a12b-fp8": "nemotron-3-super-120b-a12b-fp8",
    "moonshotai/kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b",
    "moonshotai/kimi-linear-48b-a3b-base": "kimi-linear-48b-a3b",
}


# The repository each bundled architecture was read from: what an engine loads when a profile or
# --model names the bundled file (`--model gpt-oss-120b` launches `vllm serve openai/gpt-oss-120b`).
BUNDLED_REPO_IDS = {
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "kimi-k2.6": "moonshotai/Kimi-K2.6",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",  # the base model's config (eos_token_id 128001)
    "minimax-m2.5": "MiniMaxAI/MiniMax-M2.5",
    "mixtral-8x7b-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b-fp8": "Qwen/Qwen3-30B-A3B-FP8",
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


def bundled_dir() -> Path:
    """Where bundled architectures live (``layouts/models`` of the installed package)."""
    try:
        # Installed from the project's layouts/ folder (package-dir in pyproject.toml), which a
        # static import cannot see; import it by name.
        layouts_pkg = importlib.import_module("cockpit.layouts")
        return Path(str(layouts_pkg.__file__)).resolve().parent / "models"
    except ImportError:  # pragma: no cover - running from an odd layout
        return _BUNDLED_DIR


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled_dir().glob("*.json"))


def hf_cache_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """The hub cache folders Hugging Face itself would use, most specific first."""
    env = os.environ if env is None else env
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(Path(env["HF_HUB_CACHE"]))
    if env.get("HF_HOME"):
        dirs.append(Path(env["HF_HOME"]) / "hub")
    dirs.append(Path(env.get("HOME", str(Path.home()))) / ".cache" / "huggingface" / "hub")
    return dirs


def _from_hf_cache(repo_id: str, env: Mapping[str, str] | None) -> Path | None:
    folder = "models--" + repo_id.replace("/", "--")
    for cache in hf_cache_dirs(env):
        repo = cache / folder
        if not repo.is_dir():
            continue
        main_ref = repo / "refs" / "main"
        if main_ref.is_file():
            config = repo / "snapshots" / main_ref.read_text().strip() / "config.json"
            if config.is_file():
                return config
        configs = sorted(repo.glob("snapshots/*/config.json"), key=lambda p: p.stat().st_mtime)
        if configs:
            return configs[-1]
    return None


def _from_bundle(spec: str) -> Path | None:
    key = spec.strip().lower()
    stem = _BUNDLED_ALIASES.get(key, key.rsplit("/", 1)[-1])
    path = bundled_dir() / f"{stem}.json"
    return path if path.is_file() else None


def find_config(spec: str, env: Mapping[str, str] | None = None) -> Path:
    """Resolve what the user gave (file, folder, repo id, bundled name) to a config.json."""
    path = Path(spec).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise CockpitError(
                f"model folder {path} has no config.json: point --model at the folder that holds it"
            )
        return config
    if path.is_file():
        return path
    if re.fullmatch(r"[\w.\-]+/[\w.\-]+", spec.strip()):
        cached = _from_hf_cache(spec.strip(), env)
        if cached is not None:
            return cached
    bundled = _from_bundle(spec)
    if bundled is not None:
        return bundled
    raise CockpitError(
        f"model '{spec}' not found: give a config.json, a model folder, a repo id in the Hugging Face "
        f"cache, or a bundled architecture ({', '.join(bundled_names())})"
    )


def model_argv_path(spec: str) -> str:
    """What the engine is told to load: a bundled architecture's name becomes its repository id
    (the engine has no file named ``gpt-oss-120b``); a path or a repo id stays as given."""
    key = spec.strip().lower()
    if key in BUNDLED_REPO_IDS and not Path(spec).expanduser().exists():
        return BUNDLED_REPO_IDS[key]
    return spec


def load_model(spec: str, env: Mapping[str, str] | None = None) -> ModelArch:
    """Find and read a model's architecture; every failure is one CockpitError line."""
    config_path = find_config(spec, env)
    # A repo id names the model best; a path or bundled name names it by its file or folder.
    name = spec if "/" in spec and not Path(spec).expanduser().exists() else None
    return read_config(config_path, name=name)


MAX_CONFIG_BYTES = 16 * 2**20  # real config.json files are a few KB; anything this big is not one


def read_config(path: Path | str, name: str | None = None) -> ModelArch:
    path = Path(path)
    text = read_text(
        path, limit=MAX_CONFIG_BYTES, what=str(path), fix="point --model at the model's config.json"
    )
    config = parse_json(text, path)
    if not isinstance(config, dict):
        raise CockpitError(f"{path} holds no JSON object: a config.json is one object of model settings")
    config = with_separate_quantization(config, path)
    default_name = path.parent.name if path.name == "config.json" else path.stem
    try:
        model = parse_config(config, source=str(path), name=name or default_name)
    except NeedsCheckpoint as exc:
        return _from_checkpoint(config, path, name or default_name, exc)
    return _exact_if_on_disk(config, path, model) if model.approximate else model


def with_separate_quantization(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A ModelOpt checkpoint of 0.29 and before keeps its quantization in hf_quant_config.json
    beside config.json, which vLLM reads when config.json has none
    (vllm/transformers_utils/config.py); a bundled config keeps it as ``<name>.hf_quant_config``."""
    if config.get("quantization_config") is not None:
        return config
    beside = path.parent / (
        "hf_quant_config.json" if path.name == "config.json" else f"{path.stem}.hf_quant_config"
    )
    if not beside.is_file():
        return config
    text = read_text(beside, limit=MAX_CONFIG_BYTES, what=str(beside), fix="fix or remove the file")
    quant = parse_json(text, beside)
    settings = quant.get("quantization") if isinstance(quant, dict) else None
    if not isinstance(settings, dict):
        raise CockpitError(
            f"{beside} has no 'quantization' object: fix or remove it, or give config.json a quantization_config"
        )
    return {**config, "quantization_config": {"quant_method": "modelopt", **settings}}


def _exact_if_on_disk(config: Mapping[str, Any], path: Path, model: ModelArch) -> ModelArch:
    """An approximate plan (a family read from the common config names) gives way to the
    checkpoint beside its config.json, whose tensor headers size every weight. The checkpoint
    says nothing of attention windows, so the config's sliding-window layers are kept."""
    if path.name != "config.json":  # a loose file: its folder need not be the model's
        return model
    tensors = read_checkpoint(path.parent)
    if tensors is None:
        return model
    exact = arch_from_checkpoint(config, tensors, source=str(path), name=model.name)
    if model.windowed is not None and exact.windowed is None and exact.layers == model.layers:
        note = f"{model.windowed.layers} sliding-window layers ({model.windowed.window} tokens) read from the config.json"
        exact = replace(exact, windowed=model.windowed, notes=(*exact.notes, note))
    return exact


def _from_checkpoint(config: Mapping[str, Any], path: Path, name: str, unsized: NeedsCheckpoint) -> ModelArch:
    """Plan from the tensor headers of the checkpoint beside a config.json (a model folder, or the
    Hugging Face cache snapshot it came from); with none there, say where to put one."""
    if path.name != "config.json":  # a loose file: its folder need not be the model's
        raise unsized
    folder = path.parent
    tensors = read_checkpoint(folder)
    if tensors is None:
        raise CockpitError(
            f"{unsized.reason}, and no *.safetensors lie beside it to read the shapes from: download the "
            f"checkpoint into {folder} (cockpit reads only each shard's header) or point --model at the "
            "folder that holds config.json and its *.safetensors"
        ) from None
    return arch_from_checkpoint(config, tensors, source=str(path), name=name)


def parse_json(text: str, path: Path | str) -> Any:
    """JSON from a config's text; too deep or too long numbers are one line each."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CockpitError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}): fix it or point --model at another config.json"
        ) from exc
    except RecursionError:
        raise CockpitError(
            f"{path} nests JSON too deeply to be a config.json: point --model at the model's config.json"
        ) from None
    except ValueError:  # int() refuses a number of thousands of digits
        raise CockpitError(
            f"{path} holds a number of thousands of digits, no model's setting: point --model at the model's config.json"
        ) from None
