"""Calibration that survives differences of form (docs/performance.md#what-a-box-teaches).

A simulated box whose truth differs from the planner in form, not only in its constants, is
measured on three layouts; calibration (cockpit.core.fitting) learns from them; an untried
layout of another GPU count and parallel kind is then predicted within 15% at every level
measured on it, where the uncalibrated model was further off.

The witness: the simulator's batcher on a virtual clock (``cockpit.sim.measure.closed_loop``),
closed-loop clients windowed as the bench's, paced by the simulator's own step model
(``cockpit.sim.witness``, ``pace: witness``) with one part bent per truth, which the planner and
the fit never read. Each test names the truth it runs against.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import Launch, Level

from cockpit.core.fitting import fit
from cockpit.core.perfmodel import predict_tok_s
from cockpit.core.planner import Learned, Setup, plan_layout
from cockpit.core.secrets import redact_argv
from cockpit.sim.measure import closed_loop
from cockpit.sim.witness import Truth, witness_for
from cockpit.store.profile_setup import SetupOverrides, build_setup

IN, OUT = 1024, 64
LEVELS = (1, 8, 32, 128)
LIMIT = 0.15


# -- the truths -------------------------------------------------------------------------------

# Each bends one part of the simulator's own step model (cockpit.sim.witness), which differs from
# the planner's in form even unbent (pipelines fill and drain, a per-chunk prefill cost, its own
# routing spread and overheads). ``pace: witness``: never measured kernels, installed or not.
TRUTHS = {
    # The example: all-reduce floor x4, bus bandwidth halved.
    "collectives": {"collective_latency_scale": 4.0, "collective_bw_scale": 0.5},
    # Expert kernels at half pace with few tokens in a step, nearly full pace from 256.
    "moe by batch": {"moe_efficiency": {1: 0.5, 32: 0.7, 256: 0.95}},
    # Host costs: per step, per layer, and a millisecond more on each 8-GPU EP layout.
    "overheads": {
        "step_overhead_ms": 4.0,
        "layer_overhead_us": 80.0,
        "layout_overhead_ms": {"tp8 ep": 1.0, "tp8 ep8": 1.0},
    },
    # Prompts computed at a tenth of peak, 10 ms a chunk besides.
    "prefill": {"prefill_flops_share": 0.1, "prefill_overhead_ms": 10.0},
}


def truth(name: str) -> Truth:
    return Truth.parse({"pace": "witness", "bend": TRUTHS[name]}, f"the '{name}' truth")


# -- launches as the fit reads them -------------------------------------------------------------


def measure(setup: Setup, layout: str, box: Truth) -> dict[int, float]:
    """Output tok/s at each of LEVELS on a simulated box whose truth is ``box``."""
    pacer = witness_for(setup, plan_layout(setup, layout), box)
    return {
        c: closed_loop(
            pacer, concurrency=c, input_len=IN, output_len=OUT, token_budget=pacer.token_budget
        ).tok_s
        for c in LEVELS
    }


def run(setup: Setup, layout: str, box: Truth) -> tuple[Launch, list[Level]]:
    argv = redact_argv(plan_layout(setup, layout).argv)
    return Launch(layout, argv), [Level(c, t, IN, OUT) for c, t in measure(setup, layout, box).items()]


def worst(setup: Setup, layout: str, measured: dict[int, float]) -> float:
    predicted = predict_tok_s(setup, plan_layout(setup, layout), LEVELS, IN, OUT)
    return max(abs(predicted[c] / measured[c] - 1) for c in LEVELS)


# -- the tests ----------------------------------------------------------------------------------


def setup_for(engine: str) -> Setup:
    return build_setup(SetupOverrides(profile="minimax-m2.5", engine=engine))[0]


# (engine, trained layouts, untried layout): 4-GPU layouts teach an 8-GPU EP layout, and back.
CASES = {
    "vllm 4 -> 8": ("vllm", ("tp4", "tp2 dp2 ep", "pp4"), "tp8 ep"),
    "vllm 8 -> 4": ("vllm", ("tp8 ep", "tp4 pp2", "tp2 pp4"), "tp4 ep"),
    "sglang 4 -> 8": ("sglang", ("tp4", "tp4 ep2", "tp2 pp2"), "tp8 ep8"),
    "sglang 8 -> 4": ("sglang", ("tp8 ep8", "tp4 pp2", "tp4 dp2"), "tp4 ep4"),
}


def calibrated_error(case: str, name: str) -> tuple[float, float, Learned]:
    """The untried layout's worst |error| before and after calibrating on the trained ones."""
    engine, trained, untried = CASES[case]
    setup = setup_for(engine)
    box = truth(name)
    learned = fit(setup, [run(setup, layout, box) for layout in trained])
    measured = measure(setup, untried, box)
    return worst(setup, untried, measured), worst(replace(setup, learned=learned), untried, measured), learned


@pytest.mark.parametrize("truth", list(TRUTHS))
@pytest.mark.parametrize("case", list(CASES))
def test_three_layouts_predict_an_untried_one_of_another_size_and_kind(case, truth):
    before, after, learned = calibrated_error(case, truth)
    said = (
        f"{case} under truth '{truth}': before {before:.1%}, after {after:.1%}, learned {learned.calibration}"
    )
    assert after <= LIMIT, said
    assert after < before, said
