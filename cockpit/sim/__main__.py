"""``python -m cockpit.sim vllm -- serve MODEL --tensor-parallel-size 8 ...``: a simulated engine.

The words after ``--`` are the real engine's argv; its launcher words may be left in, as
``cockpit.system.children.simulated_engine`` leaves them: ``... -m cockpit.sim vllm -- vllm serve MODEL``.
"""

from __future__ import annotations

import signal
import sys

from cockpit.core.errors import CockpitError
from cockpit.engines import ENGINE_NAMES

USAGE = f"usage: python -m cockpit.sim {{{'|'.join(ENGINE_NAMES)}}} -- <the engine's argv>"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ENGINE_NAMES:
        print(USAGE, file=sys.stderr)
        return 2
    engine, rest = argv[0], argv[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    # SIGTERM before the server is up still runs the clean-up that frees the simulated memory.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from cockpit.sim.engine import run_engine
    from cockpit.sim.flags import parse_engine_args

    try:
        return run_engine(parse_engine_args(engine, rest))
    except CockpitError as exc:
        print(f"cockpit.sim: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
