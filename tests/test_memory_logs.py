"""The planner's memory model against what public engine logs printed (docs/memory.md#public-logs).

Each fixture in tests/fixtures/public_logs/ is an excerpt of a public log with its URL on the first
line. A case says how that server was launched (model, GPU, layout, engine version, arguments, as
read from the log or its thread); the test plans the same launch and compares the planner's
weights and KV cache per GPU with the logged ones.

Tolerances: weights within 2% (the checkpoint's bytes, and the kernels' MXFP4 repacking);
KV cache within 0.35 GiB (3% of a pool above 10 GiB; the logs' own rounding is 0.01 GiB); KV
tokens within 3% where logged. Which logs also fitted a constant is said in docs/memory.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import MODELS

from cockpit.core.hardware import hardware
from cockpit.core.model import ModelArch
from cockpit.core.planner import MemoryEstimate, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import bundled_dir, read_config

LOGS = Path(__file__).parent / "fixtures" / "public_logs"
WEIGHTS_REL = 0.02
KV_ABS_GIB = 0.35
TOKENS_REL = 0.03


@dataclass(frozen=True)
class PublicLog:
    fixture: str
    model: str  # a bundled architecture or a config in tests/fixtures/models
    gpu: str
    layout: str
    engine: str
    version: str
    args: tuple[str, ...] = ()
    total_gib: float | None = None  # torch's total when the log prints it; else the catalog's


CASES = [
    # vLLM 0.19.0 DEBUG logs of llm-d's capacity-planner validation, H100 80GB (total_memory=79.19GiB).
    # Mixtral-8x7B-Instruct-v0.1 has the base model's shapes (the bundled config).
    PublicLog(
        "vllm_0_19_mixtral_8x7b_tp2_h100.log",
        "mixtral-8x7b-v0.1",
        "h100",
        "tp2",
        "vllm",
        "0.19.0",
        ("--gpu-memory-utilization", "0.95", "--max-model-len", "8192", "--no-enable-prefix-caching"),
        79.19,
    ),
    PublicLog(
        "vllm_0_19_qwen2_5_72b_tp2_h100.log",
        "qwen2.5-72b-instruct",
        "h100",
        "tp2",
        "vllm",
        "0.19.0",
        ("--gpu-memory-utilization", "0.95", "--max-model-len", "8192", "--no-enable-prefix-caching"),
        79.19,
    ),
    # A large FP8 MoE at TP4 on 80 GB GPUs, on both engines (vllm-project/vllm#21348).
    PublicLog(
        "vllm_qwen3_235b_fp8_tp4_h100.log",
        "qwen3-235b-a22b-fp8",
        "h100",
        "tp4",
        "vllm",
        "0.9.2",
        ("--gpu-memory-utilization", "0.9"),
    ),  # fmt: skip
    PublicLog(
        "sglang_qwen3_235b_fp8_tp4_h100.log",
        "qwen3-235b-a22b-fp8",
        "h100",
        "tp4",
        "sglang",
        "0.4.9",
        ("--mem-fraction-static", "0.93"),
    ),  # fmt: skip
    # gpt-oss (MXFP4 experts) on Hopper, without native FP4: Marlin in 0.10.1 (default utilization
    # 0.9 then), the OAI Triton kernels in 0.14.1.
    PublicLog(
        "vllm_0_10_1_gpt_oss_120b_h100.log",
        "gpt-oss-120b",
        "h100",
        "tp1",
        "vllm",
        "0.10.1",
        ("--gpu-memory-utilization", "0.9"),
    ),  # fmt: skip
    PublicLog("vllm_0_14_1_gpt_oss_120b_h100.log", "gpt-oss-120b", "h100", "tp1", "vllm", "0.14.1"),
    # SGLang derived mem_fraction_static=0.83 itself (the log's server_args); a recent image.
    PublicLog(
        "sglang_qwen3_30b_a3b_fp8_h100.log",
        "qwen3-30b-a3b-fp8",
        "h100",
        "tp1",
        "sglang",
        "0.5.23",
        ("--mem-fraction-static", "0.83"),
    ),  # fmt: skip
]


@dataclass(frozen=True)
class Logged:
    url: str
    weights_gib: float | None
    kv_gib: float | None
    kv_tokens: int | None


def read_log(name: str) -> Logged:
    """The numbers an excerpt prints: vLLM's "Model loading took" and "Available KV cache memory",
    SGLang's "Load weight end ... mem usage" and "KV Cache is allocated" (its "GB" are GiB)."""
    text = (LOGS / name).read_text(encoding="utf-8")
    url = text.splitlines()[0]
    weights = re.search(r"Model loading took ([\d.]+) GiB|Load weight end\..*?mem usage=([\d.]+) GB", text)
    kv = re.search(r"Available KV cache memory: (-?[\d.]+) GiB", text)
    kv_sizes = re.search(r"K size: ([\d.]+) GB, V size: ([\d.]+) GB", text)
    tokens = re.search(r"GPU KV cache size: ([\d,]+) tokens|#tokens: (\d+)", text)
    return Logged(
        url=url,
        weights_gib=float(weights.group(1) or weights.group(2)) if weights else None,
        kv_gib=float(kv.group(1)) if kv else (float(kv_sizes[1]) + float(kv_sizes[2]) if kv_sizes else None),
        kv_tokens=int((tokens.group(1) or tokens.group(2)).replace(",", "")) if tokens else None,
    )


