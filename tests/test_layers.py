"""The import direction of the package: the pure core at the bottom, the faces at the top.

Read from the source with `ast`, so an import inside a function counts as much as one at the top.
A module may import from its own layer or any layer below it, never from one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cockpit"

# Lowest first. A name is the module or subpackage right under cockpit/.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "the pure core: parsing, models, planning",
        {
            "errors",
            "layout",
            "hardware",
            "model",
            "archs",
            "calibrate",
            "checkpoint",
            "engines",
            "planner",
            "perfmodel",
            "commands",
            "prompt",
            "benchrequest",
            "records",
            "knobs",
            "secrets",
            "outcome",
            "slo",
            "tune",
        },
    ),
    (
        "the user's files and the environment",
        {
            "paths",
            "textfile",
            "layouts",
            "modelfiles",
            "profile",
            "resolve",
            "children",
            "eventloop",
            "installed",
            "safetensors",
            "processes",
        },
    ),
    ("storage", {"journal", "learning"}),
    ("the simulated box and engine", {"sim"}),
    ("GPU and engine telemetry", {"telemetry"}),
    ("the load generator", {"bench"}),
    ("running experiments", {"runner"}),
    ("opening a lab, reports", {"boxcontext", "lab", "reports", "tuner"}),
    ("the faces", {"headless", "tui", "webserve"}),
    ("the command line", {"cli", "entry", "__main__"}),
]

CORE = LAYERS[0][1]

# What the core must not import: processes, the network, storage, the terminal, the GPUs, the disk.
IO_LIBRARIES = {
    "asyncio",
    "fcntl",
    "http",
    "importlib",
    "io",
    "multiprocessing",
    "os",
    "pathlib",
    "select",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "subprocess",
    "tempfile",
    "threading",
    "urllib",
    "aiohttp",
    "httpx",
    "platformdirs",
    "plotext",
    "psutil",
    "pynvml",
    "rich",
    "textual",
    "textual_serve",
    "uvloop",
    "yaml",
}


def _layer_of(part: str) -> int:
    for index, (_, names) in enumerate(LAYERS):
        if part in names:
            return index
    raise AssertionError(f"cockpit.{part} is in no layer: add it to LAYERS in {Path(__file__).name}")


def _part(path: Path) -> str:
    """The top-level part of the package a file belongs to: `runner` for cockpit/runner/x.py."""
    relative = path.relative_to(PACKAGE).with_suffix("")
    return relative.parts[0] if relative.parts[0] != "__init__" else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in a file, relative ones resolved."""
    package = ["cockpit", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                module = ".".join([*package[: len(package) - node.level + 1], *filter(None, [node.module])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from cockpit import journal` imports the module cockpit.journal
            found += [
                (node.lineno, f"{module}.{alias.name}")
                for alias in node.names
                if _is_module(module, alias.name)
            ]
    return found


def _is_module(package: str, name: str) -> bool:
    """Whether `from package import name` names a module of cockpit (rather than a function)."""
    parts = package.split(".")
    if parts[0] != "cockpit":
        return False
    folder = PACKAGE.joinpath(*parts[1:])
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if _part(p))


def test_every_part_of_the_package_has_a_layer():
    for path in _sources():
        _layer_of(_part(path))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_module_imports_a_higher_layer(path):
    own = _layer_of(_part(path))
    wrong = []
    for line, module in _imports(path):
        parts = module.split(".")
        if parts[0] != "cockpit" or len(parts) < 2:
            continue
        target = _layer_of(parts[1])
        if target > own:
            wrong.append(f"line {line}: {module} ({LAYERS[target][0]}) from {LAYERS[own][0]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "path", [p for p in _sources() if _part(p) in CORE], ids=lambda p: str(p.relative_to(PACKAGE.parent))
)
def test_the_core_imports_no_io_library(path):
    wrong = [
        f"line {line}: {module}" for line, module in _imports(path) if module.split(".")[0] in IO_LIBRARIES
    ]
    assert not wrong, "\n".join(wrong)


def test_only_the_command_line_imports_the_headless_face():
    importers = [
        str(path.relative_to(PACKAGE.parent))
        for path in _sources()
        if any(module == "cockpit.headless" for _, module in _imports(path)) and _part(path) != "cli"
    ]
    assert importers == []


def test_no_widget_imports_the_journal():
    widgets = sorted((PACKAGE / "tui" / "widgets").glob("*.py"))
    importers = [
        str(path.relative_to(PACKAGE.parent))
        for path in widgets
        if any(module.startswith("cockpit.journal") for _, module in _imports(path))
    ]
    assert importers == []
