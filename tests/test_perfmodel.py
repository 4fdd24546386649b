"""The performance model against the reference measurements with the default calibration
(docs/performance.md#reference-measurements).

Kimi TP8 at C=1 uses the per-layout step floor the kimi-k2.6 profile carries (the reference
box's SGLang TP8 never stepped under 38 ms); everything else is the global table for the GPU type.
"""

from __future__ import annotations

import pytest

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.perfmodel import Calibration, calibration_for, for_verdict, predict_tok_s
from cockpit.core.planner import plan_layout
from cockpit.store.profile_setup import SetupOverrides, build_setup

KIMI = {
    "tp8": {1: 26.3, 32: 577.8, 64: 693.1, "peak": 808},
    "pp8": {1: 36.9, 32: 250.9, 64: 396.0, "peak": 396},
    "tp8 ep8": {1: 65.3, 32: 546.0, 64: 795.0, "peak": 961},
}
MINIMAX = {"tp4": {1: 84, 256: 2586}, "tp8 ep": {1: 71, 256: 3982, 1024: 3997}}


def predictions(profile_name: str, layouts, levels):
    setup, profile = build_setup(SetupOverrides(profile=profile_name))
    out = {}
    for layout in layouts:
        verdict = plan_layout(setup, layout)
        tok_s = predict_tok_s(setup, verdict, levels, profile.bench.input_len, profile.bench.output_len)
        tok_s["peak"] = max(tok_s[c] for c in levels)
        out[layout] = tok_s
    return out


@pytest.fixture(scope="module")
def kimi_pred():
    return predictions("kimi-k2.6", KIMI, (1, 32, 64, 128))


@pytest.fixture(scope="module")
def minimax_pred():
    return predictions("minimax-m2.5", MINIMAX, (1, 256, 1024))


def test_kimi_orderings(kimi_pred):
    assert kimi_pred["tp8 ep8"][1] > kimi_pred["pp8"][1]  # EP8 > PP8 at C=1
    assert kimi_pred["tp8"][32] > kimi_pred["tp8 ep8"][32]  # TP8 > EP8 at C=32
    peaks = {layout: pred["peak"] for layout, pred in kimi_pred.items()}
    assert max(peaks, key=peaks.get) == "tp8 ep8"  # EP8 the highest peak


def test_minimax_orderings(minimax_pred):
    assert minimax_pred["tp4"][1] > minimax_pred["tp8 ep"][1]
    assert minimax_pred["tp8 ep"][256] >= 1.3 * minimax_pred["tp4"][256]


@pytest.mark.parametrize("measured, fixture", [(KIMI, "kimi_pred"), (MINIMAX, "minimax_pred")])
def test_every_number_within_30_percent_of_the_measurement(measured, fixture, request):
    pred = request.getfixturevalue(fixture)
    for layout, levels in measured.items():
        for level, value in levels.items():
            assert pred[layout][level] == pytest.approx(value, rel=0.30), (layout, level)


def test_concurrency_is_capped_by_kv_and_max_running():
    setup, profile = build_setup(SetupOverrides(profile="minimax-m2.5"))
    model = for_verdict(setup, plan_layout(setup, "tp8 ep"))
    assert model.max_running == 256  # the profile's --max-num-seqs
    assert model.effective_concurrency(1024, 2048) == 256
    kimi_setup, _ = build_setup(SetupOverrides(profile="kimi-k2.6"))
    kimi = for_verdict(kimi_setup, plan_layout(kimi_setup, "tp8"))
    assert kimi.effective_concurrency(1024, 2048) == kimi.memory.kv_tokens // 2048


def test_failed_layouts_have_no_prediction():
    setup, _ = build_setup(SetupOverrides(profile="minimax-m2.5"))
    assert for_verdict(setup, plan_layout(setup, "tp8")) is None


def test_step_time_grows_with_batch_and_prefill_with_length():
    setup, _ = build_setup(SetupOverrides(profile="minimax-m2.5"))
    model = for_verdict(setup, plan_layout(setup, "tp4"))
    steps = [model.step_time_s(b, 1536) for b in (1, 8, 64, 256)]
    assert steps == sorted(steps) and steps[0] > 0
    assert model.prefill_time_s(8192) > model.prefill_time_s(512) > 0
    assert model.ttft_s(1024) > model.prefill_time_s(1024)


def test_calibration_table_and_overrides():
    box = hardware("rtx-pro-6000", 8)
    assert calibration_for(box, "vllm").eta_bw != Calibration().eta_bw
    cal = calibration_for(box, "sglang", {"eta_bw": 0.5, "t_floor_ms": {"tp8": 30}})
    assert cal.eta_bw == 0.5 and cal.t_floor_ms == {"tp8": 30.0}
    with pytest.raises(CockpitError, match="unknown calibration 'eta_bandwidth'"):
        calibration_for(box, "vllm", {"eta_bandwidth": 0.5})
    with pytest.raises(CockpitError, match="needs a number"):
        calibration_for(box, "vllm", {"eta_bw": "fast"})
    with pytest.raises(CockpitError, match="t_floor_ms maps layouts"):
        calibration_for(box, "vllm", {"t_floor_ms": 3})


def test_profile_calibration_moves_the_prediction():
    setup, profile = build_setup(SetupOverrides(profile="kimi-k2.6"))
    verdict = plan_layout(setup, "tp8")
    floored = predict_tok_s(setup, verdict, [1], 1024, 1024)[1]
    from dataclasses import replace

    free = predict_tok_s(replace(setup, calibration={}), verdict, [1], 1024, 1024)[1]
    assert floored == pytest.approx(1 / 0.038, rel=0.01) and free > 2 * floored


