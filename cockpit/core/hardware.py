"""GPU types, GPU-to-GPU links, and the box they make: the constants the planner divides by.

Memory is what torch reports as a GPU's total ("GPU 2 has a total capacity of 94.97 GiB"),
not the marketing figure, because engines budget against that number. Sources are given
next to each figure and gathered in docs/performance.md#hardware-constants and
docs/performance.md#collectives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from cockpit.core.errors import CockpitError, shown

GIB = 2**30
# Upper bounds that no real box reaches, so a typo (`--gpus 80000`, `--gpu-mem 1e9`) is refused
# in one line instead of planning (or simulating) an absurd box. The largest single nodes hold
# 8-72 GPUs of at most a few hundred GiB each.
MAX_GPUS = 512
MAX_GPU_MEM_GIB = 16384.0


def check_gpu_count(count: object, where: str = "the GPU count") -> int:
    """A GPU count a box can have: a whole number from 1 to MAX_GPUS (bools are not numbers)."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise CockpitError(
            f"{where} has the wrong type: a box needs 1 GPU or more, a whole number up to {MAX_GPUS} "
            f"(got {shown(count)}): give a count like 8"
        )
    if not 1 <= count <= MAX_GPUS:
        raise CockpitError(
            f"{where}: a box needs 1 GPU or more and at most {MAX_GPUS} (got {shown(count)}): "
            "give the GPUs of one box, like 8"
        )
    return count


def check_gpu_memory(gib: object, where: str = "GPU memory") -> float:
    """Memory per GPU in GiB: a finite number above 0 and at most MAX_GPU_MEM_GIB."""
    if isinstance(gib, bool) or not isinstance(gib, (int, float)):
        raise CockpitError(
            f"{where} has the wrong type: it is GiB per GPU, a number above 0 GiB (got {shown(gib)}): "
            "give it like 94.97"
        )
    if not (0 < gib <= MAX_GPU_MEM_GIB):  # also refuses nan and inf
        raise CockpitError(
            f"{where} must be above 0 GiB and at most {MAX_GPU_MEM_GIB:,.0f} GiB per GPU "
            f"(got {shown(gib)}): give it like 94.97"
        )
    return float(gib)


@dataclass(frozen=True)
class LinkClass:
    """How GPUs in a box talk: point-to-point bandwidth and small/large all-reduce costs.

    `allreduce_latency_us` and `allreduce_busbw_gbs` are the 8-GPU figures; `by_group`
    holds measured (group_size, latency_us, busbw_gbs) points for smaller groups where
    we have them, since on PCIe a TP2 all-reduce is much cheaper than a TP8 one.
    """

    key: str
    name: str
    p2p_gbs: float  # per direction
    allreduce_latency_us: float  # small-message NCCL all-reduce floor, 8 GPUs
    allreduce_busbw_gbs: float  # large-message all-reduce bus bandwidth, 8 GPUs
    by_group: tuple[tuple[int, float, float], ...] = ()

    def allreduce_latency(self, group_size: int) -> float:
        """Small-message all-reduce time in us for a group; a group of one costs nothing."""
        return self._point(group_size)[1]

    def allreduce_busbw(self, group_size: int) -> float:
        """All-reduce bus bandwidth in GB/s for a group; a group of one is unlimited."""
        return self._point(group_size)[2]

    def _point(self, group_size: int) -> tuple[int, float, float]:
        if group_size <= 1:
            return (group_size, 0.0, math.inf)
        # Odd sizes take the next measured size up (TP6 costs like TP8): the cautious side.
        for point in self.by_group:
            if point[0] >= group_size:
                return point
        return (group_size, self.allreduce_latency_us, self.allreduce_busbw_gbs)


