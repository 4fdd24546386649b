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
    server_args,
)
from cockpit.engines.options import CheckedArgs, Option, OptionTable, check_args, option_table
from cockpit.engines.sglang import SGLang
from cockpit.engines.vllm import VLLM
from cockpit.errors import CockpitError

ENGINES: dict[str, Engine] = {"vllm": VLLM(), "sglang": SGLang()}


def get_engine(name: str, version: str | None = None) -> Engine:
    """The adapter for an engine, speaking ``version`` (None: the newest cockpit knows)."""
    try:
        default = ENGINES[name.lower()]
    except KeyError:
        raise CockpitError(f"unknown engine '{name}': use one of {', '.join(ENGINES)}") from None
    return default if version in (None, default.version) else type(default)(version)


__all__ = [
    "ENGINES",
    "CheckedArgs",
    "Option",
    "OptionTable",
    "check_args",
    "option_table",
    "server_args",
    "Engine",
    "Inexpressible",
    "Placement",
    "Rule",
    "ServerArgs",
    "api_keys",
    "get_engine",
    "parse_server_args",
]