def load(name: str) -> ModelArch:
    bundled = bundled_dir() / f"{name}.json"
    return read_config(bundled if bundled.exists() else MODELS / f"{name}.json")


def plan(case: PublicLog) -> MemoryEstimate:
    setup = Setup(
        load(case.model),
        hardware(case.gpu, 8, case.total_gib),
        get_engine(case.engine, case.version),
        server_args=case.args,
    )
    memory = plan_layout(setup, case.layout).memory
    assert memory is not None
    return memory


@pytest.mark.parametrize("case", CASES, ids=[c.fixture.removesuffix(".log") for c in CASES])
def test_the_planner_matches_the_public_log(case):
    logged = read_log(case.fixture)
    assert logged.url.startswith("https://github.com/")
    memory = plan(case)
    assert logged.weights_gib is not None or logged.kv_gib is not None
    if logged.weights_gib is not None:
        assert memory.weights_gib == pytest.approx(logged.weights_gib, rel=WEIGHTS_REL)
    if logged.kv_gib is not None:
        assert memory.kv_budget_gib == pytest.approx(logged.kv_gib, abs=KV_ABS_GIB)
    if logged.kv_tokens is not None:
        assert memory.kv_tokens == pytest.approx(logged.kv_tokens, rel=TOKENS_REL)


def test_every_fixture_is_checked():
    assert {case.fixture for case in CASES} == {path.name for path in LOGS.glob("*.log")}


def test_the_profile_terms_match_the_logged_breakdown():
    """vLLM 0.19's DEBUG line splits what it keeps besides weights: "torch peak memory increase"
    (the profile's activations), "non-torch forward increase memory", and the CUDA graph estimate."""
    for name, activation, non_torch, graphs in (
        ("vllm_0_19_mixtral_8x7b_tp2_h100.log", 1.21, 2.07, 0.82),
        ("vllm_0_19_qwen2_5_72b_tp2_h100.log", 2.29, 2.09, 1.63),
    ):
        text = (LOGS / name).read_text(encoding="utf-8")
        assert f"torch peak memory increase: {activation}GiB" in text
        assert f"non-torch forward increase memory: {non_torch}GiB" in text
        assert f"Estimated CUDA graph memory: {graphs} GiB total" in text
        memory = plan(next(c for c in CASES if c.fixture == name))
        assert memory.activation_gib == pytest.approx(activation, rel=0.05)
        assert memory.non_torch_gib == pytest.approx(non_torch, rel=0.05)
        assert memory.graph_gib == pytest.approx(graphs, rel=0.05)


