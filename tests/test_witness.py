"""The simulated box's own speed (cockpit/sim/witness.py): a truth file that says which truth paces
the engine and bends each part of the witness, a witness that differs from the planner in form,
and closed-loop measurements of any truth in process (cockpit/sim/measure.py)."""

from __future__ import annotations

import time
from dataclasses import replace

import httpx
import pytest
import yaml
from helpers import free_port
from simproc import SimProcess

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import Learned, Setup, plan_layout
from cockpit.core.speed import SpeedSource
from cockpit.engines import get_engine
from cockpit.sim.engine import read_truth
from cockpit.sim.measure import closed_loop
from cockpit.sim.pacers import PerfPacer
from cockpit.sim.witness import Bend, Truth, Witness, witness_for
from cockpit.store.modelfiles import load_model
from cockpit.store.profile_setup import SetupOverrides, build_setup

BENT = {
    "pace": "witness",
    "bend": {
        "collective_floor_us": 20,
        "collective_latency_scale": 2,
        "collective_bw_scale": 0.5,
        "moe_efficiency": {1: 0.5, 32: 0.8, 256: 1.0},
        "bandwidth_share": 0.6,
        "step_overhead_ms": 3,
        "layer_overhead_us": 40,
        "eager_factor": 2,
        "layout_overhead_ms": {"TP8+EP": 3},
        "prefill_flops_share": 0.4,
        "prefill_overhead_ms": 2,
    },
    "reserve_offset_gib": 2,
}


def env_with(tmp_path, data) -> dict[str, str]:
    path = tmp_path / "truth.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return {"COCKPIT_SIM_TRUTH": str(path)}


@pytest.fixture(scope="module")
def minimax() -> Setup:
    setup, _ = build_setup(SetupOverrides(profile="minimax-m2.5"))
    return setup


@pytest.fixture(scope="module")
def llama() -> Setup:
    """A dense model on 8 RTX PRO 6000: its layers' collectives are all-reduces over TP."""
    setup, _ = build_setup(SetupOverrides(profile="demo", model="llama-3.1-70b"))
    return replace(setup, calibration={})


# -- the truth file -----------------------------------------------------------------------------


def test_a_truth_file_reads_pace_bends_and_memory(tmp_path):
    assert read_truth({}) == Truth() and Truth().pace is None  # the default: kernels, else the witness
    truth = read_truth(env_with(tmp_path, BENT))
    assert truth.pace == "witness" and truth.reserve_offset_gib == 2.0
    assert truth.bend.moe_efficiency == {1: 0.5, 32: 0.8, 256: 1.0}
    assert truth.bend.layout_overhead_ms == {"tp8 ep": 3.0}  # the layout's canonical words
    assert truth.bend.collective_floor_us == 20.0 and truth.bend.bandwidth_share == 0.6
    assert read_truth(env_with(tmp_path, BENT)).learned == Learned(
        reserve_offset_gib=2.0
    )  # what it plans with


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"pace": "fast"}, "pace in"),
        ({"bend": 3}, "bend in"),
        ({"bend": {"collective_floor": 3}}, "unknown bend 'collective_floor'"),
        ({"bend": {"collective_floor_us": -1}}, "bend collective_floor_us must be 0 or more"),
        ({"bend": {"collective_bw_scale": 0}}, "bend collective_bw_scale must be above 0"),
        ({"bend": {"bandwidth_share": 1.5}}, "bend bandwidth_share must be above 0 and at most 1"),
        ({"bend": {"step_overhead_ms": "slow"}}, "bend step_overhead_ms needs a number"),
        ({"bend": {"moe_efficiency": {0: 0.5}}}, "batch sizes are whole numbers from 1"),
        ({"bend": {"moe_efficiency": {8: 0}}}, "moe_efficiency at 8 must be above 0"),
        ({"bend": {"moe_efficiency": [0.5]}}, "maps batch sizes to efficiencies"),
        ({"bend": {"layout_overhead_ms": {"tp8 xx": 3}}}, "is not a layout"),
        ({"bend": {"layout_overhead_ms": {"tp8": -3}}}, "layout_overhead_ms for tp8 must be 0 or more"),
        ({"speed": 1}, "unknown key 'speed'"),
    ],
)
def test_a_bad_truth_is_one_line(tmp_path, data, said):
    with pytest.raises(CockpitError) as caught:
        read_truth(env_with(tmp_path, data))
    text = str(caught.value)
    assert "\n" not in text and said in text, text
    assert text.startswith("COCKPIT_SIM_TRUTH") and text.endswith("or unset COCKPIT_SIM_TRUTH")


