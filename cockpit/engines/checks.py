"""Startup checks both engines share, each with the text the engine raises.

Texts are the engines' own (docs/placement.md#startup-checks): vLLM's
``vllm/model_executor/layers/quantization/utils/fp8_utils.py`` and ``vllm/config/model.py``;
SGLang's ``sglang/srt/layers/quantization/fp8.py`` raises the same FP8 words. Where the engine
dies on a bare ``assert``, the message is the bare ``AssertionError`` and ``detail`` says which.
Checks only one engine makes live in its adapter (``vllm.py``, ``sglang.py``).
"""

from __future__ import annotations

from cockpit.core.model import ATTN_SHARDED, DENSE_MLP, ROUTED_EXPERTS, SHARED_EXPERTS, ModelArch
from cockpit.engines.base import Rule


def attention_rules(model: ModelArch, attn_tp: int, heads_message: str | None) -> list[Rule]:
    """Query heads must split evenly; GQA KV heads must split or be replicated evenly."""
    return heads_rules(model, attn_tp, heads_message) + kv_heads_rules(model, attn_tp)


def heads_rules(model: ModelArch, attn_tp: int, heads_message: str | None) -> list[Rule]:
    """Query heads split over the attention TP (``heads_message``: the engine's text, else a bare assert)."""
    if model.heads % attn_tp == 0:
        return []
    return [
        Rule(
            "attention-heads",
            (heads_message or "AssertionError").format(heads=model.heads, tp=attn_tp),
            f"{model.heads} attention heads do not split over attention TP {attn_tp}",
        )
    ]


def kv_heads_rules(model: ModelArch, attn_tp: int) -> list[Rule]:
    """GQA KV heads split over the attention TP, or are replicated evenly when fewer (MLA has one latent)."""
    if model.mla is not None:
        return []
    kv = model.kv_heads
    if (kv % attn_tp if kv >= attn_tp else attn_tp % kv) == 0:
        return []
    rule = "kv_heads % tp == 0" if kv >= attn_tp else "tp % kv_heads == 0"
    return [
        Rule(
            "kv-heads",
            "AssertionError",
            f"{kv} KV heads cannot be split or replicated evenly over TP {attn_tp} "
            f"(bare assert {rule} in the attention layer)",
        )
    ]


def moe_width_rules(model: ModelArch, moe_tp: int, down_tp: int | None = None) -> list[Rule]:
    """Each expert's intermediate width is split by MoE-TP; block-FP8 needs whole blocks.

    The down projection's block_k is checked when ``down_tp`` (default: the MoE-TP) is above 1:
    vLLM asks its TP world (``validate_fp8_block_shape_moe`` reads
    ``get_tensor_model_parallel_world_size()``, fp8_utils.py), SGLang the MoE-TP
    (``layer.moe_tp_size`` in ``Fp8MoEMethod.create_fp8_moe_weight_``, sglang/srt/layers/quantization/fp8.py).
    """
    if model.moe is None or moe_tp <= 1 and not model.quant.block:
        return []
    width = model.moe.expert_intermediate
    if width % moe_tp:
        return [
            Rule("moe-width", "AssertionError", f"expert width {width} does not split over MoE-TP {moe_tp}")
        ]
    per_rank = width // moe_tp
    block = model.quant.block
    if not block or ROUTED_EXPERTS not in model.quant.blocked_classes:
        return []
    bn, bk = block
    rules = []
    if per_rank % bn:
        rules.append(
            Rule(
                "fp8-block-gate-up",
                f"ValueError: The output_size of gate's and up's weight = {per_rank} is not divisible by "
                f"weight quantization block_n = {bn}.",
                f"{width} / {moe_tp} = {per_rank} is not a multiple of the FP8 block {bn}",
            )
        )
    if (moe_tp if down_tp is None else down_tp) > 1 and per_rank % bk:
        rules.append(
            Rule(
                "fp8-block-down",
                f"ValueError: The input_size of down's weight = {per_rank} is not divisible by "
                f"weight quantization block_k = {bk}.",
                f"{width} / {moe_tp} = {per_rank} is not a multiple of the FP8 block {bk}",
            )
        )
    return rules


def linear_block_rules(
    model: ModelArch, attn_tp: int, dense_tp: int, padded_shared: bool = False
) -> list[Rule]:
    """Block-FP8 column/row-parallel linears: each shard must hold whole blocks.

    ``padded_shared``: the engine rounds the shared experts' width up to whole blocks per rank
    (vLLM's DeepseekV4MLP, vllm/models/deepseek_v4/nvidia/model.py), so they never fail."""
    block = model.quant.block
    if not block:
        return []
    bn, bk = block
    blocked = model.quant.blocked_classes
    shards: list[tuple[str, int, int, int]] = []  # (what, full width, tp, which: 0 out / 1 in)
    if ATTN_SHARDED in blocked and attn_tp > 1:
        v_dim = model.mla.v_head_dim if model.mla else model.head_dim
        shards.append(("attention o_proj", model.heads * v_dim, attn_tp, 1))
    if DENSE_MLP in blocked and model.dense_layers and dense_tp > 1:
        shards.append(("dense MLP", model.dense_intermediate, dense_tp, 0))
        shards.append(("dense MLP", model.dense_intermediate, dense_tp, 1))
    if (
        SHARED_EXPERTS in blocked
        and model.moe
        and model.moe.shared_intermediate
        and dense_tp > 1
        and not padded_shared
    ):
        shards.append(("shared experts", model.moe.shared_intermediate, dense_tp, 0))
        shards.append(("shared experts", model.moe.shared_intermediate, dense_tp, 1))
    rules = []
    for what, width, tp, is_input in shards:
        part = width // tp
        size = bk if is_input else bn
        if width % tp == 0 and part % size == 0:
            continue
        if is_input:
            text = f"ValueError: Weight input_size_per_partition = {part} is not divisible by weight quantization block_k = {bk}."
        else:
            text = f"ValueError: Weight output_partition_size = {part} is not divisible by weight quantization block_n = {bn}."
        rules.append(
            Rule(
                "fp8-block-linear",
                text,
                f"{what}: {width} / {tp} = {part} is not a multiple of the FP8 block {size}",
            )
        )
    return rules
