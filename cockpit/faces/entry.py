"""The console script's first step: Ctrl-C while the command is still importing ends quietly.

The ``cockpit`` script imports its entry point before any handler of ours runs; importing the
CLI (argparse, the planner, the engines' tables) takes a tenth of a second, and an interrupt in
that window would print Python's traceback. This module imports nothing of cockpit's at its top,
so the window left is the interpreter's own start.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


def main() -> int:
    try:
        from cockpit.faces.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        print("cockpit: interrupted", file=sys.stderr)
        return INTERRUPTED
