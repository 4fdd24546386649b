"""Engine adapters: one per inference engine, behind ``Engine``."""

from __future__ import annotations

from cockpit.core.errors import CockpitError
from cockpit.engines.arguments import check_args
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
from cockpit.engines.options import CheckedArgs, Option, OptionTable, option_table
from cockpit.engines.sglang import SGLang
from cockpit.engines.surface import EngineSurface
from cockpit.engines.vllm import VLLM

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (VLLM(), SGLang())}
ENGINE_NAMES = tuple(ENGINES)  # what a person may choose, in the order the help lists them
DEFAULT_ENGINE = VLLM.name  # a profile that names no engine


def surfaces() -> tuple[EngineSurface, ...]:
    """Every engine's surface (what it prints and serves), in the order cockpit lists engines."""
    return tuple(engine.surface for engine in ENGINES.values())


def surface(name: str) -> EngineSurface:
    """The surface of the engine called ``name`` (any case)."""
    return get_engine(name).surface


def get_engine(name: str, version: str | None = None) -> Engine:
    """The adapter for an engine, speaking ``version`` (None: the newest cockpit knows)."""
    try:
        default = ENGINES[name.lower()]
    except KeyError:
        raise CockpitError(f"unknown engine '{name}': use one of {', '.join(ENGINES)}") from None
    return default if version in (None, default.version) else type(default)(version)


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENGINE_NAMES",
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
    "surface",
    "surfaces",
    "parse_server_args",
]
