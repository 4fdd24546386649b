"""What AIConfigurator's measured kernels can describe: which of cockpit's GPU types and engines,
and how a cockpit placement reads as its parallel sizes. Pure: no library, no disk.

AIConfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0) names its GPU tables by system
(``aiconfigurator_core/systems/*.yaml``); cockpit names GPU types by key (cockpit.core.hardware).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cockpit.core.model import ModelArch
from cockpit.engines import ENGINE_NAMES, Placement

# cockpit GPU key -> AIConfigurator system holding measured tables for it. The H20, the CPU box
# and any GPU cockpit does not know have none.
SYSTEMS = {
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "a100": "a100_sxm",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
}

# cockpit engine name -> AIConfigurator backend: it names its backends as the engines name
# themselves (common.BackendName), so each of cockpit's engines is one of its backends.
BACKENDS = {name: name for name in ENGINE_NAMES}


@dataclass(frozen=True)
class ParallelSizes:
    """A placement in AIConfigurator's words (``EngineHandle.compile``'s keyword arguments)."""

    tp_size: int
    pp_size: int
    attention_dp_size: int
    moe_tp_size: int
    moe_ep_size: int

    def to_kwargs(self) -> dict[str, int]:
        return {
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
            "attention_dp_size": self.attention_dp_size,
            "moe_tp_size": self.moe_tp_size,
            "moe_ep_size": self.moe_ep_size,
        }

    def ranks_batch(self, batch: int) -> int:
        """Sequences one attention rank decodes in one microbatch when a replica serves ``batch``:
        AIConfigurator's batch is per attention-DP rank, and a pipeline splits a rank's batch into
        up to ``pp_size`` microbatches, each timed through every stage (one token's interval)."""
        per_rank = math.ceil(batch / self.attention_dp_size)
        microbatches = max(1, min(per_rank, self.pp_size))
        return max(1, math.ceil(per_rank / microbatches))


def shares_moe(model: ModelArch, placement: Placement) -> bool:
    """Whether the attention replicas share one MoE (vLLM DP+EP or DP of a MoE, SGLang DP
    attention): as ``PerfModel.independent_replicas`` reads a placement."""
    if placement.attn_replicas <= 1 or model.moe is None:
        return False
    return placement.moe_ep * placement.moe_tp >= placement.attn_tp * placement.attn_replicas


def parallel_sizes(model: ModelArch, placement: Placement) -> ParallelSizes | str:
    """The placement as one AIConfigurator replica, or why it cannot be one.

    Replicas that share nothing (SGLang's plain DP, DP of a dense model) are one replica each:
    the performance model divides the batch among them. Replicas that share the MoE are one
    replica with ``attention_dp_size`` ranks. The MoE width is the engine's: vLLM ``tpN`` without
    EP slices each expert TP x DP ways, with EP spreads the experts over TP x DP ranks; SGLang's
    ``--ep-size`` splits its TP group (cockpit.engines has already said which)."""
    p = placement
    if min(p.attn_tp, p.attn_replicas, p.pp, p.moe_tp, p.moe_ep) < 1:
        return f"placement {p.layout} has a parallel size under 1"
    shared = shares_moe(model, p)
    dp = p.attn_replicas if shared else 1
    if model.moe is None:
        return ParallelSizes(p.attn_tp, p.pp, dp, 1, 1)
    if p.moe_tp * p.moe_ep != p.attn_tp * dp:
        return (
            f"placement {p.layout} splits the MoE {p.moe_tp * p.moe_ep} ways over "
            f"{p.attn_tp * dp} attention ranks, which AIConfigurator cannot model"
        )
    return ParallelSizes(p.attn_tp, p.pp, dp, p.moe_tp, p.moe_ep)
