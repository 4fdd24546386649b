"""Planning a model cockpit does not know from its checkpoint: the name, dtype and shape of every
tensor say its tensor classes, layers, experts, attention kind and quantization.

Pure: `cockpit.store.safetensors` reads the headers and `cockpit.store.modelfiles` calls ``arch_from_checkpoint``
when `cockpit.core.model` raises NeedsCheckpoint for a config.json it cannot size alone
(docs/placement.md#models-cockpit-reads-from-their-checkpoint).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cockpit.core.errors import CockpitError
from cockpit.core.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    LINEAR_CLASSES,
    LM_HEAD,
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    TENSOR_CLASSES,
    LinearAttention,
    MlaDims,
    ModelArch,
    ModelConfig,
    MoeDims,
    Quantization,
    architecture_name,
    dtype_size,
    one_line_errors,
    read_quantization,
)


@dataclass(frozen=True)
class CheckpointTensor:
    """One tensor as a safetensors header describes it; ``nbytes`` is what its offsets span."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


# Module names of the attention block: softmax attention, linear attention (Gated DeltaNet), Mamba.
_ATTENTION_MODULES = frozenset(
    {"self_attn", "attn", "attention", "self_attention", "linear_attn", "linear_attention", "mixer", "mamba"}
)
# MLA's down-projections run on every attention rank (ReplicatedLinear in DeepseekV2MLAAttention).
_REPLICATED_ATTENTION = frozenset({"q_a_proj", "kv_a_proj_with_mqa", "kv_a_proj"})
_ROUTER_MODULES = frozenset({"gate", "router", "shared_expert_gate"})
_ROUTER_PARAMS = frozenset({"e_score_correction_bias"})
# Towers of multimodal checkpoints: not the language model's layers, counted whole on every GPU.
_TOWER_PREFIXES = ("vision", "visual", "audio", "multi_modal_projector", "mm_projector", "image_newline")
# Quantization companions of a weight: bytes of its class, no parameters of their own.
_AUX_PARAMS = frozenset({"scales", "qzeros", "g_idx", "zeros", "weight_shape"})
_AUX_SUFFIXES = ("_scale", "_scales", "_scale_inv", "_scale_2", "_zero_point", "_global_scale")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_LM_HEAD_NAMES = frozenset({"lm_head", "embed_out"})


@dataclass(frozen=True)
class TensorPlace:
    """Where a checkpoint tensor belongs: its tensor class, its layer, its routed expert."""

    cls: str
    layer: int | None
    expert: int | None  # a routed expert's number, when the name carries one


def classify_tensor(name: str) -> TensorPlace:
    """The tensor class of a checkpoint tensor, from its name alone, for any architecture.

    Quantization scales and zero points sit beside their weight, so they take its class. Names
    no rule knows are counted whole on every GPU (as norms are), which never under-counts."""
    parts = name.split(".")
    match = _LAYER.search(name)
    if any(p.startswith(_TOWER_PREFIXES) for p in parts):
        return TensorPlace(NORMS, None, None)
    if match is None:
        if any(p in _LM_HEAD_NAMES for p in parts) or name in ("output.weight", "output.bias"):
            return TensorPlace(LM_HEAD, None, None)
        if any("embed" in p or p in ("wte", "wpe") for p in parts):
            return TensorPlace(EMBEDDING, None, None)
        return TensorPlace(NORMS, None, None)
    layer = int(match.group(1))
    inner = name[match.end() :].split(".")
    modules, param = inner[:-1], inner[-1]
    if any(m in _ATTENTION_MODULES for m in modules):
        if any(m in _REPLICATED_ATTENTION for m in modules):
            return TensorPlace(ATTN_REPLICATED, layer, None)
        if any("norm" in m for m in modules) or "norm" in param:
            return TensorPlace(NORMS, layer, None)
        return TensorPlace(ATTN_SHARDED, layer, None)
    if any(m == "shared_expert_gate" for m in modules) or param in _ROUTER_PARAMS:
        return TensorPlace(ROUTER, layer, None)
    if any(m.startswith(("shared_expert", "shared_mlp")) for m in modules):
        return TensorPlace(SHARED_EXPERTS, layer, None)
    if "experts" in modules:
        after = modules[modules.index("experts") + 1 :]
        expert = int(after[0]) if after and after[0].isdigit() else None
        return TensorPlace(ROUTED_EXPERTS, layer, expert)
    if any(m in _ROUTER_MODULES for m in modules):
        return TensorPlace(ROUTER, layer, None)
    if any(m in ("mlp", "feed_forward", "ffn", "block_sparse_moe", "moe") for m in modules):
        return TensorPlace(DENSE_MLP, layer, None)
    return TensorPlace(NORMS, layer, None)  # layer norms, and what no rule knows: on every GPU