def test_moe_efficiency_is_interpolated_in_log_batch():
    bend = Bend(moe_efficiency={1: 0.5, 32: 0.8, 256: 1.0})
    assert bend.moe_efficiency_at(1) == 0.5 and bend.moe_efficiency_at(256) == 1.0
    assert bend.moe_efficiency_at(4096) == 1.0  # flat beyond the ends
    assert bend.moe_efficiency_at(32) == pytest.approx(0.8)
    assert bend.moe_efficiency_at(16) == pytest.approx(0.5 + 0.3 * 4 / 5)  # log2: 4 of 5 steps
    assert Bend().moe_efficiency_at(7) == 1.0


# -- the witness differs from the planner in form -------------------------------------------------


def _pacers(setup: Setup, layout: str, truth: Truth) -> tuple[Witness, PerfPacer]:
    verdict = plan_layout(setup, layout)
    witness = witness_for(setup, verdict, truth)
    planner = witness_for(setup, verdict, Truth(pace="planner"))
    assert isinstance(witness, Witness) and isinstance(planner, PerfPacer)
    return witness, planner


def test_unbent_the_witness_lands_near_the_planner_but_is_its_own(minimax):
    for layout in ("tp8 ep", "tp4", "dp4"):
        witness, planner = _pacers(minimax, layout, Truth(pace="witness"))
        for batch in (1, 8, 64, 256):
            ratio = witness.step_time_s(batch, 2048) / planner.step_time_s(batch, 2048)
            assert 0.7 < ratio < 1.3, (layout, batch, ratio)
        assert witness.step_time_s(8, 2048) != planner.step_time_s(8, 2048)
        assert (witness.max_running, witness.kv_tokens) == (planner.max_running, planner.kv_tokens)


def test_bending_the_moe_kernels_changes_the_ratio_to_the_planner_across_batches(minimax):
    plain, planner = _pacers(minimax, "tp8 ep", Truth(pace="witness"))
    bent, _ = _pacers(minimax, "tp8 ep", Truth(pace="witness", bend=Bend(moe_efficiency={1: 0.4, 256: 1.0})))

    def ratio(pacer: Witness, batch: int) -> float:
        return pacer.step_time_s(batch, 2048) / planner.step_time_s(batch, 2048)

    assert ratio(bent, 1) > 1.2 * ratio(plain, 1)  # slow at small batch
    assert ratio(bent, 256) == pytest.approx(ratio(plain, 256))  # full speed from 256
    assert plain.prefill_time_s(4096) == bent.prefill_time_s(4096)  # decode's kernels only


