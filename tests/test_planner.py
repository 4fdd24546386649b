"""The preflight planner against the reference cases (docs/memory.md#worked-numbers), and every
startup rule it knows (docs/placement.md#startup-checks)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from conftest import MODELS

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.planner import (
    FAILS,
    FITS,
    TIGHT,
    Setup,
    memory_reasons,
    nearest_fitting,
    plan_all,
    plan_layout,
)
from cockpit.engines import get_engine, parse_server_args
from cockpit.engines.base import stage_layers
from cockpit.engines.sglang.memory import preload_gib
from cockpit.store.modelfiles import load_model, read_config


def reason(verdict, rule):
    return next(r for r in verdict.reasons if r.rule == rule)


# --- The MiniMax-M2.5 story (vLLM, 8 x RTX PRO 6000) -----------------------------------------


def test_minimax_tp8_fails_on_the_fp8_block(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp8")
    assert v.verdict == FAILS
    assert reason(v, "fp8-block-gate-up").message == (
        "ValueError: The output_size of gate's and up's weight = 192 is not divisible by "
        "weight quantization block_n = 128."
    )


def test_minimax_tp6_fails_on_the_kv_heads(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp6")
    assert v.verdict == FAILS
    kv = reason(v, "kv-heads")
    assert kv.message == "AssertionError" and "8 KV heads" in kv.detail and "TP 6" in kv.detail
    # 48 heads split by 6 and 1536 / 6 = 256 are fine: the KV heads are the only reason.
    assert [r.rule for r in v.reasons] == ["kv-heads"]


def test_minimax_tp4_fits_on_four_gpus(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp4")
    assert v.verdict == FITS and v.gpus_used == 4 and v.placement.gpus_idle == 4
    assert v.memory.weights_gib == pytest.approx(53.7, rel=0.03)


def test_minimax_tp2_ep_fails_as_an_oom_at_load(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp2 ep")
    assert v.verdict == FAILS and v.gpus_used == 2
    oom = reason(v, "oom-at-load")
    assert v.memory.weights_gib * 2**30 / 1e9 == pytest.approx(115, rel=0.03)  # "about 115 GB"
    assert oom.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert "has a total capacity of 94.97 GiB of which" in oom.message


def test_minimax_tp8_ep_fits_with_whole_experts(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp8 ep")
    assert v.verdict == FITS and v.gpus_used == 8
    assert v.placement.moe_ep == 8 and v.placement.moe_tp == 1 and v.placement.experts_per_gpu == 32
    assert v.memory.weights_gib == pytest.approx(26.9, rel=0.03)
    assert "--enable-expert-parallel" in v.argv
    # ~1.9 M KV tokens (docs/memory.md#worked-numbers; a community report says 1.7 M).
    assert 1.5e6 < v.memory.kv_tokens < 2.1e6


def test_vllm_argv_is_the_real_command(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp4 dp2 ep")
    assert list(v.argv) == [
        "vllm",
        "serve",
        "MiniMaxAI/MiniMax-M2.5",
        "--tensor-parallel-size",
        "4",
        "--data-parallel-size",
        "2",
        "--enable-expert-parallel",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert v.placement.moe_ep == 8 and v.placement.attn_replicas == 2


def test_vllm_cannot_say_an_ep_size(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp4 ep2")
    assert v.verdict == FAILS and v.placement is None and v.argv == ()
    assert "vLLM has no EP size" in v.reasons[0].message
    assert [str(a) for a in v.alternatives] == ["tp4 dp2 ep", "tp4 ep"]
    # An EP size equal to TP x DP is what vLLM does anyway.
    assert plan_layout(minimax_vllm, "tp8 ep8").verdict == FITS


def test_vllm_has_no_dp_attention_flag(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp8 dp8 dpa ep8")
    assert v.verdict == FAILS and "no --enable-dp-attention" in v.reasons[0].message
    assert [str(a) for a in v.alternatives] == ["dp8 ep"]


def test_vllm_dp_without_ep_slices_experts_over_tp_times_dp(minimax_vllm):
    v = plan_layout(minimax_vllm, "tp4 dp2")
    assert v.placement.moe_tp == 8
    assert reason(v, "fp8-block-gate-up")  # 1536 / 8 = 192 again


# --- The Kimi K2.6 story (SGLang, same box) ---------------------------------------------------


@pytest.mark.parametrize("layout", ["tp8", "pp8", "tp8 ep8"])
def test_kimi_fits_on_eight_gpus(kimi_sglang, layout):
    v = plan_layout(kimi_sglang, layout)
    assert v.verdict == FITS and v.gpus_used == 8


def test_kimi_tp8_weights_match_the_worked_numbers(kimi_sglang):
    assert plan_layout(kimi_sglang, "tp8").memory.weights_gib == pytest.approx(71.3, rel=0.03)
    assert plan_layout(kimi_sglang, "tp8 ep8").placement.experts_per_gpu == 48


def test_kimi_tp4_ep2_runs_on_four_gpus_and_ooms(kimi_sglang):
    v = plan_layout(kimi_sglang, "tp4 ep2")
    assert v.verdict == FAILS and v.gpus_used == 4
    assert v.placement.moe_ep == 2 and v.placement.moe_tp == 2
    assert v.memory.weights_gib * 2**30 / 1e9 == pytest.approx(149, rel=0.03)  # "about 149 GB"
    assert "--ep-size adds no GPUs" in " ".join(v.placement.notes)
    assert "GPU 0 has a total capacity of 94.97 GiB" in reason(v, "oom-at-load").message


def test_sglang_argv(kimi_sglang):
    v = plan_layout(kimi_sglang, "tp8 dp8 dpa ep8")
    assert list(v.argv) == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "moonshotai/Kimi-K2.6",
        "--tp-size",
        "8",
        "--ep-size",
        "8",
        "--attn-dp-size",
        "8",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--enable-metrics",  # SGLang serves /metrics only when asked
    ]
    assert v.placement.attn_tp == 1 and v.placement.attn_replicas == 8


def test_sglang_dp_attention_is_tight_for_kimi(kimi_sglang):
    # Attention replicated on every GPU leaves almost no KV room (docs/memory.md#worked-numbers).
    v = plan_layout(kimi_sglang, "tp8 dp8 dpa ep8")
    assert v.verdict in (TIGHT, FAILS)
    assert v.memory.weights_gib > plan_layout(kimi_sglang, "tp8 ep8").memory.weights_gib + 10


def test_sglang_ep_must_divide_tp(kimi_sglang):
    v = plan_layout(kimi_sglang, "tp8 ep3")
    assert reason(v, "ep-divides-tp").detail.startswith("SGLang carves EP inside the TP group")


def test_sglang_dp_attention_needs_dp_dividing_tp(kimi_sglang):
    v = plan_layout(kimi_sglang, "tp8 dp3 dpa")
    assert reason(v, "dp-attention")


def test_sglang_block_rule_uses_tp_over_ep(minimax, seed_box):
    setup = Setup(minimax, seed_box, get_engine("sglang"))
    assert plan_layout(setup, "tp8 ep2").verdict == FITS  # 1536 / 4 = 384 = 3 x 128
    v = plan_layout(setup, "tp8")
    assert reason(v, "fp8-block-gate-up")
    assert plan_layout(setup, "tp4 ep2").gpus_used == 4


# --- Rules on other models --------------------------------------------------------------------


def test_heads_rule_has_vllms_text(seed_box):
    model = load_model("llama-3.1-70b", env={})
    v = plan_layout(Setup(model, seed_box, get_engine("vllm")), "tp3")
    assert reason(v, "attention-heads").message == (  # the line inside vLLM's pydantic ValidationError
        "Value error, Total number of attention heads (64) must be divisible by tensor parallel size (3)."
    )


def test_expert_parallel_on_a_dense_model(seed_box):
    model = load_model("llama-3.1-70b", env={})
    v = plan_layout(Setup(model, seed_box, get_engine("vllm")), "tp8 ep")
    assert reason(v, "ep-needs-experts").message.startswith(
        "Value error, Number of experts in the model must be greater than 0"
    )


def test_more_gpus_than_the_box_has(minimax, seed_box):
    v = plan_layout(Setup(minimax, seed_box, get_engine("vllm")), "tp8 dp2 ep")
    assert reason(v, "gpus-available").message.startswith(
        "World size (16) is larger than the number of available GPUs (8)"
    )
    v = plan_layout(Setup(minimax, seed_box, get_engine("sglang")), "tp16")
    assert reason(v, "gpus-available").message == "RuntimeError: CUDA error: invalid device ordinal"


def test_block_fp8_dense_and_shared_linears(seed_box):
    # DeepSeek-V3 FP8: shared expert 2048 and dense MLP 18432 are split over TP.
    model = read_config(MODELS / "deepseek-v3.json")
    setup = Setup(model, hardware("h200", 32), get_engine("vllm"))
    v = plan_layout(setup, "tp32 ep")
    assert any(r.rule == "fp8-block-linear" and "shared experts" in r.detail for r in v.reasons)
    assert (
        "ValueError: Weight input_size_per_partition = 64 is not divisible by weight quantization block_k = 128."
        in [r.message for r in v.reasons]
    )
    assert not any(r.rule.startswith("fp8") for r in plan_layout(setup, "tp8 ep").reasons)


def test_block_fp8_down_projection_rule(seed_box):
    model = read_config(MODELS / "qwen3-235b-a22b-fp8.json")  # 1536-wide experts, 4 KV heads
    v = plan_layout(Setup(model, seed_box, get_engine("sglang")), "tp8 ep2")  # 1536 / 4 = 384: fine
    assert not any(r.rule.startswith("fp8") for r in v.reasons)
    v = plan_layout(Setup(model, hardware("h200", 16), get_engine("sglang")), "tp16")
    assert {"fp8-block-gate-up", "fp8-block-down"} <= {r.rule for r in v.reasons}


def test_eplb_rules(minimax, seed_box):
    setup = Setup(minimax, seed_box, get_engine("vllm"), server_args=("--enable-eplb",))
    assert (
        reason(plan_layout(setup, "tp4"), "eplb").message
        == "Value error, enable_expert_parallel must be True to use EPLB."
    )
    assert plan_layout(setup, "tp8 ep").verdict == FITS  # 256 experts / 8
    v = plan_layout(setup, "tp6 ep")
    assert "Got 256 experts and 6 EP ranks." in reason(v, "eplb").message


def test_kv_cache_below_one_max_length_request_fails_with_vllms_words(kimi, seed_box):
    # Kimi's 262,144-token context needs 17 GiB of MLA cache on every rank; TP8 leaves ~12 GiB.
    setup = Setup(kimi, seed_box, get_engine("vllm"))
    v = plan_layout(setup, "tp8 ep")
    r = reason(v, "kv-max-len")
    assert r.message.startswith(
        "ValueError: To serve at least one request with the model's max seq len (262144)"
    )
    assert (
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
        "or decreasing `max_model_len`" in r.message
    )
    assert "--max-model-len" in r.detail
    fixed = Setup(kimi, seed_box, get_engine("vllm"), server_args=("--max-model-len", "32768"))
    assert plan_layout(fixed, "tp8 ep").verdict == FITS


def test_no_kv_memory_left(kimi, seed_box):
    setup = Setup(kimi, seed_box, get_engine("vllm"), server_args=("--gpu-memory-utilization=0.75",))
    v = plan_layout(setup, "tp8 ep")
    assert reason(v, "no-kv-memory").message.startswith(
        "ValueError: No available memory for the cache blocks."
    )


def test_no_kv_memory_left_speaks_sglang_0_5_23(kimi, seed_box):
    """KVCacheConfigurator._profile_available_bytes (sglang/srt/mem_cache/kv_cache_configurator.py):
    pre is the free memory before the load, available after it; the least share is 1 - available/pre."""
    setup = Setup(kimi, seed_box, get_engine("sglang"), server_args=("--mem-fraction-static", "0.6"))
    v = plan_layout(setup, "tp8")
    memory = v.memory
    pre = memory.capacity_gib - preload_gib(v.placement, seed_box)
    minimum = 1 - (pre - memory.weights_gib) / pre
    suggested = math.ceil(minimum * 1000) / 1000
    assert reason(v, "no-kv-memory").message == (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.6. "
        f"Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = "
        f"{minimum:.4f}). If using speculative decoding, draft weights are now counted."
    )
    raised = Setup(
        kimi,
        seed_box,
        get_engine("sglang"),
        server_args=("--mem-fraction-static", f"{suggested + 0.001:.3f}"),
    )
    assert plan_layout(raised, "tp8").memory.kv_budget_gib > 0
    # A pool above zero bytes but under one token: the pool configurator's words, no share appended.
    crumb = replace(memory, kv_budget_gib=1e-6, kv_tokens=0)
    reasons = memory_reasons(kimi, get_engine("sglang"), v.placement, crumb, setup.server, setup.request_len)
    assert [(r.rule, r.message) for r in reasons] == [
        ("no-kv-memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    ]


def test_thin_kv_budget_is_tight(kimi, seed_box):
    setup = Setup(kimi, seed_box, get_engine("sglang"), server_args=("--mem-fraction-static", "0.79"))
    v = plan_layout(setup, "tp8")
    assert v.verdict == TIGHT and v.reasons[0].rule == "kv-thin"


def test_fp8_kv_cache_doubles_the_tokens(minimax, seed_box):
    plain = plan_layout(Setup(minimax, seed_box, get_engine("vllm")), "tp8 ep").memory.kv_tokens
    fp8 = plan_layout(
        Setup(minimax, seed_box, get_engine("vllm"), server_args=("--kv-cache-dtype", "fp8")), "tp8 ep"
    ).memory.kv_tokens
    assert fp8 == pytest.approx(2 * plain, rel=0.001)


def test_bad_server_argument_is_one_line():
    with pytest.raises(CockpitError, match="--gpu-memory-utilization needs a number"):
        parse_server_args(["--gpu-memory-utilization", "lots"])


def test_pipeline_stages_split_like_vllm():
    assert stage_layers(61, 8) == (7, 7, 8, 8, 8, 8, 8, 7)
    assert stage_layers(62, 2) == (31, 31)
    assert sum(stage_layers(94, 3)) == 94


def test_pp_memory_counts_the_busiest_stage(kimi_sglang):
    v = plan_layout(kimi_sglang, "pp8")
    assert v.placement.pp == 8 and max(v.placement.stage_layers) == 8
    # SGLang gives the extra layers to the last stages: the last holds 8 layers and the lm_head.
    assert v.placement.stage_layers[-1] == 8 and v.memory.busiest_gpu == 7
    assert 74 < v.memory.weights_gib < 76.5  # ~75 GiB (docs/memory.md#worked-numbers)


def test_plan_all_lists_fits_first_and_covers_the_box(minimax_vllm):
    verdicts = plan_all(minimax_vllm)
    order = [v.verdict for v in verdicts]
    assert order == sorted(order, key=[FITS, TIGHT, FAILS].index)
    layouts = {str(v.layout) for v in verdicts}
    assert {"tp8", "tp6", "tp4", "tp8 ep", "pp8"} <= layouts


def test_nearest_fitting_layouts(minimax_vllm):
    verdicts = plan_all(minimax_vllm)
    failed = plan_layout(minimax_vllm, "tp8")
    suggestions = nearest_fitting(failed, verdicts)
    assert suggestions and all(s.tp * s.pp * s.dp == 8 for s in suggestions)
    assert str(suggestions[0]) == "tp8 ep"


def test_verdict_json_has_the_promised_keys(minimax_vllm):
    data = plan_layout(minimax_vllm, "tp8").to_json()
    for key in (
        "layout",
        "engine",
        "argv",
        "gpus_used",
        "verdict",
        "reasons",
        "weights_gib_per_gpu",
        "kv_tokens",
    ):
        assert key in data
    assert data["reasons"][0]["rule"] == "fp8-block-gate-up"
    assert set(data["reasons"][0]) >= {"rule", "message"}


@pytest.mark.parametrize(
    "engine, args, words",
    [
        ("vllm", ["--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization", "at most 1", "1.5"]),
        ("vllm", ["--gpu-memory-utilization=1.5"], ["--gpu-memory-utilization", "at most 1"]),
        ("vllm", ["--gpu-memory-utilization", "0"], ["above 0"]),
        ("vllm", ["--gpu-memory-utilization", "nan"], ["above 0"]),
        ("sglang", ["--mem-fraction-static", "-0.5"], ["--mem-fraction-static", "above 0"]),
        ("vllm", ["--max-model-len", "0"], ["--max-model-len", "from 1"]),
        ("vllm", ["--max-num-seqs=-3"], ["--max-num-seqs"]),
        # vLLM reads token counts as sizes (32k, 1M) now (vllm/utils/argparse_utils.py)
        ("vllm", ["--max-num-batched-tokens", "9" * 5000], ["needs a size like 32k"]),
        ("vllm", ["--gpu-memory-utilization"], ["needs a value"]),
    ],
)
def test_server_arguments_the_engine_would_refuse(engine, args, words):
    with pytest.raises(CockpitError) as err:
        parse_server_args(args, get_engine(engine).options)
    assert "\n" not in str(err.value) and len(str(err.value)) < 250
    for word in words:
        assert word in str(err.value)


def test_server_arguments_at_their_limits():
    sglang = get_engine("sglang").options
    assert parse_server_args(["--gpu-memory-utilization", "1"]).gpu_memory_utilization == 1.0
    assert parse_server_args(["--mem-fraction-static=0.85"], sglang).mem_fraction_static == 0.85
    off = parse_server_args(["--chunked-prefill-size", "-1"], sglang)  # -1: chunked prefill off in SGLang
    assert off.chunked_prefill is False and off.max_num_batched_tokens is None


# --- the plan's words -----------------------------------------------------------------------------


def test_a_reason_of_several_lines_is_shown_whole(minimax_vllm):
    """vLLM's world-size error goes on with what to do on two more lines: none of it is cut."""
    v = plan_layout(minimax_vllm, "tp9")
    shown = str(reason(v, "gpus-available"))
    assert shown == (
        "World size (9) is larger than the number of available GPUs (8) in this node. If this is intentional "
        "and you are using: - ray, set '--distributed-executor-backend ray'. - multiprocessing, set "
        "'--nnodes' appropriately."
    )
    assert str(v).startswith("tp9 on vllm: fails (World size (9)") and str(v).endswith("appropriately.)")


