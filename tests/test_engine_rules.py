"""Placement and startup rules checked against what vLLM 0.33.0 and SGLang 0.5.23 really do
(docs/placement.md#sglang, docs/placement.md#startup-checks). Where an engine's text is built by
an f-string, the test rebuilds it with the engine's own expression, copied from the upstream file."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import MODELS

from cockpit.core.hardware import hardware
from cockpit.core.layout import parse_layout
from cockpit.core.model import ROUTED_EXPERTS, ModelArch
from cockpit.core.planner import Setup, plan_layout
from cockpit.engines import check_args, get_engine
from cockpit.engines.base import ServerArgs
from cockpit.engines.sglang import derived_mem_fraction, prefill_graph_sizes, stage_layers
from cockpit.engines.vllm import PYDANTIC_CONFIG, PYDANTIC_PREFIX
from cockpit.store.modelfiles import load_model, read_config

SGLANG = get_engine("sglang")
VLLM = get_engine("vllm")


def rules(engine, model: ModelArch, layout: str, *args: str, gpus: int = 8) -> dict[str, str]:
    """Rule id -> message for a layout on an engine, straight from the adapter."""
    server = engine.check(args)
    placement = engine.placement(parse_layout(layout), gpus, model, server)
    return {r.rule: r.message for r in engine.startup_rules(model, placement, server)}


@pytest.fixture(scope="module")
def llama() -> ModelArch:
    return load_model("llama-3.1-70b", env={})


@pytest.fixture(scope="module")
def qwen3_30b() -> ModelArch:
    return load_model("qwen3-30b-a3b-fp8", env={})


# --- Item 1: DP attention spelled for the version ---------------------------------------------


def test_sglang_0_5_23_says_dp_attention_as_attn_dp_size(kimi):
    placement = SGLANG.placement(parse_layout("tp8 dp8 dpa ep8"), 8, kimi)
    assert placement.flags == ("--tp-size", "8", "--ep-size", "8", "--attn-dp-size", "8")
    # attn_tp_size = tp_size // attn_dp_size (derive_attn_tp_size, sglang/srt/runtime_context.py),
    # on the TP x PP GPUs (launch_world_size_of, same file)
    assert (placement.attn_tp, placement.attn_replicas, placement.gpus_used) == (1, 8, 8)
    checked = check_args(SGLANG.options, placement.flags)
    assert checked.values["attn_dp_size"] == 8 and not checked.deprecated


def test_older_sglang_keeps_the_dp_size_pair(kimi):
    old = get_engine("sglang", "0.5.9")
    placement = old.placement(parse_layout("tp8 dp4 dpa ep8"), 8, kimi)
    assert placement.flags == ("--tp-size", "8", "--ep-size", "8", "--dp-size", "4", "--enable-dp-attention")
    assert (placement.attn_tp, placement.gpus_used) == (2, 8)


def test_plain_dp_stays_replicas_on_every_version(kimi):
    for engine in (SGLANG, get_engine("sglang", "0.5.9")):
        placement = engine.placement(parse_layout("tp4 dp2"), 8, kimi)
        assert placement.flags == ("--tp-size", "4", "--dp-size", "2")
        assert placement.gpus_used == 8 and placement.attn_tp == 4


def test_dp_attention_must_divide_tp(kimi):
    assert rules(SGLANG, kimi, "tp8 dp3 dpa")["dp-attention"] == "AssertionError"


# --- Item 2: pipeline stages as SGLang splits them --------------------------------------------


def upstream_get_pp_indices(num_hidden_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """get_pp_indices of sglang/srt/distributed/utils.py (0.5.23), without SGLANG_PP_LAYER_PARTITION."""
    base_layers = num_hidden_layers // pp_size
    remainder = num_hidden_layers % pp_size
    if pp_rank >= pp_size - remainder:
        partitions_without_extra_layer = pp_size - remainder
        start_layer = pp_rank * (base_layers + 1) - partitions_without_extra_layer
        end_layer = start_layer + (base_layers + 1)
    else:
        start_layer = pp_rank * base_layers
        end_layer = start_layer + base_layers
    return start_layer, end_layer


@pytest.mark.parametrize("layers", [32, 61, 62, 80, 94])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 6, 8])
def test_sglang_stages_match_get_pp_indices(layers, pp):
    expected = [end - start for start, end in (upstream_get_pp_indices(layers, r, pp) for r in range(pp))]
    assert list(stage_layers(layers, pp)) == expected


def test_sglang_gives_the_extra_layers_to_the_last_stages(kimi):
    assert stage_layers(61, 8) == (7, 7, 7, 8, 8, 8, 8, 8)
    assert SGLANG.placement(parse_layout("pp8"), 8, kimi).stage_layers == (7, 7, 7, 8, 8, 8, 8, 8)
    assert VLLM.placement(parse_layout("pp8"), 8, kimi).stage_layers == (7, 7, 8, 8, 8, 8, 8, 7)


# --- Item 3: lm_head over the whole TP group unless --enable-dp-lm-head ------------------------


def test_sglang_lm_head_spans_the_tp_group_under_dp_attention(kimi):
    placement = SGLANG.placement(parse_layout("tp8 dp8 dpa ep8"), 8, kimi)
    # DeepseekV2ForCausalLM: embedding over the attention-TP group, ParallelLMHead over TP
    assert (placement.vocab_tp, placement.lm_head_tp) == (1, 8)
    dp_head = SGLANG.placement(
        parse_layout("tp8 dp8 dpa ep8"), 8, kimi, SGLANG.check(["--enable-dp-lm-head"])
    )
    assert (dp_head.vocab_tp, dp_head.lm_head_tp) == (1, 1)
    plain = SGLANG.placement(parse_layout("tp8 ep8"), 8, kimi, SGLANG.check(["--enable-dp-lm-head"]))
    assert (plain.vocab_tp, plain.lm_head_tp) == (8, 8)
    assert "--enable-dp-lm-head does nothing without DP attention" in " ".join(plain.notes)


def test_models_that_shard_the_vocabulary_their_own_way(minimax, llama):
    dp_head = SGLANG.check(["--enable-dp-lm-head"])
    # MiniMaxM2ForCausalLM builds its lm_head without use_attn_tp_group (sglang/srt/models/minimax_m2.py)
    minimax_head = SGLANG.placement(parse_layout("tp8 dp4 dpa ep8"), 8, minimax, dp_head)
    assert (minimax_head.vocab_tp, minimax_head.lm_head_tp) == (2, 8)
    # LlamaModel's embedding spans the whole TP group (sglang/srt/models/llama.py)
    llama_head = SGLANG.placement(parse_layout("tp8 dp4 dpa"), 8, llama, dp_head)
    assert (llama_head.vocab_tp, llama_head.lm_head_tp) == (8, 2)


def test_dp_lm_head_needs_dp_attention(kimi):
    text = rules(SGLANG, kimi, "tp4 dp2", "--enable-dp-lm-head")["dp-lm-head"]
    assert text == "AssertionError: --enable-dp-lm-head requires attention DP (--attn-dp-size)."
    assert "dp-lm-head" not in rules(SGLANG, kimi, "tp8 dp8 dpa", "--enable-dp-lm-head")


def test_the_planner_puts_a_tp_sharded_lm_head_on_the_last_stage(kimi, seed_box):
    setup = Setup(kimi, seed_box, SGLANG)
    plain = plan_layout(setup, "tp8 dp8 dpa ep8").memory
    dp_head = plan_layout(replace(setup, server_args=("--enable-dp-lm-head",)), "tp8 dp8 dpa ep8").memory
    assert plain.weights_by_group["embeddings"] < dp_head.weights_by_group["embeddings"]


# --- Item 4: `ep` on a dense model -------------------------------------------------------------


def test_sglang_dense_model_gets_no_ep_flag_and_a_verdict(llama, seed_box):
    for layout in ("tp8 ep", "tp8 ep8"):
        placement = SGLANG.placement(parse_layout(layout), 8, llama)
        assert placement.flags == ("--tp-size", "8") and placement.moe_ep == 1
        v = plan_layout(Setup(llama, seed_box, SGLANG), layout)
        assert v.verdict == "fails" and v.reasons[0].rule == "ep-needs-experts"
        assert "--ep-size" not in v.argv
        # SGLang has no text for it (no MoE layer reads --ep-size): cockpit says it in its own words
        assert str(v.reasons[0]) == "llama-3.1-70b is a dense model: drop `ep`"


def test_vllm_dense_model_with_expert_parallel_fails_in_vllms_words(llama):
    # ModelConfig._verify_with_expert_parallelism tests the flag alone, at any TP size
    placement = VLLM.placement(parse_layout("tp1 ep"), 8, llama)
    assert "--enable-expert-parallel" in placement.flags
    assert rules(VLLM, llama, "tp1 ep")["ep-needs-experts"] == PYDANTIC_PREFIX + (
        "Number of experts in the model must be greater than 0 when expert parallelism is enabled."
    )


# --- Item 5: the engines' startup checks -------------------------------------------------------


def test_vllm_heads_rule_is_the_line_inside_the_validation_error(llama):
    assert rules(VLLM, llama, "tp6")["attention-heads"] == (
        "Value error, Total number of attention heads (64) must be divisible by tensor parallel size (6)."
    )
    assert PYDANTIC_CONFIG["attention-heads"] == "VllmConfig"


def test_vllm_heads_come_before_experts_in_verify_with_parallel_config(llama):
    assert list(rules(VLLM, llama, "tp3 ep"))[:2] == ["attention-heads", "ep-needs-experts"]


@pytest.mark.parametrize(
    "layout, args, text",
    [
        ("tp4", ["--enable-eplb"], "enable_expert_parallel must be True to use EPLB."),
        (
            "tp1 ep",
            ["--enable-eplb"],
            "EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, PCP=1, DP=1.",
        ),
        (
            "tp8 ep",
            ["--eplb-config", '{"num_redundant_experts": 32}'],
            "num_redundant_experts is set to 32 but EPLB is not enabled. Either enable EPLB or unset "
            "num_redundant_experts.",
        ),
    ],
)
def test_vllm_parallel_config_eplb_checks(minimax, layout, args, text):
    # ParallelConfig._validate_parallel_config, vllm/config/parallel.py: inside a ValidationError
    assert rules(VLLM, minimax, layout, *args)["eplb"] == PYDANTIC_PREFIX + text


def test_vllm_eplb_counts_the_redundant_experts(minimax):
    args = ("--enable-eplb", "--eplb-config.num_redundant_experts", "4")
    assert rules(VLLM, minimax, "tp8 ep", *args)["eplb"] == (
        "ValueError: EPLB currently only supports even distribution of experts across ranks. "
        "Got 260 experts and 8 EP ranks."
    )
    assert "eplb" not in rules(
        VLLM, minimax, "tp8 ep", "--enable-eplb", "--eplb-config.num_redundant_experts", "8"
    )


def test_sglang_eplb_needs_an_ep_size(minimax):
    assert rules(SGLANG, minimax, "tp8", "--enable-eplb")["eplb"] == "AssertionError"
    assert "eplb" not in rules(SGLANG, minimax, "tp8 ep8", "--enable-eplb")


def test_vllm_checks_the_down_block_on_its_tp_world(qwen3_30b):
    # validate_fp8_block_shape_moe reads get_tensor_model_parallel_world_size() (fp8_utils.py):
    # block_k is tested whenever TP > 1, even with whole experts (EP), and not for TP1 x DP2.
    wide_k = replace(qwen3_30b, quant=replace(qwen3_30b.quant, block=(128, 512)))
    assert "fp8-block-down" in rules(VLLM, wide_k, "tp2 ep")  # 768 % 512 with MoE-TP 1
    assert "fp8-block-down" not in rules(SGLANG, wide_k, "tp2 ep2")  # SGLang asks the MoE-TP
    mid_k = replace(qwen3_30b, quant=replace(qwen3_30b.quant, block=(128, 256)))
    assert "fp8-block-down" not in rules(VLLM, mid_k, "dp2")  # 768 / 2 = 384: TP world 1
    assert "fp8-block-down" in rules(SGLANG, mid_k, "tp2")  # MoE-TP 2


def test_sglang_block_fp8_experts_fail_on_the_fp8_method_first(qwen3_30b):
    # Fp8MoEMethod's block checks run while the model loads, before check_quantized_moe_compatibility
    found = rules(SGLANG, qwen3_30b, "tp8")
    assert found["fp8-block-gate-up"] == (
        "ValueError: The output_size of gate's and up's weight = 96 is not divisible by "
        "weight quantization block_n = 128."
    )
    assert "quantized-moe-block" not in found


def test_sglang_quantized_moe_check_when_the_experts_stay_unquantized(qwen3_30b):
    experts_kept = replace(
        qwen3_30b,
        quant=replace(qwen3_30b.quant, blocked_classes=qwen3_30b.quant.blocked_classes - {ROUTED_EXPERTS}),
    )
    found = rules(SGLANG, experts_kept, "tp8")
    assert "fp8-block-gate-up" not in found
    # check_quantized_moe_compatibility, sglang/srt/model_executor/model_runner_components/moe_ep_setup.py
    moe_intermediate_size, moe_tp_size, weight_block_size_n, tp_size, moe_ep_size = 768, 8, 128, 8, 1
    assert found["quantized-moe-block"] == "ValueError: " + (
        f"For quantized MoE models, please make sure ({moe_intermediate_size=} / {moe_tp_size=}) "
        f"% {weight_block_size_n=} == 0 "
        f"where moe_tp_size is equal to tp_size ({tp_size}) divided by ep_size ({moe_ep_size}). "
        f"You can fix this by setting arguments `--tp` and `--ep` correctly."
    )
    assert "ep_size (2)" in rules(SGLANG, experts_kept, "tp8 ep2")["quantized-moe-block"]  # 768 / 4 = 192
    assert "quantized-moe-block" not in rules(SGLANG, experts_kept, "tp8 ep8")  # 768 / 1 = 6 x 128


def test_sglang_ep_outside_the_tp_group_fails_on_the_process_groups(kimi, minimax):
    assert rules(SGLANG, kimi, "tp8 ep3")["ep-divides-tp"] == "AssertionError"
    # 256 experts over EP6: ExpertLocationMetadata and FusedMoE assert an even split
    assert rules(SGLANG, minimax, "tp6 ep6")["experts-divide-ep"] == "AssertionError"
    assert "experts-divide-ep" not in rules(SGLANG, kimi, "tp8 ep8")


def test_sglang_pipeline_needs_a_model_that_takes_proxy_tensors(kimi, qwen3_30b):
    assert "pp-unsupported" not in rules(SGLANG, kimi, "pp8")
    assert "pp-unsupported" not in rules(SGLANG, qwen3_30b, "tp4 pp2")
    next_arch = replace(qwen3_30b, architecture="Qwen3NextForCausalLM")
    assert rules(SGLANG, next_arch, "tp4 pp2")["pp-unsupported"] == (
        "AssertionError: Pipeline Parallel is not compatible with this model."
    )
    assert "pp-unsupported" not in rules(SGLANG, next_arch, "tp8")


def test_sglang_rules_come_in_the_order_sglang_meets_them(kimi):
    # the launcher's argument resolution, then the scheduler's devices and process groups, then the load
    found = list(rules(SGLANG, kimi, "tp16 dp3 dpa ep3", "--enable-eplb", gpus=8))
    assert found.index("dp-attention") < found.index("gpus-available") < found.index("ep-divides-tp")


# --- Item 6: the memory share SGLang derives ---------------------------------------------------


def fraction(model: ModelArch, layout: str, *args: str, gib: float = 94.97) -> float:
    server = SGLANG.check(args)
    placement = SGLANG.placement(parse_layout(layout), 8, model, server)
    return SGLANG.memory_fraction(server, gib, placement, model)


def test_sglang_derives_the_share_from_the_gpu_and_the_parallel_config(minimax, kimi):
    gpu = 94.97 * 1024  # MiB, as nvidia-smi reports memory.total
    # above 90 GiB: chunked prefill 8192, decode graphs up to 512 (TP >= 4); handle_gpu_memory_settings
    activations, parallel, decode = 512 + 8192 * 1.5, 8 * 1 / 8 * 1024, 512 * 2
    prefill = len(prefill_graph_sizes(8192)) * 8  # breakable prefill graphs, non-MLA
    assert len(prefill_graph_sizes(8192)) == 58
    assert (
        fraction(minimax, "tp8")
        == round((gpu - (activations + parallel + decode + prefill)) / gpu, 3)
        == 0.843
    )
    mla_prefill = 1.5 * 1024
    assert fraction(kimi, "tp8") == round((gpu - (activations + parallel + decode + mla_prefill)) / gpu, 3)
    # PP turns prefill graphs off; TP1 captures decode up to 256
    assert fraction(kimi, "pp8") == round((gpu - (activations + parallel + 256 * 2)) / gpu, 3) == 0.853
    # DP attention pads every decode graph per DP rank: 3 + 1.5 MiB per slot above 300
    dpa = activations + parallel + decode + 512 * 8 * 3 + 512 * 8 * 1.5 + mla_prefill
    assert fraction(kimi, "tp8 dp8 dpa ep8") == round((gpu - dpa) / gpu, 3) == 0.642


def test_sglang_share_follows_the_knobs(minimax):
    base = fraction(minimax, "tp8")
    assert fraction(minimax, "tp8", "--mem-fraction-static", "0.8") == 0.8
    assert fraction(minimax, "tp8", "--chunked-prefill-size", "4096") > base
    assert fraction(minimax, "tp8", "--cuda-graph-max-bs-decode", "128") > base
    assert fraction(minimax, "tp8", "--max-running-requests", "64") > base
    assert fraction(minimax, "tp8", "--disable-cuda-graph") > base


def test_sglang_share_on_small_gpus_and_unknown_ones():
    server = ServerArgs()
    # below 35 GiB: chunked prefill 4096, decode graphs up to 48 at TP1, no 10 GiB floor
    reserve = 512 + 4096 * 1.5 + 1 / 8 * 1024 + 48 * 2 + len(prefill_graph_sizes(4096)) * 8
    assert derived_mem_fraction(server, 24 * 1024, tp=1, pp=1, attn_dp=1, mla=False) == round(
        (24 * 1024 - reserve) / (24 * 1024), 3
    )
    # above 60 GiB the reserve is at least 10 GiB (here 512 + 2048 x 1.5 + 128 MiB without graphs)
    small = ServerArgs(max_num_batched_tokens=2048, cuda_graphs=False)
    assert derived_mem_fraction(small, 80 * 1024, tp=1, pp=1, attn_dp=1, mla=False) == round(70 / 80, 3)
    assert derived_mem_fraction(server, 0, tp=1, pp=1, attn_dp=1, mla=False) == 0.95


def test_the_planner_uses_the_derived_share(kimi, seed_box):
    v = plan_layout(Setup(kimi, seed_box, SGLANG), "tp8")
    # SGLang derives the share from nvidia-smi's total (97,887 MiB), not torch's 94.97 GiB
    # (get_nvgpu_memory_capacity, sglang/srt/utils/common.py)
    assert v.memory.budget_gib == pytest.approx(94.97 * fraction(kimi, "tp8", gib=seed_box.smi_total_gib))


def test_deepseek_v3_on_h200(seed_box):
    model = read_config(MODELS / "deepseek-v3.json")
    h200 = hardware("h200", 8)
    placement = SGLANG.placement(parse_layout("tp8"), 8, model)
    share = SGLANG.memory_fraction(ServerArgs(), h200.memory_gib, placement, model)
    assert 0.85 < share < 0.9  # the 16 GiB reserve of an MLA model at TP8 on a 140 GiB card
