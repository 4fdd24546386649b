"""Engine adapters: one per inference engine, behind ``Engine``."""

from __future__ import annotations

from cockpit.engines.base import (
    Engine,
    Inexpressible,
    Placement,
    Rule,
    ServerArgs,
    api_keys,
    parse_server_args,
)
from cockpit.engines.sglang import SGLang
from cockpit.engines.vllm import VLLM
from cockpit.errors import CockpitError

ENGINES: dict[str, Engine] = {"vllm": VLLM(), "sglang": SGLang()}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name.lower()]
    except KeyError:
        raise CockpitError(f"unknown engine '{name}': use one of {', '.join(ENGINES)}") from None


__all__ = [
    "ENGINES",
    "Engine",
    "Inexpressible",
    "Placement",
    "Rule",
    "ServerArgs",
    "api_keys",
    "get_engine",
    "parse_server_args",
]
