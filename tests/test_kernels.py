"""The measured-kernel speed backend (cockpit.kernels): AIConfigurator's tables where the box is
covered, the analytic model with a reason everywhere else (docs/speed.md#speed-sources)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.core.hardware import hardware
from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import Setup, plan_layout
from cockpit.core.speed import (
    ANALYTIC,
    KERNELS,
    SpeedSource,
    nearest_version,
    version_note,
    versions_far_apart,
)
from cockpit.engines import get_engine
from cockpit.kernels import MeasuredKernels, library, measured_kernels
from cockpit.kernels.coverage import ParallelSizes, parallel_sizes
from cockpit.store.modelfiles import load_model
from tests.conftest import MODELS


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def deepseek():
    return load_model(str(MODELS / "deepseek-v3.json"))


def _placement(model, gpu: str, engine: str, layout: str):
    verdict = plan_layout(Setup(model, hardware(gpu, 8), get_engine(engine)), layout)
    assert verdict.placement is not None
    return verdict.placement


def test_versions_nearest_and_far():
    assert nearest_version(["0.24.0", "0.27.0"], "0.33.0") == "0.27.0"
    assert nearest_version(["0.5.14", "0.5.16"], "0.5.23") == "0.5.16"
    assert nearest_version(["0.24.0", "0.27.0"], "0.25.1") == "0.24.0"
    assert nearest_version([], "0.33.0") is None
    assert versions_far_apart("0.24.0", "0.33.0")
    assert not versions_far_apart("0.5.16", "0.5.23")
    assert not versions_far_apart("0.24.0", "")  # a box whose version nobody asked
    assert version_note("vllm", "0.24.0", "0.33.0") == "data from vllm 0.24.0, the box runs 0.33.0"


def test_placements_read_as_aiconfigurator_sizes(deepseek):
    tp8 = parallel_sizes(deepseek, _placement(deepseek, "h200", "vllm", "tp8"))
    assert tp8 == ParallelSizes(8, 1, 1, 8, 1)
    dp_ep = parallel_sizes(deepseek, _placement(deepseek, "h200", "vllm", "tp4 dp2 ep"))
    assert dp_ep == ParallelSizes(4, 1, 2, 1, 8)  # EP over TP x DP, attention DP ranks
    dpa = parallel_sizes(deepseek, _placement(deepseek, "h200", "sglang", "tp8 dp8 dpa ep8"))
    assert dpa == ParallelSizes(1, 1, 8, 1, 8)
    assert dpa.ranks_batch(64) == 8  # its batch is per attention rank
    assert ParallelSizes(4, 2, 1, 4, 1).ranks_batch(16) == 8  # two microbatches in the pipeline


def test_deepseek_tp8_on_h200_under_vllm_from_measured_kernels(deepseek):
    pytest.importorskip("aiconfigurator_core")
    placement = _placement(deepseek, "h200", "vllm", "tp8")
    times = measured_kernels(deepseek, hardware("h200", 8), "vllm", placement, "0.33.0")
    assert not isinstance(times, SpeedSource), times.note
    source = times.source
    assert source.backend == KERNELS
    assert "h200_sxm" in source.data and "AIConfigurator" in source.data
    assert source.data_version and source.box_version == "0.33.0"
    assert source.note == f"data from vllm {source.data_version}, the box runs 0.33.0"
    assert source.label.startswith("measured kernels (AIConfigurator")
    assert source.short == f"measured kernels h200_sxm vllm {source.data_version}"  # the picker's words
    step = times.decode_step_s(4, 2048)
    assert 0.008 < step < 0.04  # a public run measured 19.4 ms for DeepSeek-R1 at 4 requests
    assert times.decode_step_s(128, 2048) > step
    assert 0.02 < times.prefill_s(2048) < 1.0
    assert times.decode_step_s(4, 2048) == step  # remembered


def test_the_performance_model_takes_measured_kernels_through_the_setup(deepseek):
    pytest.importorskip("aiconfigurator_core")
    setup = Setup(deepseek, hardware("h200", 8), get_engine("vllm"), speed=MeasuredKernels("0.33.0"))
    model = for_verdict(setup, plan_layout(setup, "tp8"))
    assert model is not None and model.source.backend == KERNELS
    analytic = for_verdict(replace(setup, speed=None), plan_layout(setup, "tp8"))
    assert analytic is not None and analytic.source.backend == ANALYTIC
    assert model.step_time_s(4, 2048) != analytic.step_time_s(4, 2048)


def test_an_uncovered_gpu_gives_the_analytic_model_with_a_reason(deepseek):
    placement = _placement(deepseek, "h20", "vllm", "tp8")
    source = measured_kernels(deepseek, hardware("h20", 8), "vllm", placement, "0.33.0")
    assert isinstance(source, SpeedSource) and source.backend == ANALYTIC
    assert "no measured kernels for" in source.note and "H20" in source.note


def test_without_the_library_the_analytic_model_says_so(deepseek, monkeypatch):
    def missing():
        raise ImportError("No module named 'aiconfigurator_core'")

    monkeypatch.setattr(library, "load", missing)
    placement = _placement(deepseek, "h200", "vllm", "tp8")
    source = measured_kernels(deepseek, hardware("h200", 8), "vllm", placement)
    assert isinstance(source, SpeedSource) and source.backend == ANALYTIC
    assert "not installed" in source.note and "cockpit[kernels]" in source.note
    setup = Setup(deepseek, hardware("h200", 8), get_engine("vllm"), speed=MeasuredKernels())
    model = for_verdict(setup, plan_layout(setup, "tp8"))
    assert model is not None and model.source.label.startswith(
        "analytic model; measured kernels not installed"
    )


def test_a_bad_placement_gives_the_analytic_model_with_a_reason(deepseek):
    placement = replace(_placement(deepseek, "h200", "vllm", "tp8"), moe_tp=2)
    source = measured_kernels(deepseek, hardware("h200", 8), "vllm", placement)
    assert isinstance(source, SpeedSource) and source.backend == ANALYTIC
    assert "splits the MoE 2 ways over 8 attention ranks" in source.note


def test_a_model_with_no_config_on_disk_gives_the_analytic_model(deepseek):
    pytest.importorskip("aiconfigurator_core")
    model = replace(deepseek, source="<config>")
    placement = _placement(deepseek, "h200", "vllm", "tp8")
    source = measured_kernels(model, hardware("h200", 8), "vllm", placement)
    assert isinstance(source, SpeedSource) and "not a file on disk" in source.note
