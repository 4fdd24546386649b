"""A family cockpit has not met, planned from the names most config.json files share.

Transformers-style configs spell the same few settings a handful of ways (``num_hidden_layers``,
``n_layer``, ``num_layers``; ``hidden_size``, ``n_embd``, ``d_model``; ...). When a config names
the layers, the width, the heads, the vocabulary and the MLP widths, the model is planned as the
engines build the common decoder: GQA or MLA attention, a gated MLP (gate, up and down
projections) or routed experts with optional shared experts, on the layers the common layer
patterns pick (vllm/model_executor/models/deepseek_v2.py DeepseekV2DecoderLayer: ``i >=
first_k_dense_replace and i % moe_layer_freq == 0``; vllm/model_executor/models/qwen2_moe.py
Qwen2MoeDecoderLayer: ``i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0``).
Sliding-window layers come from ``layer_types`` or, as Gemma 3 writes it, from
``sliding_window_pattern`` (every N-th layer full attention: transformers' Gemma3TextConfig
derives ``layer_types`` so, and vllm/model_executor/models/gemma3.py Gemma3Attention reads them).

The plan is marked ``approximate`` and its ``notes`` say each thing assumed rather than read. What
the config does not say at all (no layer count, no width) is refused with the keys it lacked: a
NeedsCheckpoint, so a model folder with its *.safetensors is planned from the tensor headers
instead (cockpit.store.modelfiles).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cockpit.core.errors import CockpitError, shown
from cockpit.core.model import (
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    SLIDING,
    ConfigText,
    ModelArch,
    ModelConfig,
    MoeDims,
    NeedsCheckpoint,
    Quantization,
    WindowedLayers,
    count_params,
    layer_list,
    mla_dims,
    read_quantization,
)

FAMILY = "generic"

# The spellings of one setting across families; the first one present counts.
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HIDDEN = ("hidden_size", "n_embd", "d_model")
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
HEAD_DIM = ("head_dim", "kv_channels")
VOCAB = ("vocab_size", "padded_vocab_size")
CONTEXT = ("max_position_embeddings", "seq_length", "max_sequence_length", "n_positions")
DENSE_WIDTH = ("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner")
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "moe_k")
EXPERT_WIDTH = ("moe_intermediate_size", "expert_intermediate_size")
SHARED_COUNT = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
SHARED_WIDTH = ("shared_expert_intermediate_size",)
FIRST_DENSE = ("first_k_dense_replace", "moe_layer_start_index")
# Keys of layers that keep a state instead of KV (linear attention, Mamba): not read here.
STATE_KEYS = (
    "linear_num_value_heads",
    "linear_attn_config",
    "ssm_state_size",
    "mamba_num_heads",
    "hybrid_override_pattern",
)
_KNOWN_LAYER_KINDS = ("full_attention", "sliding_attention")


@dataclass
class _Reading:
    """The config as this reader reads it: each required key found or listed as lacking, each
    assumption written down."""

    cfg: ModelConfig
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def key(self, keys: tuple[str, ...]) -> str | None:
        return next((k for k in keys if self.cfg.data.get(k) is not None), None)

    def need(self, keys: tuple[str, ...], high: int) -> int:
        """A count the plan cannot do without; 0 (and the key listed as lacking) when absent."""
        found = self.optional(keys, low=1, high=high)
        if found is None:
            self.missing.append(keys[0])
            return 0
        return found

    def optional(self, keys: tuple[str, ...], *, low: int, high: int) -> int | None:
        key = self.key(keys)
        if key is None:
            return None
        return self.cfg.check(key, self.one_value(key), low, high)

    def one_value(self, key: str) -> Any:
        """A count, or a per-layer list of one same count (Hunyuan writes moe_topk as [8, 8, ...])."""
        value = self.cfg.data[key]
        if isinstance(value, list) and value and all(v == value[0] for v in value):
            self.notes.append(f"{key} given per layer: read as {shown(value[0])}")
            return value[0]
        return value


def read(text: ConfigText) -> ModelArch:
    """A config of a model_type no family reader knows: an approximate plan from the common
    names, or NeedsCheckpoint naming every key it lacked."""
    cfg, reading = text.cfg, _Reading(text.cfg)
    layers = reading.need(LAYERS, MAX_LAYERS)
    hidden = reading.need(HIDDEN, MAX_HIDDEN)
    heads = reading.need(HEADS, MAX_HEADS)
    vocab = reading.need(VOCAB, MAX_VOCAB)
    experts = reading.optional(EXPERTS, low=0, high=MAX_EXPERTS) or 0
    is_moe = experts > 1
    moe_flags = _moe_layer_flags(reading, layers) if is_moe and layers else [False] * layers
    dense_layers = moe_flags.count(False)
    dense_width = _dense_width(reading, is_moe, dense_layers)
    expert_width = _expert_width(reading) if is_moe else 0
    if reading.missing:
        raise NeedsCheckpoint(
            f"{text.source}: model_type {text.model_type!r} is not a family cockpit knows, and its "
            f"config.json lacks {_listed(reading.missing)}"
        )
    reading.notes.insert(
        0,
        f"model_type {text.model_type!r} is not a family cockpit knows: planned from the common config names",
    )
    kv_heads, head_dim = _heads(reading, hidden, heads)
    mla = mla_dims(cfg) if cfg.get("kv_lora_rank") is not None else None
    moe = _moe_dims(reading, experts, expert_width, moe_flags) if is_moe else None
    if not is_moe:
        reading.notes.append("no expert count found: planned as dense")
    reading.notes.append("gated MLP assumed (3 matrices)")
    _note_state_layers(reading)
    tied = _tied(reading, text)
    params = count_params(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied=tied,
        mla=mla,
        moe=moe,
        dense_layers=dense_layers,
        dense_intermediate=dense_width,
        attention_bias=bool(cfg.get("attention_bias", cfg.get("qkv_bias", False))),
        expert_bias=False,
        router_bias=False,
    )
    first_moe = moe_flags.index(True) if moe is not None else 0
    return ModelArch(
        name=text.name,
        source=text.source,
        family=FAMILY,
        architecture=text.architecture,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=1 if mla else kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied_embeddings=tied,
        max_context=_context(reading),
        dense_intermediate=dense_width,
        dense_layers=dense_layers,
        quant=_quantization(reading, text, first_moe),
        mla=mla,
        moe=moe,
        params=params,
        windowed=_windowed(reading, layers),
        notes=tuple(reading.notes),
        approximate=True,
    )


def _listed(keys: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def _heads(reading: _Reading, hidden: int, heads: int) -> tuple[int, int]:
    """(KV heads, head width); ChatGLM's multi_query_group_num counts only with
    multi_query_attention on (vllm/model_executor/models/chatglm.py GLMAttention)."""
    cfg, source = reading.cfg, reading.cfg.source
    keys = KV_HEADS if cfg.get("multi_query_attention", True) else KV_HEADS[:-1]
    kv_heads = reading.optional(keys, low=1, high=MAX_HEADS)
    if kv_heads is None:
        kv_heads = heads
        reading.notes.append("no KV head count found: every query head its own KV head (MHA) assumed")
    if kv_heads > heads:
        raise CockpitError(
            f"{source}: {reading.key(keys)} ({kv_heads}) is more than {reading.key(HEADS)} ({heads}); "
            "every KV head serves one or more query heads: fix the config.json"
        )
    head_dim = reading.optional(HEAD_DIM, low=1, high=MAX_WIDTH)
    if head_dim is None:
        if hidden < heads:
            raise CockpitError(
                f"{source}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}), so a "
                "head has no width: fix the config.json or give head_dim"
            )
        head_dim = hidden // heads
        reading.notes.append("head_dim from hidden_size / num_attention_heads")
    return kv_heads, head_dim


def _dense_width(reading: _Reading, is_moe: bool, dense_layers: int) -> int:
    """The dense MLP's width, needed when some layer is dense (all of them, for a dense model)."""
    if not is_moe or dense_layers:
        return reading.need(DENSE_WIDTH, MAX_WIDTH)
    return reading.optional(DENSE_WIDTH, low=0, high=MAX_WIDTH) or 0


