"""DeepSeek Sparse Attention families: MLA whose attention reads only the top-k tokens a
"lightning indexer" picks, the indexer keeping a small key cache of its own.

- DeepSeek-V3.2 (``deepseek_v32``) and GLM-5 (``glm_moe_dsa``): DeepSeek-V3's MLA and MoE plus
  one indexer per layer. vLLM builds both with one class (DeepseekV32ForCausalLM and its alias
  GlmMoeDsaForCausalLM, vllm/models/deepseek_v32/nvidia/model.py; the attention and indexer in
  vllm/models/deepseek_v32/attention.py), SGLang with DeepseekV2ForCausalLM
  (sglang/srt/models/deepseek_v2.py, the indexer in sglang/srt/layers/attention/dsa/dsa_indexer.py).
- DeepSeek-V4 (``deepseek_v4``, Flash and Pro): a single 512-wide KV head with low-rank query and
  grouped low-rank output, a 128-token sliding window on every layer, compressed KV on the
  layers ``compress_ratios`` marks (an indexer on the ratio-4 ones), hyper-connections and an
  MoE on every layer (vllm/models/deepseek_v4/nvidia/model.py, attention.py, compressor.py;
  sglang/srt/models/deepseek_v4.py).

Parameters are counted tensor by tensor as vLLM builds them; the multi-token-prediction layer
(``num_nextn_predict_layers``) is not, as for DeepSeek-V3: the engines load it only for
speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cockpit.core.archs.common import Reader, family_arch
from cockpit.core.errors import CockpitError, shown
from cockpit.core.model import (
    ATTN_REPLICATED,
    ATTN_SHARDED,
    EMBEDDING,
    LM_HEAD,
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_WIDTH,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    SLIDING,
    TENSOR_CLASSES,
    ConfigText,
    MlaDims,
    ModelArch,
    ModelConfig,
    MoeDims,
    Quantization,
    WindowedLayers,
    common_dims,
    count_params,
    deepseek_moe,
    mla_dims,
    read_quantization,
    routed_experts,
)

# The indexer's key cache: index_head_dim FP8 values and one float32 scale per 128 of them,
# one vector per token (DeepseekV32Indexer.k_cache = DeepseekV32IndexerCache(head_dim=
# head_dim + head_dim // 128 * 4, dtype=uint8), vllm/models/deepseek_v32/attention.py, an
# MLAAttentionSpec of one head; SGLang's IndexKeyCache, sglang/srt/mem_cache/index_key_cache.py,
# the same 128 + 4 bytes). Neither engine's --kv-cache-dtype changes it.
INDEX_QUANT_BLOCK = 128
INDEX_SCALE_BYTES = 4


def index_cache_bytes(index_head_dim: int) -> int:
    """Bytes one token's indexer key takes: 132 for the 128-wide key of V3.2, GLM-5 and V4."""
    return index_head_dim + index_head_dim // INDEX_QUANT_BLOCK * INDEX_SCALE_BYTES


# ---------------------------------------------------------------------------------------------
# DeepSeek-V3.2 and GLM-5


def read_dsa(text: ConfigText) -> ModelArch:
    """DeepSeek-V3.2 or GLM-5: DeepSeek-V3 with an indexer in every layer."""
    family = "deepseek-v32" if text.model_type == "deepseek_v32" else "glm-moe-dsa"
    cfg = ModelConfig(text.cfg.data, text.source, family)
    dims = common_dims(cfg)
    mla = mla_dims(cfg)
    if not mla.q_lora_rank:
        raise CockpitError(
            f"{cfg.source}: q_lora_rank is missing or 0, but the DSA indexer projects its queries from the "
            "q_lora latent (DeepseekV32Indexer.wq_b): fix the config.json"
        )
    moe, dense_layers, dense_width = _deepseek_moe(cfg, dims.layers)
    params = count_params(
        layers=dims.layers,
        hidden=dims.hidden,
        heads=dims.heads,
        kv_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        vocab=dims.vocab,
        tied=dims.tied,
        mla=mla,
        moe=moe,
        dense_layers=dense_layers,
        dense_intermediate=dense_width,
        attention_bias=False,
        expert_bias=False,
    )
    index_heads, index_dim = _index_shape(cfg)
    indexed = _indexer_layers(cfg, dims.layers)
    for cls, count in _indexer_params(dims.hidden, mla.q_lora_rank, index_heads, index_dim).items():
        params[cls] += indexed * count
    quant = read_quantization(text.quant_raw, text.dtype_bytes, text.source, first_moe_layer=dense_layers)
    return family_arch(
        text,
        family,
        dims,
        kv_heads=1,
        dense_intermediate=dense_width,
        dense_layers=dense_layers,
        quant=quant,
        mla=mla,
        moe=moe,
        params=params,
        index_bytes_per_token=index_cache_bytes(index_dim) * indexed / dims.layers,
    )


