"""Model architecture: what the planner needs from a model's config.json.

`cockpit.store.modelfiles` finds and reads the files (a path, a model folder, the Hugging Face cache, a
bundled architecture; `cockpit.store.safetensors` the checkpoint's tensor headers); this module reads no
files. Each family spells its MoE facts differently; ``cockpit.core.archs.parse_config`` normalises them into one
``ModelArch`` with parameter counts and bytes per *tensor class*, the unit in which the engines
shard weights (docs/memory.md#tensor-classes). A config.json this module cannot size alone (a
family cockpit does not know) raises NeedsCheckpoint; `cockpit.core.checkpoint` then plans the model
from the name, dtype and shape of every tensor
(docs/placement.md#models-cockpit-reads-from-their-checkpoint).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.errors import CockpitError, shown

# Tensor classes: each is sharded its own way by the engines.
ATTN_SHARDED = "attn_sharded"  # q/k/v/o (GQA), MLA q_b/kv_b/o: split over attention TP
ATTN_REPLICATED = "attn_replicated"  # MLA q_a and kv_a projections: every attention rank
DENSE_MLP = "dense_mlp"  # MLP of dense layers: split over TP
SHARED_EXPERTS = "shared_experts"  # always-on experts: split over TP
ROUTED_EXPERTS = "routed_experts"  # split by EP (whole experts) and MoE-TP (slices)
ROUTER = "router"  # gate (+ correction bias): replicated, never quantized
NORMS = "norms"  # replicated, tiny
EMBEDDING = "embedding"  # vocab-parallel over TP
LM_HEAD = "lm_head"  # vocab-parallel over TP

TENSOR_CLASSES = (
    ATTN_SHARDED,
    ATTN_REPLICATED,
    DENSE_MLP,
    SHARED_EXPERTS,
    ROUTED_EXPERTS,
    ROUTER,
    NORMS,
    EMBEDDING,
    LM_HEAD,
)
# Classes made of Linear layers, so a checkpoint's quantization can apply to them.
# lm_head is a vocab-parallel embedding in both engines and stays in the model dtype.
LINEAR_CLASSES = (ATTN_SHARDED, ATTN_REPLICATED, DENSE_MLP, SHARED_EXPERTS, ROUTED_EXPERTS)


@dataclass(frozen=True)
class Quantization:
    """How weights are stored: bytes per parameter for each tensor class."""

    method: str  # bf16, fp16, fp32, fp8-block, fp8, int4, nvfp4, mxfp4
    label: str  # one line for people: "FP8 block 128x128"
    bytes_by_class: Mapping[str, float]
    block: tuple[int, int] | None = None  # (block_n, block_k) of block-FP8 checkpoints
    group_size: int | None = None
    # Classes whose Linear layers use the block format (block rules apply to them).
    blocked_classes: frozenset[str] = frozenset()

    def bytes_per_param(self, cls: str) -> float:
        return self.bytes_by_class[cls]


@dataclass(frozen=True)
class MlaDims:
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MoeDims:
    experts: int
    experts_per_token: int
    expert_intermediate: int  # width of one routed expert
    moe_layers: int
    shared_experts: int = 0
    shared_intermediate: int = 0  # total width of the shared expert(s) in one layer


# Kinds of state layer, each sized by its own MambaStateShapeCalculator method
# (vllm/model_executor/layers/mamba/mamba_utils.py).
GATED_DELTANET = "gated-deltanet"  # Qwen3-Next, Qwen3.5: gated_delta_net_state_shape
KIMI_DELTA = "kda"  # Kimi Linear's Kimi Delta Attention: kda_state_shape
MAMBA2 = "mamba2"  # Nemotron-H: mamba2_state_shape


@dataclass(frozen=True)
class LinearAttention:
    """Layers that keep a fixed-size state per request instead of per-token KV: a short
    convolution window and a recurrent matrix per head, whatever the request's length.

    One shape covers the three kinds cockpit plans, as vLLM sizes them (MambaStateShapeCalculator,
    vllm/model_executor/layers/mamba/mamba_utils.py; SGLang's sglang/srt/configs/mamba_utils.py
    agrees): the convolution runs over ``2 x key_heads x key_head_dim + value_heads x
    value_head_dim`` channels and the recurrent state is ``value_heads x value_head_dim x
    key_head_dim``.
    - Gated DeltaNet: key and value heads as the config names them.
    - KDA: key_heads = value_heads = the KDA heads, both dims the KDA head dim.
    - Mamba-2: key_heads = n_groups, key_head_dim = ssm_state_size, value_heads = mamba heads,
      value_head_dim = mamba head dim (the convolution's intermediate size + 2 x groups x state).
    """

    layers: int  # how many of the model's layers are linear attention
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    dtype_bytes: int = 2  # the model's dtype, which vLLM's "auto" state dtype follows
    kind: str = GATED_DELTANET
    # Parameters of one such layer as its family counts them; 0: Gated DeltaNet's own formula.
    layer_params: int = 0
    # The recurrent state's dtype when vLLM's "auto" does not follow the model's: the model's
    # config (Nemotron-H's mamba_ssm_cache_dtype, Qwen3.5's mamba_ssm_dtype, float32 by default:
    # vllm/model_executor/models/config.py) or the kind itself (KDA: kda_state_dtype, float32).
    # 0: the convolution's dtype.
    ssm_dtype_bytes: int = 0

    @property
    def conv_dim(self) -> int:
        """Channels of the short convolution: queries, keys and values side by side."""
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    def sharded_conv_dim(self, attn_tp: int) -> int:
        """Convolution channels on one rank. Mamba-2 repeats its groups until every rank holds
        the groups its heads read (extra_groups_for_head_shards, mamba_utils.py)."""
        key_heads = self.key_heads
        if self.kind == MAMBA2 and key_heads % attn_tp:
            key_heads = attn_tp
        channels = 2 * key_heads * self.key_head_dim + self.value_heads * self.value_head_dim
        return -(-channels // attn_tp)

    def params_per_layer(self, hidden: int) -> int:
        """in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log and out_proj, all split over attention
        TP (Qwen3NextGatedDeltaNet, vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py);
        another kind's count as its family gave it."""
        if self.layer_params:
            return self.layer_params
        key_dim, value_dim = self.key_heads * self.key_head_dim, self.value_heads * self.value_head_dim
        in_proj = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * self.value_heads
        return in_proj + self.conv_dim * self.conv_kernel + 2 * self.value_heads + value_dim * hidden

    def state_bytes(self, attn_tp: int, conv_bytes: float, ssm_bytes: float) -> float:
        """One layer's state for one request on one attention rank: the convolution window
        (conv_dim / TP channels x kernel - 1 steps) and the recurrent state (value heads / TP x
        value head dim x key head dim)."""
        conv = self.sharded_conv_dim(attn_tp) * (self.conv_kernel - 1) * conv_bytes
        ssm = -(-self.value_heads // attn_tp) * self.value_head_dim * self.key_head_dim * ssm_bytes
        return conv + ssm


SLIDING = "sliding"  # sliding-window attention: gpt-oss, Gemma 3, DeepSeek-V4's local layers
CHUNKED = "chunked"  # chunked local attention: Llama 4's RoPE layers


@dataclass(frozen=True)
class WindowedLayers:
    """Attention layers that look back only ``window`` tokens, so a request keeps at most about a
    window of KV in each, however long it grows. The engines give such layers their own share of
    the cache: vLLM's SlidingWindowSpec and ChunkedLocalAttentionSpec (vllm/v1/kv_cache_interface.py)
    in KV cache groups of their own, SGLang a sliding-window pool beside the full one
    (sglang/srt/model_executor/pool_configurator.py)."""

    kind: str  # SLIDING or CHUNKED
    layers: int
    window: int  # the sliding window or the attention chunk, in tokens

    def tokens_held(self, tokens: int, in_flight: int = 0) -> int:
        """Tokens one layer keeps for a request of ``tokens``: vLLM keeps the window (window - 1
        for a sliding window) plus the tokens scheduled but not yet settled
        (max_admission_blocks_per_request), never more than the request."""
        reach = self.window - 1 if self.kind == SLIDING else self.window
        return min(tokens, reach + in_flight)


@dataclass(frozen=True)
class ModelArch:
    """A model as the planner sees it. Counts are parameters, bytes follow the quantization."""

    name: str
    source: str  # the config.json this came from
    family: str
    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    max_context: int
    dense_intermediate: int
    dense_layers: int
    quant: Quantization
    mla: MlaDims | None = None
    moe: MoeDims | None = None
    params: Mapping[str, int] = field(default_factory=dict)
    linear_attention: LinearAttention | None = None  # hybrid models: layers with a state, no KV
    windowed: WindowedLayers | None = None  # layers that keep only a window of KV per request
    # Bytes per token per full-attention layer kept beside the KV in a fixed dtype: the DSA
    # indexer's key cache (DeepSeek-V3.2, GLM-5), which no --kv-cache-dtype changes.
    index_bytes_per_token: float = 0.0
    notes: tuple[str, ...] = ()  # what was inferred rather than read (a checkpoint's top-k, ...)
    # Layers of the MoE (empty: the last moe.moe_layers layers, dense ones first), for families
    # that interleave them (Llama 4 Maverick, Nemotron-H); a pipeline stage holds its own.
    moe_layer_ids: tuple[int, ...] = ()
    # Layers with no token mixer at all, so neither KV nor state (Nemotron-H's MoE and MLP layers).
    mixer_free_layers: int = 0
    # True when the family is not one cockpit knows and its shapes were read from the common
    # config names; ``notes`` then says what was assumed.
    approximate: bool = False

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    def class_bytes(self, cls: str) -> float:
        return self.params.get(cls, 0) * self.quant.bytes_per_param(cls)

    @property
    def total_bytes(self) -> float:
        return sum(self.class_bytes(c) for c in TENSOR_CLASSES)

    @property
    def active_params(self) -> int:
        """Parameters one token touches: everything but the routed experts it skips."""
        total = self.total_params
        if self.moe is None:
            return total
        routed = self.params.get(ROUTED_EXPERTS, 0)
        return int(total - routed + routed * self.moe.experts_per_token / self.moe.experts)

    def kv_bytes_per_token(self, kv_dtype_bytes: float, attn_tp: int = 1, layers: int | None = None) -> float:
        """KV cache bytes per token on one attention rank.

        GQA shards KV heads over attention TP (down to one head, then replicated); MLA keeps one
        latent per token on every attention rank (docs/memory.md#kv-cache-per-token). Only
        full-attention layers keep per-token KV: a hybrid model's linear-attention layers keep
        ``state_bytes_per_request`` instead.
        """
        return self.kv_layers(layers) * self.kv_bytes_per_layer_token(kv_dtype_bytes, attn_tp) + (
            self.full_attention_layers(layers) * self.index_bytes_per_token
        )

    def kv_bytes_per_layer_token(self, kv_dtype_bytes: float, attn_tp: int = 1) -> float:
        """One token's KV in one attention layer on one attention rank (the indexer's cache apart)."""
        if self.mla is not None:
            return (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * kv_dtype_bytes
        heads_per_rank = max(1, -(-self.kv_heads // attn_tp))
        return 2 * heads_per_rank * self.head_dim * kv_dtype_bytes

    def kv_bytes_per_request(
        self,
        tokens: int,
        kv_dtype_bytes: float,
        attn_tp: int = 1,
        layers: int | None = None,
        in_flight: int = 0,
    ) -> float:
        """KV one request of ``tokens`` holds on one attention rank: every token in full-attention
        layers, at most a window (and the tokens in flight) in windowed ones."""
        per_layer = self.kv_bytes_per_layer_token(kv_dtype_bytes, attn_tp)
        full = self.full_attention_layers(layers)
        held = full * tokens * (per_layer + self.index_bytes_per_token)
        if self.windowed is not None:
            held += self.windowed_layers(layers) * self.windowed.tokens_held(tokens, in_flight) * per_layer
        return held

    def layer_share(self, count: int, layers: int | None) -> int:
        """A stage's share of ``count`` layers of one kind: the kinds interleave evenly
        (Qwen3-Next: every fourth layer is full attention), so a stage of ``layers`` holds its
        share of each, rounded up."""
        if layers is None or layers == self.layers:
            return count
        return -(-layers * count // self.layers)

    def kv_layers(self, layers: int | None = None) -> int:
        """Layers with per-token KV (full or windowed) among ``layers`` (a pipeline stage's count;
        all by default)."""
        state = self.linear_attention.layers if self.linear_attention else 0
        return self.layer_share(self.layers - state - self.mixer_free_layers, layers)

    def windowed_layers(self, layers: int | None = None) -> int:
        """Windowed attention layers among ``layers``."""
        return self.layer_share(self.windowed.layers, layers) if self.windowed else 0

    def full_attention_layers(self, layers: int | None = None) -> int:
        """Layers that keep every token's KV among ``layers``."""
        state = self.linear_attention.layers if self.linear_attention else 0
        window = self.windowed.layers if self.windowed else 0
        return self.layer_share(self.layers - state - window - self.mixer_free_layers, layers)

    def state_bytes_per_request(
        self,
        attn_tp: int = 1,
        *,
        conv_bytes: float | None = None,
        ssm_bytes: float | None = None,
        layers: int | None = None,
    ) -> float:
        """Fixed state one request keeps on one attention rank, whatever its length: 0 unless the
        model has linear-attention layers.

        The dtypes are the engine's: vLLM keeps both parts in the model dtype unless
        --mamba-cache-dtype / --mamba-ssm-cache-dtype say otherwise (MambaStateDtypeCalculator,
        vllm/model_executor/layers/mamba/mamba_utils.py); SGLang keeps the convolution in bf16 and
        the recurrent state in float32 unless --mamba-ssm-dtype says otherwise (mamba2_state_dtype,
        sglang/srt/configs/mamba_utils.py). By default, the model dtype for both.
        """
        linear = self.linear_attention
        if linear is None:
            return 0.0
        n_linear = self.layer_share(linear.layers, layers)
        per_layer = linear.state_bytes(
            attn_tp,
            linear.dtype_bytes if conv_bytes is None else conv_bytes,
            (linear.ssm_dtype_bytes or linear.dtype_bytes) if ssm_bytes is None else ssm_bytes,
        )
        return n_linear * per_layer

    def __str__(self) -> str:
        size = self.total_params / 1e9
        moe = ""
        if self.moe:
            moe = f", {self.moe.experts} experts top-{self.moe.experts_per_token}"
        if self.linear_attention or self.windowed:
            moe += f", {self.full_attention_layers()} of {self.layers} layers full attention"
        approximate = ", approximate" if self.approximate else ""
        return f"{self.name} ({self.family}, {size:,.1f}B params{moe}, {self.quant.label}{approximate})"


# ---------------------------------------------------------------------------------------------
# Normalising the families


# Bounds on counts in a config.json: far above any real model (today's largest have ~130 layers,
# hidden 16k-25k, 512 experts, a 260k vocabulary, a 10M-token context), low enough that a typo
# (a layer count of 10**9, a hidden size of 1e308) is refused before planning loops over it or
# overflows a float.
MAX_LAYERS = 10_000
MAX_HIDDEN = 1_000_000
MAX_HEADS = 100_000
MAX_VOCAB = 10_000_000
MAX_WIDTH = 10_000_000  # intermediate sizes, head dims, MLA ranks
MAX_EXPERTS = 100_000
MAX_CONTEXT = 1_000_000_000
MAX_BLOCK = 65_536  # FP8 weight block and quantization group sizes


def whole_number(value: Any, where: str, low: int, high: int, fix: str) -> int:
    """A count from a file: an int (or a float with no fraction) from low to high; bools are not counts."""
    if isinstance(value, float) and value.is_integer() and low <= value <= high:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CockpitError(
            f"{where} must be a whole number from {low:,} to {high:,} (got {shown(value)}): {fix}"
        )
    return value


class ModelConfig:
    """A config dict that names the key and the file when a key is missing or its value is absurd."""

    def __init__(self, data: Mapping[str, Any], source: str, family: str):
        self.data, self.source, self.family = data, source, family

    def req(self, *keys: str) -> Any:
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        raise CockpitError(
            f"{self.source} has no '{keys[0]}' (needed for a {self.family} model): is this the model's config.json?"
        )

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def count(self, *keys: str, low: int = 1, high: int, default: int | None = None) -> int:
        """A required count (or ``default`` when absent) within [low, high]."""
        key = next((k for k in keys if self.data.get(k) is not None), None)
        if key is None and default is not None:
            return default
        value = self.req(*keys)
        return self.check(key or keys[0], value, low, high)

    def check(self, key: str, value: Any, low: int, high: int) -> int:
        return whole_number(
            value,
            f"{self.source}: {key}",
            low,
            high,
            "fix the config.json or point --model at the model's own",
        )


class NeedsCheckpoint(CockpitError):
    """A config.json that alone cannot be sized (a model_type cockpit does not know, a quantization
    it cannot size) but whose checkpoint can: `cockpit.store.modelfiles` then reads the tensor headers."""

    def __init__(self, reason: str):
        super().__init__(
            f"{reason}: point --model at the model's folder with its *.safetensors, whose headers cockpit "
            "reads to plan any architecture"
        )
        self.reason = reason


# model_type -> family. Anything else is planned from its checkpoint's tensors, never guessed
# to be dense from its config.
_FAMILIES = {
    "deepseek_v3": "deepseek-v3",
    "deepseek_v2": "deepseek-v3",
    "kimi_k2": "deepseek-v3",
    "kimi_k25": "deepseek-v3",
    "qwen3_moe": "qwen3-moe",
    "qwen2_moe": "qwen3-moe",
    "qwen3_next": "qwen3-next",
    "qwen2": "dense",
    "qwen3": "dense",
    "llama": "dense",
    "mistral": "dense",
    "mixtral": "mixtral",
    "minimax_m2": "minimax-m2",
    "glm4_moe": "glm4-moe",
    "gpt_oss": "gpt-oss",
}


@contextmanager
def one_line_errors(source: str) -> Iterator[None]:
    """A shape no check foresaw (a list where a mapping belongs, ...) in a model's files is still
    one CockpitError line, never a traceback."""
    try:
        yield
    except CockpitError:
        raise
    except (
        TypeError,
        ValueError,
        AttributeError,
        KeyError,
        IndexError,
        ZeroDivisionError,
        OverflowError,
        re.error,
    ) as exc:
        raise CockpitError(
            f"{source}: a value has the wrong type or size ({type(exc).__name__}: {str(exc)[:60]}): "
            "fix the config.json or point --model at the model's own"
        ) from exc


@dataclass(frozen=True)
class ConfigText:
    """A config.json as a family reader gets it: the language model's settings (``cfg``, under
    ``text_config`` for multimodal wrappers) and what every family reads alike."""

    cfg: ModelConfig
    raw: Mapping[str, Any]  # the whole file
    name: str
    model_type: str
    architecture: str
    dtype_bytes: int
    quant_raw: Any

    @property
    def source(self) -> str:
        return self.cfg.source


@dataclass(frozen=True)
class CommonDims:
    """The settings every transformer's config.json spells alike."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_context: int


def read_config_text(raw: Mapping[str, Any], source: str, name: str) -> ConfigText:
    """Unwrap a multimodal wrapper (Kimi-K2.5, Qwen3.5, Llama 4 nest the language model under
    text_config) and read the family-independent facts."""
    model_type = raw.get("model_type")
    quant_raw = raw.get("quantization_config")
    text = raw
    if isinstance(raw.get("text_config"), dict) and raw["text_config"].get("model_type"):
        text = raw["text_config"]
        quant_raw = quant_raw or text.get("quantization_config")
        model_type = text["model_type"]
    dtype_bytes = dtype_size(
        text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    )
    return ConfigText(
        cfg=ModelConfig(text, source, str(model_type)),
        raw=raw,
        name=name,
        model_type=str(model_type),
        architecture=architecture_name(raw.get("architectures") or text.get("architectures")),
        dtype_bytes=dtype_bytes,
        quant_raw=quant_raw,
    )


def common_dims(cfg: ModelConfig, head_dim_keys: tuple[str, ...] = ("head_dim",)) -> CommonDims:
    """Layers, widths, heads, vocabulary and context, each checked."""
    source = cfg.source
    layers = cfg.count("num_hidden_layers", high=MAX_LAYERS)
    hidden = cfg.count("hidden_size", high=MAX_HIDDEN)
    heads = cfg.count("num_attention_heads", high=MAX_HEADS)
    kv_heads = cfg.count("num_key_value_heads", high=MAX_HEADS, default=heads)
    if kv_heads > heads:
        raise CockpitError(
            f"{source}: num_key_value_heads ({kv_heads}) is more than num_attention_heads ({heads}); "
            "every KV head serves one or more query heads: fix the config.json"
        )
    if all(cfg.get(k) is None for k in head_dim_keys) and hidden < heads:
        raise CockpitError(
            f"{source}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}), so a head has no width: "
            "fix the config.json or give head_dim"
        )
    head_dim = cfg.count(*head_dim_keys, high=MAX_WIDTH, default=hidden // heads)
    return CommonDims(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=cfg.count("vocab_size", high=MAX_VOCAB),
        tied=bool(cfg.data.get("tie_word_embeddings", False)),
        max_context=cfg.count("max_position_embeddings", low=0, high=MAX_CONTEXT, default=0) or 4096,
    )


def read_own_family(text: ConfigText) -> ModelArch | None:
    """The families this module reads itself (Llama, Qwen, Mixtral, DeepSeek-V3, ...); None for a
    model_type it leaves to ``cockpit.core.archs``, whose ``parse_config`` asks here first."""
    raw, source, name = text.raw, text.cfg.source, text.name
    family = _FAMILIES.get(text.model_type)
    if family is None:
        return None
    cfg = ModelConfig(text.cfg.data, source, family)
    arch = text.architecture
    dtype_bytes = text.dtype_bytes
    dims = common_dims(cfg)
    layers, hidden, heads, kv_heads, head_dim = (
        dims.layers,
        dims.hidden,
        dims.heads,
        dims.kv_heads,
        dims.head_dim,
    )
    vocab, max_context = dims.vocab, dims.max_context
    tied = bool(cfg.data.get("tie_word_embeddings", raw.get("tie_word_embeddings", False)))

    mla = mla_dims(cfg) if family == "deepseek-v3" else None
    moe, dense_layers, dense_intermediate = _moe_dims(cfg, family, layers)
    linear = _linear_attention(cfg, layers, dtype_bytes) if family == "qwen3-next" else None
    windowed = sliding_window_layers(cfg, layers) if family == "gpt-oss" else None

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
        dense_intermediate=dense_intermediate,
        attention_bias=bool(cfg.get("attention_bias", family == "dense" and text.model_type == "qwen2")),
        expert_bias=family == "gpt-oss",
        linear=linear,
        # Qwen3-Next's full attention gates its output: q_proj also yields the gate
        # (attn_output_gate, Qwen3NextAttention in vllm/model_executor/models/qwen3_next.py).
        gated_attention=family == "qwen3-next" and bool(cfg.get("attn_output_gate", True)),
        shared_gate=family == "qwen3-next",
        router_bias=family != "qwen3-next",  # Qwen3-Next's gate is a bare Linear (GateLinear, no bias)
    )
    quant = read_quantization(
        text.quant_raw, dtype_bytes, source, first_moe_layer=layers - (moe.moe_layers if moe else 0)
    )
    return ModelArch(
        name=name,
        source=source,
        family=family,
        architecture=arch,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=1 if mla else kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied_embeddings=tied,
        max_context=max_context,
        dense_intermediate=dense_intermediate,
        dense_layers=dense_layers,
        quant=quant,
        mla=mla,
        moe=moe,
        params=params,
        linear_attention=linear,
        windowed=windowed,
    )


def sliding_window_layers(cfg: ModelConfig, layers: int) -> WindowedLayers | None:
    """Sliding-window layers as ``layer_types`` lists them (gpt-oss alternates
    "sliding_attention" and "full_attention"; transformers' GptOssConfig, read by vLLM's
    GptOssAttention, vllm/model_executor/models/gpt_oss.py), with the window of ``sliding_window``.
    None when the config has no window."""
    window = cfg.count("sliding_window", low=0, high=MAX_CONTEXT, default=0)
    if not window:
        return None
    kinds = cfg.get("layer_types")
    if kinds is None:
        return None
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise CockpitError(
            f"{cfg.source}: layer_types must list one kind per layer ({layers}; got {shown(kinds)}): "
            "fix the config.json"
        )
    count = sum(1 for kind in kinds if kind == "sliding_attention")
    return WindowedLayers(SLIDING, count, window) if count else None


def architecture_name(value: Any) -> str:
    """The first of ``architectures``; a config that spells it oddly still plans."""
    if isinstance(value, list) and value:
        return str(value[0])[:80]
    return str(value)[:80] if isinstance(value, str) and value else "?"


def dtype_size(dtype: Any) -> int:
    """Bytes of one value of a config's torch_dtype: float32 is 4, the rest (bf16, fp16) 2."""
    return 4 if str(dtype) in ("float32", "torch.float32") else 2


def mla_dims(cfg: ModelConfig) -> MlaDims:
    q_lora = cfg.count("q_lora_rank", low=0, high=MAX_WIDTH, default=0)
    return MlaDims(
        q_lora_rank=q_lora or None,
        kv_lora_rank=cfg.count("kv_lora_rank", high=MAX_WIDTH),
        qk_nope_head_dim=cfg.count("qk_nope_head_dim", low=0, high=MAX_WIDTH),
        qk_rope_head_dim=cfg.count("qk_rope_head_dim", low=0, high=MAX_WIDTH),
        v_head_dim=cfg.count("v_head_dim", high=MAX_WIDTH),
    )


def routed_experts(
    cfg: ModelConfig, experts_keys: str | tuple[str, ...], *top_k_keys: str
) -> tuple[int, int]:
    """(routed experts, experts per token); top-k above the expert count is refused. Several
    ``experts_keys``: the spellings of one setting, the first one present counts."""
    keys = (experts_keys,) if isinstance(experts_keys, str) else experts_keys
    experts_key = keys[0]
    experts = cfg.count(*keys, high=MAX_EXPERTS)
    top_k = cfg.count(*top_k_keys, high=MAX_EXPERTS)
    if top_k > experts:
        raise CockpitError(
            f"{cfg.source}: {top_k_keys[0]} ({top_k}) is more than the {experts} experts of {experts_key}: "
            "a token cannot be routed to more experts than exist; fix the config.json"
        )
    return experts, top_k


def deepseek_moe(cfg: ModelConfig, layers: int) -> MoeDims:
    """DeepSeek's MoE layout, shared by the families built on it: layer i is MoE when
    i >= first_k_dense_replace and i % moe_layer_freq == 0, and the shared experts are one MLP of
    n_shared_experts x moe_intermediate_size (DeepseekV2MoE, vllm/model_executor/models/deepseek_v2.py)."""
    first_dense = cfg.count("first_k_dense_replace", low=0, high=layers, default=0)
    freq = cfg.count("moe_layer_freq", high=max(1, layers), default=1)
    expert = cfg.count("moe_intermediate_size", high=MAX_WIDTH)
    shared = cfg.count("n_shared_experts", low=0, high=MAX_EXPERTS, default=0)
    experts, top_k = routed_experts(cfg, "n_routed_experts", "num_experts_per_tok")
    return MoeDims(
        experts=experts,
        experts_per_token=top_k,
        expert_intermediate=expert,
        moe_layers=len([i for i in range(first_dense, layers) if i % freq == 0]),
        shared_experts=shared,
        shared_intermediate=shared * expert,
    )


def _moe_dims(cfg: ModelConfig, family: str, layers: int) -> tuple[MoeDims | None, int, int]:
    """(MoE dims, number of dense-MLP layers, dense MLP width) for each family."""
    if family == "dense":
        return None, layers, cfg.count("intermediate_size", high=MAX_WIDTH)
    dense_width = cfg.count("intermediate_size", low=0, high=MAX_WIDTH, default=0)
    if family in ("deepseek-v3", "glm4-moe"):
        moe = deepseek_moe(cfg, layers)
        return moe, layers - moe.moe_layers, dense_width
    if family in ("qwen3-moe", "qwen3-next"):
        dense_only = layer_list(cfg, "mlp_only_layers", layers)
        step = cfg.count("decoder_sparse_step", low=0, high=max(1, layers), default=1) or 1
        moe_layers = len([i for i in range(layers) if i not in dense_only and (i + 1) % step == 0])
        shared_width = cfg.count("shared_expert_intermediate_size", low=0, high=MAX_WIDTH, default=0)
        # transformers 5 saves Qwen3-MoE's expert count as num_local_experts (its config maps
        # num_experts onto it: models/qwen3_moe/configuration_qwen3_moe.py attribute_map).
        experts, top_k = routed_experts(cfg, ("num_experts", "num_local_experts"), "num_experts_per_tok")
        return (
            MoeDims(
                experts=experts,
                experts_per_token=top_k,
                expert_intermediate=cfg.count("moe_intermediate_size", high=MAX_WIDTH),
                moe_layers=moe_layers,
                shared_experts=1 if shared_width else 0,
                shared_intermediate=shared_width,
            ),
            layers - moe_layers,
            dense_width,
        )
    if family in ("mixtral", "minimax-m2", "gpt-oss"):
        # MiniMax-M2 keeps the per-expert width in intermediate_size; experts in num_local_experts.
        keys = (
            ("moe_intermediate_size", "intermediate_size")
            if family == "minimax-m2"
            else ("intermediate_size",)
        )
        shared_width = cfg.count("shared_intermediate_size", low=0, high=MAX_WIDTH, default=0)
        experts, top_k = routed_experts(cfg, "num_local_experts", "num_experts_per_tok", "experts_per_token")
        return (
            MoeDims(
                experts=experts,
                experts_per_token=top_k,
                expert_intermediate=cfg.count(*keys, high=MAX_WIDTH),
                moe_layers=layers,
                shared_experts=1 if shared_width else 0,
                shared_intermediate=shared_width,
            ),
            0,
            0,
        )
    raise AssertionError(family)  # every family in _FAMILIES is handled above


def _linear_attention(cfg: ModelConfig, layers: int, dtype_bytes: int) -> LinearAttention:
    """Qwen3-Next's Gated DeltaNet layers: which layers (``layer_types``, or all but every
    ``full_attention_interval``-th, as transformers' Qwen3NextConfig derives them and both engines
    read them) and their head shapes (defaults as in that config class)."""
    kinds = cfg.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != layers:
            raise CockpitError(
                f"{cfg.source}: layer_types must list one kind per layer ({layers}; got {shown(kinds)}): "
                "fix the config.json"
            )
        linear_layers = sum(1 for kind in kinds if kind == "linear_attention")
    else:
        interval = cfg.count("full_attention_interval", high=max(1, layers), default=4)
        linear_layers = len([i for i in range(layers) if (i + 1) % interval])
    return LinearAttention(
        layers=linear_layers,
        key_heads=cfg.count("linear_num_key_heads", high=MAX_HEADS, default=16),
        value_heads=cfg.count("linear_num_value_heads", high=MAX_HEADS, default=32),
        key_head_dim=cfg.count("linear_key_head_dim", high=MAX_WIDTH, default=128),
        value_head_dim=cfg.count("linear_value_head_dim", high=MAX_WIDTH, default=128),
        conv_kernel=cfg.count("linear_conv_kernel_dim", high=MAX_WIDTH, default=4),
        dtype_bytes=dtype_bytes,
    )


def layer_list(cfg: ModelConfig, key: str, layers: int) -> set[int]:
    """A list of layer indices such as mlp_only_layers."""
    value = cfg.get(key, [])
    if not isinstance(value, list):
        raise CockpitError(
            f"{cfg.source}: {key} must be a list of layer numbers (got {shown(value)}): fix the config.json"
        )
    return {cfg.check(key, i, 0, max(0, layers - 1)) for i in value}


def count_params(
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    tied: bool,
    mla: MlaDims | None,
    moe: MoeDims | None,
    dense_layers: int,
    dense_intermediate: int,
    attention_bias: bool,
    expert_bias: bool,
    linear: LinearAttention | None = None,
    gated_attention: bool = False,
    shared_gate: bool = False,
    router_bias: bool = True,
) -> dict[str, int]:
    h = hidden
    if mla is not None:
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q_repl = h * mla.q_lora_rank
            q_shard = mla.q_lora_rank * heads * qk_head
            extra_norms = mla.q_lora_rank
        else:
            q_repl, q_shard, extra_norms = 0, h * heads * qk_head, 0
        kv_repl = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        kv_shard = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        o = heads * mla.v_head_dim * h
        attn_shard = q_shard + kv_shard + o
        attn_repl = q_repl + kv_repl
        norms_per_layer = 2 * h + extra_norms + mla.kv_lora_rank
    else:
        q = h * heads * head_dim * (2 if gated_attention else 1)
        kv = 2 * h * kv_heads * head_dim
        o = heads * head_dim * h
        bias = (heads + 2 * kv_heads) * head_dim + h if attention_bias else 0
        attn_shard, attn_repl = q + kv + o + bias, 0
        norms_per_layer = 2 * h + 2 * head_dim
    params = {cls: 0 for cls in TENSOR_CLASSES}
    full = layers - (linear.layers if linear else 0)
    params[ATTN_SHARDED] = full * attn_shard
    params[ATTN_REPLICATED] = full * attn_repl
    params[NORMS] = full * norms_per_layer + h
    if linear is not None:  # two layer norms and the gated RMSNorm of one value head
        params[ATTN_SHARDED] += linear.layers * linear.params_per_layer(h)
        params[NORMS] += linear.layers * (2 * h + linear.value_head_dim)
    params[DENSE_MLP] = dense_layers * 3 * h * dense_intermediate
    params[EMBEDDING] = vocab * h
    params[LM_HEAD] = 0 if tied else vocab * h
    if moe is not None:
        per_expert = 3 * h * moe.expert_intermediate
        if expert_bias:
            per_expert += 2 * moe.expert_intermediate + h
        params[ROUTED_EXPERTS] = moe.moe_layers * moe.experts * per_expert
        params[SHARED_EXPERTS] = moe.moe_layers * 3 * h * moe.shared_intermediate
        params[ROUTER] = moe.moe_layers * (moe.experts * h + (moe.experts if router_bias else 0))
        if shared_gate and moe.shared_intermediate:  # a replicated shared_expert_gate (hidden -> 1)
            params[ROUTER] += moe.moe_layers * h
    return params


# ---------------------------------------------------------------------------------------------
# Quantization


def _uniform(value: float) -> dict[str, float]:
    return {cls: float(value) for cls in TENSOR_CLASSES}


def read_quantization(
    raw: Any, dtype_bytes: int = 2, source: str = "<config>", first_moe_layer: int = 1
) -> Quantization:
    """Bytes per parameter per tensor class, from a checkpoint's quantization_config."""
    base = _uniform(dtype_bytes)
    plain = {2: "BF16", 4: "FP32"}[dtype_bytes]
    if not raw:
        return Quantization(method=plain.lower(), label=plain, bytes_by_class=base)
    if not isinstance(raw, dict):
        raise CockpitError(f"{source}: quantization_config is not an object: fix the config.json")
    method = str(raw.get("quant_method", "")).lower()
    if method == "fp8":
        skip = _module_names(raw, "modules_to_not_convert", source)
        kept = _ignored_classes(skip, first_moe_layer, globs=True)
        kept |= {ROUTER}
        block = raw.get("weight_block_size")
        if block:
            bn, bk = _block(block, source)
            per = 1.0 + 4.0 / (bn * bk)
            quantized = set(LINEAR_CLASSES) - kept
            values = {**base, **{c: per for c in quantized}}
            return Quantization(
                "fp8-block",
                f"FP8 block {bn}x{bk}",
                values,
                block=(bn, bk),
                blocked_classes=frozenset(quantized),
            )
        quantized = set(LINEAR_CLASSES) - kept
        return Quantization("fp8", "FP8", {**base, **{c: 1.0 for c in quantized}})
    if method == "mxfp4":
        # gpt-oss: only the routed experts are MXFP4 (4-bit values, one e8m0 scale per 32).
        values = dict(base)
        values[ROUTED_EXPERTS] = 0.5 + 1 / 32
        return Quantization("mxfp4", "MXFP4 experts", values, group_size=32)
    if method == "compressed-tensors":
        return _compressed_tensors(raw, base, source, first_moe_layer)
    if method == "modelopt":
        algo = str(raw.get("quant_algo", "")).upper()
        skip = _module_names(raw, "exclude_modules", source) or _module_names(raw, "ignore", source)
        kept = _ignored_classes(skip, first_moe_layer, globs=True) | {ROUTER}
        quantized = set(LINEAR_CLASSES) - kept
        if algo == "NVFP4":
            group = _quant_number(raw.get("group_size", 16), "group_size", source, MAX_BLOCK)
            return Quantization(
                "nvfp4", "NVFP4", {**base, **{c: 0.5 + 1 / group for c in quantized}}, group_size=group
            )
        if algo == "FP8":
            return Quantization("fp8", "FP8", {**base, **{c: 1.0 for c in quantized}})
    raise NeedsCheckpoint(
        f"{source}: quantization '{raw.get('quant_method')}' {raw.get('quant_algo', '')} is not one cockpit can size "
        "from the config (it knows fp8 (block or not), compressed-tensors int4/fp8/nvfp4, mxfp4, modelopt nvfp4)"
    )


def _compressed_tensors(
    raw: Mapping[str, Any], base: dict[str, float], source: str, first_moe_layer: int
) -> Quantization:
    groups = raw.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise CockpitError(
            f"{source}: quantization_config.config_groups must be a mapping (got {shown(groups)}): fix the config.json"
        )
    weights = None
    for group in groups.values():
        if isinstance(group, dict) and group.get("weights"):
            weights = group["weights"]
            break
    if weights is None:
        raise CockpitError(
            f"{source}: compressed-tensors config has no config_groups weights: cannot size it"
        )
    if not isinstance(weights, dict):
        raise CockpitError(
            f"{source}: compressed-tensors weights must be a mapping (got {shown(weights)}): fix the config.json"
        )
    bits = _quant_number(weights.get("num_bits", 16), "num_bits", source, 64)
    kind = str(weights.get("type", "int"))
    group_size = weights.get("group_size")
    if group_size is not None:
        group_size = _quant_number(group_size, "group_size", source, MAX_BLOCK)
    kept = _ignored_classes(_module_names(raw, "ignore", source), first_moe_layer, globs=True) | {ROUTER}
    quantized = set(LINEAR_CLASSES) - kept
    if bits == 4 and kind == "float":
        group = int(group_size or 16)
        per, method, label = 0.5 + 1 / group, "nvfp4", "NVFP4"
    elif bits == 4:
        group = int(group_size or 128)
        scale = 2.0  # bf16 scales per group (pack-quantized), symmetric: no zero points
        if not weights.get("symmetric", True):
            scale += 0.5
        per, method, label = 0.5 + scale / group, "int4", f"INT4 g{group}"
    elif bits == 8 and kind == "float":
        per, method, label, group = 1.0, "fp8", "FP8 (compressed-tensors)", None
    elif bits == 8:
        per, method, label, group = 1.0, "int8", "INT8", None
    else:
        raise NeedsCheckpoint(
            f"{source}: compressed-tensors with {bits}-bit {kind} weights is not one cockpit can size"
        )
    if ROUTED_EXPERTS in quantized and quantized != set(LINEAR_CLASSES) - {ROUTER}:
        label += " experts"
    return Quantization(method, label, {**base, **{c: per for c in quantized}}, group_size=group)


def _quant_number(value: Any, key: str, source: str, high: int) -> int:
    return whole_number(value, f"{source}: quantization_config {key}", 1, high, "fix the config.json")


def _block(value: Any, source: str) -> tuple[int, int]:
    """An FP8 weight_block_size: two whole numbers, like [128, 128]."""
    if not isinstance(value, list) or len(value) != 2:
        raise CockpitError(
            f"{source}: quantization_config weight_block_size must be two whole numbers like [128, 128] "
            f"(got {shown(value)}): fix the config.json"
        )
    bn, bk = (_quant_number(v, "weight_block_size", source, MAX_BLOCK) for v in value)
    return bn, bk


def _module_names(raw: Mapping[str, Any], key: str, source: str) -> list[str]:
    """An ignore list (modules kept unquantized): a list of names, or nothing."""
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise CockpitError(
            f"{source}: quantization_config {key} must be a list of module names (got {shown(value)}): fix the config.json"
        )
    return [str(m) for m in value]


def _ignored_classes(patterns: list[str], first_moe_layer: int, globs: bool) -> set[str]:
    """Which tensor classes an ignore list keeps unquantized.

    Ignore lists name modules (exact, glob, or ``re:`` regex) per layer; we test one
    representative module of each class in the first MoE layer (and layer 0 for dense MLP).
    """
    layer = first_moe_layer
    examples = {
        ATTN_SHARDED: [f"model.layers.{layer}.self_attn.o_proj", f"model.layers.{layer}.self_attn.q_b_proj"],
        ATTN_REPLICATED: [f"model.layers.{layer}.self_attn.kv_a_proj_with_mqa"],
        DENSE_MLP: ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"],
        SHARED_EXPERTS: [
            f"model.layers.{layer}.mlp.shared_experts.gate_proj",
            f"model.layers.{layer}.mlp.shared_expert.gate_proj",
        ],
        ROUTED_EXPERTS: [
            f"model.layers.{layer}.mlp.experts.0.gate_proj",
            f"model.layers.{layer}.block_sparse_moe.experts.0.w1",
        ],
    }
    kept = set()
    for cls, names in examples.items():
        candidates = names + [f"language_model.{n}" for n in names]
        if any(_module_matches(p, n) for p in patterns for n in candidates):
            kept.add(cls)
    return kept


def _module_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    if pattern == name or name.startswith(pattern + "."):
        return True
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    # Short names ("gate", "lm_head", "self_attn") match any module path component.
    return "." not in pattern and pattern in name.split(".")
