"""SGLang: ``python -m sglang.launch_server --model-path M --tp-size .. --ep-size ..``.

GPUs used = TP x PP; ``--ep-size`` carves EP *inside* the TP group (MoE-TP = TP / EP), so
``--tp-size 4 --ep-size 2`` runs on 4 GPUs. DP attention (``--attn-dp-size D`` since 0.5.23,
``--dp-size D --enable-dp-attention`` before) splits attention into D groups of TP / D, still on
TP GPUs. Plain ``--dp-size`` without DP attention starts D full replicas (TP x PP x D GPUs). See
docs/placement.md#sglang, and in SGLang sglang/srt/model_executor/model_runner.py,
sglang/srt/runtime_context.py and sglang/srt/arg_groups/parallel_hook.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from cockpit.core.cluster import Rendezvous
from cockpit.core.hardware import Hardware
from cockpit.core.layout import Layout, divisors, gpu_totals, in_listing_order, splits
from cockpit.core.model import ROUTED_EXPERTS, ModelArch
from cockpit.engines import checks, support
from cockpit.engines.base import Engine, Placement, Rule, ServerArgs, experts_per_gpu
from cockpit.engines.estimate import CachePool, MemoryBudget, MemoryEstimate, StateArgs
from cockpit.engines.nodes import NodeShare, host_port, node_shares, nodes_spanned, whole_nodes
from cockpit.engines.options import version_key
from cockpit.engines.sglang import memory as memory_rules
from cockpit.engines.sglang.surface import SURFACE

# `--attn-dp-size` replaced `--dp-size D --enable-dp-attention`, which 0.5.23 still reads
# (handle_deprecated_dp_attention, sglang/srt/arg_groups/parallel_hook.py).
ATTN_DP_SIZE_SINCE = (0, 5, 23)

# Vocabulary sharding under DP attention (sglang/srt/models/*.py): most models build the input
# embedding over the attention-TP group (`use_attn_tp_group=is_dp_attention_enabled()`), these over
# the whole TP group; the lm_head is split over the whole TP group unless --enable-dp-lm-head
# (`use_attn_tp_group=get_parallel().enable_dp_lm_head`), which these ignore.
_EMBEDDING_OVER_TP = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"})
_LM_HEAD_IGNORES_DP_LM_HEAD = frozenset({"MixtralForCausalLM", "Qwen2ForCausalLM", "MiniMaxM2ForCausalLM"})

# Families whose config names the expert width `moe_intermediate_size`, which SGLang's
# check_quantized_moe_compatibility reads (it passes the others).
_MOE_INTERMEDIATE_FAMILIES = frozenset({"deepseek-v3", "qwen3-moe", "glm4-moe"})

# SGLang 0.5.23 models whose forward() takes no `pp_proxy_tensors`, so that ModelRunner asserts
# "Pipeline Parallel is not compatible with this model." under --pp-size > 1 (`support_pp`,
# sglang/srt/model_executor/model_runner.py). These are the generative ones people serve; among the
# families cockpit reads, Qwen3-Next and Llama 4's multimodal class are here.
PP_UNSUPPORTED = frozenset(
    {
        "Cohere2ForCausalLM",
        "CohereForCausalLM",
        "DbrxForCausalLM",
        "DeepseekForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "FalconH1ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "GemmaForCausalLM",
        "GraniteMoeForCausalLM",
        "Grok1ForCausalLM",
        "HunYuanMoEV1ForCausalLM",
        "InternLM2ForCausalLM",
        "KimiVLForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "Mamba2ForCausalLM",
        "MiMoForCausalLM",
        "MiniCPM3ForCausalLM",
        "Olmo2ForCausalLM",
        "OlmoeForCausalLM",
        "Phi3SmallForCausalLM",
        "PhiMoEForCausalLM",
        "Qwen2VLForConditionalGeneration",
        "Qwen3NextForCausalLM",
    }
)

# Across nodes: check_server_args (sglang/srt/arg_groups/validation_hook.py).
NNODES_MESSAGE = "AssertionError: tp_size must be divisible by number of nodes"
DP_NODES_MESSAGE = (
    "AssertionError: multi-node data-parallel replicas are not supported; use attention DP "
    "(--attn-dp-size) across nodes"
)


class SGLang(Engine):
    surface = SURFACE
    name = SURFACE.name
    label = SURFACE.label
    default_command = ("python", "-m", "sglang.launch_server")
    ready_paths = ("/health", "/get_model_info", "/v1/models")
    # SGLang serves /metrics only when asked (sglang/srt/entrypoints/http_server.py): the engine
    # line and each benchmark level's engine figures read it (docs/metrics.md).
    always_args = ("--enable-metrics",)
    calibration = memory_rules.CALIBRATION
    ssm_dtype_dest = "mamba_ssm_dtype"

    @property
    def speaks_attn_dp_size(self) -> bool:
        """Whether this version says DP attention as ``--attn-dp-size`` (else the old pair)."""
        return version_key(self.version) >= ATTN_DP_SIZE_SINCE

    def model_args(self, model_path: str, command: Sequence[str] = ()) -> list[str]:
        return ["--model-path", model_path]

    def memory_fraction(
        self, server: ServerArgs, capacity_gib: float, placement: Placement, model: ModelArch
    ) -> float:
        """--mem-fraction-static, or the share SGLang derives from the GPU and the parallel config."""
        if server.mem_fraction_static is not None:
            return server.mem_fraction_static
        layout = placement.layout
        return memory_rules.derived_mem_fraction(
            server,
            capacity_gib * 1024,
            tp=layout.tp,
            pp=layout.pp,
            attn_dp=layout.dp if layout.dpa else 1,
            mla=model.mla is not None,
            model_name=model.name,
        )

    def prefix_caching(self, values: Mapping[str, object]) -> bool:
        """The radix cache: on unless --disable-radix-cache."""
        return not values.get("disable_radix_cache")

    def pools_windows(self, model: ModelArch, server: ServerArgs) -> bool:
        """For the architectures in its hybrid-SWA list, unless --disable-hybrid-swa-memory."""
        return server.hybrid_kv_cache and memory_rules.swa_pool(model)

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
            placement,
            hw,
            fraction=self.memory_fraction(server, hw.smi_total_gib, placement, model),
            weights_gib=weights_gib,
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
        return memory_rules.cache_pool(model, placement, server, state, kv_dtype, kv_budget_gib, layers)

    def context_length_refusal(self, model: ModelArch, server: ServerArgs) -> Rule | None:
        return memory_rules.context_length_refusal(model, server)

    def memory_refusal(
        self, model: ModelArch, placement: Placement, memory: MemoryEstimate, server: ServerArgs
    ) -> Rule | None:
        return memory_rules.memory_refusal(memory, server)

    def default_max_running(self, hw: Hardware) -> int:
        """No cap of its own worth modelling: the KV cache bounds the batch."""
        return 4096

    def step_tokens(self, server: ServerArgs, hw: Hardware, model: ModelArch) -> int:
        """``--chunked-prefill-size``, by GPU memory (_handle_gpu_memory_settings in
        sglang/srt/arg_groups/memory_hook.py)."""
        return memory_rules.step_tokens(server, hw)

    def graph_max_bs(self, server: ServerArgs, hw: Hardware, model: ModelArch, placement: Placement) -> int:
        """Its own default, by card and TP (the memory share reads the same)."""
        if not server.cuda_graphs:
            return 0
        return memory_rules.decode_graph_max_bs(server, hw.smi_total_gib * 1024, placement.layout.tp)

    def candidate_layouts(self, n_gpus: int, *, moe: bool, nodes: int = 1) -> list[Layout]:
        """GPUs = tp x pp; `--ep-size` is carved inside the TP group and must divide tp; DP
        attention splits the TP group and adds no GPUs."""
        totals = gpu_totals(n_gpus)
        grid = [Layout(tp, pp) for p in totals for tp, pp in splits(p, 2)]
        grid += [Layout(tp=k) for k in range(1, n_gpus + 1)]
        replicas = [Layout(tp=tp, dp=dp) for p in totals for tp, dp in splits(p, 2) if dp > 1]
        dp_attention = [Layout(tp=t, dp=d, dpa=True) for t in totals for d in divisors(t) if d > 1]
        layouts = grid + replicas + dp_attention
        if moe:
            layouts += [replace(x, ep=e) for x in grid + replicas for e in divisors(x.tp) if e > 1]
            layouts += [replace(x, ep=x.tp) for x in dp_attention]

        def used(x: Layout) -> int:
            return x.tp * x.pp if x.dpa else x.gpus_product

        if nodes > 1:
            layouts = [x for x in layouts if whole_nodes(used(x), n_gpus // nodes, nodes)]
        return in_listing_order(layouts, used)

    def placement(
        self,
        layout: Layout,
        gpus_total: int,
        model: ModelArch,
        server: ServerArgs | None = None,
        *,
        nodes: int = 1,
    ) -> Placement:
        server = server or ServerArgs()
        tp, pp, dp = layout.tp, layout.pp, layout.dp
        ep = layout.ep if layout.ep is not None else (tp if layout.expert_parallel else 1)
        if not model.is_moe:
            ep = 1  # `ep` on a dense model is a verdict (startup_rules), not a flag
        attn_tp = max(1, tp // dp) if layout.dpa else tp
        flags = ["--tp-size", str(tp)]
        if model.is_moe and layout.expert_parallel:
            flags += ["--ep-size", str(ep)]
        flags += self._dp_flags(layout)
        if pp > 1:
            flags += ["--pp-size", str(pp)]
        moe_tp = max(1, tp // ep)
        notes = []
        if model.is_moe and ep > 1:
            notes.append(f"EP{ep} inside the TP group: each expert sliced {moe_tp} ways")
        if model.is_moe and layout.ep and layout.ep < tp * dp and not layout.dpa:
            notes.append(f"--ep-size adds no GPUs: world = TP x PP = {tp * pp}")
        if server.enable_dp_lm_head and dp == 1:
            notes.append("--enable-dp-lm-head does nothing without DP attention: SGLang turns it off")
        embedding_tp, lm_head_tp = vocab_split(model, tp, attn_tp, layout.dpa, server.enable_dp_lm_head)
        gpus_used = tp * pp if layout.dpa else tp * pp * dp
        per_node = gpus_total // nodes
        return Placement(
            engine=self.name,
            layout=layout,
            gpus_total=gpus_total,
            gpus_used=gpus_used,
            attn_tp=attn_tp,
            attn_replicas=dp,
            dense_tp=tp,
            vocab_tp=embedding_tp,
            lm_head_tp=lm_head_tp,
            pp=pp,
            stage_layers=stage_layers(model.layers, pp),
            moe_ep=ep,
            moe_tp=moe_tp,
            experts_per_gpu=experts_per_gpu(model, ep) if model.is_moe else 0,
            flags=tuple(flags),
            notes=tuple(notes),
            nodes=nodes_spanned(gpus_used, per_node) if nodes > 1 else 1,
            gpus_per_node=per_node if nodes > 1 else 0,
        )

    def node_args(
        self, placement: Placement, rank: int, rendezvous: Rendezvous
    ) -> tuple[list[str], list[str]]:
        """`--nnodes N --dist-init-addr HEAD:PORT` on every node, its own `--node-rank R`
        (sglang/srt/server_args.py; https://docs.sglang.ai/references/multi_node_deployment/);
        TP, attention DP and EP span the nodes, and only rank 0 starts the HTTP server."""
        shared = [
            "--nnodes",
            str(placement.nodes),
            "--dist-init-addr",
            host_port(rendezvous.head, rendezvous.port),
        ]
        return shared, ["--node-rank", str(rank)]

    def node_shares(self, placement: Placement) -> list[NodeShare]:
        layout = placement.layout
        if layout.dpa:
            return node_shares(layout.tp, layout.pp, 1, placement.nodes, attn_dp=layout.dp)
        return node_shares(layout.tp, layout.pp, layout.dp, placement.nodes)

    def _dp_flags(self, layout: Layout) -> list[str]:
        if layout.dp == 1:
            return []
        if not layout.dpa:
            return ["--dp-size", str(layout.dp)]
        if self.speaks_attn_dp_size:
            return ["--attn-dp-size", str(layout.dp)]
        return ["--dp-size", str(layout.dp), "--enable-dp-attention"]

    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        """In SGLang's order: cockpit's own refusal, the server-argument resolution in the launcher
        (sglang/srt/arg_groups/), the scheduler's device and process groups, the model load, then
        ModelRunner's checks after the load (sglang/srt/model_executor/model_runner.py)."""
        layout = placement.layout
        rules: list[Rule] = []
        if layout.expert_parallel and not model.is_moe:
            # SGLang itself would start and ignore --ep-size (no MoE layer reads it); no text of its own.
            rules.append(Rule("ep-needs-experts", "", f"{model.name} is a dense model: drop `ep`"))
        rules += _resolution_rules(layout, placement, server)
        if placement.gpus_per_node:
            rules += _node_rules(placement)
        elif placement.gpus_used > placement.gpus_total:
            rules.append(
                Rule(
                    "gpus-available",
                    "RuntimeError: CUDA error: invalid device ordinal",
                    f"the layout needs {placement.gpus_used} GPUs and the box has {placement.gpus_total}",
                )
            )
        if placement.moe_ep > 1 and layout.tp % placement.moe_ep:
            # Ranks outside every MoE group fail `assert self.cpu_group is not None`
            # (GroupCoordinator.__init__, sglang/srt/distributed/parallel_state.py), before the load
            # and before moe_ep_setup.py's "tp_size T must be divisible by ep_size E".
            rules.append(
                Rule(
                    "ep-divides-tp",
                    "AssertionError",
                    f"SGLang carves EP inside the TP group: --ep-size {placement.moe_ep} must divide "
                    f"--tp-size {layout.tp}",
                )
            )
        rules += _expert_split_rules(model, placement, server)
        rules += support.linear_attention_rules(model, placement.attn_tp, self.name)
        rules += checks.attention_rules(model, placement.attn_tp, None)
        rules += support.sglang_kimi_rules(model, layout.tp, placement.attn_tp)
        rules += checks.moe_width_rules(model, placement.moe_tp)
        rules += checks.linear_block_rules(model, placement.attn_tp, placement.dense_tp)
        rules += quantized_moe_rules(model, placement)
        if placement.pp > 1 and model.architecture in PP_UNSUPPORTED:
            rules.append(
                Rule(
                    "pp-unsupported",
                    "AssertionError: Pipeline Parallel is not compatible with this model.",
                    f"SGLang cannot split {model.architecture} into pipeline stages: use a layout without pp",
                )
            )
        return rules


def _node_rules(placement: Placement) -> list[Rule]:
    """A cluster's world as SGLang checks it (check_server_args, validation_hook.py) and places it
    (tp_size_per_node and pp_size_per_node, sglang/srt/entrypoints/engine.py)."""
    layout, per_node = placement.layout, placement.per_node
    cluster = placement.gpus_total // per_node
    world = layout.tp * layout.pp
    nodes = min(placement.nodes, cluster) if placement.gpus_used > placement.gpus_total else placement.nodes
    if placement.gpus_used > placement.gpus_total:
        have = f"the cluster has {placement.gpus_total} ({cluster} nodes of {per_node})"
        message = NNODES_MESSAGE if world % cluster else "RuntimeError: CUDA error: invalid device ordinal"
        return [Rule("gpus-available", message, f"the layout needs {placement.gpus_used} GPUs and {have}")]
    if nodes <= 1:
        return []
    if layout.dp > 1 and not layout.dpa:
        return [
            Rule(
                "dp-nodes",
                DP_NODES_MESSAGE,
                f"dp{layout.dp} starts whole replicas, which SGLang keeps on one node: say `dpa` or fit in a node",
            )
        ]
    if world % nodes:
        return [
            Rule("nnodes", NNODES_MESSAGE, f"TP x PP = {world} does not spread evenly over {nodes} nodes")
        ]
    if layout.pp > 1 and layout.pp % nodes and nodes % layout.pp:
        # pp_size_per_node = pp // nnodes and nnodes_per_pp_rank = nnodes // pp (engine.py): a stage
        # count and a node count neither of which divides the other leave stages on no node.
        return [
            Rule(
                "pp-nodes",
                "",
                f"SGLang puts whole pipeline stages on each node (or one stage on several): --pp-size "
                f"{layout.pp} over {nodes} nodes leaves stages unplaced",
            )
        ]
    return []


def _resolution_rules(layout: Layout, placement: Placement, server: ServerArgs) -> list[Rule]:
    """What the launcher refuses while it resolves the arguments (sglang/srt/arg_groups/), in order."""
    rules = []
    if layout.dpa and layout.tp % layout.dp:
        # `assert cfg.tp_size % cfg.attn_dp_size == 0` in handle_data_parallelism (parallel_hook.py)
        rules.append(
            Rule(
                "dp-attention",
                "AssertionError",
                f"DP attention splits the TP group: the DP size {layout.dp} must divide "
                f"--tp-size {layout.tp}",
            )
        )
    if server.enable_dp_lm_head and layout.dp > 1 and not layout.dpa:
        # _dp_lm_head_validation (sglang/srt/arg_groups/overrides.py); one DP rank resets the flag instead
        rules.append(
            Rule(
                "dp-lm-head",
                "AssertionError: --enable-dp-lm-head requires attention DP (--attn-dp-size).",
                "plain dp starts whole replicas; the DP lm_head needs `dpa`",
            )
        )
    if server.enable_eplb and placement.moe_ep <= 1:
        # `assert resolved_view(server_args).ep_size > 1` in handle_eplb_and_dispatch (parallel_hook.py)
        rules.append(Rule("eplb", "AssertionError", "--enable-eplb needs --ep-size above 1"))
    return rules


def _expert_split_rules(model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
    """Routed experts (with EPLB's redundant copies) must split evenly over the EP group: bare asserts
    in ExpertLocationMetadata (sglang/srt/eplb/expert_location.py) and FusedMoE.__init__
    (sglang/srt/layers/moe/fused_moe_triton/layer.py)."""
    if model.moe is None or placement.moe_ep <= 1:
        return []
    physical = model.moe.experts + server.redundant_experts
    if physical % placement.moe_ep == 0:
        return []
    extra = f" + {server.redundant_experts} redundant" if server.redundant_experts else ""
    return [
        Rule(
            "experts-divide-ep",
            "AssertionError",
            f"{model.moe.experts} experts{extra} do not split evenly over --ep-size {placement.moe_ep}",
        )
    ]


def quantized_moe_rules(model: ModelArch, placement: Placement) -> list[Rule]:
    """ModelRunner.check_quantized_moe_compatibility
    (sglang/srt/model_executor/model_runner_components/moe_ep_setup.py) runs after the load, for any
    checkpoint with a weight_block_size. Its TP/EP and width checks repeat ones met earlier (the
    process groups, FusedMoE's assert, the FP8 MoE method's block checks), so its block check is the
    first to fire only where the routed experts are not block-quantized."""
    block = model.quant.block
    moe = model.moe
    if moe is None or not block or ROUTED_EXPERTS in model.quant.blocked_classes:
        return []
    if model.family not in _MOE_INTERMEDIATE_FAMILIES:
        return []
    tp, ep, width = placement.layout.tp, placement.moe_ep, moe.expert_intermediate
    moe_tp = tp // ep
    if tp % ep or width % moe_tp or (width // moe_tp) % block[0] == 0:
        return []
    return [
        Rule(
            "quantized-moe-block",
            f"ValueError: For quantized MoE models, please make sure (moe_intermediate_size={width} / "
            f"moe_tp_size={moe_tp}) % weight_block_size_n={block[0]} == 0 where moe_tp_size is equal to "
            f"tp_size ({tp}) divided by ep_size ({ep}). You can fix this by setting arguments `--tp` and "
            "`--ep` correctly.",
            f"{width} / {moe_tp} = {width // moe_tp} is not a multiple of the block {block[0]}",
        )
    ]


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage as SGLang splits them: an even share each, the remainder one
    apiece to the LAST stages (get_pp_indices, sglang/srt/distributed/utils.py; without
    SGLANG_PP_LAYER_PARTITION)."""
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if stage >= pp - extra else 0) for stage in range(pp))


def vocab_split(model: ModelArch, tp: int, attn_tp: int, dpa: bool, dp_lm_head: bool) -> tuple[int, int]:
    """(embedding TP, lm_head TP). Without DP attention both span the TP group; with it the
    embedding spans the attention-TP group in most models, and the lm_head stays on the whole TP
    group unless --enable-dp-lm-head moves it to the attention-TP group."""
    if not dpa:
        return tp, tp
    embedding = tp if model.architecture in _EMBEDDING_OVER_TP else attn_tp
    follows_flag = model.architecture not in _LM_HEAD_IGNORES_DP_LM_HEAD
    return embedding, attn_tp if dp_lm_head and follows_flag else tp