def test_a_collective_floor_costs_tp8_more_than_tp2(llama):
    floor = Truth(pace="witness", bend=Bend(collective_floor_us=30))
    added = {}
    for layout in ("tp8", "tp2"):
        plain, _ = _pacers(llama, layout, Truth(pace="witness"))
        bent, _ = _pacers(llama, layout, floor)
        added[layout] = bent.step_time_s(1, 1024) - plain.step_time_s(1, 1024)
    assert added["tp8"] > 0 and added["tp2"] > 0
    assert added["tp8"] == pytest.approx(added["tp2"])  # per call, the same calls per layer...
    scaled = Truth(pace="witness", bend=Bend(collective_bw_scale=0.25))
    grown = {}
    for layout in ("tp8", "tp2"):
        plain, planner = _pacers(llama, layout, Truth(pace="witness"))
        slow, _ = _pacers(llama, layout, scaled)
        grown[layout] = slow.step_time_s(64, 1024) / plain.step_time_s(64, 1024)
    assert grown["tp8"] > 1.0 and grown["tp2"] > 1.0  # ...while bytes over a slower bus grow both
    # Against the step, the same floor weighs more at tp8, whose other work is a quarter of tp2's.
    plain8, _ = _pacers(llama, "tp8", Truth(pace="witness"))
    plain2, _ = _pacers(llama, "tp2", Truth(pace="witness"))
    assert added["tp8"] / plain8.step_time_s(1, 1024) > added["tp2"] / plain2.step_time_s(1, 1024)


def test_a_layout_overhead_is_added_to_that_layout_only(minimax):
    truth = Truth(pace="witness", bend=Bend(layout_overhead_ms={"tp8 ep": 3.0}))
    for layout, added in (("tp8 ep", 3e-3), ("tp4", 0.0)):
        plain, _ = _pacers(minimax, layout, Truth(pace="witness"))
        bent, _ = _pacers(minimax, layout, truth)
        for batch in (1, 64):
            assert bent.step_time_s(batch, 1024) - plain.step_time_s(batch, 1024) == pytest.approx(added)


def test_prefill_and_overheads_bend_their_own_parts(minimax):
    plain, _ = _pacers(minimax, "tp4", Truth(pace="witness"))
    prefill, _ = _pacers(
        minimax, "tp4", Truth(pace="witness", bend=Bend(prefill_flops_share=0.2, prefill_overhead_ms=5))
    )
    assert prefill.prefill_time_s(8192) > plain.prefill_time_s(8192) + 0.1  # compute at under half the share
    assert prefill.step_time_s(8, 1024) == plain.step_time_s(8, 1024)
    step, _ = _pacers(minimax, "tp4", Truth(pace="witness", bend=Bend(step_overhead_ms=10)))
    assert step.step_time_s(8, 1024) > plain.step_time_s(8, 1024) + 5e-3


def test_the_planner_pace_is_the_planners_model(minimax):
    verdict = plan_layout(minimax, "tp4")
    pacer = witness_for(minimax, verdict, Truth(pace="planner"))
    perf = for_verdict(minimax, verdict)
    assert perf is not None and pacer.pace.truth == "planner"
    assert pacer.step_time_s(16, 2048) == perf.step_time_s(16, 2048)
    assert pacer.token_budget == (perf.step_tokens or None)


def test_witness_for_plans_with_the_truths_memory(minimax):
    verdict = plan_layout(minimax, "tp4")
    roomy = witness_for(minimax, verdict, Truth(pace="witness"))
    tight = witness_for(minimax, verdict, Truth(pace="witness", reserve_offset_gib=8))
    assert tight.kv_tokens < roomy.kv_tokens


# -- measuring in process -----------------------------------------------------------------------


def test_closed_loop_is_deterministic_and_fast(minimax):
    pacer = witness_for(minimax, plan_layout(minimax, "tp8 ep"), Truth(pace="witness"))
    start = time.perf_counter()
    first = closed_loop(
        pacer, concurrency=64, input_len=1024, output_len=256, token_budget=pacer.token_budget
    )
    took = time.perf_counter() - start
    again = closed_loop(
        pacer, concurrency=64, input_len=1024, output_len=256, token_budget=pacer.token_budget
    )
    assert first == again and first.requests == 128
    assert took < 0.5, took
    assert first.tok_s > 0 and first.ttft_s > 0 and first.tpot_s > 0
    assert first.tok_s == pytest.approx(64 / (first.tpot_s + first.ttft_s / 256), rel=0.15)


