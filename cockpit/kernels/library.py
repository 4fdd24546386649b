"""The one place cockpit imports AIConfigurator's core (``aiconfigurator-core``, the ``kernels``
extra): lazily, the first time a prediction asks, never on a screen's startup path.

Only its public SDK is used: ``sdk.engine.EngineHandle`` (compile a model for a system, backend,
version and parallel sizes, then ask step latencies) and ``sdk.perf_database.get_version_slots``
(the engine versions it holds data for). Its own logging is kept off the terminal: a screen owns
it, and a warning the library prints (a layer count a pipeline does not divide) is no news to
the person planning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

PACKAGE = "aiconfigurator-core"


@dataclass(frozen=True)
class Library:
    """The parts of AIConfigurator cockpit calls, and its version for the labels."""

    version: str
    engine_handle: Any  # aiconfigurator_core.sdk.engine.EngineHandle
    perf_database: Any  # aiconfigurator_core.sdk.perf_database


_loaded: Library | None = None


def load() -> Library:
    """AIConfigurator, imported once; ImportError where the extra is not installed (tests put a
    failing loader here to see the analytic model stand in)."""
    global _loaded
    if _loaded is None:
        from importlib.metadata import version

        quiet = logging.getLogger("aiconfigurator_core")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.engine import EngineHandle

        _loaded = Library(version(PACKAGE), EngineHandle, perf_database)
    return _loaded