def test_mxfp4_experts_load_larger_without_native_fp4():
    """gpt-oss's checkpoint holds 60.7 GiB at TP1; Hopper's kernels pad the experts (Marlin in 0.10,
    hidden 2880 -> 3072 and width 2880 -> 2944), and so does TRT-LLM on B200; vLLM 0.33's Triton
    path on Hopper pads only the width, to a multiple of 64 (2880 already is)."""
    model = load("gpt-oss-120b")

    def weights(gpu: str, version: str) -> float:
        setup = Setup(model, hardware(gpu, 8), get_engine("vllm", version))
        memory = plan_layout(setup, "tp1").memory
        assert memory is not None
        return memory.weights_gib

    checkpoint = model.total_bytes / 2**30
    assert hardware("h100", 1).gpu.native_fp4 is False and hardware("b200", 1).gpu.native_fp4 is True
    assert weights("h100", "0.10.1") == pytest.approx(65.97, rel=0.01)  # vllm-project/vllm#23278
    assert weights("h100", "0.33.0") == pytest.approx(checkpoint, rel=0.005)
    assert weights("b200", "0.33.0") > checkpoint * 1.05
    assert weights("h100", "0.33.0") < weights("h100", "0.14.1") < weights("h100", "0.10.1")


def test_other_mxfp4_models_run_humming_on_hopper_in_vllm_0_33():
    """Humming moves ahead of Marlin on SM90 (prioritize_humming, vLLM 0.33): an MXFP4 model that is
    not gpt-oss pads only its width there, as the Triton path does; older releases used Marlin."""
    from dataclasses import replace

    from cockpit.engines.vllm.memory import mxfp4_backend

    model = replace(load("gpt-oss-120b"), architecture="SomeOtherMoeForCausalLM")
    h100 = hardware("h100", 8)
    assert mxfp4_backend(model, h100, "0.33.0") == "humming"
    assert mxfp4_backend(model, h100, "0.14.1") == "marlin"
    memory = plan_layout(Setup(model, h100, get_engine("vllm", "0.33.0")), "tp1").memory
    assert memory is not None and memory.weights_gib == pytest.approx(model.total_bytes / 2**30, rel=0.005)


def test_graphs_are_taken_from_kv_since_vllm_0_21():
    """vLLM 0.33 subtracts its CUDA graph estimate before sizing KV (Worker.determine_available_memory);
    0.19 captured them afterwards, in what --gpu-memory-utilization leaves free."""
    model, box = load("qwen2.5-72b-instruct"), hardware("h100", 8)
    args = ("--max-model-len", "8192")
    old, new = (
        plan_layout(Setup(model, box, get_engine("vllm", version), server_args=args), "tp4").memory
        for version in ("0.19.0", "0.33.0")
    )
    assert old is not None and new is not None
    assert new.graph_gib == pytest.approx(old.graph_gib) and new.graph_gib > 1.0
    assert old.kv_budget_gib - new.kv_budget_gib == pytest.approx(new.graph_gib)
    assert new.to_json()["graph_gib"] == round(new.graph_gib, 2)
    assert {"activation_gib", "graph_gib", "non_torch_gib"} <= set(new.to_json())


def test_sglang_derives_the_logged_share_from_nvidia_smi():
    """The H100 log's mem_fraction_static=0.83 is what SGLang derives from nvidia-smi's 81,559 MiB;
    torch's 79.19 GiB would give 0.829 (get_nvgpu_memory_capacity, sglang/srt/utils/common.py)."""
    engine = get_engine("sglang")
    model, box = load("qwen3-30b-a3b-fp8"), hardware("h100", 1)
    placement = engine.placement(plan_layout(Setup(model, box, engine), "tp1").layout, 1, model)
    server = engine.check(())
    assert engine.memory_fraction(server, box.smi_total_gib, placement, model) == 0.83
    assert engine.memory_fraction(server, 79.19, placement, model) != 0.83
