"""Regenerate an engine's option table (cockpit/engines/tables/) from the engine itself.

Run it with the Python that has the engine installed (a CPU-only install is enough: only the
argument parser is built, nothing is loaded onto a GPU):

    /path/to/venv/bin/python tools/engine_options.py vllm > options.json
    python tools/engine_options.py --write options.json      # -> cockpit/engines/tables/vllm_<ver>.py

The first step imports the engine and reads every action of its server parser; the second turns
that JSON into the table module cockpit imports (plain Python data, so the pure core can use it
without reading files). Both steps in one: `--engine-python /path/to/venv/bin/python vllm`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

TABLES = Path(__file__).resolve().parent.parent / "cockpit" / "engines" / "tables"
HELP_CHARS = 200
COMMANDS = {
    "vllm": "vllm serve MODEL [options]",
    "sglang": "python -m sglang.launch_server --model-path MODEL [options]",
}


def use_vllm_cpu_platform_without_gpu() -> None:
    """Let a CPU-only vLLM build its parser: its platform detection finds no device and the option
    defaults (DeviceConfig) then fail with "Failed to infer device type" (vllm/config/device.py).
    VLLM_TARGET_DEVICE=cpu selects vLLM's CPU platform (vllm/platforms/__init__.py); a box with CUDA
    keeps its own platform."""
    if "VLLM_TARGET_DEVICE" in os.environ:
        return
    try:
        import torch

        has_cuda = bool(torch.cuda.is_available())
    except ImportError:
        has_cuda = False
    if not has_cuda:
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"


def installed_version(engine: str) -> str:
    """The engine's version from its distribution: `vllm`, or a build published under another name
    (vLLM's CPU build is the distribution `vllm-cpu`, its package still `vllm`)."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in (engine, f"{engine}-cpu"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    raise SystemExit(f"{engine} is not installed for {sys.executable}")


def engine_parser(engine: str) -> tuple[argparse.ArgumentParser, str]:
    """The engine's own server parser and its version (imports the engine).

    vLLM: the `serve` subparser exactly as `vllm` builds it (vllm/entrypoints/cli/main.py: a root
    FlexibleArgumentParser, `ServeSubcommand.subparser_init`). SGLang: a plain ArgumentParser filled by
    `ServerArgs.add_cli_args`, as `prepare_server_args` does (sglang/srt/server_args.py).
    """
    if engine == "vllm":
        use_vllm_cpu_platform_without_gpu()
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        root = FlexibleArgumentParser(prog="vllm")
        subparsers = root.add_subparsers(required=False, dest="subparser")
        parser: argparse.ArgumentParser = ServeSubcommand().subparser_init(subparsers)
        return parser, installed_version("vllm")
    if engine == "sglang":
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        return parser, installed_version("sglang")
    raise SystemExit(f"unknown engine {engine!r}: vllm or sglang")


def _name(value: object) -> str | None:
    if value is None:
        return None
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) else type(value).__name__


def _json_safe(value: object) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False


def _plain(value: object) -> object:
    """JSON-safe defaults (scalars, lists, dicts of them) as they are, anything else as its repr."""
    if not _json_safe(value):
        return repr(value)
    return list(value) if isinstance(value, tuple) else value


def _choices(choices: Iterable[object] | None) -> list[str] | None:
    """Choices as the strings a user types (`None` included: vLLM's optional types read "None").
    A set (SGLang's --sampling-backend) has no order of its own, so it is sorted."""
    if not choices:
        return None
    names = [str(c) for c in choices]
    return sorted(names) if isinstance(choices, (set, frozenset)) else names


def _first_help_line(action: argparse.Action) -> str:
    """The first line of help, cut at 200 characters (the tables are for checking, not for help)."""
    lines = (action.help or "").strip().splitlines()
    return lines[0][:HELP_CHARS].strip() if lines else ""


def read_options(engine: str) -> dict[str, object]:
    """Every action of the engine's server parser, in the parser's order (help excluded)."""
    parser, engine_version = engine_parser(engine)
    options: list[dict[str, object]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            options.append({"positional": action.dest, "nargs": action.nargs})
            continue
        options.append(
            {
                "options": list(action.option_strings),
                "dest": action.dest,
                "action": type(action).__name__,
                "nargs": action.nargs,
                "choices": _choices(action.choices),
                "type": _name(action.type),
                "default": _plain(action.default),
                "help": _first_help_line(action),
            }
        )
    return {"engine": engine, "version": engine_version, "command": COMMANDS[engine], "options": options}


def module_text(data: dict) -> str:
    """The table module: one tuple per option, in the parser's order."""
    engine, version = data["engine"], data["version"]
    lines = [
        f'"""{engine} {version}: every option of `{data["command"]}`, read from the engine\'s own',
        "argument parser by tools/engine_options.py. Generated: regenerate, do not edit.",
        '"""',
        "",
        f"ENGINE = {engine!r}",
        f"VERSION = {version!r}",
        f"COMMAND = {data['command']!r}",
        "POSITIONAL = " + repr(tuple(o["positional"] for o in data["options"] if "positional" in o)),
        "# (spellings, dest, argparse action class, nargs, choices, type name, default, first line of help)",
        "OPTIONS: tuple[tuple, ...] = (",
    ]
    for o in data["options"]:
        if "positional" in o:
            continue
        row = (
            tuple(o["options"]),
            o["dest"],
            o["action"],
            o["nargs"],
            tuple(o["choices"]) if o["choices"] else None,
            o["type"],
            o["default"],
            (o.get("help") or "").strip(),
        )
        lines.append(f"    {row!r},")
    lines.append(")")
    return "\n".join(lines) + "\n"


def table_path(data: dict) -> Path:
    return TABLES / f"{data['engine']}_{data['version'].replace('.', '_')}.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", nargs="?", choices=("vllm", "sglang"), help="read this engine's parser")
    parser.add_argument("--write", metavar="JSON", help="write the table module from a JSON dump")
    parser.add_argument(
        "--engine-python", metavar="PYTHON", help="read the engine with this interpreter, then write"
    )
    args = parser.parse_args(argv)
    if args.write:
        data = json.loads(Path(args.write).read_text())
    elif args.engine_python:
        if not args.engine:
            parser.error("--engine-python needs the engine name")
        out = subprocess.run(
            [args.engine_python, __file__, args.engine], check=True, capture_output=True, text=True
        ).stdout
        data = json.loads(out)
    elif args.engine:
        # The engines log to stdout (vLLM's default logging config); keep stdout for the JSON.
        with contextlib.redirect_stdout(sys.stderr):
            data = read_options(args.engine)
        json.dump(data, sys.stdout, indent=1)
        return 0
    else:
        parser.error("name an engine, or --write JSON")
    path = table_path(data)
    path.write_text(module_text(data))
    print(f"wrote {path} ({len(data['options'])} options)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