def test_plan_json_carries_predicted_tok_s():
    import contextlib
    import io
    import json

    from cockpit.faces.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(
                ["plan", "--profile", "minimax-m2.5", "--layout", "tp4", "--concurrency", "1,32,64", "--json"]
            )
            == 0
        )
    data = json.loads(out.getvalue())[0]
    assert set(data["predicted_tok_s"]) == {"1", "32", "64"} and data["predicted_tok_s"]["1"] > 50


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"eta_bw": 0}, ["eta_bw", "above 0 and at most 1"]),
        ({"eta_bw": 1.5}, ["eta_bw"]),
        ({"t_layer_us": -5}, ["t_layer_us"]),
        ({"skew": float("inf")}, ["skew"]),
        ({"skew": True}, ["needs a number"]),
        ({"max_running": -1}, ["max_running"]),
        ({"max_running": 2.5}, ["needs a number"]),
        ({"t_floor_ms": {"tp8": -1}}, ["t_floor_ms tp8"]),
        ({"t_floor_ms": {"tp8": "slow"}}, ["needs a number"]),
    ],
)
def test_absurd_calibration_values_are_refused(overrides, words):
    with pytest.raises(CockpitError) as err:
        Calibration().overridden(overrides, "p.yaml")
    assert str(err.value).startswith("p.yaml: ") and "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_max_running_zero_keeps_the_engine_default():
    assert Calibration().overridden({"max_running": 0, "eta_bw": 1}).max_running == 0


def test_an_added_overhead_may_be_zero_a_share_may_not():
    """0 ms of scheduler time means "none"; a bandwidth share of 0 would divide by zero."""
    calibration = Calibration().overridden(
        {"t_layer_us": 0, "t_sched_ms": 0, "alpha_p2p_us": 0, "t_floor_ms": {"tp8": 0}}
    )
    assert (calibration.t_layer_us, calibration.t_sched_ms, calibration.alpha_p2p_us) == (0, 0, 0)
    for share in ("eta_bw", "bw_p2p_gbs", "skew"):
        with pytest.raises(CockpitError, match=f"'{share}' must be above 0"):
            Calibration().overridden({share: 0})


def test_predictions_are_for_the_workload_prefill_included():
    """predict_tok_s is what a closed-loop bench measures (docs/performance.md#the-workload): close
    to pure decode for short prompts, far below it when prompts dominate the round."""
    setup, _ = build_setup(SetupOverrides(profile="minimax-m2.5"))
    verdict = plan_layout(setup, "tp8 ep")
    model = for_verdict(setup, verdict)
    long_prompts = predict_tok_s(setup, verdict, [1, 32], 8192, 256)
    assert long_prompts[32] == model.workload_tok_s(32, 8192, 256) < 0.5 * model.decode_tok_s(32, 8192, 256)
    assert long_prompts[1] < model.decode_tok_s(1, 8192, 256)
    assert model.workload_tok_s(1, 256, 128) == pytest.approx(model.decode_tok_s(1, 256, 128), rel=0.03)
    loop = model.closed_loop(1024, 256, 128)  # --max-num-seqs 256: the rest queue
    assert loop.running == 256 and loop.ttft_s > 3 * loop.round_s


def test_sglang_speed_uses_its_own_largest_decode_graph(minimax):
    """SGLang captures decode graphs up to its own default by card and TP (256 below TP4 on a
    94 GiB card, gpu_defaults), not vLLM's 512: batches above it run eager."""
    from cockpit.core.planner import Setup
    from cockpit.engines import get_engine

    box = hardware("rtx-pro-6000", 8)
    setup = Setup(minimax, box, get_engine("sglang"))
    tp2 = for_verdict(setup, plan_layout(setup, "tp2 pp2"))
    tp4 = for_verdict(setup, plan_layout(setup, "tp4"))
    assert tp2 is not None and tp4 is not None
    assert (tp2.graph_max_bs, tp4.graph_max_bs) == (256, 512)
    capped = Setup(minimax, box, get_engine("sglang"), server_args=("--max-running-requests", "64"))
    assert for_verdict(capped, plan_layout(capped, "tp4")).graph_max_bs == 64
    eager = Setup(minimax, box, get_engine("sglang"), server_args=("--disable-cuda-graph",))
    assert for_verdict(eager, plan_layout(eager, "tp4")).graph_max_bs == 0


def test_replicas_prefill_their_own_prompts_side_by_side():
    """Two replicas each compute the prompts of their own requests: a round's prefill takes half
    the time it takes one replica of the same shape to compute them all."""
    setup = build_setup(SetupOverrides(profile="minimax-m2.5", engine="sglang"))[0]
    one = for_verdict(setup, plan_layout(setup, "tp4"))
    two = for_verdict(setup, plan_layout(setup, "tp4 dp2"))
    assert one is not None and two is not None
    assert two.prefill_time_s(1024) == pytest.approx(one.prefill_time_s(1024))  # the same shape
    alone, side_by_side = one.closed_loop(8, 1024, 64), two.closed_loop(8, 1024, 64)
    assert side_by_side.prefill_s == pytest.approx(alone.prefill_s / 2)
    assert two.closed_loop(1, 1024, 64).prefill_s == pytest.approx(one.closed_loop(1, 1024, 64).prefill_s)
