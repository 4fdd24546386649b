"""Hybrid families: layers that keep a fixed state per request beside layers that keep per-token KV.

- Qwen3.5 MoE (``qwen3_5_moe``): Gated DeltaNet and gated full attention, MoE in every layer, a
  vision tower (vllm/model_executor/models/qwen3_5.py, sglang/srt/models/qwen3_5.py).
- Nemotron-H (``nemotron_h``): one mixer per layer, Mamba-2, attention, MoE or MLP, as
  ``hybrid_override_pattern`` spells them (vllm/model_executor/models/nemotron_h.py,
  sglang/srt/models/nemotron_h.py).
- Kimi Linear (``kimi_linear``): Kimi Delta Attention and MLA, DeepSeek-style MoE
  (vllm/models/kimi_k3/nvidia/model.py with
  vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py, sglang/srt/models/kimi_linear.py).

Parameters are counted tensor by tensor as those files build them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cockpit.core.archs.common import Reader, family_arch
from cockpit.core.errors import CockpitError, shown
from cockpit.core.model import (
    ATTN_SHARDED,
    DENSE_MLP,
    EMBEDDING,
    GATED_DELTANET,
    KIMI_DELTA,
    LM_HEAD,
    MAMBA2,
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_WIDTH,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    TENSOR_CLASSES,
    CommonDims,
    ConfigText,
    LinearAttention,
    MlaDims,
    ModelArch,
    ModelConfig,
    MoeDims,
    common_dims,
    count_params,
    mla_dims,
    read_quantization,
    routed_experts,
    whole_number,
)

# ---------------------------------------------------------------------------------------------
# Qwen3.5 MoE


def _gdn_layers(cfg: ModelConfig, layers: int) -> int:
    """Gated DeltaNet layers: ``layer_types`` as vLLM's Qwen3_5Model reads it per layer, else all
    but every ``full_attention_interval``-th (transformers' Qwen3_5MoeTextConfig default)."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        interval = cfg.count("full_attention_interval", high=max(1, layers), default=4)
        return len([i for i in range(layers) if (i + 1) % interval])
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise CockpitError(
            f"{cfg.source}: layer_types must list one kind per layer ({layers}; got {shown(kinds)}): "
            "fix the config.json"
        )
    unknown = sorted({str(k) for k in kinds} - {"linear_attention", "full_attention"})
    if unknown:
        raise CockpitError(
            f"{cfg.source}: layer_types may name only linear_attention and full_attention "
            f"(got {shown(unknown[0])}; Qwen3_5DecoderLayer raises 'Invalid layer_type'): fix the config.json"
        )
    return kinds.count("linear_attention")


def _vision_params(raw: Mapping[str, Any], source: str) -> int:
    """Qwen3_VisionTransformer (vllm/model_executor/models/qwen3_vl.py) as both engines build it
    unless --language-model-only: the patch Conv3d, the learned position table, ``depth`` blocks
    (two LayerNorms, qkv and proj with biases, a two-matrix MLP with biases), the patch merger and
    one deepstack merger per ``deepstack_visual_indexes``. 0 without a vision_config."""
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    vc = ModelConfig(vision, f"{source} vision_config", "qwen3.5-moe")
    h = vc.count("hidden_size", high=MAX_HIDDEN)
    width = vc.count("intermediate_size", high=MAX_WIDTH)
    out = vc.count("out_hidden_size", high=MAX_HIDDEN)
    patch = vc.count("patch_size", high=MAX_WIDTH, default=16)
    temporal = vc.count("temporal_patch_size", high=MAX_WIDTH, default=2)
    merged = h * vc.count("spatial_merge_size", high=MAX_WIDTH, default=2) ** 2
    deepstack = vc.get("deepstack_visual_indexes", [])
    embed = vc.count("in_channels", high=MAX_WIDTH, default=3) * temporal * patch * patch * h + h
    embed += vc.count("num_position_embeddings", low=0, high=MAX_CONTEXT, default=0) * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (2 * h * width + width + h)
    merger = (merged * merged + merged) + (merged * out + out)
    deep_count = len(deepstack) if isinstance(deepstack, list) else 0
    depth = vc.count("depth", high=MAX_LAYERS)
    # The merger normalises the hidden size; a deepstack merger the merged one (use_postshuffle_norm).
    return embed + depth * block + merger + 2 * h + deep_count * (merger + 2 * merged)


def read_qwen3_5_moe(text: ConfigText) -> ModelArch:
    """Qwen3.5 MoE: Qwen3-Next's layers (QwenGatedDeltaNetAttention, Qwen3NextAttention with its
    output gate, Qwen3NextSparseMoeBlock with a gated shared expert) in the order ``layer_types``
    gives, MoE in every layer whatever mlp_only_layers says (Qwen3_5DecoderLayer,
    vllm/model_executor/models/qwen3_5.py). The checkpoint's separate in_proj_qkv/z/b/a are the
    fused in_proj_qkvz/ba of Qwen3-Next, so the count is the same. MTP layers are skipped
    unless speculative decoding asks for them (hf_to_vllm_mapper drops ``mtp.``)."""
    cfg = ModelConfig(text.cfg.data, text.source, "qwen3.5-moe")
    dims = common_dims(cfg)
    linear = LinearAttention(
        layers=_gdn_layers(cfg, dims.layers),
        key_heads=cfg.count("linear_num_key_heads", high=MAX_HEADS, default=16),
        value_heads=cfg.count("linear_num_value_heads", high=MAX_HEADS, default=32),
        key_head_dim=cfg.count("linear_key_head_dim", high=MAX_WIDTH, default=128),
        value_head_dim=cfg.count("linear_value_head_dim", high=MAX_WIDTH, default=128),
        conv_kernel=cfg.count("linear_conv_kernel_dim", high=MAX_WIDTH, default=4),
        dtype_bytes=text.dtype_bytes,
        kind=GATED_DELTANET,
        ssm_dtype_bytes=_dtype_bytes(cfg.get("mamba_ssm_dtype")),
    )
    experts, top_k = routed_experts(cfg, ("num_experts", "num_local_experts"), "num_experts_per_tok")
    shared = cfg.count("shared_expert_intermediate_size", low=0, high=MAX_WIDTH, default=0)
    moe = MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=cfg.count("moe_intermediate_size", high=MAX_WIDTH),
        moe_layers=dims.layers,
        shared_experts=1 if shared else 0,
        shared_intermediate=shared,
    )
    params = count_params(
        layers=dims.layers,
        hidden=dims.hidden,
        heads=dims.heads,
        kv_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        vocab=dims.vocab,
        tied=_tied(text),
        mla=None,
        moe=moe,
        dense_layers=0,
        dense_intermediate=0,
        attention_bias=bool(cfg.get("attention_bias", False)),
        expert_bias=False,
        linear=linear,
        gated_attention=bool(cfg.get("attn_output_gate", True)),
        shared_gate=True,
        router_bias=False,  # the gate is a bare Linear (Qwen3NextSparseMoeBlock)
    )
    notes: list[str] = []
    if cfg.get("mamba_ssm_dtype") is not None:  # else vLLM follows the model dtype
        notes.append(
            _ssm_note(
                cfg.get("mamba_ssm_dtype"),
                "mamba_ssm_dtype",
                "Qwen3_5ForConditionalGenerationConfig in vllm/model_executor/models/config.py",
            )
        )
    if cfg.get("layer_scale"):  # attn_layer_scale and ffn_layer_scale, hidden each (Qwen3_5DecoderLayer)
        params[NORMS] += 2 * dims.layers * dims.hidden
    vision = _vision_params(text.raw, text.source)
    if vision:
        # Counted with the norms: in the model dtype (SGLang builds the tower with quant_config=None)
        # and replicated, so a plan never undercounts it, though both engines split its Linear
        # layers over TP unless told to run the encoder data-parallel.
        params[NORMS] += vision
        notes.append(
            f"the {vision / 1e9:.2f}B-parameter vision tower is counted, replicated: both engines load it "
            "unless --language-model-only (vLLM, SGLang) or --limit-mm-per-prompt 0 for image and video (vLLM)"
        )
    return _arch(text, "qwen3.5-moe", dims, params, moe=moe, linear=linear, notes=notes, first_moe_layer=0)


