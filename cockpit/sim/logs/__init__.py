"""Startup logs in each engine's own words (docs/simulator.md#log-texts).

The lines cockpit reads (progress bars, weights loaded, the KV lines, CUDA graphs, the ready
line, errors and deprecation warnings) are printed exactly as vLLM 0.33.0 and SGLang 0.5.23
print them, each next to the upstream file it comes from; the rest is a short sketch.
"""

from __future__ import annotations

from cockpit.sim.logs.base import EngineLog, Out
from cockpit.sim.logs.sglang import SGLangLog
from cockpit.sim.logs.vllm import VLLMLog


def for_engine(engine: str, out: Out) -> EngineLog:
    return VLLMLog(out) if engine == "vllm" else SGLangLog(out)


__all__ = ["EngineLog", "SGLangLog", "VLLMLog", "for_engine"]
