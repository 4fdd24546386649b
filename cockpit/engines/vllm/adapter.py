"""vLLM: ``vllm serve MODEL --tensor-parallel-size ... --enable-expert-parallel``.

GPUs used = TP x PP x DP. There is no EP size: ``--enable-expert-parallel`` makes EP = TP x DP
with whole experts per GPU; without it every expert is sliced TP x DP ways (DP is flattened into
the MoE's TP). DP ranks each keep their own attention (TP-sharded inside the rank) and their own
KV cache. See docs/placement.md#vllm, and in vLLM vllm/config/parallel.py and
vllm/model_executor/layers/fused_moe/config.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from cockpit.core.cluster import Rendezvous
from cockpit.core.hardware import Hardware
from cockpit.core.layout import Layout, gpu_totals, in_listing_order, splits
from cockpit.core.model import ModelArch
from cockpit.engines import checks, support
from cockpit.engines.base import (
    Engine,
    Inexpressible,
    Placement,
    Rule,
    ServerArgs,
    experts_per_gpu,
    stage_layers,
)
from cockpit.engines.estimate import CachePool, MemoryBudget, MemoryEstimate, StateArgs
from cockpit.engines.nodes import nodes_spanned, whole_nodes
from cockpit.engines.vllm import memory as memory_rules
from cockpit.engines.vllm.surface import SURFACE

# vLLM's configs are pydantic dataclasses: a ValueError raised while one is built (in
# ``__post_init__`` or a ``model_validator``) reaches the log as ``pydantic_core._pydantic_core.
# ValidationError: 1 validation error for <config>`` over the line ``  Value error, <text> [type=...]``.
# The messages that start with PYDANTIC_PREFIX are that inner line; PYDANTIC_CONFIG names the config.
PYDANTIC_PREFIX = "Value error, "
# ModelConfig.verify_with_parallel_config and _verify_with_expert_parallelism (vllm/config/model.py),
# called from VllmConfig.__post_init__ (vllm/config/vllm.py); the experts check tests the flag alone.
HEADS_MESSAGE = (
    PYDANTIC_PREFIX
    + "Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
)
EXPERTS_MESSAGE = (
    PYDANTIC_PREFIX
    + "Number of experts in the model must be greater than 0 when expert parallelism is enabled."
)
PYDANTIC_CONFIG = {
    "attention-heads": "VllmConfig",
    "ep-needs-experts": "VllmConfig",
    "eplb": "ParallelConfig",
}
WORLD_MESSAGE = (
    "World size ({world}) is larger than the number of available GPUs ({gpus}) in this node. If this is "
    "intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, "
    "set '--nnodes' appropriately."
)

# Across nodes (vllm/engine/arg_utils.py create_engine_config, vllm/config/parallel.py): --nnodes
# must divide the world, and a DP replica spanning nodes needs whole replicas per node group.
NNODES_MESSAGE = (
    "ValueError: Invalid data-parallel launch options: `--nnodes {nodes}` must evenly divide the total "
    "world size ({world}). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size`, "
    "`--tensor-parallel-size`, or `--prefill-context-parallel-size`."
)
DP_NODE_GROUPS_MESSAGE = (
    "ValueError: Invalid data parallel configuration: nnodes ({nodes}) must be divisible by the number of "
    "data parallel node groups ({groups} = data_parallel_size {dp} / data_parallel_size_local 1)"
)
# A node given more ranks than it has GPUs (Worker.init_device, vllm/v1/worker/gpu_worker.py).
LOCAL_RANK_MESSAGE = "AssertionError: DP adjusted local rank {rank} is out of bounds for {gpus} devices."


class VLLM(Engine):
    surface = SURFACE
    name = SURFACE.name
    label = SURFACE.label
    default_command = ("vllm", "serve")
    ready_paths = ("/health", "/v1/models")
    calibration = memory_rules.CALIBRATION
    ssm_dtype_dest = "mamba_ssm_cache_dtype"
    host_ip_var = "VLLM_HOST_IP"  # the node's own address, as the others reach it (vllm/envs.py)

    def model_args(self, model_path: str, command: Sequence[str] = ()) -> list[str]:
        """Positional after ``vllm serve`` (the `model_tag` of vllm/entrypoints/cli/serve.py);
        ``--model`` after any other launcher (``python -m vllm.entrypoints.openai.api_server``,
        which a build installed under another distribution name needs: docs/placement.md)."""
        if not command or command[-1] == "serve":
            return [model_path]
        return ["--model", model_path]

    def memory_fraction(
        self, server: ServerArgs, capacity_gib: float, placement: Placement, model: ModelArch
    ) -> float:
        """--gpu-memory-utilization as given (vLLM derives nothing from the box)."""
        return server.gpu_memory_utilization

    def prefix_caching(self, values: Mapping[str, object]) -> bool:
        """On unless --no-enable-prefix-caching (on by default for hybrid models,
        is_prefix_caching_supported in vllm/config/model.py)."""
        return values.get("enable_prefix_caching") is not False

    def pools_windows(self, model: ModelArch, server: ServerArgs) -> bool:
        """Unless --disable-hybrid-kv-cache-manager."""
        return server.hybrid_kv_cache

    def expert_weight_factor(self, model: ModelArch, hw: Hardware, moe_tp: int) -> float:
        return memory_rules.mxfp4_expert_factor(model, hw, self.version, moe_tp)

    def memory_budget(
        self,
        model: ModelArch,
        hw: Hardware,
        placement: Placement,
        server: ServerArgs,
        *,
        weights_gib: float,
        layers: int,
        last_stage: bool,
        reserve_offset_gib: float,
    ) -> MemoryBudget:
        return memory_rules.memory_budget(
            model,
            self.version,
            placement,
            server,
            hw,
            fraction=self.memory_fraction(server, hw.smi_total_gib, placement, model),
            weights_gib=weights_gib,
            layers=layers,
            last_stage=last_stage,
            reserve_offset_gib=reserve_offset_gib,
        )

    def cache_dtype_bytes(self, model: ModelArch, server: ServerArgs, hw: Hardware) -> float:
        return memory_rules.cache_dtype_bytes(model, server, hw)

    def cache_pool(
        self,
        model: ModelArch,
        hw: Hardware,
        placement: Placement,
        server: ServerArgs,
        state: StateArgs,
        kv_dtype: float,
        kv_budget_gib: float,
        layers: int,
    ) -> CachePool:
        return memory_rules.cache_pool(model, hw, placement, server, state, kv_dtype, kv_budget_gib, layers)

    def context_length_refusal(self, model: ModelArch, server: ServerArgs) -> Rule | None:
        return memory_rules.context_length_refusal(model, server)

    def memory_refusal(
        self, model: ModelArch, placement: Placement, memory: MemoryEstimate, server: ServerArgs
    ) -> Rule | None:
        return memory_rules.memory_refusal(model, placement, memory, server)

    def default_max_running(self, hw: Hardware) -> int:
        """max_num_seqs's default for the card."""
        return memory_rules.max_num_seqs(ServerArgs(), hw)

    def step_tokens(self, server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
        """``max_num_batched_tokens``, by card (get_batch_defaults in vllm/engine/arg_utils.py)."""
        return memory_rules.batched_tokens(server, hw, model)

    def graph_max_bs(self, server: ServerArgs, hw: Hardware, model: ModelArch, placement: Placement) -> int:
        return memory_rules.graph_max_bs(server, hw, model)

    def candidate_layouts(self, n_gpus: int, *, moe: bool, nodes: int = 1) -> list[Layout]:
        """GPUs = tp x pp x dp; vLLM has no EP size, only the switch (EP = tp x dp)."""
        totals = gpu_totals(n_gpus)
        layouts = [Layout(tp, pp, dp) for p in totals for tp, pp, dp in splits(p, 3)]
        layouts += [Layout(tp=k) for k in range(1, n_gpus + 1)]
        if moe:
            layouts += [replace(x, expert_parallel=True) for x in layouts if x.tp * x.dp > 1]
        if nodes > 1:
            layouts = [x for x in layouts if whole_nodes(x.gpus_product, n_gpus // nodes, nodes)]
        return in_listing_order(layouts, lambda x: x.gpus_product)

    def placement(
        self,
        layout: Layout,
        gpus_total: int,
        model: ModelArch,
        server: ServerArgs | None = None,
        *,
        nodes: int = 1,
    ) -> Placement:
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
        per_node = gpus_total // nodes
        spanned = nodes_spanned(tp * pp * dp, per_node) if nodes > 1 else 1
        if spanned > 1:
            _check_dp_over_nodes(layout, spanned, per_node)
        return Placement(
            engine=self.name,
            layout=layout,
            gpus_total=gpus_total,
            gpus_used=tp * pp * dp,
            attn_tp=tp,
            attn_replicas=dp,
            dense_tp=tp,
            vocab_tp=tp,
            lm_head_tp=tp,  # ParallelLMHead: vllm/model_executor/layers/vocab_parallel_embedding.py
            pp=pp,
            stage_layers=stage_layers(model.layers, pp),
            moe_ep=moe_ep,
            moe_tp=1 if ep_on else tp * dp,
            experts_per_gpu=experts_per_gpu(model, moe_ep) if model.is_moe else 0,
            flags=tuple(flags),
            notes=tuple(notes),
            nodes=spanned,
            gpus_per_node=per_node if nodes > 1 else 0,
        )

    def node_args(
        self, placement: Placement, rank: int, rendezvous: Rendezvous
    ) -> tuple[list[str], list[str]]:
        """vLLM's multi-node flags (vllm/engine/arg_utils.py, vllm/entrypoints/cli/serve.py).

        A world of one DP rank, or of DP ranks each wider than a node: `--nnodes N --node-rank R
        --master-addr HEAD --master-port P` (multiprocessing workers over torch.distributed), the
        DP ranks inferred from the node rank, `--headless` on every node but the head. DP ranks that
        each fit in a node: the data-parallel launch of
        https://docs.vllm.ai/en/latest/serving/data_parallel_deployment.html, the same
        `--data-parallel-size D --data-parallel-address HEAD --data-parallel-rpc-port RPC`
        everywhere, each node its `--data-parallel-size-local d`, the others `--headless` with
        `--data-parallel-start-rank` (the earlier nodes' local sizes added up). The head says no
        start rank: given to a node that serves the API, it turns on the hybrid load balancer
        (create_engine_config), which balances over that node's own ranks alone."""
        layout = placement.layout
        head = rendezvous.head
        dp_address = ["--data-parallel-address", head, "--data-parallel-rpc-port", str(rendezvous.rpc_port)]
        headless = ["--headless"] if rank else []
        if layout.dp == 1 or layout.tp * layout.pp > placement.per_node:
            shared = [
                "--nnodes",
                str(placement.nodes),
                "--master-addr",
                head,
                "--master-port",
                str(rendezvous.port),
            ]
            if layout.dp > 1:
                shared += dp_address
            return shared, ["--node-rank", str(rank), *headless]
        local = layout.dp // placement.nodes
        own = ["--data-parallel-size-local", str(local)]
        if rank:
            own += ["--data-parallel-start-rank", str(rank * local), *headless]
        return dp_address, own

    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        """In vLLM's order: ParallelConfig (world size, EPLB), then VllmConfig (heads, experts,
        pipeline support), then the workers' model load (the first layer's state split in hybrid
        models, whose layer 0 is a state layer; KV heads, EPLB's expert split, MoE width, FP8 blocks)."""
        layout = placement.layout
        rules: list[Rule] = []
        if placement.gpus_per_node:
            rules += _node_rules(placement)
        elif placement.gpus_used > placement.gpus_total:
            rules.append(
                Rule(
                    "gpus-available",
                    WORLD_MESSAGE.format(world=placement.gpus_used, gpus=placement.gpus_total),
                    f"the layout needs {placement.gpus_used} GPUs and the box has {placement.gpus_total}",
                )
            )
        rules += _eplb_config_rules(layout, server)
        rules += checks.heads_rules(model, placement.attn_tp, HEADS_MESSAGE)
        if layout.expert_parallel and not model.is_moe:
            rules.append(
                Rule("ep-needs-experts", EXPERTS_MESSAGE, f"{model.name} is a dense model: drop `ep`")
            )
        rules += support.vllm_pp_rules(model, placement.pp)
        rules += support.linear_attention_rules(model, placement.attn_tp)
        rules += checks.kv_heads_rules(model, placement.attn_tp)
        rules += _eplb_split_rules(model, placement, server)
        rules += checks.moe_width_rules(model, placement.moe_tp, down_tp=placement.attn_tp)
        rules += checks.linear_block_rules(
            model, placement.attn_tp, placement.dense_tp, padded_shared=model.family == "deepseek-v4"
        )
        return rules


def _check_dp_over_nodes(layout: Layout, spanned: int, per_node: int) -> None:
    """DP ranks that each fit in a node are launched as whole ranks per node (the data-parallel
    launch: every node the same --data-parallel-size-local, so the ranks spread evenly); a DP size
    the nodes cannot share evenly has no such launch."""
    replica = layout.tp * layout.pp
    if layout.dp == 1 or replica > per_node:
        return
    if layout.dp % spanned == 0 and replica * (layout.dp // spanned) <= per_node:
        return
    fits = max(1, per_node // replica)
    alternatives = [
        replace(layout, dp=fits * spanned, ep=None),
        *([replace(layout, dp=fits, ep=None)] if fits > 1 else []),
    ]
    said = ", ".join(f"`{a}`" for a in alternatives)
    raise Inexpressible(
        f"vLLM starts the same number of DP ranks on every node (--data-parallel-size-local): DP{layout.dp} of "
        f"{replica} GPUs each does not share evenly over {spanned} nodes of {per_node} GPUs; try {said}",
        alternatives,
    )


def _node_rules(placement: Placement) -> list[Rule]:
    """A cluster's world as vLLM checks it: --nnodes dividing the world and the DP node groups
    (create_engine_config, vllm/engine/arg_utils.py; ParallelConfig.nnodes_within_dp,
    vllm/config/parallel.py), and no node given more ranks than it has GPUs."""
    layout, per_node = placement.layout, placement.per_node
    world, nodes = placement.gpus_used, placement.nodes
    cluster = placement.gpus_total // per_node
    have = f"the cluster has {placement.gpus_total} ({cluster} nodes of {per_node})"
    if world > placement.gpus_total:
        if world % cluster:
            message = NNODES_MESSAGE.format(nodes=cluster, world=world)
        else:
            message = LOCAL_RANK_MESSAGE.format(rank=per_node, gpus=per_node)
        return [Rule("gpus-available", message, f"the layout needs {world} GPUs and {have}")]
    if nodes > 1 and world % nodes:
        return [
            Rule(
                "nnodes",
                NNODES_MESSAGE.format(nodes=nodes, world=world),
                f"{world} ranks need {nodes} nodes of {per_node} GPUs and do not spread evenly over them",
            )
        ]
    replica = layout.tp * layout.pp
    if layout.dp > 1 and replica > per_node and nodes % layout.dp:
        return [
            Rule(
                "nnodes",
                DP_NODE_GROUPS_MESSAGE.format(nodes=nodes, groups=layout.dp, dp=layout.dp),
                f"each of the {layout.dp} DP ranks spans nodes: {nodes} nodes do not split into {layout.dp} groups",
            )
        ]
    return []


def _eplb_config_rules(layout: Layout, server: ServerArgs) -> list[Rule]:
    """ParallelConfig._validate_parallel_config (vllm/config/parallel.py): EPLB needs the EP flag and
    a group to balance over; redundant experts need EPLB."""
    if not server.enable_eplb:
        if server.redundant_experts:
            return [
                Rule(
                    "eplb",
                    f"{PYDANTIC_PREFIX}num_redundant_experts is set to {server.redundant_experts} but EPLB is "
                    "not enabled. Either enable EPLB or unset num_redundant_experts.",
                    "--eplb-config num_redundant_experts needs --enable-eplb",
                )
            ]
        return []
    if not layout.expert_parallel:
        return [
            Rule(
                "eplb",
                f"{PYDANTIC_PREFIX}enable_expert_parallel must be True to use EPLB.",
                "--enable-eplb needs `ep` in the layout",
            )
        ]
    if layout.tp * layout.dp <= 1:  # TP x PCP x DP; cockpit never sets prefill-context parallelism
        return [
            Rule(
                "eplb",
                f"{PYDANTIC_PREFIX}EPLB requires tensor, prefill-context, or data parallelism, but got "
                f"TP={layout.tp}, PCP=1, DP={layout.dp}.",
                "EPLB balances experts over the EP group of TP x DP ranks: use tp or dp above 1",
            )
        ]
    return []


def _eplb_split_rules(model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
    """The MoE layer's check at load (vllm/model_executor/layers/fused_moe/layer.py): the routed
    experts plus the redundant copies must split evenly over the EP ranks."""
    if not server.enable_eplb or model.moe is None or placement.moe_ep <= 1:
        return []
    physical = model.moe.experts + server.redundant_experts
    if physical % placement.moe_ep == 0:
        return []
    return [
        Rule(
            "eplb",
            "ValueError: EPLB currently only supports even distribution of experts across ranks. "
            f"Got {physical} experts and {placement.moe_ep} EP ranks.",
            f"{model.moe.experts} experts + {server.redundant_experts} redundant do not split evenly over "
            f"EP{placement.moe_ep}",
        )
    ]