# ---------------------------------------------------------------------------------------------
# Nemotron-H

_NEMOTRON_KINDS = {"M": "Mamba-2", "*": "attention", "E": "MoE", "-": "MLP"}


def _pattern(cfg: ModelConfig) -> str:
    """``hybrid_override_pattern``: one character per layer, the layer's one mixer
    (ALL_DECODER_LAYER_TYPES, vllm/model_executor/models/nemotron_h.py, which builds
    len(pattern) layers)."""
    pattern = cfg.req("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_LAYERS:
        raise CockpitError(
            f"{cfg.source}: hybrid_override_pattern must be a string of M, *, E and - with one "
            f"character per layer (got {shown(pattern)}): fix the config.json"
        )
    unknown = sorted(set(pattern) - set(_NEMOTRON_KINDS))
    if unknown:
        raise CockpitError(
            f"{cfg.source}: hybrid_override_pattern has {unknown[0]!r}, not a layer kind "
            "(M Mamba-2, * attention, E MoE, - MLP): fix the config.json"
        )
    layers = cfg.get("num_hidden_layers")
    if layers is not None and layers != len(pattern):
        raise CockpitError(
            f"{cfg.source}: num_hidden_layers ({shown(layers)}) differs from the {len(pattern)} layers of "
            "hybrid_override_pattern: fix the config.json"
        )
    return pattern


def _mamba2(cfg: ModelConfig, layers: int, hidden: int, dtype_bytes: int) -> LinearAttention:
    """Mamba-2 mixers (MambaMixer2, vllm/model_executor/layers/mamba/mamba_mixer2.py): in_proj
    (hidden -> 2 x intermediate + 2 x groups x state + heads), the depthwise conv1d over
    intermediate + 2 x groups x state channels, A, D and dt_bias per head, out_proj; the gated
    RMSNorm of the intermediate width is counted with the norms."""
    heads = cfg.count("mamba_num_heads", high=MAX_HEADS)
    head_dim = cfg.count("mamba_head_dim", high=MAX_WIDTH)
    groups = cfg.count("n_groups", high=MAX_HEADS, default=1)
    state = cfg.count("ssm_state_size", high=MAX_WIDTH)
    kernel = cfg.count("conv_kernel", high=MAX_WIDTH, default=4)
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state
    bias = bool(cfg.get("use_bias", False))
    in_proj = hidden * (inner + conv_dim + heads) + (inner + conv_dim + heads if bias else 0)
    conv = conv_dim * kernel + (conv_dim if cfg.get("use_conv_bias", True) else 0)
    out_proj = inner * hidden + (hidden if bias else 0)
    return LinearAttention(
        layers=layers,
        key_heads=groups,
        value_heads=heads,
        key_head_dim=state,
        value_head_dim=head_dim,
        conv_kernel=kernel,
        dtype_bytes=dtype_bytes,
        kind=MAMBA2,
        layer_params=in_proj + conv + 3 * heads + out_proj,
        ssm_dtype_bytes=_dtype_bytes(cfg.get("mamba_ssm_cache_dtype", "float32")),
    )


def _mlp_widths(cfg: ModelConfig, count: int) -> list[int]:
    """Widths of the "-" layers: ``intermediate_size`` alone, or one per MLP layer
    (NemotronHMLPDecoderLayer)."""
    value = cfg.get("intermediate_size")
    if isinstance(value, list):
        if len(value) not in (1, count):
            raise CockpitError(
                f"{cfg.source}: intermediate_size lists {len(value)} widths for {count} MLP layers: fix the config.json"
            )
        widths = [cfg.check("intermediate_size", v, 1, MAX_WIDTH) for v in value]
        return widths * count if len(widths) == 1 else widths
    return [cfg.count("intermediate_size", high=MAX_WIDTH)] * count if count else []


def _nemotron_moe(cfg: ModelConfig, moe_layers: int, hidden: int) -> tuple[MoeDims, dict[str, int]]:
    """NemotronHMoE: routed experts of up and down only (relu2, not gated), on the latent width
    when ``moe_latent_size`` is set (Nemotron 3 Super), with replicated fc1/fc2 latent projections
    the ModelOpt checkpoints leave unquantized (counted with the router); a sigmoid gate with an
    e_score_correction_bias; shared experts of n_shared x moe_shared_expert_intermediate_size on the
    full hidden size."""
    experts, top_k = routed_experts(cfg, "n_routed_experts", "num_experts_per_tok")
    width = cfg.count("moe_intermediate_size", high=MAX_WIDTH)
    n_shared = cfg.count("n_shared_experts", low=0, high=MAX_EXPERTS, default=0)
    shared = n_shared * cfg.count("moe_shared_expert_intermediate_size", low=0, high=MAX_WIDTH, default=0)
    latent = cfg.count("moe_latent_size", high=MAX_HIDDEN, default=0)
    bias = bool(cfg.get("mlp_bias", False))
    routed_hidden = latent or hidden
    per_expert = 2 * routed_hidden * width + ((width + routed_hidden) if bias else 0)
    latent_proj = (2 * hidden * latent + ((latent + hidden) if bias else 0)) if latent else 0
    params = {
        ROUTED_EXPERTS: moe_layers * experts * per_expert,
        SHARED_EXPERTS: moe_layers * (2 * hidden * shared + ((shared + hidden) if bias else 0)),
        ROUTER: moe_layers * (experts * hidden + experts + latent_proj),
    }
    moe = MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=width,
        moe_layers=moe_layers,
        shared_experts=n_shared if shared else 0,
        shared_intermediate=shared,
    )
    return moe, params


