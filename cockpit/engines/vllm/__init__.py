"""vLLM: its adapter, memory rules, log and metric vocabulary and option tables."""

from __future__ import annotations

from cockpit.engines.vllm.adapter import PYDANTIC_CONFIG, PYDANTIC_PREFIX, VLLM

__all__ = ["PYDANTIC_CONFIG", "PYDANTIC_PREFIX", "VLLM"]
