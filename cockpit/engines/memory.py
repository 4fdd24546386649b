"""Memory rules every engine shares: what the model and the box say alike on any engine, and the
plain-words half of a refusal whose engine's words differ (docs/memory.md)."""

from __future__ import annotations

from cockpit.core.model import ModelArch
from cockpit.engines.base import Placement, Rule, ServerArgs
from cockpit.engines.estimate import MemoryEstimate

# Bytes of one element of a linear-attention state dtype, as both engines name them.
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The sparse-attention (DSA) families, whose cache dtype both engines pick by rules of their own.
DSA_FAMILIES = frozenset({"deepseek-v32", "glm-moe-dsa"})
# The links the collective figures were measured on (NVLink 4, H100) and the newer one assumed alike.
MEASURED_COLLECTIVE_LINKS = frozenset({"nvlink4", "nvlink5"})


def max_model_len(model: ModelArch, server: ServerArgs) -> int:
    """The context length the server runs with: the argument, else the model's own."""
    return server.max_model_len or model.max_context


def collective_group(placement: Placement) -> bool:
    """Whether the GPU takes part in all-reduces or all-gathers (TP, or MoE over DP ranks)."""
    return placement.attn_tp > 1 or placement.dense_tp > 1 or placement.moe_ep > 1 or placement.moe_tp > 1


def round_down_tokens(tokens: int) -> int:
    """A context length to suggest: whole thousands (of 1,024) below ``tokens``, 256 at least."""
    return max(256, tokens // 1024 * 1024)


def longer_than_trained(model: ModelArch, server: ServerArgs, message: str, flag: str) -> Rule | None:
    """A context length above the model's own, which both engines refuse at startup unless an
    environment variable allows it; ``message``: the engine's words, ``flag``: its spelling."""
    asked = server.max_model_len
    if not asked or asked <= model.max_context:
        return None
    return Rule(
        "max-model-len",
        message,
        f"{model.name} was trained for {model.max_context:,} tokens: set {flag} {model.max_context} or less",
    )


def no_kv_memory(message: str, memory: MemoryEstimate) -> Rule:
    """No KV cache left once the weights and the reserve are taken, in the engine's ``message``."""
    pool = f" + linear-attention state {memory.state_pool_gib:.1f} GiB" if memory.state_pool_gib else ""
    return Rule(
        "no-kv-memory",
        message,
        f"weights {memory.weights_gib:.1f} GiB + reserve {memory.reserve_gib:.1f} GiB{pool} leave no KV "
        f"cache in {memory.budget_gib:.1f} GiB",
    )