def read_nemotron_h(text: ConfigText) -> ModelArch:
    """Nemotron-H: each layer is one RMSNorm and one mixer (NemotronH*DecoderLayer,
    vllm/model_executor/models/nemotron_h.py); attention is plain GQA (qkv_proj, o_proj, no
    bias, no q/k norms); MLP layers are relu2 up/down.

    Every character of hybrid_override_pattern is a layer, as the engines count them for pipeline
    stages; the MoE and MLP layers keep neither KV nor state (``mixer_free_layers``), and the MoE
    layers are where the pattern puts them (``moe_layer_ids``)."""
    cfg = ModelConfig(text.cfg.data, text.source, "nemotron-h")
    pattern = _pattern(cfg)
    counts = {kind: pattern.count(kind) for kind in _NEMOTRON_KINDS}
    n_mamba, n_attn, n_moe, n_mlp = counts["M"], counts["*"], counts["E"], counts["-"]
    dims = common_dims(cfg)
    h = dims.hidden
    linear = _mamba2(cfg, n_mamba, h, text.dtype_bytes) if n_mamba else None
    params = dict.fromkeys(TENSOR_CLASSES, 0)
    q_kv = (dims.heads + 2 * dims.kv_heads) * dims.head_dim
    # qkv_proj and o_proj without bias whatever attention_bias says (NemotronHAttention).
    params[ATTN_SHARDED] = n_attn * (h * q_kv + dims.heads * dims.head_dim * h)
    if linear is not None:
        params[ATTN_SHARDED] += n_mamba * linear.params_per_layer(h)
    mlp_bias = bool(cfg.get("mlp_bias", False))
    widths = _mlp_widths(cfg, n_mlp)
    params[DENSE_MLP] = sum(2 * h * w + ((w + h) if mlp_bias else 0) for w in widths)
    moe = None
    if n_moe:
        moe, moe_params = _nemotron_moe(cfg, n_moe, h)
        params.update(moe_params)
    inner = linear.value_heads * linear.value_head_dim if linear else 0
    params[NORMS] = len(pattern) * h + h + n_mamba * inner
    params[EMBEDDING] = dims.vocab * h
    params[LM_HEAD] = 0 if _tied(text) else dims.vocab * h
    mixer_free = n_moe + n_mlp
    notes = [
        f"{len(pattern)} layers: {n_mamba} Mamba-2, {n_attn} attention, {n_moe} MoE, {n_mlp} MLP "
        "(MoE and MLP layers keep no KV or state)",
        _ssm_note(
            cfg.get("mamba_ssm_cache_dtype", "float32"),
            "mamba_ssm_cache_dtype",
            "NemotronHForCausalLMConfig in vllm/model_executor/models/config.py",
        ),
    ]
    arch = _arch(
        text,
        "nemotron-h",
        dims,
        params,
        moe=moe,
        linear=linear,
        notes=notes,
        first_moe_layer=pattern.find("E") if n_moe else 0,
        dense=(max(widths) if widths else 0, len(pattern) - n_moe if moe else len(pattern)),
    )
    moe_ids = tuple(i for i, kind in enumerate(pattern) if kind == "E")
    return replace(arch, mixer_free_layers=mixer_free, moe_layer_ids=moe_ids)