@dataclass(frozen=True)
class InterLink:
    """The network between nodes, per GPU: each GPU's share of the node's NICs (one 400 Gb/s
    NIC per GPU on an HGX box is 50 GB/s per direction), and a small message's latency."""

    name: str = "InfiniBand NDR"
    bandwidth_gbs: float = 50.0  # per GPU, per direction
    latency_us: float = 10.0  # a small all-reduce across nodes, software included

    def __str__(self) -> str:
        return f"{self.name} ({self.bandwidth_gbs * 8:.0f} Gb/s per GPU, {self.latency_us:g} us)"


LINKS: dict[str, LinkClass] = {
    link.key: link
    for link in (
        # AIConfigurator's NCCL all-reduce tables from an 8x RTX PRO 6000 PCIe host
        # (ai-dynamo/aiconfigurator, systems/data/rtx_pro_6000_server): latency floor ~4/13/25 us
        # for 2/4/8 GPUs; bus bandwidth ~20 GB/s (2 GPUs), ~12 (4 and 8), from 64 MB messages.
        # p2p: x16 Gen5 is 64 GB/s per direction, ~50 in practice through a switch.
        LinkClass(
            "pcie5",
            "PCIe 5",
            50.0,
            25.0,
            12.0,
            by_group=((2, 4.0, 20.0), (4, 13.0, 12.0), (8, 25.0, 12.0)),
        ),
        # Not measured: half of PCIe 5's bandwidth, same latencies (software and hops dominate).
        LinkClass(
            "pcie4",
            "PCIe 4",
            25.0,
            25.0,
            6.0,
            by_group=((2, 4.0, 10.0), (4, 13.0, 6.0), (8, 25.0, 6.0)),
        ),
        # A100: NVLink 3, 600 GB/s bidirectional. Collectives not measured: NVLink 4's
        # latency, bus bandwidth scaled by link speed (210 x 300/450).
        LinkClass("nvlink3", "NVLink 3", 300.0, 5.0, 140.0),
        # AIConfigurator's H200 vLLM custom all-reduce data: 4.7 us floor at 8 GPUs, ~210 GB/s
        # bus bandwidth; H100/H200 datasheets: 900 GB/s bidirectional per GPU via NVSwitch.
        LinkClass("nvlink4", "NVLink 4", 450.0, 5.0, 210.0),
        # B200: NVLink 5, 1.8 TB/s bidirectional (HGX B200 datasheet). Bus bandwidth scaled
        # from NVLink 4 by link speed; not measured.
        LinkClass("nvlink5", "NVLink 5", 900.0, 5.0, 420.0),
        # The ranks of vLLM's CPU backend meet in host memory (gloo over shared memory,
        # vllm/distributed/device_communicators/cpu_communicator.py). Not measured: a
        # conservative floor for what only a TP>1 CPU run would pay.
        LinkClass("host", "host memory", 10.0, 50.0, 5.0),
    )
}


@dataclass(frozen=True)
class GpuType:
    """One GPU model. `name` is the NVML name; `label` is the short one people read."""

    key: str
    name: str
    label: str
    memory_gib: float  # total as torch reports it
    mem_bw_gbs: float  # peak
    flops_tflops: dict[str, float] = field(hash=False)  # dense, by dtype: bf16 fp8 fp4 int8
    power_w: float  # board limit
    link: str  # a LINKS key
    pcie_gen: int
    aliases: tuple[str, ...] = ()
    # CUDA compute capability (major, minor); (0, 0): unknown. Engines pick kernels, and with them
    # memory layouts, by it (docs/memory.md#mxfp4-experts-on-gpus-without-native-fp4).
    capability: tuple[int, int] = (0, 0)
    # The total nvidia-smi prints (MiB), which is what SGLang sizes its memory share by
    # (get_nvgpu_memory_capacity, sglang/srt/utils/common.py); 0: not known, use memory_gib.
    smi_total_mib: float = 0.0
    # What the engine runs on: "cuda" for the NVIDIA GPUs, "cpu" for vLLM's CPU build, where the
    # "GPU" is the host's memory and cores (docs/placement.md#a-cpu-box).
    device: str = "cuda"

    @property
    def native_fp4(self) -> bool:
        """Whether the tensor cores compute in FP4 (Blackwell, SM100 and later). Hopper and Ampere
        run FP4 checkpoints weight-only through Marlin or Triton kernels that repack the experts
        ("Your GPU does not have native support for FP4 computation but FP4 quantization is being
        used", vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py)."""
        return self.capability >= (10, 0)