def _deepseek_moe(cfg: ModelConfig, layers: int) -> tuple[MoeDims, int, int]:
    """(MoE dims, dense layers, dense width): DeepSeek's layout (DeepseekV32DecoderLayer,
    vllm/models/deepseek_v32/nvidia/model.py), with a dense width required when dense layers exist."""
    moe = deepseek_moe(cfg, layers)
    moe_layers = moe.moe_layers
    dense_width = cfg.count(
        "intermediate_size", low=0 if moe_layers == layers else 1, high=MAX_WIDTH, default=0
    )
    return moe, layers - moe_layers, dense_width


def _index_shape(cfg: ModelConfig) -> tuple[int, int]:
    """(index_n_heads, index_head_dim); both engines' indexer caches assume a 128-wide key
    (SGLang's DSATokenToKVPool asserts index_head_dim == 128)."""
    heads = cfg.count("index_n_heads", high=MAX_HEADS)
    dim = cfg.count("index_head_dim", high=MAX_WIDTH)
    if dim % INDEX_QUANT_BLOCK:
        raise CockpitError(
            f"{cfg.source}: index_head_dim ({dim}) must be a multiple of {INDEX_QUANT_BLOCK}, the indexer "
            "cache's FP8 scale block (DeepseekV32Indexer, vllm/models/deepseek_v32/attention.py): fix the config.json"
        )
    return heads, dim


def _indexer_layers(cfg: ModelConfig, layers: int) -> int:
    """Layers that build an indexer: all, unless index_topk_freq / index_topk_pattern make some
    reuse another layer's top-k (skip_topk in DeepseekV32Attention.__init__,
    vllm/models/deepseek_v32/attention.py)."""
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, (list, str)):
            raise CockpitError(
                f"{cfg.source}: index_topk_pattern must list one letter per layer (got {shown(pattern)}): "
                "fix the config.json"
            )
        return sum(1 for i in range(layers) if not (i < len(pattern) and pattern[i] == "S"))
    freq = cfg.count("index_topk_freq", high=max(1, layers), default=1)
    offset = cfg.count("index_skip_topk_offset", low=0, high=max(2, layers), default=2)
    return sum(1 for i in range(layers) if max(i - offset + 1, 0) % freq == 0)


def _indexer_params(hidden: int, q_lora: int, heads: int, dim: int) -> dict[str, int]:
    """One indexer, as both engines build it, replicated on every attention rank: wq_b
    (q_lora -> heads x dim, quantized like the checkpoint's linears, so counted with the
    replicated MLA projections), and wk, weights_proj and the LayerNorm k_norm, which vLLM keeps
    in the model dtype (wk_weights_proj with quant_config=None; SGLang's weights_proj has
    params_dtype bf16), so they go with the norms, the replicated class never quantized."""
    return {
        ATTN_REPLICATED: q_lora * heads * dim,
        NORMS: hidden * dim + hidden * heads + 2 * dim,
    }


# ---------------------------------------------------------------------------------------------
# DeepSeek-V4


@dataclass(frozen=True)
class V4Dims:
    hidden: int
    heads: int
    head_dim: int
    rope_dim: int
    q_lora: int
    o_lora: int
    o_groups: int
    hc_mult: int
    index_heads: int
    index_dim: int
    window: int
    ratios: tuple[int, ...]


def _v4_dims(cfg: ModelConfig, layers: int, hidden: int, heads: int) -> V4Dims:
    head_dim = cfg.count("head_dim", high=MAX_WIDTH)
    rope = cfg.count("qk_rope_head_dim", low=0, high=head_dim)
    groups = cfg.count("o_groups", high=MAX_HEADS)
    if heads % groups:
        raise CockpitError(
            f"{cfg.source}: num_attention_heads ({heads}) must be a multiple of o_groups ({groups}), which split "
            "the heads for the grouped output projection (wo_a): fix the config.json"
        )
    index_heads, index_dim = _index_shape(cfg)
    return V4Dims(
        hidden=hidden,
        heads=heads,
        head_dim=head_dim,
        rope_dim=rope,
        q_lora=cfg.count("q_lora_rank", high=MAX_WIDTH),
        o_lora=cfg.count("o_lora_rank", high=MAX_WIDTH),
        o_groups=groups,
        hc_mult=cfg.count("hc_mult", high=64, default=1),
        index_heads=index_heads,
        index_dim=index_dim,
        window=cfg.count("sliding_window", high=MAX_LAYERS * 1000),
        ratios=_compress_ratios(cfg, layers),
    )