# ---------------------------------------------------------------------------------------------
# Kimi Linear


def _one_based_layers(cfg: ModelConfig, lac: Mapping[str, Any], key: str, layers: int) -> set[int]:
    """A 1-based layer list of linear_attn_config (KimiLinearConfig.is_kda_layer reads
    ``layer_idx + 1 in kda_layers``)."""
    value = lac.get(key)
    if value is None:
        return set()
    if not isinstance(value, list):
        raise CockpitError(
            f"{cfg.source}: linear_attn_config.{key} must be a list of layer numbers from 1 "
            f"(got {shown(value)}): fix the config.json"
        )
    return {
        whole_number(v, f"{cfg.source}: linear_attn_config.{key}", 1, layers, "fix the config.json")
        for v in value
    }


def _kda(cfg: ModelConfig, layers: int, hidden: int, dtype_bytes: int) -> LinearAttention:
    """Kimi Delta Attention layers (KimiGatedDeltaNetAttention,
    vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py; KimiDeltaAttention,
    sglang/srt/models/kimi_linear.py): q, k, v and beta projections, the low-rank forget gate
    f_a/f_b and output gate g_a/g_b, dt_bias per channel, the q/k/v short conv1d (no bias), A_log
    per head, o_proj; the gated RMSNorm of one head is counted with the norms. Layers are the
    ``kda_layers`` list, else all but ``full_attn_layers``."""
    lac = cfg.get("linear_attn_config")
    if not isinstance(lac, dict):
        raise CockpitError(
            f"{cfg.source} has no linear_attn_config (needed for a kimi-linear model): is this the model's config.json?"
        )
    kda = _one_based_layers(cfg, lac, "kda_layers", layers)
    full = _one_based_layers(cfg, lac, "full_attn_layers", layers)
    if kda & full:
        raise CockpitError(
            f"{cfg.source}: layer {min(kda & full)} is in both kda_layers and full_attn_layers: fix the config.json"
        )
    count = len(kda) if kda else layers - len(full)
    lc = ModelConfig(lac, f"{cfg.source} linear_attn_config", "kimi-linear")
    heads = lc.count("num_heads", high=MAX_HEADS)
    head_dim = lc.count("head_dim", high=MAX_WIDTH)
    kernel = lc.count("short_conv_kernel_size", high=MAX_WIDTH, default=4)
    proj = heads * head_dim
    # Forget gate f_a (hidden -> head_dim, replicated) and f_b; output gate g_a/g_b, or one full-rank
    # g in the fused in_proj when use_full_rank_gate.
    forget = hidden * head_dim + head_dim * proj
    output = hidden * proj if lac.get("use_full_rank_gate") else hidden * head_dim + head_dim * proj
    gate = forget + output
    per_layer = 3 * hidden * proj + hidden * heads + gate + proj + 3 * proj * kernel + heads + proj * hidden
    return LinearAttention(
        layers=count,
        key_heads=heads,
        value_heads=heads,
        key_head_dim=head_dim,
        value_head_dim=head_dim,
        conv_kernel=kernel,
        dtype_bytes=dtype_bytes,
        kind=KIMI_DELTA,
        layer_params=per_layer,
        ssm_dtype_bytes=4,  # kda_state_dtype: float32 whatever --mamba-ssm-cache-dtype says
    )