# Memory: the torch "total capacity" in OOM messages on that GPU. Bandwidth, FLOPs, power:
# NVIDIA's datasheets (dense, i.e. half the "with sparsity" figures), see
# docs/performance.md#hardware-constants.
CATALOG: dict[str, GpuType] = {
    gpu.key: gpu
    for gpu in (
        GpuType(
            "rtx-pro-6000",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "RTX PRO 6000 Blackwell",
            94.97,  # torch: "total capacity of 94.97 GiB"; 97,887 MiB in nvidia-smi (antirez/ds4#431)
            1792.0,  # RTX PRO 6000 Blackwell datasheet
            # AIConfigurator's systems/rtx_pro_6000_server.yaml (scaled to the observed clock);
            # INT8 runs at the FP8 rate.
            {"bf16": 468.0, "fp8": 936.0, "fp4": 1871.0, "int8": 936.0},
            600.0,
            "pcie5",
            5,
            ("rtx pro 6000 blackwell workstation edition", "rtx 6000 pro"),
            (12, 0),  # SM120, consumer Blackwell
            97887.0,
        ),
        GpuType(
            "h100",
            "NVIDIA H100 80GB HBM3",
            "H100 SXM 80GB",
            79.11,  # vllm-project/vllm#27508: "total capacity of 79.11 GiB" on an H100
            3350.0,  # H100 SXM datasheet
            {"bf16": 989.0, "fp8": 1979.0, "int8": 1979.0},
            700.0,
            "nvlink4",
            5,
            ("h100 sxm", "h100 sxm5", "h100 sxm 80gb"),
            (9, 0),
            81559.0,  # nvidia-smi on H100 80GB HBM3 boxes: "0MiB /  81559MiB"
        ),
        GpuType(
            "h200",
            "NVIDIA H200",
            "H200 SXM 141GB",
            139.81,  # torch OOMs on 8xH200 boxes: 139.80-139.81 GiB (nvidia-smi 143,771 MiB)
            4800.0,  # H200 datasheet
            {"bf16": 989.0, "fp8": 1979.0, "int8": 1979.0},
            700.0,
            "nvlink4",
            5,
            ("h200 sxm", "h200 141gb"),
            (9, 0),
            143771.0,  # nvidia-smi: "124585MiB / 143771MiB" (sgl-project/sglang#3196)
        ),
        GpuType(
            "b200",
            "NVIDIA B200",
            "B200",
            178.35,  # torch OOMs on 8xB200 boxes: 178.35-178.36 GiB (HGX B200: 180 GB per GPU)
            8000.0,  # HGX B200 datasheet: 8 TB/s
            {"bf16": 2250.0, "fp8": 4500.0, "fp4": 9000.0, "int8": 4500.0},
            1000.0,
            "nvlink5",
            5,
            ("b200 sxm", "hgx b200"),
            (10, 0),  # SM100, data-center Blackwell
        ),
        GpuType(
            "a100",
            "NVIDIA A100-SXM4-80GB",
            "A100 SXM 80GB",
            79.15,  # torch OOMs on A100 80GB (nvidia-smi 81,920 MiB): 79.15 GiB
            2039.0,  # A100 datasheet, SXM 80GB
            {"bf16": 312.0, "int8": 624.0},
            400.0,
            "nvlink3",
            4,
            ("a100 80gb", "a100 sxm", "a100 sxm4"),
            (8, 0),
            81920.0,
        ),
        GpuType(
            "l40s",
            "NVIDIA L40S",
            "L40S",
            44.42,  # stepfun-ai/Step-Video-T2V#8 (8xL40S): "total capacity of 44.42 GiB"
            864.0,  # L40S datasheet
            {"bf16": 362.0, "fp8": 733.0, "int8": 733.0},
            350.0,
            "pcie4",
            4,
            capability=(8, 9),
            smi_total_mib=46068.0,  # nvidia-smi: "1MiB /  46068MiB" (sgl-project/sglang#13023)
        ),
        GpuType(
            "h20",
            "NVIDIA H20",
            "H20",
            # Estimated, no torch report found: 96 GB HBM3 shows as ~97,871 MiB in nvidia-smi;
            # less the ~0.62 GiB torch cannot see on the RTX PRO 6000 (97,887 MiB -> 94.97).
            94.96,
            4000.0,  # H20 datasheet: 4.0 TB/s
            {"bf16": 148.0, "fp8": 296.0, "int8": 296.0},
            400.0,
            "nvlink4",
            5,
            capability=(9, 0),
        ),
        GpuType(
            "cpu",
            "CPU",
            "CPU (host memory)",
            # A profile gives the host memory the engine may use (hardware.memory_gib); this is
            # the default when it does not.
            16.0,
            # One memory channel's worth of DDR4/DDR5 as a 2-core guest sees it; what a box
            # achieves is learned from its launches (docs/performance.md#what-a-box-teaches).
            20.0,
            {"bf16": 0.2, "fp8": 0.2, "int8": 0.2},
            0.0,  # no board power to read
            "host",
            0,
            ("host", "x86", "x86_64", "cpu only"),
            device="cpu",
        ),
    )
}

