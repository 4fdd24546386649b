"""NVML, the real GPUs' driver interface. Every call that fails means "n/a", never a crash.

As in nvitop, one helper (`nvml_query`) makes every NVML call and turns any failure into
None: a board without power readings, a container that cannot list processes, a GPU that
fell off the bus, or a binding older than the driver each blank one field, not the pane.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import psutil

from cockpit.core.errors import CockpitError
from cockpit.telemetry.base import NA_NAME, GpuProcess, GpuSample, GpuSource, unknown_sample

log = logging.getLogger(__name__)

# The process lists NVML keeps per GPU; a process can appear in both.
_PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")


def driver_present() -> bool:
    """True when an NVIDIA driver answers (pynvml initialises and sees at least one GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError, missing libnvidia-ml.so, anything the binding raises
        return False


def nvml_query(nvml: Any, function: str, *args: Any) -> Any:
    """`nvml.<function>(*args)`, or None when it fails in any way (missing function included)."""
    try:
        return getattr(nvml, function)(*args)
    except Exception as error:  # NVMLError_NotSupported, _NoPermission, _GpuIsLost, ...
        log.debug("NVML %s%r failed: %r", function, args, error)
        return None


class NvmlSource(GpuSource):
    """One sample per GPU from the NVIDIA driver; `indices` watches a subset (NVML numbering)."""

    def __init__(self, indices: Sequence[int] | None = None, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as error:
            raise CockpitError(
                f"no NVIDIA driver: NVML did not initialise ({error}): "
                "run with --sim to use the simulated box"
            ) from None
        self._open = True
        if indices is None:
            count = self._query("nvmlDeviceGetCount")
            if not count:
                self.close()
                raise CockpitError(
                    "no NVIDIA GPU: NVML initialised but lists no GPUs: "
                    "run with --sim to use the simulated box"
                )
            indices = range(count)
        self.indices = tuple(indices)
        self.name = "nvml"
        self._handles: dict[int, Any] = {}
        self._names: dict[int, str] = {}

    def _query(self, function: str, *args: Any) -> Any:
        return nvml_query(self._nvml, function, *args)

    def sample(self) -> list[GpuSample]:
        now = time.time()
        return [self._sample(index, now) for index in self.indices]

    def _sample(self, index: int, now: float) -> GpuSample:
        handle = self._handle(index)
        if handle is None:  # lost or never there: keep its slot, every reading n/a
            return unknown_sample(index, self._names.get(index, NA_NAME), now)
        memory = self._query("nvmlDeviceGetMemoryInfo", handle)
        utilization = self._query("nvmlDeviceGetUtilizationRates", handle)
        temperature = getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0)
        return GpuSample(
            index=index,
            name=self._name(index, handle),
            memory_used=_count(_attribute(memory, "used")),
            memory_total=_count(_attribute(memory, "total")),
            power_w=_watts(self._query("nvmlDeviceGetPowerUsage", handle)),
            power_limit_w=_watts(self._query("nvmlDeviceGetEnforcedPowerLimit", handle)),
            utilization=_number(_attribute(utilization, "gpu")),
            temperature_c=_number(self._query("nvmlDeviceGetTemperature", handle, temperature)),
            processes=self._processes(handle),
            time=now,
        )

    def _handle(self, index: int) -> Any:
        """The GPU's handle, kept once found; a failed lookup is retried on the next sample."""
        if index not in self._handles:
            handle = self._query("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return None
            self._handles[index] = handle
        return self._handles[index]

    def _name(self, index: int, handle: Any) -> str:
        """The board's name, asked until NVML gives it, then kept: it never changes."""
        if index not in self._names:
            name = self._query("nvmlDeviceGetName", handle)
            if isinstance(name, bytes):  # bindings before 11.515 return bytes
                name = name.decode(errors="replace")
            if not isinstance(name, str) or not name:
                return NA_NAME
            self._names[index] = name
        return self._names[index]

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        """Compute and graphics processes, each PID once; memory NVML withholds counts as 0."""
        processes: dict[int, GpuProcess] = {}
        for function in _PROCESS_LISTS:
            for info in self._query(function, handle) or ():
                pid = _count(_attribute(info, "pid"))
                if pid is None or pid in processes:
                    continue
                used = _count(_attribute(info, "usedGpuMemory")) or 0
                processes[pid] = GpuProcess(pid, _process_name(pid), used)
        return tuple(processes.values())

    def close(self) -> None:
        """Shut NVML down once; later calls do nothing."""
        if getattr(self, "_open", False):
            self._open = False
            self._query("nvmlShutdown")


def _process_name(pid: int) -> str:
    """The process's name as the host sees it; "?" once it has gone or is not ours to read."""
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return "?"


def _attribute(value: Any, name: str) -> Any:
    return None if value is None else getattr(value, name, None)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _watts(milliwatts: Any) -> float | None:
    value = _number(milliwatts)
    return None if value is None else value / 1000