def test_closed_loop_of_the_planner_lands_on_its_workload_prediction(minimax):
    verdict = plan_layout(minimax, "tp4")
    perf = for_verdict(minimax, verdict)
    assert perf is not None
    pacer = witness_for(minimax, verdict, Truth(pace="planner"))
    measured = closed_loop(
        pacer, concurrency=32, input_len=256, output_len=128, token_budget=pacer.token_budget
    )
    assert measured.tok_s == pytest.approx(perf.workload_tok_s(32, 256, 128), rel=0.10)


# -- which truth paces ----------------------------------------------------------------------------


def test_the_default_pace_is_kernels_where_they_cover_the_box_else_the_witness(minimax):
    """MiniMax on the RTX box has no kernel data (or no library): the witness paces, and says why."""
    pacer = witness_for(minimax, plan_layout(minimax, "tp4"), Truth())
    assert pacer.pace.truth == "witness" and "measured kernels" in pacer.pace.detail


def test_pace_kernels_paces_from_measured_kernel_times():
    pytest.importorskip("aiconfigurator_core")
    from cockpit.kernels import measured_kernels

    model = load_model("qwen3-30b-a3b-fp8", env={})
    setup = Setup(model, hardware("h200", 8), get_engine("vllm"), model_path="qwen3-30b-a3b-fp8")
    verdict = plan_layout(setup, "tp2")
    assert verdict.placement is not None
    kernels = measured_kernels(model, setup.hardware, "vllm", verdict.placement, setup.engine.version)
    assert not isinstance(kernels, SpeedSource), kernels.note  # the library covers Qwen3 on H200
    pacer = witness_for(setup, verdict, Truth(pace="kernels"))
    assert pacer.pace.truth == "kernels" and "measured kernels" in pacer.pace.detail
    assert pacer.step_time_s(8, 1024) == pytest.approx(kernels.decode_step_s(8, 1024))
    assert pacer.prefill_time_s(2048) == pytest.approx(kernels.prefill_s(2048))
    bent = witness_for(setup, verdict, Truth(pace="kernels", bend=Bend(collective_floor_us=40)))
    assert bent.step_time_s(8, 1024) > pacer.step_time_s(8, 1024)  # its own bends, times the kernels


def test_the_engine_says_which_truth_paces_it(tmp_path):
    port = free_port()
    argv = ["serve", "qwen3-30b-a3b-fp8", "--tensor-parallel-size", "2", "--port", str(port)]
    truth = {"pace": "witness", "bend": {"collective_floor_us": 10}}
    sim = SimProcess("vllm", argv, tmp_path / "simbox", truth=truth)
    url = f"http://127.0.0.1:{port}"
    try:
        sim.wait_ready(url)
        pace = httpx.get(url + "/cockpit/truth", timeout=5).json()["pace"]
    finally:
        sim.stop()
    assert pace["truth"] == "witness" and "collective_floor_us=10" in pace["detail"]
    lines = [line for line in sim.log_path.read_text().splitlines() if "cockpit sim: paced by" in line]
    assert lines == [f"INFO:     cockpit sim: paced by the witness truth: {pace['detail']}"]


def test_replicas_schedule_with_their_budgets_together_and_prefill_side_by_side():
    """One batcher stands for every replica: their step budgets together, a step's prompt tokens
    spread over them, each computing its share at once."""
    setup = build_setup(SetupOverrides(profile="minimax-m2.5", engine="sglang"))[0]
    one = witness_for(setup, plan_layout(setup, "tp4"), Truth(pace="witness"))
    two = witness_for(setup, plan_layout(setup, "tp4 dp2"), Truth(pace="witness"))
    assert one.token_budget is not None and two.token_budget == 2 * one.token_budget
    assert two.prefill_time_s(2048) == pytest.approx(one.prefill_time_s(1024))
    planner = witness_for(setup, plan_layout(setup, "tp4 dp2"), Truth(pace="planner"))
    assert planner.token_budget == two.token_budget  # the planner's pace schedules the same way
