"""Llama 4 (Scout, Maverick): MoE on interleaved layers, chunked local attention with a full-
attention (NoPE) layer every fourth.

Shapes follow the engines' model files: vLLM's Llama4DecoderLayer, Llama4Attention and Llama4MoE
(vllm/model_executor/models/llama4.py), the multimodal wrapper Llama4ForConditionalGeneration
(vllm/model_executor/models/mllama4.py), and SGLang's alike (sglang/srt/models/llama4.py,
mllama4.py).

- Attention: GQA; q/k/v and o without bias whatever ``attention_bias`` says (both engines pass
  bias=False); the QK norm of the RoPE layers is an RMSNorm without weight (has_weight=False),
  so it adds no parameters.
- Feed-forward: layer i is MoE when ``(i + 1) % interleave_moe_layer_step == 0`` (Scout: 1, every
  layer; Maverick: 2, every other); an MoE layer holds ``num_local_experts`` routed experts of
  ``intermediate_size``, one shared expert of the same width and a router without bias
  (GateLinear; SGLang a ReplicatedLinear, bias=False); the other layers a dense MLP of
  ``intermediate_size_mlp``.
- KV: the RoPE layers attend within chunks of ``attention_chunk_size`` tokens, the NoPE layers
  (``no_rope_layers[i] == 0``; by default every ``no_rope_layer_interval``-th, 4, as
  transformers' Llama4TextConfig derives the list) see every token. vLLM gives chunked layers a
  ChunkedLocalAttentionSpec group of their own (vllm/v1/kv_cache_interface.py), which holds at
  most one chunk plus the tokens in flight per request; SGLang puts them in its sliding-window
  pool, window = attention_chunk_size (is_hybrid_swa_model, get_hybrid_layer_ids,
  sglang/srt/configs/model_config.py; resolve_sliding_window_size,
  sglang/srt/model_executor/model_runner_components/load_model_utils.py), for the
  Llama4ForConditionalGeneration architecture only.
- The vision tower and projector are not counted (see ``vision_params``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cockpit.core.archs.common import Reader, family_arch
from cockpit.core.errors import CockpitError, shown
from cockpit.core.model import (
    CHUNKED,
    MAX_CONTEXT,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_WIDTH,
    NORMS,
    ConfigText,
    ModelArch,
    ModelConfig,
    MoeDims,
    Quantization,
    WindowedLayers,
    common_dims,
    count_params,
    read_quantization,
    routed_experts,
)

FAMILY = "llama4"


def read_llama4(text: ConfigText) -> ModelArch:
    """A Llama 4 config.json (the wrapper with its text_config, or a bare llama4_text)."""
    cfg = text.cfg
    dims = common_dims(cfg)
    moe = moe_dims(cfg, dims.layers)
    dense_layers = dims.layers - (moe.moe_layers if moe else 0)
    params = count_params(
        layers=dims.layers,
        hidden=dims.hidden,
        heads=dims.heads,
        kv_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        vocab=dims.vocab,
        tied=dims.tied,
        mla=None,
        moe=moe,
        dense_layers=dense_layers,
        dense_intermediate=dense_width(cfg, dense_layers),
        attention_bias=False,
        expert_bias=False,
        router_bias=False,
    )
    # count_params gives every attention layer a q_norm and a k_norm of head_dim weights (Qwen3);
    # Llama 4's QK norm has none.
    params[NORMS] -= dims.layers * 2 * dims.head_dim
    return family_arch(
        text,
        FAMILY,
        dims,
        dense_intermediate=dense_width(cfg, dense_layers),
        dense_layers=dense_layers,
        quant=quantization(text, first_moe_layer(cfg, dims.layers)),
        moe=moe,
        params=params,
        windowed=chunked_layers(cfg, dims.layers),
        moe_layer_ids=tuple(moe_layer_ids(cfg, dims.layers)),
        notes=vision_notes(text.raw, dims.hidden, text.source),
    )


def moe_step(cfg: ModelConfig, layers: int) -> int:
    """interleave_moe_layer_step: 0 for no MoE layer (both engines test ``> 0`` first)."""
    return cfg.count("interleave_moe_layer_step", low=0, high=max(1, layers), default=1)


def moe_layer_ids(cfg: ModelConfig, layers: int) -> list[int]:
    """The MoE layers as Llama4DecoderLayer picks them: ``(i + 1) % step == 0``."""
    step = moe_step(cfg, layers)
    return [i for i in range(layers) if step and (i + 1) % step == 0]


def first_moe_layer(cfg: ModelConfig, layers: int) -> int:
    ids = moe_layer_ids(cfg, layers)
    return ids[0] if ids else 0


def moe_dims(cfg: ModelConfig, layers: int) -> MoeDims | None:
    """Routed experts, top-k, one shared expert of the routed width per MoE layer (Llama4MoE);
    None when no layer is MoE."""
    moe_layers = len(moe_layer_ids(cfg, layers))
    if not moe_layers:
        return None
    experts, top_k = routed_experts(cfg, "num_local_experts", "num_experts_per_tok")
    width = cfg.count("intermediate_size", high=MAX_WIDTH)
    return MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=width,
        moe_layers=moe_layers,
        shared_experts=1,
        shared_intermediate=width,
    )


def dense_width(cfg: ModelConfig, dense_layers: int) -> int:
    """intermediate_size_mlp, the dense layers' MLP (16,384 by Llama4TextConfig's default)."""
    if not dense_layers:
        return 0
    return cfg.count("intermediate_size_mlp", high=MAX_WIDTH, default=16384)


def nope_layer_ids(cfg: ModelConfig, layers: int) -> list[int]:
    """The full-attention (NoPE) layers: ``no_rope_layers`` (one flag per layer, 0 = NoPE, as
    vLLM's Llama4Attention reads it), else every ``no_rope_layer_interval``-th layer, the list
    transformers' Llama4TextConfig derives. SGLang fixes the interval at 4 (Llama4Attention.use_rope
    and get_hybrid_layer_ids), which is what every published Llama 4 uses."""
    flags = cfg.get("no_rope_layers")
    if flags:
        if not isinstance(flags, list) or len(flags) != layers:
            raise CockpitError(
                f"{cfg.source}: no_rope_layers must hold one 0 or 1 per layer ({layers}; got {shown(flags)}): "
                "fix the config.json"
            )
        return [i for i, flag in enumerate(flags) if flag == 0]
    interval = cfg.count("no_rope_layer_interval", high=max(1, layers), default=4)
    return [i for i in range(layers) if (i + 1) % interval == 0]


def chunked_layers(cfg: ModelConfig, layers: int) -> WindowedLayers | None:
    """The RoPE layers, chunked local attention of ``attention_chunk_size`` tokens; None when the
    config sets no chunk (every layer full attention: ``use_chunked_local_attn`` is false)."""
    chunk = 8192  # Llama4TextConfig's default; an explicit null turns chunking off
    if "attention_chunk_size" in cfg.data:
        chunk = cfg.count("attention_chunk_size", low=0, high=MAX_CONTEXT, default=0)
    count = layers - len(nope_layer_ids(cfg, layers))
    return WindowedLayers(CHUNKED, count, chunk) if chunk and count else None


# ---------------------------------------------------------------------------------------------
# Quantization


def quantization(text: ConfigText, first_moe: int) -> Quantization:
    """The checkpoint's quantization, its module names read as Llama 4 spells them."""
    return read_quantization(llama4_quant_raw(text.quant_raw), text.dtype_bytes, text.source, first_moe)