def _expert_width(reading: _Reading) -> int:
    """One routed expert's width: moe_intermediate_size, else intermediate_size as Mixtral and
    its kin spell it (vllm/model_executor/models/mixtral.py MixtralMoE)."""
    width = reading.optional(EXPERT_WIDTH, low=1, high=MAX_WIDTH)
    if width is not None:
        return width
    width = reading.optional(DENSE_WIDTH, low=1, high=MAX_WIDTH)
    if width is None:
        reading.missing.append(EXPERT_WIDTH[0])
        return 0
    reading.notes.append(f"expert width from {reading.key(DENSE_WIDTH)} (no moe_intermediate_size)")
    return width


def _moe_layer_flags(reading: _Reading, layers: int) -> list[bool]:
    """Which layers hold routed experts, by the layer patterns the common families write."""
    cfg = reading.cfg
    first = reading.optional(FIRST_DENSE, low=0, high=layers) or 0
    dense_only = layer_list(cfg, "mlp_only_layers", layers)
    step = reading.optional(("decoder_sparse_step",), low=0, high=max(1, layers)) or 1
    freq = _moe_layer_freq(cfg, layers)
    flags = [i >= first and i not in dense_only and (i + 1) % step == 0 and freq(i) for i in range(layers)]
    patterns = (*FIRST_DENSE, "mlp_only_layers", "decoder_sparse_step", "moe_layer_freq")
    if not any(cfg.get(k) is not None for k in patterns):
        reading.notes.append("MoE on every layer (no layer pattern found)")
    if not any(flags):
        raise CockpitError(
            f"{cfg.source}: its MoE layer pattern leaves no layer with experts: fix the config.json"
        )
    return flags