_KNOWN = ", ".join(CATALOG)


@dataclass(frozen=True, init=False)
class Hardware:
    """A box: `count` GPUs of one type. `memory_gib` defaults to the type's, may be overridden."""

    gpu: GpuType
    count: int  # every GPU, over all nodes
    memory_gib: float  # per GPU, always set: the type's figure unless the box says otherwise
    nodes: int  # boxes the GPUs sit in (cockpit.core.cluster); 1: one box
    inter_link: (
        InterLink | None
    )  # the network between nodes (cockpit.core.cluster.InterLink); None on one box

    def __init__(
        self,
        gpu: GpuType,
        count: int,
        memory_gib: float | None = None,
        *,
        nodes: int = 1,
        inter_link: InterLink | None = None,
    ) -> None:
        # Written out so that `memory_gib` is a plain float once built; None only means "the type's".
        check_gpu_count(count, "the box's GPU count")
        if memory_gib is not None:
            check_gpu_memory(memory_gib)
        if nodes < 1 or count % nodes:
            raise CockpitError(f"{count} GPUs cannot be spread evenly over {nodes} nodes")
        object.__setattr__(self, "gpu", gpu)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "memory_gib", gpu.memory_gib if memory_gib is None else memory_gib)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "inter_link", inter_link)

    @property
    def gpus_per_node(self) -> int:
        return self.count // self.nodes

    @property
    def link(self) -> LinkClass:
        return LINKS[self.gpu.link]

    @property
    def on_cpu(self) -> bool:
        """A CPU box: the engine's CPU build runs on the host; no driver, nothing to simulate."""
        return self.gpu.device == "cpu"

    @property
    def smi_total_gib(self) -> float:
        """The GPU's total as nvidia-smi reports it, which is more than torch sees (94.97 GiB
        to CUDA, 97,887 MiB in nvidia-smi on an RTX PRO 6000); memory_gib when unknown or
        overridden for this box."""
        if self.gpu.smi_total_mib and self.memory_gib == self.gpu.memory_gib:
            return self.gpu.smi_total_mib / 1024
        return self.memory_gib

    def __str__(self) -> str:
        if self.nodes > 1:
            return (
                f"{self.nodes} nodes x {self.gpus_per_node} x {self.gpu.label} ({self.memory_gib:.2f} GiB, "
                f"{self.link.name} inside, {self.inter_link} between)"
            )
        return f"{self.count} x {self.gpu.label} ({self.memory_gib:.2f} GiB, {self.link.name})"


