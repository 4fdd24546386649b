"""SGLang: ``python -m sglang.launch_server --model-path M --tp-size .. --ep-size ..``.

GPUs used = TP x PP; ``--ep-size`` carves EP *inside* the TP group (MoE-TP = TP / EP), so
``--tp-size 4 --ep-size 2`` runs on 4 GPUs. ``--enable-dp-attention --dp-size D`` splits
attention into D replicas of TP / D, still on TP GPUs. Plain ``--dp-size`` without DP attention
starts D full replicas (TP x PP x D GPUs). See docs/placement.md#sglang, and in SGLang
sglang/srt/model_executor/model_runner.py and sglang/srt/runtime_context.py.
"""

from __future__ import annotations

from cockpit.engines import checks
from cockpit.engines.base import Engine, Placement, Rule, ServerArgs, experts_per_gpu, stage_layers
from cockpit.layout import Layout
from cockpit.model import ModelArch

# SGLang derives its static pool from the GPU and the parallel config when the flag is absent
# (sglang/srt/arg_groups/memory_hook.py); cockpit takes one fixed share instead, and a profile that
# must match a real server sets --mem-fraction-static (docs/memory.md#the-memory-fraction).
DEFAULT_MEM_FRACTION = 0.88


class SGLang(Engine):
    name = "sglang"
    label = "SGLang"
    default_command = ("python", "-m", "sglang.launch_server")
    ready_paths = ("/health", "/get_model_info", "/v1/models")

    def model_args(self, model_path: str) -> list[str]:
        return ["--model-path", model_path]

    def memory_fraction(self, server: ServerArgs, capacity_gib: float) -> float:
        return server.mem_fraction_static or DEFAULT_MEM_FRACTION

    def placement(self, layout: Layout, gpus_total: int, model: ModelArch) -> Placement:
        tp, pp, dp = layout.tp, layout.pp, layout.dp
        ep = layout.ep if layout.ep is not None else (tp if layout.expert_parallel else 1)
        if not model.is_moe:
            ep = 1
        attn_tp = max(1, tp // dp) if layout.dpa else tp
        gpus = tp * pp if layout.dpa else tp * pp * dp
        flags = ["--tp-size", str(tp)]
        if ep > 1 or layout.expert_parallel:
            flags += ["--ep-size", str(ep)]
        if dp > 1:
            flags += ["--dp-size", str(dp)]
        if layout.dpa:
            flags.append("--enable-dp-attention")
        if pp > 1:
            flags += ["--pp-size", str(pp)]
        moe_tp = max(1, tp // ep)
        notes = []
        if model.is_moe and ep > 1:
            notes.append(f"EP{ep} inside the TP group: each expert sliced {moe_tp} ways")
        if layout.ep and layout.ep < tp * dp and not layout.dpa:
            notes.append(f"--ep-size adds no GPUs: world = TP x PP = {tp * pp}")
        return Placement(
            engine=self.name,
            layout=layout,
            gpus_total=gpus_total,
            gpus_used=gpus,
            attn_tp=attn_tp,
            attn_replicas=dp,
            dense_tp=tp,
            vocab_tp=attn_tp,
            pp=pp,
            stage_layers=stage_layers(model.layers, pp),
            moe_ep=ep,
            moe_tp=moe_tp,
            experts_per_gpu=experts_per_gpu(model, ep) if model.is_moe else 0,
            flags=tuple(flags),
            notes=tuple(notes),
        )

    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        layout = placement.layout
        rules: list[Rule] = []
        if placement.gpus_used > placement.gpus_total:
            rules.append(
                Rule(
                    "gpus-available",
                    "RuntimeError: CUDA error: invalid device ordinal",
                    f"the layout needs {placement.gpus_used} GPUs and the box has {placement.gpus_total}",
                )
            )
        if layout.ep and layout.tp % layout.ep:
            rules.append(
                Rule(
                    "ep-divides-tp",
                    "AssertionError",
                    f"SGLang carves EP inside the TP group: --ep-size {layout.ep} must divide --tp-size {layout.tp}",
                )
            )
        if layout.dpa and layout.tp % layout.dp:
            rules.append(
                Rule(
                    "dp-attention",
                    "AssertionError",
                    f"with --enable-dp-attention, --dp-size {layout.dp} must divide --tp-size {layout.tp}",
                )
            )
        if layout.expert_parallel and not model.is_moe:
            rules.append(
                Rule("ep-needs-experts", "AssertionError", f"{model.name} is a dense model: drop `ep`")
            )
        rules += checks.attention_rules(model, placement.attn_tp, None)
        rules += checks.moe_width_rules(model, placement.moe_tp)
        rules += checks.linear_block_rules(model, placement.attn_tp, placement.dense_tp)
        if server.enable_eplb and placement.moe_ep <= 1:
            rules.append(Rule("eplb", "AssertionError", "--enable-eplb needs --ep-size above 1"))
        return rules