def _is_aux(param: str) -> bool:
    return param in _AUX_PARAMS or param.endswith(_AUX_SUFFIXES) or param.startswith("weight_scale")


def _logical_params(tensor: CheckpointTensor, packed_bits: int) -> int:
    """Parameters a tensor holds: its elements, times the values packed into each (INT4 in I32
    ``weight_packed``/``qweight``, FP4 in U8 weights and MXFP4 ``_blocks``); scales hold none."""
    param = tensor.name.rsplit(".", 1)[-1]
    if _is_aux(param):
        return 0
    elements = math.prod(tensor.shape)
    if tensor.dtype in ("I32", "U32") and param in ("weight_packed", "qweight"):
        return elements * (32 // packed_bits)
    if tensor.dtype == "U8" and (param.endswith("_blocks") or param in ("weight", "weight_packed")):
        return elements * 2
    return elements


@dataclass
class _Tally:
    """What the tensors add up to, per class and per layer."""

    bytes: dict[str, int] = field(default_factory=lambda: {c: 0 for c in TENSOR_CLASSES})
    params: dict[str, int] = field(default_factory=lambda: {c: 0 for c in TENSOR_CLASSES})
    layers: set[int] = field(default_factory=set)
    moe_layers: set[int] = field(default_factory=set)
    experts: dict[int, set[int]] = field(default_factory=dict)  # layer -> numbered experts
    fused_experts: int = 0  # experts of a fused 3-D tensor (its first dimension)
    kv_layers: set[int] = field(default_factory=set)  # layers with per-token K/V projections
    skipped_bytes: int = 0
    by_name: dict[str, CheckpointTensor] = field(default_factory=dict)


_KV_PROJECTIONS = ("k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "wqkv", "kv_a_proj_with_mqa")


def _tally(tensors: Sequence[CheckpointTensor], config_layers: int | None, packed_bits: int) -> _Tally:
    tally = _Tally()
    for tensor in tensors:
        parts = tensor.name.split(".")
        where = classify_tensor(tensor.name)
        # Multi-token-prediction layers (Qwen3-Next's mtp.*, DeepSeek-V3's layer 61) load only for
        # speculative decoding: vLLM's and SGLang's load_weights skip them otherwise.
        beyond = where.layer is not None and config_layers is not None and where.layer >= config_layers
        if beyond or any(p == "mtp" or p.startswith(("mtp_", "nextn")) for p in parts):
            tally.skipped_bytes += tensor.nbytes
            continue
        cls = where.cls
        if where.layer is not None:
            tally.layers.add(where.layer)
            if cls == ROUTED_EXPERTS:
                tally.moe_layers.add(where.layer)
                if where.expert is not None:
                    tally.experts.setdefault(where.layer, set()).add(where.expert)
                elif len(tensor.shape) >= 3 and not _is_aux(parts[-1]):
                    tally.fused_experts = max(tally.fused_experts, tensor.shape[0])
            if any(p in _KV_PROJECTIONS for p in parts):
                tally.kv_layers.add(where.layer)
        tally.bytes[cls] += tensor.nbytes
        tally.params[cls] += _logical_params(tensor, packed_bits)
        tally.by_name[tensor.name] = tensor
    return tally


def _find(tally: _Tally, *suffixes: str) -> CheckpointTensor | None:
    """The first tensor (in name order) whose name ends with one of ``suffixes``."""
    for name in sorted(tally.by_name):
        if name.endswith(suffixes):
            return tally.by_name[name]
    return None


def _plain_dim(tensor: CheckpointTensor | None, axis: int) -> int | None:
    """A dimension of an unquantized (float) tensor; packed tensors' shapes are not the model's."""
    if tensor is None or not tensor.dtype.startswith(("F", "BF")) or len(tensor.shape) <= axis:
        return None
    return tensor.shape[axis] or None


def arch_from_checkpoint(
    raw: Mapping[str, Any], tensors: Sequence[CheckpointTensor], source: str, name: str
) -> ModelArch:
    """A model planned from its tensors: bytes per class are the checkpoint's own, so the planner's
    weights per GPU are the tensors' bytes split by class. Counts come from the config's generic
    keys where it has them and from the shapes where it does not; what was guessed is in ``notes``."""
    with one_line_errors(source):
        return _arch_from_checkpoint(raw, tensors, source, name)


def _arch_from_checkpoint(
    raw: Mapping[str, Any], tensors: Sequence[CheckpointTensor], source: str, name: str
) -> ModelArch:
    text = raw
    quant_raw = raw.get("quantization_config")
    if isinstance(raw.get("text_config"), dict):
        text = raw["text_config"]
        quant_raw = quant_raw or text.get("quantization_config")
    model_type = str(text.get("model_type") or raw.get("model_type") or "checkpoint")
    cfg = ModelConfig(text, source, model_type)
    notes: list[str] = []
    packed_bits = _packed_bits(quant_raw)
    config_layers = _optional(cfg, ("num_hidden_layers", "n_layer", "num_layers"), MAX_LAYERS)
    tally = _tally(tensors, config_layers, packed_bits)
    if not tally.layers:
        raise CockpitError(
            f"{source}: none of the {len(tensors):,} tensors of its checkpoint sits in a numbered layer "
            "(model.layers.N...): cockpit cannot tell how this model splits over GPUs; plan with a model it knows"
        )
    if tally.skipped_bytes:
        notes.append(f"{tally.skipped_bytes / 1e9:,.2f} GB of multi-token-prediction layers not loaded")
    layers = config_layers or max(tally.layers) + 1

    embedding = _find(
        tally, "embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight"
    )
    hidden = _optional(cfg, ("hidden_size", "n_embd", "d_model"), MAX_HIDDEN) or _plain_dim(embedding, 1)
    vocab = _optional(cfg, ("vocab_size",), MAX_VOCAB) or _plain_dim(embedding, 0)
    if not hidden or not vocab:
        raise CockpitError(
            f"{source}: neither the config.json (hidden_size, vocab_size) nor an embedding tensor says the model's "
            "width: give them in the config.json"
        )
    k_proj = _find(tally, "k_proj.weight")
    head_dim = _optional(cfg, ("head_dim",), MAX_WIDTH) or _plain_dim(_find(tally, "k_norm.weight"), 0)
    heads = _optional(cfg, ("num_attention_heads", "n_head", "num_heads"), MAX_HEADS)
    if not head_dim:
        head_dim = hidden // heads if heads and hidden >= heads else 128
        if not heads:
            notes.append(f"head width {head_dim} assumed")
    if not heads:
        heads = max(1, hidden // head_dim)
        notes.append(f"{heads} attention heads inferred from the hidden size")
    kv_heads = _optional(cfg, ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"), MAX_HEADS)
    kv_out = _plain_dim(k_proj, 0)
    kv_heads = kv_heads or (kv_out // head_dim if kv_out and kv_out % head_dim == 0 else heads)
    max_context = _optional(
        cfg, ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"), MAX_CONTEXT
    )
    dtype_bytes = dtype_size(text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype"))

    moe = _checkpoint_moe(cfg, tally, hidden, notes)
    dense_layers = layers - (moe.moe_layers if moe else 0)
    params = _regroup(tally.params, moe is not None, dense_layers)
    nbytes = _regroup(tally.bytes, moe is not None, dense_layers)
    for cls in TENSOR_CLASSES:  # bytes with no parameter count (scales alone): one byte each
        if nbytes[cls] and not params[cls]:
            params[cls] = nbytes[cls]
    dense_intermediate = _optional(cfg, ("intermediate_size", "ffn_dim", "n_inner"), MAX_WIDTH) or 0
    if dense_layers and params[DENSE_MLP] and not dense_intermediate:
        down = _plain_dim(_find(tally, "mlp.down_proj.weight"), 1)
        dense_intermediate = down or round(params[DENSE_MLP] / dense_layers / (3 * hidden))

    quant = _checkpoint_quantization(
        quant_raw, dtype_bytes, params, nbytes, source, first_moe_layer=dense_layers, notes=notes
    )
    mla = _checkpoint_mla(cfg, tally, head_dim) if _find(tally, "kv_a_proj_with_mqa.weight") else None
    linear = _checkpoint_linear_attention(cfg, tally, dtype_bytes, notes)
    return ModelArch(
        name=name,
        source=source,
        family=model_type,
        architecture=architecture_name(text.get("architectures") or raw.get("architectures")),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=1 if mla else min(kv_heads, heads),
        head_dim=head_dim,
        vocab=vocab,
        tied_embeddings=nbytes[LM_HEAD] == 0,
        max_context=max_context or 4096,
        dense_intermediate=dense_intermediate,
        dense_layers=dense_layers,
        quant=quant,
        mla=mla,
        moe=moe,
        params=params,
        linear_attention=linear,
        notes=tuple(notes),
    )


def _regroup(by_class: Mapping[str, int], has_experts: bool, dense_layers: int) -> dict[str, int]:
    """Classes as the planner divides them: with no routed experts an always-on MLP is the dense
    MLP and a gate is replicated like the norms; an MLP beside the experts of every layer (no
    dense layer to hold it) is split over TP like the shared experts it works as."""
    out = dict(by_class)
    if not has_experts:
        out[DENSE_MLP] += out[SHARED_EXPERTS]
        out[NORMS] += out[ROUTER]
        out[SHARED_EXPERTS] = out[ROUTER] = 0
    elif dense_layers == 0:
        out[SHARED_EXPERTS] += out[DENSE_MLP]
        out[DENSE_MLP] = 0
    return out


def _optional(cfg: ModelConfig, keys: tuple[str, ...], high: int) -> int | None:
    """A count the config may give under one of ``keys`` (checked), or None (also for 0)."""
    key = next((k for k in keys if cfg.get(k) is not None), None)
    return None if key is None else cfg.check(key, cfg.data[key], 0, high) or None


def _packed_bits(quant_raw: Any) -> int:
    """Bits of one packed weight value (4 unless the quantization config says 8, 2, ...)."""
    if not isinstance(quant_raw, dict):
        return 4
    bits: Any = quant_raw.get("bits") or quant_raw.get("w_bit")
    groups = quant_raw.get("config_groups")
    if bits is None and isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                bits = group["weights"].get("num_bits")
                break
    return bits if isinstance(bits, int) and bits in (2, 3, 4, 8) else 4


def _checkpoint_moe(cfg: ModelConfig, tally: _Tally, hidden: int, notes: list[str]) -> MoeDims | None:
    """Expert counts: the config's generic keys, else the expert numbers in the tensor names (or a
    fused tensor's first dimension); widths from the bytes when the config has none."""
    if not tally.moe_layers:
        return None
    numbered = max((len(e) for e in tally.experts.values()), default=0)
    experts = _optional(
        cfg, ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"), MAX_EXPERTS
    ) or max(numbered, tally.fused_experts, 1)
    top_k = _optional(
        cfg,
        ("num_experts_per_tok", "experts_per_token", "moe_topk", "num_experts_per_token", "top_k"),
        MAX_EXPERTS,
    )
    if top_k is None:
        top_k = min(8, experts)
        notes.append(f"top-{top_k} routing assumed (the config does not say)")
    moe_layers = len(tally.moe_layers)
    width = (
        _optional(cfg, ("moe_intermediate_size", "expert_intermediate_size"), MAX_WIDTH)
        or _plain_dim(_find(tally, ".experts.0.down_proj.weight", ".experts.0.w2.weight"), 1)
        or max(1, round(tally.params[ROUTED_EXPERTS] / moe_layers / experts / (3 * hidden)))
    )
    shared_width = _optional(cfg, ("shared_expert_intermediate_size",), MAX_WIDTH)
    if shared_width is None and tally.params[SHARED_EXPERTS]:
        shared_width = _plain_dim(
            _find(tally, "shared_expert.down_proj.weight", "shared_experts.down_proj.weight"), 1
        )
        shared_width = shared_width or round(tally.params[SHARED_EXPERTS] / moe_layers / (3 * hidden))
    shared = _optional(cfg, ("n_shared_experts", "num_shared_experts"), MAX_EXPERTS)
    return MoeDims(
        experts=experts,
        experts_per_token=min(top_k, experts),
        expert_intermediate=width,
        moe_layers=moe_layers,
        shared_experts=shared or (1 if shared_width else 0),
        shared_intermediate=shared_width or 0,
    )


# (least bytes per parameter, method, label): what a Linear class's bytes say of its format.
_METHODS_BY_BYTES = (
    (3.0, "fp32", "FP32"),
    (1.5, "bf16", "BF16"),
    (0.9, "fp8", "FP8"),
    (0.0, "int4", "4-bit"),
)


def _checkpoint_quantization(
    quant_raw: Any,
    dtype_bytes: int,
    params: Mapping[str, int],
    nbytes: Mapping[str, int],
    source: str,
    first_moe_layer: int,
    notes: list[str],
) -> Quantization:
    """The config's quantization where cockpit can read it (its method, block and label), with the
    bytes per parameter the checkpoint really holds; else one named after the bytes."""
    measured = {
        cls: nbytes[cls] / params[cls] if params[cls] else float(dtype_bytes) for cls in TENSOR_CLASSES
    }
    try:  # a config with no quantization_config may still hold quantized tensors: named by bytes
        known = read_quantization(quant_raw, dtype_bytes, source, first_moe_layer) if quant_raw else None
    except CockpitError:
        known = None
    if known is not None:
        return replace(known, bytes_by_class=measured)
    per = measured[max(LINEAR_CLASSES, key=lambda c: nbytes[c])]  # of the biggest Linear class
    method, label = next((m, lb) for floor, m, lb in _METHODS_BY_BYTES if per >= floor)
    if quant_raw or per < 1.5:  # worth saying only where the config did not say it
        notes.append(f"quantization read from the tensors: {label} ({per:.2f} bytes per parameter)")
    return Quantization(method, label, measured)


def _checkpoint_mla(cfg: ModelConfig, tally: _Tally, head_dim: int) -> MlaDims:
    """MLA ranks from the config, else from kv_a_layernorm (the latent) and kv_a_proj_with_mqa
    (latent + rope)."""
    latent = _optional(cfg, ("kv_lora_rank",), MAX_WIDTH) or _plain_dim(
        _find(tally, "kv_a_layernorm.weight"), 0
    )
    both = _plain_dim(_find(tally, "kv_a_proj_with_mqa.weight"), 0)
    rope = _optional(cfg, ("qk_rope_head_dim",), MAX_WIDTH)
    if rope is None:
        rope = both - latent if both and latent and both > latent else 64
    latent = latent or max(1, (both or 576) - rope)
    q_lora = _optional(cfg, ("q_lora_rank",), MAX_WIDTH) or _plain_dim(
        _find(tally, "q_a_layernorm.weight"), 0
    )
    return MlaDims(
        q_lora_rank=q_lora,
        kv_lora_rank=latent,
        qk_nope_head_dim=_optional(cfg, ("qk_nope_head_dim",), MAX_WIDTH) or head_dim,
        qk_rope_head_dim=rope,
        v_head_dim=_optional(cfg, ("v_head_dim",), MAX_WIDTH) or head_dim,
    )


def _checkpoint_linear_attention(
    cfg: ModelConfig, tally: _Tally, dtype_bytes: int, notes: list[str]
) -> LinearAttention | None:
    """Linear-attention layers: attention layers with no K/V projection but a recurrent decay
    (``A_log``). Head shapes from the config's Qwen3-Next keys, else from the tensors."""
    decays = sorted(name for name in tally.by_name if name.endswith(".A_log"))
    linear_layers = {
        where.layer
        for where in map(classify_tensor, decays)
        if where.layer is not None and where.layer not in tally.kv_layers
    }
    if not linear_layers or not tally.kv_layers:
        return None
    value_heads = _optional(cfg, ("linear_num_value_heads",), MAX_HEADS) or _plain_dim(
        tally.by_name[decays[0]], 0
    )
    conv = _find(tally, "conv1d.weight")
    kernel = _optional(cfg, ("linear_conv_kernel_dim",), MAX_WIDTH) or (conv.shape[-1] if conv else 4)
    value_dim = _plain_dim(_find(tally, "linear_attn.out_proj.weight", "mixer.out_proj.weight"), 1)
    value_head_dim = _optional(cfg, ("linear_value_head_dim",), MAX_WIDTH) or (
        value_dim // value_heads if value_dim and value_heads else 128
    )
    key_head_dim = _optional(cfg, ("linear_key_head_dim",), MAX_WIDTH) or value_head_dim
    key_heads = _optional(cfg, ("linear_num_key_heads",), MAX_HEADS)
    if key_heads is None:
        conv_dim = conv.shape[0] if conv else None
        if conv_dim and value_dim and conv_dim > value_dim:
            key_heads = max(1, (conv_dim - value_dim) // 2 // key_head_dim)
        else:
            key_heads = value_heads or 1
        notes.append("linear-attention key heads inferred from the convolution's width")
    return LinearAttention(
        layers=len(linear_layers),
        key_heads=key_heads,
        value_heads=value_heads or 1,
        key_head_dim=key_head_dim,
        value_head_dim=value_head_dim,
        conv_kernel=kernel,
        dtype_bytes=dtype_bytes,
    )