def gpu_type(name: str) -> GpuType:
    """Find a GPU type by key, alias or (part of) its NVML name: `h200`, "NVIDIA H100 80GB HBM3"."""
    wanted = _compact(name)
    found = _exact(wanted)
    if found is not None:
        return found
    if len(wanted) >= 3:  # loose matching only for something more than a digit or two
        hits = [gpu for gpu in CATALOG.values() if any(wanted in s for s in _spellings(gpu))]
        if len(hits) == 1:
            return hits[0]
        if hits:
            keys = ", ".join(gpu.key for gpu in hits)
            raise CockpitError(f"GPU type '{name}' could be any of {keys}: give one of those keys.")
    raise CockpitError(f"unknown GPU type '{name}': known types are {_KNOWN}; or give --gpu-mem GIB.")


def hardware(gpu: str, count: int, memory_gib: float | None = None) -> Hardware:
    """A box from what a person typed. An unknown type is allowed when they give its memory."""
    check_gpu_count(count)
    if memory_gib is not None:
        memory_gib = check_gpu_memory(memory_gib)
    try:
        kind = gpu_type(gpu)
    except CockpitError:
        if memory_gib is None:
            raise
        kind = _generic(gpu, memory_gib)
    return Hardware(kind, count, memory_gib)


def parse_box(spec: str) -> Hardware:
    """Read `8xrtx-pro-6000`, `4xh200`, `8 x H100` (the COCKPIT_SIM_GPUS form)."""
    match = re.fullmatch(r"\s*(\d+)\s*[x×*]\s*(\S.*?)\s*", spec, flags=re.IGNORECASE)
    if match is None:
        raise CockpitError(
            f"cannot read the GPU box '{spec}': write COUNTxTYPE, like `8xrtx-pro-6000` or `4xh200`."
        )
    if len(match[1]) > 6:  # int() of a thousand-digit count is slow and then refused anyway
        raise CockpitError(
            f"the GPU box '{spec[:60]}' has more than {MAX_GPUS} GPUs: give the GPUs of one box, like `8xh200`"
        )
    return hardware(match[2], int(match[1]))


def from_nvml_name(name: str, memory_total_bytes: int, count: int) -> Hardware:
    """A box from what NVML reports. Never fails on an unknown name: detection must not crash.

    NVML's total includes memory torch cannot use, so a known type keeps its catalog
    figure unless NVML reports less (a cut-down variant under the same name).
    """
    reported_gib = max(memory_total_bytes, 0) / GIB
    kind = _exact(_compact(name))
    if kind is None:
        return Hardware(_generic(name, reported_gib), count)
    if reported_gib <= 0:
        return Hardware(kind, count)
    return Hardware(kind, count, min(kind.memory_gib, reported_gib))


def _generic(name: str, memory_gib: float) -> GpuType:
    """A GPU we have no figures for: its memory, and deliberately modest everything else."""
    label = re.sub(r"^\s*nvidia\s+", "", name, flags=re.IGNORECASE).strip() or "unknown GPU"
    return GpuType(
        key="unknown",
        name=name,
        label=label,
        memory_gib=memory_gib,
        mem_bw_gbs=800.0,
        flops_tflops={"bf16": 200.0},
        power_w=300.0,
        link="pcie4",
        pcie_gen=4,
    )


def _compact(text: str) -> str:
    """'NVIDIA RTX PRO 6000' and 'rtx-pro-6000' both become 'rtxpro6000'."""
    return re.sub(r"[^a-z0-9]", "", str(text).lower().replace("nvidia", ""))


def _spellings(gpu: GpuType) -> set[str]:
    return {_compact(s) for s in (gpu.key, gpu.name, gpu.label, *gpu.aliases)}


def _exact(wanted: str) -> GpuType | None:
    if not wanted:
        return None
    return next((gpu for gpu in CATALOG.values() if wanted in _spellings(gpu)), None)
