"""The host as the one "GPU" of a CPU box, where vLLM's CPU build keeps weights and KV cache.

NVML lists the processes that hold memory on a GPU; on a CPU box the analogue is the engine's own
processes and their resident memory. So the pane's "memory used" is what the inference engines on
this host hold (their RSS), not the whole host's use: other programs' memory is not a busy box,
and a stray engine is (the launcher refuses a busy box the same way on both kinds). Utilisation is
the host's CPU use; power and temperature are n/a.
"""

from __future__ import annotations

import os
import re
import time

import psutil

from cockpit.engines import surfaces
from cockpit.engines.surface import any_of
from cockpit.telemetry.base import GpuProcess, GpuSample, GpuSource

# The processes of a real engine: the names its processes give themselves, and the launchers by
# their module or console script (cockpit/engines/<engine>/surface.py). cockpit's simulated engine
# is not one of them: it lives on a simulated box.
_ENGINE_NAME = any_of((f"^{e.process_title}" for e in surfaces()), re.IGNORECASE)
_ENGINE_MODULE = any_of(f"^{e.launcher_module}" for e in surfaces())
_CONSOLE_SCRIPTS = frozenset(e.console_script for e in surfaces() if e.console_script)


def is_engine_process(name: str, cmdline: list[str]) -> bool:
    """Whether a process (its name and argv) is a real inference engine's."""
    if _ENGINE_NAME.match(name):
        return True
    if "cockpit.sim" in cmdline:
        return False
    for i, word in enumerate(cmdline[:4]):
        if word == "-m" and i + 1 < len(cmdline) and _ENGINE_MODULE.match(cmdline[i + 1]):
            return True
        if os.path.basename(word) in _CONSOLE_SCRIPTS and cmdline[i + 1 : i + 2] == ["serve"]:
            return True
    return False


class HostSource(GpuSource):
    """One sample for the host (``count`` samples when a profile splits it into ranks: each
    reads the whole host, since the engine's ranks share its memory)."""

    name = "host"

    def __init__(self, count: int = 1) -> None:
        self.count = count
        psutil.cpu_percent(None)  # the first reading starts the interval the next one measures

    def sample(self) -> list[GpuSample]:
        now = time.time()
        processes = engine_processes()
        try:
            total: int | None = psutil.virtual_memory().total
        except OSError:
            total = None
        used = sum(p.used_bytes for p in processes)
        utilization = psutil.cpu_percent(None)
        label = f"CPU ({psutil.cpu_count() or '?'} cores)"
        return [
            GpuSample(
                index=index,
                name=label,
                memory_used=used,
                memory_total=total,
                power_w=None,
                power_limit_w=None,
                utilization=utilization,
                temperature_c=None,
                processes=tuple(processes),
                time=now,
            )
            for index in range(self.count)
        ]


def engine_processes() -> list[GpuProcess]:
    """The engine processes on this host with their resident memory; one that ends while it is
    read, or has ended and waits to be reaped (a zombie), is left out."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "memory_info", "status"]):
        try:
            info = proc.info
            if info["status"] == psutil.STATUS_ZOMBIE or info["memory_info"] is None:
                continue  # an ended process not yet reaped holds nothing
            if not is_engine_process(info["name"] or "", info["cmdline"] or []):
                continue
            found.append(GpuProcess(info["pid"], info["name"] or "?", int(info["memory_info"].rss)))
        except (psutil.Error, OSError):
            continue
    return sorted(found, key=lambda p: p.pid)