def read_kimi_linear(text: ConfigText) -> ModelArch:
    """Kimi Linear: KDA layers and MLA layers without a q LoRA (q_proj, kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj, o_proj; MultiHeadLatentAttention, vllm/models/kimi_k3/nvidia/mla.py);
    MoE from ``first_k_dense_replace`` every ``moe_layer_freq`` layers (KimiDecoderLayer), with a
    bias-free gate and its e_score_correction_bias, gated SiLU experts and num_shared_experts x
    moe_intermediate_size of shared expert (KimiMoE); gated dense MLP elsewhere (KimiMLP)."""
    cfg = ModelConfig(text.cfg.data, text.source, "kimi-linear")
    dims = common_dims(cfg)
    layers = dims.layers
    linear = _kda(cfg, layers, dims.hidden, text.dtype_bytes)
    mla = mla_dims(cfg)
    experts, top_k = routed_experts(
        cfg, ("num_experts", "n_routed_experts"), "num_experts_per_token", "num_experts_per_tok"
    )
    first_dense = cfg.count("first_k_dense_replace", low=0, high=layers, default=0)
    freq = cfg.count("moe_layer_freq", high=max(1, layers), default=1)
    moe_layers = len([i for i in range(first_dense, layers) if i % freq == 0])
    width = cfg.count("moe_intermediate_size", high=MAX_WIDTH)
    shared = cfg.count("num_shared_experts", low=0, high=MAX_EXPERTS, default=0)
    moe = MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=width,
        moe_layers=moe_layers,
        shared_experts=shared,
        shared_intermediate=shared * width,
    )
    dense_width = cfg.count("intermediate_size", low=0, high=MAX_WIDTH, default=0)
    params = count_params(
        layers=layers,
        hidden=dims.hidden,
        heads=dims.heads,
        kv_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        vocab=dims.vocab,
        tied=_tied(text),
        mla=mla,
        moe=moe,
        dense_layers=layers - moe_layers,
        dense_intermediate=dense_width,
        attention_bias=False,
        expert_bias=False,
        linear=linear,
        router_bias=True,  # e_score_correction_bias, one per expert
    )
    if cfg.get("mla_use_output_gate"):  # g_proj, hidden -> heads x v_head_dim (non-LoRA layout)
        params[ATTN_SHARDED] += (layers - linear.layers) * dims.hidden * dims.heads * mla.v_head_dim
    notes = [_ssm_note("float32", "", "kda_state_dtype, vllm/model_executor/layers/mamba/mamba_utils.py")]
    return _arch(
        text,
        "kimi-linear",
        dims,
        params,
        moe=moe,
        linear=linear,
        notes=notes,
        first_moe_layer=first_dense,
        dense=(dense_width, layers - moe_layers),
        mla=mla,
    )


