"""Startup logs in each engine's own words (docs/simulator.md#log-texts).

The lines cockpit reads (progress bars, weights loaded, the KV lines, CUDA graphs, the ready
line, errors and deprecation warnings) are printed exactly as vLLM and SGLang 0.5.23 print them,
each next to the upstream file it comes from; vLLM's were checked line by line against a real
vLLM 0.32.0 (docs/simulator.md#checked-against-a-real-vllm).
"""

from __future__ import annotations

from collections.abc import Mapping

from cockpit.engines import surface
from cockpit.sim.logs.base import EngineLog, Out
from cockpit.sim.logs.sglang import SGLangLog
from cockpit.sim.logs.vllm import VLLMLog

_LOGS: dict[str, type[VLLMLog] | type[SGLangLog]] = {log.name: log for log in (VLLMLog, SGLangLog)}


def for_engine(engine: str, out: Out, env: Mapping[str, str] | None = None) -> EngineLog:
    """The engine's log; ``env`` (default: this process's) holds the variables its logger reads."""
    return _LOGS[surface(engine).name](out, env)


__all__ = ["EngineLog", "SGLangLog", "VLLMLog", "for_engine"]
