"""SGLang: ``python -m sglang.launch_server --model-path M --tp-size .. --ep-size ..``.

GPUs used = TP x PP; ``--ep-size`` carves EP *inside* the TP group (MoE-TP = TP / EP), so
``--tp-size 4 --ep-size 2`` runs on 4 GPUs. DP attention (``--attn-dp-size D`` since 0.5.23,
``--dp-size D --enable-dp-attention`` before) splits attention into D groups of TP / D, still on
TP GPUs. Plain ``--dp-size`` without DP attention starts D full replicas (TP x PP x D GPUs). See
docs/placement.md#sglang, and in SGLang sglang/srt/model_executor/model_runner.py,
sglang/srt/runtime_context.py and sglang/srt/arg_groups/parallel_hook.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from cockpit.engines import checks, support
from cockpit.engines.base import Engine, Placement, Rule, ServerArgs, experts_per_gpu
from cockpit.engines.options import version_key
from cockpit.layout import Layout
from cockpit.model import ROUTED_EXPERTS, ModelArch

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


class SGLang(Engine):
    name = "sglang"
    label = "SGLang"
    default_command = ("python", "-m", "sglang.launch_server")
    ready_paths = ("/health", "/get_model_info", "/v1/models")
    # SGLang serves /metrics only when asked (sglang/srt/entrypoints/http_server.py): the engine
    # line and each benchmark level's engine figures read it (docs/metrics.md).
    always_args = ("--enable-metrics",)

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
        return derived_mem_fraction(
            server,
            capacity_gib * 1024,
            tp=layout.tp,
            pp=layout.pp,
            attn_dp=layout.dp if layout.dpa else 1,
            mla=model.mla is not None,
            model_name=model.name,
        )

    def placement(
        self, layout: Layout, gpus_total: int, model: ModelArch, server: ServerArgs | None = None
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
        return Placement(
            engine=self.name,
            layout=layout,
            gpus_total=gpus_total,
            gpus_used=tp * pp if layout.dpa else tp * pp * dp,
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
        )

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
        if placement.gpus_used > placement.gpus_total:
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


# ---------------------------------------------------------------------------------------------
# The static memory share SGLang derives when --mem-fraction-static is absent
# (handle_gpu_memory_settings and reserve_for_graph_mb, sglang/srt/arg_groups/memory_hook.py).

# GPU memory below (MiB): (chunked prefill size, decode CUDA-graph max batch at TP < 4, at TP >= 4)
_GPU_TIERS = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 4096, 48, 160),
    (60 * 1024, 4096, 32, 160),
    (90 * 1024, 8192, 256, 512),
    (160 * 1024, 8192, 256, 512),
)
_LARGEST_TIER = (16384, 512, 512)
UNKNOWN_GPU_FRACTION = 0.95  # SGLang's share when it cannot read the GPU's memory
MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens default: the activation size without chunking


def gpu_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked prefill size, decode CUDA-graph max batch) SGLang picks for a GPU of this size."""
    tier = next((t[1:] for t in _GPU_TIERS if gpu_mib < t[0]), _LARGEST_TIER)
    chunk, small_tp_bs, large_tp_bs = tier
    return chunk, small_tp_bs if tp < 4 else large_tp_bs


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """generate_prefill_cuda_graph_batch_sizes (sglang/srt/arg_groups/cuda_graph_hook.py)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [s for s in sizes if s <= max_bs]


def decode_graph_max_bs(server: ServerArgs, gpu_mib: float, tp: int) -> int:
    """SGLang's largest decode batch captured in a CUDA graph: --cuda-graph-max-bs-decode, else its
    default for the card and TP (gpu_defaults), no more than --max-running-requests."""
    _, default_bs = gpu_defaults(gpu_mib, tp)
    decode_bs = server.cuda_graph_max_bs or default_bs
    if server.cuda_graph_max_bs is None and server.max_num_seqs is not None:
        decode_bs = min(decode_bs, server.max_num_seqs)
    return decode_bs


def derived_mem_fraction(
    server: ServerArgs, gpu_mib: float, *, tp: int, pp: int, attn_dp: int, mla: bool, model_name: str = ""
) -> float:
    """round((GPU - reserve) / GPU, 3), the reserve in MiB being 512 + 1.5 per activation token +
    1 GiB per 8 GPUs of TP x PP + the CUDA graphs' share, at least 10 GiB on GPUs above 60 GiB.

    Not modelled: multimodal models (SGLang lowers the share by 5-20% for the vision tower and turns
    prefill graphs off unless --language-only), disaggregated serving, DeepEP and post-capture sizing."""
    if gpu_mib <= 0:
        return UNKNOWN_GPU_FRACTION
    default_chunk, _ = gpu_defaults(gpu_mib, tp)
    chunk = (server.max_num_batched_tokens or default_chunk) if server.chunked_prefill else -1
    decode_bs = decode_graph_max_bs(server, gpu_mib, tp)
    activation_tokens = max(chunk if chunk > 0 else MAX_PREFILL_TOKENS, 2048)
    reserve = 512 + activation_tokens * 1.5 + tp * pp / 8 * 1024
    reserve += _graph_reserve_mib(
        server, decode_bs, chunk, pp=pp, attn_dp=attn_dp, mla=mla, model_name=model_name
    )
    if gpu_mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    return round((gpu_mib - reserve) / gpu_mib, 3)


def _graph_reserve_mib(
    server: ServerArgs, decode_bs: int, chunk: int, *, pp: int, attn_dp: int, mla: bool, model_name: str
) -> float:
    """reserve_for_graph_mb: decode graphs 2 MiB per batch slot, DP attention's padding, and the
    breakable prefill graphs (on by default on CUDA, off under PP: apply_cuda_graph_compatibility)."""
    reserve = 0.0
    if server.cuda_graphs:
        reserve += decode_bs * 2
    if attn_dp > 1:
        reserve += decode_bs * attn_dp * 3
        if decode_bs > 300:
            reserve += decode_bs * attn_dp * 1.5
    if server.cuda_graphs and pp == 1:
        if mla:
            reserve += 1.5 * 1024
        else:
            max_bs = chunk
            if server.max_total_tokens is not None:
                max_bs = min(max_bs, server.max_total_tokens)
            if "llama-2" in model_name.lower():
                max_bs = min(max_bs, 4096)
            reserve += len(prefill_graph_sizes(max_bs)) * 8
    return reserve
