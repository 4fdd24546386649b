"""vLLM: ``vllm serve MODEL --tensor-parallel-size ... --enable-expert-parallel``.

GPUs used = TP x PP x DP. There is no EP size: ``--enable-expert-parallel`` makes EP = TP x DP
with whole experts per GPU; without it every expert is sliced TP x DP ways (DP is flattened into
the MoE's TP). DP ranks each keep their own attention (TP-sharded inside the rank) and their own
KV cache. See docs/placement.md#vllm, and in vLLM vllm/config/parallel.py and
vllm/model_executor/layers/fused_moe/config.py.
"""

from __future__ import annotations

from cockpit.engines import checks
from cockpit.engines.base import (
    Engine,
    Inexpressible,
    Placement,
    Rule,
    ServerArgs,
    experts_per_gpu,
    stage_layers,
)
from cockpit.layout import Layout
from cockpit.model import ModelArch

HEADS_MESSAGE = (
    "ValueError: Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
)
WORLD_MESSAGE = (
    "World size ({world}) is larger than the number of available GPUs ({gpus}) in this node. If this is "
    "intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, "
    "set '--nnodes' appropriately."
)


class VLLM(Engine):
    name = "vllm"
    label = "vLLM"
    default_command = ("vllm", "serve")
    ready_paths = ("/health", "/v1/models")

    def model_args(self, model_path: str) -> list[str]:
        return [model_path]

    def memory_fraction(self, server: ServerArgs, capacity_gib: float) -> float:
        return server.gpu_memory_utilization

    def placement(self, layout: Layout, gpus_total: int, model: ModelArch) -> Placement:
        tp, pp, dp = layout.tp, layout.pp, layout.dp
        if layout.dpa:
            raise Inexpressible(
                f"vLLM has no --enable-dp-attention: its DP ranks always keep their own attention; "
                f"say `{Layout(tp=max(1, tp // dp), dp=dp, expert_parallel=True)}` instead",
                [Layout(tp=max(1, tp // dp), dp=dp, expert_parallel=layout.expert_parallel)],
            )
        if layout.ep is not None and layout.ep != tp * dp:
            alternatives = [
                Layout(tp=tp, pp=pp, dp=layout.ep, expert_parallel=True),
                Layout(tp=tp, pp=pp, expert_parallel=True),
            ]
            said = ", ".join(f"`{a}` (EP{a.tp * a.dp} on {a.tp * a.pp * a.dp} GPUs)" for a in alternatives)
            raise Inexpressible(
                f"vLLM has no EP size: --enable-expert-parallel makes EP = TP x DP = {tp * dp}, so `{layout}` "
                f"cannot be said in its flags; nearest: {said}",
                alternatives,
            )
        ep_on = layout.expert_parallel and model.is_moe
        moe_ep = tp * dp if ep_on else 1
        flags = ["--tensor-parallel-size", str(tp)]
        if pp > 1:
            flags += ["--pipeline-parallel-size", str(pp)]
        if dp > 1:
            flags += ["--data-parallel-size", str(dp)]
        if layout.expert_parallel:
            flags.append("--enable-expert-parallel")
        notes = []
        if ep_on:
            notes.append(f"EP = TP x DP = {moe_ep}: whole experts per GPU")
        elif model.is_moe and tp * dp > 1:
            notes.append(f"every expert sliced {tp * dp} ways (MoE TP = TP x DP)")
        return Placement(
            engine=self.name,
            layout=layout,
            gpus_total=gpus_total,
            gpus_used=tp * pp * dp,
            attn_tp=tp,
            attn_replicas=dp,
            dense_tp=tp,
            vocab_tp=tp,
            pp=pp,
            stage_layers=stage_layers(model.layers, pp),
            moe_ep=moe_ep,
            moe_tp=1 if ep_on else tp * dp,
            experts_per_gpu=experts_per_gpu(model, moe_ep) if model.is_moe else 0,
            flags=tuple(flags),
            notes=tuple(notes),
        )

    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        rules: list[Rule] = []
        if placement.gpus_used > placement.gpus_total:
            rules.append(
                Rule(
                    "gpus-available",
                    WORLD_MESSAGE.format(world=placement.gpus_used, gpus=placement.gpus_total),
                    f"the layout needs {placement.gpus_used} GPUs and the box has {placement.gpus_total}",
                )
            )
        if placement.layout.expert_parallel and not model.is_moe:
            rules.append(
                Rule(
                    "ep-needs-experts",
                    "Number of experts in the model must be greater than 0 when expert parallelism is enabled.",
                    f"{model.name} is a dense model: drop `ep`",
                )
            )
        rules += checks.attention_rules(model, placement.attn_tp, HEADS_MESSAGE)
        rules += checks.moe_width_rules(model, placement.moe_tp)
        rules += checks.linear_block_rules(model, placement.attn_tp, placement.dense_tp)
        rules += _eplb_rules(model, placement, server)
        return rules


def _eplb_rules(model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
    if not server.enable_eplb:
        return []
    if placement.moe_ep <= 1:
        return [
            Rule(
                "eplb",
                "enable_expert_parallel must be True to use EPLB.",
                "--enable-eplb needs `ep` in the layout",
            )
        ]
    if model.moe and model.moe.experts % placement.moe_ep:
        return [
            Rule(
                "eplb",
                f"EPLB currently only supports even distribution of experts across ranks. Got {model.moe.experts} "
                f"experts and {placement.moe_ep} EP ranks.",
                f"{model.moe.experts} experts do not split evenly over EP{placement.moe_ep}",
            )
        ]
    return []