# ---------------------------------------------------------------------------------------------
# Shared


def _tied(text: ConfigText) -> bool:
    """tie_word_embeddings from the language model's settings, else the wrapper's."""
    value = text.cfg.get("tie_word_embeddings")
    if value is None:
        value = text.raw.get("tie_word_embeddings", False)
    return bool(value)


def _dtype_bytes(dtype: Any) -> int:
    """Bytes of a state dtype a config names; 0 (the convolution's) when it names none."""
    return {"float32": 4, "bfloat16": 2, "float16": 2}.get(str(dtype), 0)


def _ssm_note(dtype: Any, key: str, where: str) -> str:
    """What vLLM keeps the recurrent state in by default (the config's ``key`` as ``where`` reads
    it), as the plan charges it."""
    source = f"the config's {key}, {where}" if key else where
    return f"vLLM keeps the recurrent state in {dtype} ({source})"


def _arch(
    text: ConfigText,
    family: str,
    dims: CommonDims,
    params: dict[str, int],
    *,
    moe: MoeDims | None,
    linear: LinearAttention | None,
    notes: list[str],
    first_moe_layer: int,
    dense: tuple[int, int] = (0, 0),
    mla: MlaDims | None = None,
) -> ModelArch:
    """The ModelArch of a hybrid family; ``dense``: (dense MLP width, dense layers)."""
    quant = read_quantization(text.quant_raw, text.dtype_bytes, text.source, first_moe_layer=first_moe_layer)
    return family_arch(
        text,
        family,
        dims,
        kv_heads=1 if mla else dims.kv_heads,
        tied_embeddings=_tied(text),
        dense_intermediate=dense[0],
        dense_layers=dense[1],
        quant=quant,
        mla=mla,
        moe=moe,
        params=params,
        linear_attention=linear,
        notes=tuple(notes),
    )


READERS: dict[str, Reader] = {
    "qwen3_5_moe": read_qwen3_5_moe,
    "qwen3_5_moe_text": read_qwen3_5_moe,
    "nemotron_h": read_nemotron_h,
    "kimi_linear": read_kimi_linear,
}