def _compress_ratios(cfg: ModelConfig, layers: int) -> tuple[int, ...]:
    """One ratio per layer: 0 (window only), 4 (compressed, with an indexer) or 128 (compressed),
    the ratios DeepseekCompressor accepts (CompressorStateCache asserts 4 or 128,
    vllm/models/deepseek_v4/compressor.py)."""
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers:
        raise CockpitError(
            f"{cfg.source}: compress_ratios must list one ratio per layer ({layers}; got {shown(ratios)}): "
            "fix the config.json"
        )
    checked = tuple(cfg.check("compress_ratios", r, 0, 128) for r in ratios[:layers])
    odd = [r for r in checked if r not in (0, 1, 4, 128)]
    if odd:
        raise CockpitError(
            f"{cfg.source}: compress_ratios may hold only 0, 4 and 128 (got {odd[0]}; DeepseekCompressor "
            "supports no other): fix the config.json"
        )
    return tuple(0 if r == 1 else r for r in checked)


def _compressor_params(hidden: int, dim: int, ratio: int) -> int:
    """DeepseekCompressor (vllm/models/deepseek_v4/compressor.py): the position bias ape
    (ratio x coff x dim), fused_wkv_wgate (hidden -> 2 x coff x dim, quant_config=None,
    replicated) and an RMSNorm of dim; coff is 2 for the overlapping ratio-4 windows."""
    coff = 2 if ratio == 4 else 1
    return ratio * coff * dim + hidden * 2 * coff * dim + dim


def _v4_layer_params(d: V4Dims, ratio: int) -> dict[str, int]:
    """One layer's attention and hyper-connection parameters (DeepseekV4Attention,
    vllm/models/deepseek_v4/attention.py; DeepseekV4DecoderLayer, nvidia/model.py)."""
    h, hd = d.hidden, d.head_dim
    sharded = (
        d.q_lora * d.heads * hd  # wq_b
        + d.heads * hd * d.o_lora  # wo_a: o_groups blocks of (heads x head_dim / groups) -> o_lora
        + d.o_groups * d.o_lora * h  # wo_b
    )
    replicated = h * (d.q_lora + hd)  # fused_wqa_wkv (q_a and the single KV head)
    mix = (2 + d.hc_mult) * d.hc_mult
    kept = (
        d.q_lora
        + hd  # q_norm, kv_norm
        + d.heads  # attn_sink
        + 2 * h  # attn_norm, ffn_norm
        + 2 * (mix * d.hc_mult * h + mix + 3)  # hc_{attn,ffn}_{fn,base,scale}, float32
    )
    if ratio > 1:
        kept += _compressor_params(h, hd, ratio)
    if ratio == 4:  # DeepseekV4Indexer: wq_b (quantized, replicated), weights_proj, its compressor
        replicated += d.q_lora * d.index_heads * d.index_dim
        kept += h * d.index_heads + _compressor_params(h, d.index_dim, ratio)
    return {ATTN_SHARDED: sharded, ATTN_REPLICATED: replicated, NORMS: kept}


def _v4_moe(cfg: ModelConfig, layers: int) -> MoeDims:
    """Every layer is MoE (DeepseekV4MoE): routed experts, n_shared_experts x
    moe_intermediate_size of shared MLP."""
    expert = cfg.count("moe_intermediate_size", high=MAX_WIDTH)
    shared = cfg.count("n_shared_experts", low=0, high=MAX_EXPERTS, default=0)
    experts, top_k = routed_experts(cfg, "n_routed_experts", "num_experts_per_tok")
    return MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=expert,
        moe_layers=layers,
        shared_experts=shared,
        shared_intermediate=shared * expert,
    )


def _v4_params(
    cfg: ModelConfig, d: V4Dims, moe: MoeDims, layers: int, vocab: int, tied: bool
) -> dict[str, int]:
    """Parameters by tensor class. The router is GateLinear (hidden -> experts, no bias) with an
    e_score_correction_bias on the score-routed layers and, on the first num_hash_layers, the
    token -> experts table tid2eid (vocab x top-k) instead (DeepseekV4MoE)."""
    h = d.hidden
    params = {cls: 0 for cls in TENSOR_CLASSES}
    for ratio in d.ratios:
        for cls, count in _v4_layer_params(d, ratio).items():
            params[cls] += count
    hashed = cfg.count("num_hash_layers", low=0, high=layers, default=0)
    params[ROUTED_EXPERTS] = layers * moe.experts * 3 * h * moe.expert_intermediate
    params[SHARED_EXPERTS] = layers * 3 * h * moe.shared_intermediate
    params[ROUTER] = (
        layers * moe.experts * h + (layers - hashed) * moe.experts + hashed * vocab * moe.experts_per_token
    )
    params[EMBEDDING] = vocab * h
    params[LM_HEAD] = 0 if tied else vocab * h
    params[NORMS] += h + d.hc_mult * d.hc_mult * h + d.hc_mult + 1  # norm, hc_head_{fn,base,scale}
    return params