def _moe_layer_freq(cfg: ModelConfig, layers: int) -> Any:
    """moe_layer_freq as DeepSeek writes it (a layer is MoE when ``i % freq == 0``), or a list of
    one 0/1 per layer."""
    value = cfg.get("moe_layer_freq", 1)
    if isinstance(value, list):
        if len(value) != layers:
            raise CockpitError(
                f"{cfg.source}: moe_layer_freq must be a number or one 0/1 per layer ({layers}; got "
                f"{shown(value)}): fix the config.json"
            )
        return lambda i: bool(value[i])
    freq = cfg.check("moe_layer_freq", value, 1, max(1, layers))
    return lambda i: i % freq == 0


def _moe_dims(reading: _Reading, experts: int, width: int, flags: list[bool]) -> MoeDims:
    """Routed experts, top-k and shared experts: ``n_shared_experts`` of the expert width, or one
    shared expert of ``shared_expert_intermediate_size`` (Qwen2MoeSparseMoeBlock)."""
    top_k = reading.optional(TOP_K, low=1, high=MAX_EXPERTS)
    if top_k is None:
        top_k = 1
        reading.notes.append("no experts-per-token key found: top-1 routing assumed (throughput only)")
    if top_k > experts:
        raise CockpitError(
            f"{reading.cfg.source}: {reading.key(TOP_K)} ({top_k}) is more than the {experts} experts of "
            f"{reading.key(EXPERTS)}: a token cannot be routed to more experts than exist; fix the config.json"
        )
    shared_width = reading.optional(SHARED_WIDTH, low=0, high=MAX_WIDTH)
    shared = reading.optional(SHARED_COUNT, low=0, high=MAX_EXPERTS)
    if shared_width is not None:
        shared, total = (1 if shared_width else 0), shared_width
    elif shared is not None:
        total = shared * width
    else:
        shared, total = 0, 0
        reading.notes.append("no shared-expert key found: no shared experts planned")
    return MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=width,
        moe_layers=flags.count(True),
        shared_experts=shared,
        shared_intermediate=total,
    )


