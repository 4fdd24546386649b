from __future__ import annotations

import math

import pytest

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import (
    CATALOG,
    LINKS,
    Hardware,
    from_nvml_name,
    gpu_type,
    hardware,
    parse_box,
)

MIB = 2**20


@pytest.mark.parametrize(
    "name, key",
    [
        ("RTX PRO 6000", "rtx-pro-6000"),
        ("rtx-pro-6000", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("RTX PRO 6000 Blackwell", "rtx-pro-6000"),
        ("NVIDIA H200", "h200"),
        ("h200", "h200"),
        ("H100 80GB HBM3", "h100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("H100", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("H20", "h20"),
    ],
)
def test_lookup(name: str, key: str) -> None:
    assert gpu_type(name).key == key


def test_rtx_pro_6000_memory_is_what_torch_reports() -> None:
    assert gpu_type("rtx-pro-6000").memory_gib == 94.97


def test_catalog_is_consistent() -> None:
    for key, gpu in CATALOG.items():
        assert gpu.key == key
        assert gpu.link in LINKS
        assert gpu.memory_gib > 0 and gpu.mem_bw_gbs > 0 and (gpu.power_w > 0 or gpu.device == "cpu")
        assert "bf16" in gpu.flops_tflops
        assert gpu_type(gpu.name) is gpu


def test_unknown_name_lists_known_types() -> None:
    with pytest.raises(CockpitError) as caught:
        gpu_type("voodoo5")
    message = str(caught.value)
    assert "unknown GPU type 'voodoo5'" in message
    assert "rtx-pro-6000" in message and "h200" in message and "--gpu-mem" in message


def test_ambiguous_name() -> None:
    with pytest.raises(CockpitError, match="h100, a100"):
        gpu_type("80GB")


def test_a_different_card_is_not_mistaken_for_a_known_one() -> None:
    with pytest.raises(CockpitError):
        gpu_type("NVIDIA H100 PCIe")


@pytest.mark.parametrize(
    "spec, count, key",
    [
        ("8xrtx-pro-6000", 8, "rtx-pro-6000"),
        ("4xh200", 4, "h200"),
        ("8 x H100", 8, "h100"),
        ("2X L40S", 2, "l40s"),
        (" 8x rtx pro 6000 ", 8, "rtx-pro-6000"),
    ],
)
def test_parse_box(spec: str, count: int, key: str) -> None:
    box = parse_box(spec)
    assert (box.count, box.gpu.key) == (count, key)
    assert box.memory_gib == box.gpu.memory_gib


@pytest.mark.parametrize("spec", ["", "8", "h200", "x8 h200", "eightxh200"])
def test_parse_box_errors(spec: str) -> None:
    with pytest.raises(CockpitError, match="8xrtx-pro-6000"):
        parse_box(spec)


def test_parse_box_unknown_type_and_zero_count() -> None:
    with pytest.raises(CockpitError, match="unknown GPU type 'voodoo5'"):
        parse_box("8xvoodoo5")
    with pytest.raises(CockpitError, match="1 GPU or more"):
        parse_box("0xh200")


def test_str() -> None:
    assert str(parse_box("8xrtx-pro-6000")) == "8 x RTX PRO 6000 Blackwell (94.97 GiB, PCIe 5)"
    assert str(parse_box("4xh200")) == "4 x H200 SXM 141GB (139.81 GiB, NVLink 4)"


def test_memory_override() -> None:
    box = hardware("rtx-pro-6000", 8, memory_gib=90.0)
    assert box.memory_gib == 90.0
    assert box.gpu.memory_gib == 94.97
    assert hardware("h200", 2).memory_gib == 139.81


def test_unknown_type_with_memory_is_allowed() -> None:
    box = hardware("voodoo5", 2, memory_gib=23.5)
    assert (box.gpu.key, box.memory_gib, box.link.key) == ("unknown", 23.5, "pcie4")


def test_hardware_errors() -> None:
    with pytest.raises(CockpitError, match="1 GPU or more"):
        hardware("h200", 0)
    with pytest.raises(CockpitError, match="above 0 GiB"):
        hardware("h200", 8, memory_gib=0)
    with pytest.raises(CockpitError, match="unknown GPU type"):
        hardware("voodoo5", 8)


def test_link_property() -> None:
    assert parse_box("8xrtx-pro-6000").link.key == "pcie5"
    assert parse_box("8xh100").link.key == "nvlink4"
    assert parse_box("8xb200").link.key == "nvlink5"


def test_hardware_is_hashable() -> None:
    assert hash(parse_box("8xh200")) == hash(parse_box("8xh200"))


def test_from_nvml_known_name_keeps_the_torch_figure() -> None:
    box = from_nvml_name("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887 * MIB, 8)
    assert (box.gpu.key, box.count, box.memory_gib) == ("rtx-pro-6000", 8, 94.97)


def test_from_nvml_known_name_with_less_memory() -> None:
    box = from_nvml_name("NVIDIA H100 80GB HBM3", 60 * 2**30, 1)
    assert box.memory_gib == 60.0


def test_from_nvml_unknown_name_falls_back() -> None:
    box = from_nvml_name("NVIDIA GeForce RTX 4090", 24564 * MIB, 2)
    assert box.gpu.key == "unknown"
    assert box.gpu.name == "NVIDIA GeForce RTX 4090"
    assert box.memory_gib == pytest.approx(23.99, abs=0.01)
    assert box.link.key == "pcie4"
    assert str(box) == "2 x GeForce RTX 4090 (23.99 GiB, PCIe 4)"


def test_from_nvml_never_guesses_loosely() -> None:
    # NVML names are exact; "L40" must not become an L40S.
    assert from_nvml_name("NVIDIA L40", 46068 * MIB, 1).gpu.key == "unknown"


def test_from_nvml_survives_odd_readings() -> None:
    assert from_nvml_name("", 0, 1).gpu.key == "unknown"
    assert from_nvml_name("NVIDIA H200", 0, 1).memory_gib == 139.81


def test_pcie_allreduce_by_group_size() -> None:
    pcie = LINKS["pcie5"]
    assert pcie.allreduce_latency(8) == pcie.allreduce_latency_us == 25.0
    assert pcie.allreduce_busbw(8) == pcie.allreduce_busbw_gbs == 12.0
    assert pcie.allreduce_latency(2) < pcie.allreduce_latency(4) < pcie.allreduce_latency(8)
    assert pcie.allreduce_latency(6) == pcie.allreduce_latency(8)  # odd sizes round up
    assert pcie.allreduce_latency(16) == 25.0
    assert pcie.allreduce_latency(1) == 0.0 and math.isinf(pcie.allreduce_busbw(1))


def test_nvlink_is_faster_than_pcie() -> None:
    # At 2 GPUs a PCIe all-reduce is about as quick as NVLink's; at 8 it is not
    # (docs/performance.md#collectives).
    assert LINKS["nvlink4"].allreduce_latency(8) < LINKS["pcie5"].allreduce_latency(8)
    for n in (2, 4, 8):
        assert LINKS["nvlink4"].allreduce_busbw(n) > LINKS["pcie5"].allreduce_busbw(n)


def test_hardware_default_memory() -> None:
    assert Hardware(gpu_type("l40s"), 4).memory_gib == gpu_type("l40s").memory_gib


@pytest.mark.parametrize("memory", [math.inf, math.nan, -1.0, 0, 16385, True, "80"])
def test_absurd_memory_is_refused(memory) -> None:
    with pytest.raises(CockpitError) as caught:
        hardware("h200", 8, memory_gib=memory)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("count", [0, -1, 513, 10**20, True, 8.0, "8"])
def test_absurd_counts_are_refused(count) -> None:
    with pytest.raises(CockpitError, match="1 GPU or more"):
        hardware("h200", count)


def test_a_box_of_512_is_the_largest() -> None:
    assert hardware("h200", 512).count == 512
    with pytest.raises(CockpitError, match="more than 512"):
        parse_box("9" * 5000 + "xh200")


def test_shown_values_stay_short() -> None:
    from cockpit.core.errors import shown

    assert shown(10**5000) == "a number of about 5,000 digits"
    assert len(shown("x" * 1000)) == 60 and len(shown([[list(range(100))] * 100] * 100)) <= 60
    assert shown([10**5000]) == "a list too long to show"