def _v4_quantization(text: ConfigText, experts_fp4: bool) -> Quantization:
    """The checkpoint's block-FP8 linears, and MXFP4 routed experts when expert_dtype is "fp4"
    (DeepseekV4FP8Config routes the experts to Mxfp4MoEMethod: 4-bit values and one UE8M0 scale
    per 32, vllm/models/deepseek_v4/quant_config.py); "fp8" experts stay block-FP8."""
    quant = read_quantization(text.quant_raw, text.dtype_bytes, text.source, first_moe_layer=0)
    if not experts_fp4:
        return quant
    return replace(
        quant,
        method=quant.method + "+mxfp4",
        label=quant.label + ", MXFP4 experts",
        bytes_by_class={**quant.bytes_by_class, ROUTED_EXPERTS: 0.5 + 1 / 32},
        blocked_classes=quant.blocked_classes - {ROUTED_EXPERTS},
    )


def _v4_kv(d: V4Dims, layers: int) -> tuple[MlaDims, WindowedLayers | None, float, str]:
    """KV as the planner's fields can hold it: compressed layers as full-attention layers of an
    effective latent width, window-only layers as sliding-window layers, and the note that says
    what this leaves out.

    vLLM keeps per layer a sliding window of ``sliding_window`` tokens (DeepseekV4SWACache,
    vllm/v1/attention/backends/mla/sparse_swa.py) and, on a ratio-r layer, one compressed
    head_dim-wide entry per r tokens (MLAAttentionSpec with tokens_per_state=r,
    DeepseekV4Attention.get_kv_cache_spec); a ratio-4 layer adds the indexer's 132-byte key per 4
    tokens (DeepseekV4IndexerCache). Averaged over the compressed layers, a token costs
    head_dim x mean(1/r) values of KV and 132 x (ratio-4 share) / 4 bytes of index."""
    compressed = [r for r in d.ratios if r > 1]
    window_only = layers - len(compressed)
    if not compressed:
        width = d.head_dim
        index = 0.0
    else:
        width = max(1, round(d.head_dim * sum(1 / r for r in compressed) / len(compressed)))
        index = index_cache_bytes(d.index_dim) * compressed.count(4) / 4 / len(compressed)
    # kv_lora_rank carries the effective width; the RoPE part is inside it.
    mla = MlaDims(
        q_lora_rank=d.q_lora,
        kv_lora_rank=width,
        qk_nope_head_dim=d.head_dim - d.rope_dim,
        qk_rope_head_dim=0,
        v_head_dim=d.head_dim,
    )
    windowed = WindowedLayers(SLIDING, window_only, d.window) if window_only else None
    note = (
        f"KV approximated: {len(compressed)} compressed layers charged {width} latent values per token "
        f"(head_dim {d.head_dim} x mean 1/ratio) plus {index:.1f} B of indexer key, {window_only} layers "
        f"window-only ({d.window} tokens); not charged: the {d.window}-token window the compressed layers "
        "also keep, the compressors' float32 state and fp8_ds_mla's 584-byte rows (vLLM's FlashMLA path "
        "turns --kv-cache-dtype auto into fp8_ds_mla, _resolve_dsv4_kv_cache_dtype)"
    )
    return mla, windowed, index, note


def read_deepseek_v4(text: ConfigText) -> ModelArch:
    """DeepSeek-V4 Flash or Pro."""
    cfg = ModelConfig(text.cfg.data, text.source, "deepseek-v4")
    dims = common_dims(cfg)
    layers = dims.layers
    d = _v4_dims(cfg, layers, dims.hidden, dims.heads)
    moe = _v4_moe(cfg, layers)
    expert_dtype = str(cfg.get("expert_dtype", "fp4"))
    if expert_dtype not in ("fp4", "fp8"):
        raise CockpitError(
            f'{cfg.source}: expert_dtype must be "fp4" or "fp8" (got {shown(expert_dtype)}; '
            "DeepseekV4FP8Config refuses others): fix the config.json"
        )
    mla, windowed, index, note = _v4_kv(d, layers)
    return family_arch(
        text,
        "deepseek-v4",
        dims,
        layers=layers,
        kv_heads=1,
        head_dim=d.head_dim,
        dense_intermediate=0,
        dense_layers=0,
        quant=_v4_quantization(text, expert_dtype == "fp4" and bool(text.quant_raw)),
        mla=mla,
        moe=moe,
        params=_v4_params(cfg, d, moe, layers, dims.vocab, dims.tied),
        windowed=windowed,
        index_bytes_per_token=index,
        notes=(note,),
    )


READERS: dict[str, Reader] = {
    "deepseek_v32": read_dsa,
    "glm_moe_dsa": read_dsa,
    "deepseek_v4": read_deepseek_v4,
}
