"""The GPU sample every telemetry source produces: NVML, the simulated box, Prometheus.

Every reading may be None, meaning "n/a": one field a driver cannot give (power on some
boards, processes in a container) must show as n/a, never take the whole sample down.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class GpuProcess:
    """One process holding memory on a GPU, as `nvidia-smi` lists it."""

    pid: int
    name: str
    used_bytes: int


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment: memory in bytes, power in W, utilization 0-100, time.time()."""

    index: int
    name: str
    memory_used: int | None
    memory_total: int | None
    power_w: float | None
    power_limit_w: float | None
    utilization: float | None
    temperature_c: float | None
    processes: tuple[GpuProcess, ...] = ()
    time: float = 0.0
    node: str = ""  # the node it sits in, on a cluster (cockpit.core.cluster); "" on one box

    @property
    def memory_used_gib(self) -> float | None:
        return None if self.memory_used is None else self.memory_used / GIB

    @property
    def memory_fraction(self) -> float | None:
        """Used over total, 0-1; None when either is unknown or the total is not positive."""
        if self.memory_used is None or not self.memory_total or self.memory_total <= 0:
            return None
        return self.memory_used / self.memory_total


class GpuSource(ABC):
    """Where GPU samples come from. Screens poll `sample()` and never see which source it is."""

    name: str
    last_error: str | None = None  # why the last sample came back empty, in words, if known

    @abstractmethod
    def sample(self) -> list[GpuSample]:
        """One sample per GPU, in index order. A field that fails reads None; it never raises."""

    def close(self) -> None:  # noqa: B027  (a hook: most sources hold nothing)
        """Release what the source holds (an NVML handle, an HTTP client)."""

    def __enter__(self) -> GpuSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


NA_NAME = "n/a"


def unknown_sample(index: int, name: str = NA_NAME, time: float = 0.0) -> GpuSample:
    """A GPU known to be there that could not be read: every reading n/a, so panes keep their slot."""
    return GpuSample(
        index=index,
        name=name,
        memory_used=None,
        memory_total=None,
        power_w=None,
        power_limit_w=None,
        utilization=None,
        temperature_c=None,
        time=time,
    )
