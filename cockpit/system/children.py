"""How cockpit starts Python children of its own (the simulated engine, the bench load generator).

`python -m cockpit.x` puts the current folder first on `sys.path`, so from inside a clone of
this repository the child would import the source tree's `cockpit/` rather than the installed
one (which, unlike the source tree, holds `cockpit.layouts`). `-P` (Python 3.11+) leaves the
current folder out; on 3.10 a one-line bootstrap drops it before running the module.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_BOOTSTRAP = (
    "import runpy, sys; del sys.path[0]; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
)


def python_module(module: str) -> list[str]:
    """argv that runs `module` as `python -m module` would, from the installed cockpit only."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", _BOOTSTRAP.format(module=module)]


def simulated_engine(engine: str, command: Sequence[str]) -> tuple[str, ...]:
    """The launcher that runs cockpit's simulated engine in place of the real one: the words
    before the engine's own argv, ``python -P -m cockpit.sim vllm -- vllm serve``. The real
    launcher words stay in, so the argv reads as the real one after ``--``."""
    return (*python_module("cockpit.sim"), engine, "--", *command)