def test_an_oom_on_one_gpu_says_one_gpu(minimax):
    one = hardware("rtx-pro-6000", 1)
    v = plan_layout(Setup(minimax, one, get_engine("vllm")), "tp1")
    assert (
        reason(v, "oom-at-load").detail == "weights need 214.2 GiB per GPU on 1 GPU, each GPU has 94.97 GiB"
    )
    assert (
        "on 2 GPUs,"
        in reason(
            plan_layout(Setup(minimax, hardware("rtx-pro-6000", 8), get_engine("vllm")), "tp2"), "oom-at-load"
        ).detail
    )


def test_a_layout_that_does_not_fit_says_by_how_much_not_a_negative_kv_cache(minimax_vllm):
    """The issue's case: kimi-k2.6's tp4 ep2, whose KV cache read "-57.4 GiB"."""
    from cockpit.faces.tui.format import memory_line
    from cockpit.store.profile_setup import SetupOverrides, build_setup

    kimi, _ = build_setup(SetupOverrides(profile="kimi-k2.6"))
    oom = plan_layout(kimi, "tp4 ep2").memory
    assert oom.kv_budget_gib < 0
    assert memory_line(oom) == (
        f"weights {oom.weights_gib:.1f} GiB per GPU (busiest GPU 0) · does not fit by 57.4 GiB: no room for a KV cache"
    )
    fits = plan_layout(minimax_vllm, "tp4").memory
    assert memory_line(fits) == (
        f"weights {fits.weights_gib:.1f} GiB per GPU (busiest GPU 0) · KV cache {fits.kv_budget_gib:.1f} GiB, "
        f"{fits.kv_tokens:,} tokens, room for ~{fits.max_concurrency:,.0f} requests"
    )