def _windowed(reading: _Reading, layers: int) -> WindowedLayers | None:
    """Sliding-window layers: ``layer_types`` (gpt-oss, newer transformers), else Gemma 3's
    ``sliding_window_pattern`` (layer i slides unless ``(i + 1) % pattern == 0``); a window with
    neither is planned as full attention, which holds more KV, never less."""
    cfg = reading.cfg
    window = reading.optional(("sliding_window",), low=0, high=MAX_CONTEXT) or 0
    if not window or cfg.get("use_sliding_window") is False:
        return None
    kinds = cfg.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != layers:
            raise CockpitError(
                f"{cfg.source}: layer_types must list one kind per layer ({layers}; got {shown(kinds)}): "
                "fix the config.json"
            )
        count = sum(1 for kind in kinds if kind == "sliding_attention")
    elif cfg.get("sliding_window_pattern") is not None:
        pattern = cfg.check("sliding_window_pattern", cfg.get("sliding_window_pattern"), 1, max(1, layers))
        count = sum(1 for i in range(layers) if (i + 1) % pattern)
        reading.notes.append(
            f"sliding-window layers from sliding_window_pattern {pattern}: every {pattern}th layer full attention"
        )
    else:
        reading.notes.append(
            f"sliding_window {window} without layer_types or sliding_window_pattern: planned as full "
            "attention (KV may be overstated)"
        )
        return None
    return WindowedLayers(SLIDING, count, window) if count else None


def _note_state_layers(reading: _Reading) -> None:
    """Layers of a kind this reader cannot size (linear attention, Mamba) are planned as full
    attention, which holds more than their fixed state: say so."""
    cfg = reading.cfg
    kinds = cfg.get("layer_types")
    odd = sorted({str(k) for k in kinds if k not in _KNOWN_LAYER_KINDS}) if isinstance(kinds, list) else []
    keys = [k for k in STATE_KEYS if cfg.get(k) is not None]
    if odd or keys:
        what = ", ".join(odd + keys)
        reading.notes.append(
            f"layers of a kind not read ({what}): planned as full attention (KV and weights may be overstated)"
        )


def _tied(reading: _Reading, text: ConfigText) -> bool:
    """tie_word_embeddings from the language model's settings or the wrapper; absent, an lm_head
    of its own is planned (more weights, never fewer)."""
    value = reading.cfg.get("tie_word_embeddings", text.raw.get("tie_word_embeddings"))
    if value is None:
        reading.notes.append("tie_word_embeddings absent: an lm_head of its own assumed")
        return False
    return bool(value)


def _context(reading: _Reading) -> int:
    context = reading.optional(CONTEXT, low=0, high=MAX_CONTEXT)
    if not context:
        reading.notes.append("no context length found (max_position_embeddings): 4096 assumed")
        return 4096
    return context


def _quantization(reading: _Reading, text: ConfigText, first_moe_layer: int) -> Quantization:
    """The checkpoint's quantization; one cockpit cannot size from the config is planned as the
    model's dtype, which weighs more than the quantized weights (read_quantization, cockpit.core.model)."""
    try:
        return read_quantization(text.quant_raw, text.dtype_bytes, text.source, first_moe_layer)
    except NeedsCheckpoint:
        method = text.quant_raw.get("quant_method") if isinstance(text.quant_raw, dict) else None
        plain = read_quantization(None, text.dtype_bytes, text.source)
        reading.notes.append(
            f"quantization {shown(method)} not sized from the config: weights planned as {plain.label} (overstated)"
        )
        return plain
