"""What each engine refuses for a model family: pipeline support and linear-attention splits.

Read from the engines' model files (vLLM 0.33, SGLang 0.5.23) for the architectures cockpit
plans; each rule carries the engine's text, or an empty text where the engine has none of its own
and fails later on a tensor shape. docs/placement.md#startup-checks.

Pipeline parallelism, per architecture (``config.json`` ``architectures[0]``):

====================================  =====================================  ==========================================
architecture                          vLLM: SupportsPP (model class)         SGLang: forward takes ``pp_proxy_tensors``
====================================  =====================================  ==========================================
DeepseekV32ForCausalLM                yes  vllm/models/deepseek_v32/nvidia/   yes  sglang/srt/models/deepseek_v2.py
                                           model.py (DeepseekV2ForCausalLM)
GlmMoeDsaForCausalLM                  yes  same class as DeepseekV32           yes  sglang/srt/models/glm4_moe.py
DeepseekV4ForCausalLM                 yes  vllm/models/deepseek_v4/nvidia/     yes  sglang/srt/models/deepseek_v4.py
                                           model.py
Qwen3_5MoeForConditionalGeneration    yes  vllm/model_executor/models/         yes  sglang/srt/models/qwen3_5.py
                                           qwen3_5.py (Qwen3VL base)                (Qwen3VLForConditionalGeneration)
Qwen3_5MoeForCausalLM                 yes  qwen3_5.py Qwen3_5ForCausalLMBase   yes  sglang/srt/models/qwen3_5_text.py
NemotronHForCausalLM                  yes  nemotron_h.py                       yes  sglang/srt/models/nemotron_h.py
KimiLinearForCausalLM                 yes  vllm/models/kimi_k3/nvidia/model.py yes  sglang/srt/models/kimi_linear.py
Llama4ForConditionalGeneration        yes  mllama4.py                          no   sglang/srt/models/mllama4.py
Llama4ForCausalLM                     yes  llama4.py (LlamaForCausalLM)        yes  sglang/srt/models/llama.py
GptOssForCausalLM                     yes  gpt_oss.py                          yes  sglang/srt/models/gpt_oss.py
Qwen3NextForCausalLM                  yes  qwen3_next.py                       no   sglang/srt/models/qwen3_next.py
====================================  =====================================  ==========================================

SGLang's refusals live in ``PP_UNSUPPORTED`` (cockpit/engines/sglang/adapter.py); vLLM's in
``VLLM_PP_UNSUPPORTED`` below.
"""

from __future__ import annotations

from cockpit.core.model import GATED_DELTANET, KIMI_DELTA, MAMBA2, LinearAttention, ModelArch
from cockpit.engines.base import Rule

# ModelConfig.verify_with_parallel_config (vllm/config/model.py) raises this under
# --pipeline-parallel-size > 1 when the registry says the model class lacks SupportsPP
# (ModelRegistry.is_pp_supported_model, vllm/model_executor/models/registry.py). A
# NotImplementedError is no ValueError, so pydantic lets it through unwrapped.
VLLM_PP_MESSAGE = (
    "NotImplementedError: Pipeline parallelism is not supported for this model. "
    "Supported models implement the `SupportsPP` interface."
)

# vLLM 0.33's text-generation and multimodal architectures whose model class (the CUDA one where
# vllm/models/<x>/__init__.py picks per platform) does not implement SupportsPP
# (vllm/model_executor/models/interfaces.py). Every family in the table above does.
VLLM_PP_UNSUPPORTED = frozenset(
    {
        "AliceAIForCausalLM",
        "AriaForConditionalGeneration",
        "CohereAsrForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "DomynEdgeForCausalLM",
        "DoryForCausalLM",
        "FireRedASR2ForConditionalGeneration",
        "FunASRForConditionalGeneration",
        "Gemma3nForCausalLM",
        "Gemma3nForConditionalGeneration",
        "HrmTextForCausalLM",
        "IQuestLoopCoderForCausalLM",
        "Idefics3ForConditionalGeneration",
        "Mamba2ForCausalLM",
        "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Nano_VL_V2",
        "NemotronH_Omni_Reasoning_V3",
        "NemotronH_Super_Omni_Reasoning_V3",
        "NemotronParseForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration",
        "Phi4MMForCausalLM",
        "RadioMBartPrefixForCausalLM",
        "SmolVLMForConditionalGeneration",
        "WhisperForConditionalGeneration",
        "Zamba2ForCausalLM",
    }
)

# MambaMixer2.__init__ asserts these, in this order: vLLM's
# vllm/model_executor/layers/mamba/mamba_mixer2.py and SGLang's
# sglang/srt/layers/attention/mamba/mamba.py carry the same words.
MAMBA_HEADS_MESSAGE = "AssertionError: Tensor parallel world size must divide num heads."
MAMBA_GROUPS_MESSAGE = (
    "AssertionError: If tensor parallel world size does not divide num_groups, then num_groups must equal 1."
)

