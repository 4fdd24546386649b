"""GPU samples from the simulated box, read the way NVML reads a driver.

The per-GPU arithmetic (memory summed over live processes, power floor and cap, temperature)
lives in `cockpit.sim.box`; this adapter only turns it into `GpuSample`s. Memory adds no
baseline here: each process's published figure already includes its CUDA context.
"""

from __future__ import annotations

import time

from cockpit.sim.box import BoxState, SimBox
from cockpit.telemetry.base import GpuProcess, GpuSample, GpuSource


class SimBoxSource(GpuSource):
    """One sample per GPU of a simulated box; the GPU name is the catalog's NVML name."""

    def __init__(self, box: SimBox | None = None) -> None:
        self.box = box if box is not None else SimBox.from_env()
        self.name = f"simulated {self.box.name}"

    def sample(self) -> list[GpuSample]:
        try:
            state = self.box.read()
        except OSError:  # the folder went away or became unreadable: n/a, not a crash
            return [self._unknown(index, time.time()) for index in range(self.box.hardware.count)]
        return [self._sample(state, index) for index in range(self.box.hardware.count)]

    def _sample(self, state: BoxState, index: int) -> GpuSample:
        power = state.power_w(index)
        return GpuSample(
            index=index,
            name=self.box.hardware.gpu.name,
            memory_used=state.used_bytes(index),
            memory_total=self.box.memory_bytes,
            power_w=power,
            power_limit_w=self.box.hardware.gpu.power_w,
            utilization=state.utilization(index),
            temperature_c=state.temperature_c(index),
            processes=tuple(
                GpuProcess(process.pid, process.name, load.used_bytes) for process, load in state.loads(index)
            ),
            time=state.time,
        )

    def _unknown(self, index: int, now: float) -> GpuSample:
        return GpuSample(
            index=index,
            name=self.box.hardware.gpu.name,
            memory_used=None,
            memory_total=self.box.memory_bytes,
            power_w=None,
            power_limit_w=self.box.hardware.gpu.power_w,
            utilization=None,
            temperature_c=None,
            time=now,
        )