def llama4_quant_raw(raw: Any) -> Any:
    """A quantization_config as ``read_quantization`` reads it.

    - Llama 4 names its MLPs ``feed_forward`` (``feed_forward.experts``,
      ``feed_forward.shared_expert``, ``feed_forward.gate_proj``) where the shared reader tests
      ``mlp``: an ignore list's names are read with ``mlp`` in their place.
    - ``fbgemm_fp8`` (per-channel FP8 weights, one scale per output row; FBGEMMFp8Config,
      vllm/model_executor/layers/quantization/fbgemm_fp8.py) keeps one byte per weight outside
      ``modules_to_not_convert``, as a plain FP8 checkpoint does.
    """
    if not isinstance(raw, Mapping):
        return raw
    out = dict(raw)
    if str(raw.get("quant_method", "")).lower() == "fbgemm_fp8":
        out = {"quant_method": "fp8", "modules_to_not_convert": raw.get("modules_to_not_convert")}
    for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
        names = out.get(key)
        if isinstance(names, list):
            out[key] = [n.replace("feed_forward", "mlp") if isinstance(n, str) else n for n in names]
    return out


# ---------------------------------------------------------------------------------------------
# The vision tower


def vision_params(raw: Mapping[str, Any], text_hidden: int, source: str = "<config>") -> int:
    """Parameters of the vision tower and the projector as vLLM builds them
    (Llama4VisionModel, Llama4MultiModalProjector, vllm/model_executor/models/mllama4.py); 0 when
    the config has no vision_config.

    Not counted in the model's tensor classes: SGLang loads them only with --enable-multimodal,
    which is off for Llama 4 by default (ModelConfig, sglang/srt/configs/model_config.py), and
    vLLM, which loads them unless --language-model-only or --limit-mm-per-prompt gives images 0
    (_mark_tower_model, vllm/model_executor/models/interfaces.py), splits them over TP, unquantized
    (under 0.9B parameters, 1.7 GiB in bf16, a TP share of it per GPU).
    """
    vc = raw.get("vision_config")
    if not isinstance(vc, Mapping):
        return 0
    cfg = ModelConfig(vc, f"{source} vision_config", FAMILY)
    h = cfg.count("hidden_size", high=MAX_HIDDEN)
    width = cfg.count("intermediate_size", high=MAX_WIDTH)
    layers = cfg.count("num_hidden_layers", high=MAX_LAYERS)
    patch = cfg.count("patch_size", high=MAX_WIDTH)
    channels = cfg.count("num_channels", high=MAX_HEADS, default=3)
    patches = (cfg.count("image_size", high=MAX_CONTEXT) // patch) ** 2 + 1
    projector_in = cfg.count("projector_input_dim", high=MAX_WIDTH)
    projector_out = cfg.count("projector_output_dim", high=MAX_WIDTH)
    adapter_bias = bool(vc.get("multi_modal_projector_bias", False))
    # qkv and o with bias, fc1 and fc2 with bias, two LayerNorms (weight and bias)
    layer = 4 * h * h + 4 * h + 2 * h * width + width + h + 4 * h
    embed = channels * patch * patch * h + h + patches * h + 4 * h  # patches, class, positions, pre/post LN
    adapter = width * projector_in + projector_in * projector_out
    if adapter_bias:
        adapter += projector_in + projector_out
    projector = cfg.count("vision_output_dim", high=MAX_WIDTH) * text_hidden
    return layers * layer + embed + adapter + projector


def vision_notes(raw: Mapping[str, Any], text_hidden: int, source: str) -> tuple[str, ...]:
    count = vision_params(raw, text_hidden, source)
    if not count:
        return ()
    return (
        f"vision tower and projector ({count / 1e9:.2f}B params) not counted: SGLang loads them only "
        "with --enable-multimodal; vLLM loads them split over TP unless --language-model-only",
    )


READERS: dict[str, Reader] = {"llama4": read_llama4, "llama4_text": read_llama4}