# KimiLinearModel.__init__ (sglang/srt/models/kimi_linear.py), after its layers, over the whole TP group.
SGLANG_KIMI_HEADS_MESSAGE = "AssertionError: num_attention_heads must be divisible by world_size"


def vllm_pp_rules(model: ModelArch, pp: int) -> list[Rule]:
    """vLLM refuses PP for a model class without SupportsPP (ModelConfig.verify_with_parallel_config)."""
    if pp <= 1 or model.architecture not in VLLM_PP_UNSUPPORTED:
        return []
    return [
        Rule(
            "pp-unsupported",
            VLLM_PP_MESSAGE,
            f"vLLM cannot split {model.architecture} into pipeline stages: use a layout without pp",
        )
    ]


def linear_attention_rules(model: ModelArch, tp: int, engine: str = "vllm") -> list[Rule]:
    """The state layers' own splits over the attention TP, as the engine builds them. SGLang's
    KDA layer (sglang/srt/models/kimi_linear.py) has no heads check of its own: its attention
    heads check (``sglang_kimi_rules``) speaks for it."""
    linear = model.linear_attention
    if linear is None or tp <= 1:
        return []
    if linear.kind == MAMBA2:
        return mamba2_rules(linear, tp)
    if linear.kind == KIMI_DELTA:
        return kda_rules(linear, tp) if engine == "vllm" else []
    if linear.kind == GATED_DELTANET:
        return gdn_rules(linear, tp)
    return []


def mamba2_rules(linear: LinearAttention, tp: int) -> list[Rule]:
    """Mamba-2 heads split over TP; its groups split too, or there is one group to repeat
    (MambaMixer2.__init__). ``value_heads`` are the Mamba heads, ``key_heads`` the groups."""
    if linear.value_heads % tp:
        return [
            Rule(
                "mamba-heads",
                MAMBA_HEADS_MESSAGE,
                f"{linear.value_heads} Mamba-2 heads do not split over attention TP {tp}",
            )
        ]
    groups = linear.key_heads
    if groups % tp and groups != 1:
        return [
            Rule(
                "mamba-groups",
                MAMBA_GROUPS_MESSAGE,
                f"{groups} Mamba-2 groups do not split over attention TP {tp} (only 1 group may be repeated)",
            )
        ]
    return []


def kda_rules(linear: LinearAttention, tp: int) -> list[Rule]:
    """KDA heads split over TP: a bare ``assert self.num_heads % self.tp_size == 0`` in vLLM's
    KimiK3DeltaAttention.__init__ (vllm/models/kimi_k3/nvidia/kda.py)."""
    if linear.value_heads % tp == 0:
        return []
    return [
        Rule(
            "kda-heads",
            "AssertionError",
            f"{linear.value_heads} KDA heads do not split over attention TP {tp} "
            "(bare assert num_heads % tp_size == 0 in the KDA layer)",
        )
    ]


def gdn_rules(linear: LinearAttention, tp: int) -> list[Rule]:
    """Gated DeltaNet widths and heads over TP. The layer's ColumnParallelLinear and ``A_log``
    use ``divide`` (vllm/distributed/utils.py: "{n} is not divisible by {d}") on the conv
    channels, the key and value widths and the value heads; the key heads are only ever divided
    with ``//`` (``num_k_heads // tp_size``, vllm/model_executor/layers/mamba/gdn/
    qwen_gdn_linear_attn.py, and SGLang's Qwen3_5GatedDeltaNet, sglang/srt/models/qwen3_5.py), so
    a TP above them starts and then fails on its first forward on a tensor shape, with no words of
    its own."""
    key_dim, value_dim = linear.key_heads * linear.key_head_dim, linear.value_heads * linear.value_head_dim
    for width, what in (
        (linear.conv_dim, "convolution channels"),
        (key_dim, "key width"),
        (value_dim, "value width"),
        (linear.value_heads, "value heads"),
    ):
        if width % tp:
            return [
                Rule(
                    "gdn-split",
                    f"AssertionError: {width} is not divisible by {tp}",
                    f"Gated DeltaNet {what} {width} do not split over attention TP {tp}",
                )
            ]
    if linear.key_heads % tp:
        return [
            Rule(
                "gdn-key-heads",
                "",
                f"{linear.key_heads} Gated DeltaNet key heads do not split over attention TP {tp}: the "
                "engine starts loading, then fails on its first forward pass on a tensor shape "
                f"(each rank would hold {linear.key_heads}/{tp} key heads); use a TP that divides "
                f"{linear.key_heads}",
            )
        ]
    return []


def sglang_kimi_rules(model: ModelArch, tp: int, attn_tp: int) -> list[Rule]:
    """SGLang's KimiLinearModel checks the attention heads over the whole TP group, with words;
    said only where the attention-TP check (a bare assert) has not already refused the layout."""
    if model.architecture != "KimiLinearForCausalLM" or model.heads % tp == 0 or model.heads % attn_tp:
        return []
    return [
        Rule(
            "attention-heads",
            SGLANG_KIMI_HEADS_MESSAGE,
            f"{model.heads} attention heads do not split over TP {tp}",
        )
    ]
