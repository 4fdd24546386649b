"""The import direction of the package: the pure core at the bottom, the faces at the top.

Read from the source with `ast`, so an import inside a function counts as much as one at the top.
A module may import from its own layer or any layer below it, never from one above.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cockpit"

# Lowest first. A name is a package right under cockpit/ (`core`) or, where one package holds two
# layers, a module in it (`faces.cli`): the most specific name wins.
LAYERS: list[tuple[str, set[str]]] = [
    ("the pure core: parsing, models, planning, predicting, fitting", {"core", "engines"}),
    (
        "the user's files, what cockpit keeps, the machine's processes, measured kernels",
        {"store", "system", "layouts", "kernels"},
    ),
    ("the simulated box and engine", {"sim"}),
    ("GPU and engine telemetry", {"telemetry"}),
    ("the load generator", {"bench"}),
    ("running experiments", {"runner"}),
    ("a lab on a box, reports", {"lab", "reports"}),
    ("the faces", {"faces"}),
    ("the command line", {"faces.cli", "faces.entry", "__main__"}),
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


NAMED = {name for _, names in LAYERS for name in names}


def _layer_of(part: str) -> int:
    for index, (_, names) in enumerate(LAYERS):
        if part in names:
            return index
    raise AssertionError(f"cockpit.{part} is in no layer: add it to LAYERS in {Path(__file__).name}")


def _named(parts: list[str]) -> str:
    """The most specific name LAYERS gives to a module's dotted parts under cockpit."""
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in NAMED:
            return ".".join(parts[:end])
    return parts[0] if parts else ""


def _part(path: Path) -> str:
    """The layer name a file belongs to: `runner` for a module under runner/, `faces.cli` for the command line."""
    relative = path.relative_to(PACKAGE).with_suffix("")
    return "" if relative.parts == ("__init__",) else _named(list(relative.parts))


def core_modules() -> list[str]:
    """Every module of the pure core, dotted: what the purity test imports one by one."""
    return sorted(_module_name(path) for path in _sources() if _part(path) in CORE)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
            # `from cockpit import journal` imports the module cockpit.store.journal
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
        target = _layer_of(_named(parts[1:]))
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
        if any(module == "cockpit.faces.headless" for _, module in _imports(path))
        and _part(path) != "faces.cli"
    ]
    assert importers == []


def test_no_widget_imports_the_journal():
    widgets = sorted((PACKAGE / "faces" / "tui" / "widgets").glob("*.py"))
    importers = [
        str(path.relative_to(PACKAGE.parent))
        for path in widgets
        if any(module.startswith("cockpit.store.journal") for _, module in _imports(path))
    ]
    assert importers == []


def _module_graph() -> dict[str, set[str]]:
    """Each cockpit module to the cockpit modules it imports (at the top or inside a function)."""
    modules = {_module_name(path): path for path in _sources()}
    modules["cockpit"] = PACKAGE / "__init__.py"
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {module for _, module in _imports(path) if module in modules and module != name}
        # `from cockpit.bench import metrics` names the module; its package is not imported for it
        graph[name] = {t for t in targets if not any(other.startswith(t + ".") for other in targets)}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    """A circle means neither module can be read or tested without the other: split what they share."""
    assert _circles(_module_graph()) == []


def test_the_core_never_imports_the_prompt_grammar():
    """What a person types is a face's concern; the core takes typed requests, never prompt text."""
    importers = [
        _module_name(path)
        for path in _sources()
        if not _part(path).startswith("faces")
        and any(module.startswith("cockpit.faces.prompt") for _, module in _imports(path))
    ]
    assert importers == []


README = PACKAGE.parent / "README.md"


def _readme_layers() -> list[set[str]]:
    """The packages each row of the README's layer table names, lowest first."""
    text = README.read_text().split("## Layout of the code", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    return [
        {
            name.rstrip("/").removesuffix(".py").replace("/", ".")
            for name in re.findall(r"`([\w./]+)`", row.split("|")[2])
        }
        for row in rows
    ]


def test_the_readme_maps_every_package_in_its_layer():
    assert _readme_layers() == [names for _, names in LAYERS]


ENGINE_NAME = re.compile(r"""["'](vllm|sglang|vLLM|SGLang)["']""")
# Outside cockpit/engines/, an engine's name is written only where a person chooses one: the
# command line's example of `--engine`. Everything else asks the engine package (its adapter, its
# surface) or reads the name the person chose as data.
ENGINE_NAME_LITERALS = 1


def test_engine_names_stay_in_the_engine_packages():
    """Adding an engine means a package under engines/, not edits across the tree."""
    outside = {
        str(path.relative_to(PACKAGE.parent)): len(ENGINE_NAME.findall(path.read_text()))
        for path in _sources()
        if _part(path) != "engines"
    }
    counted = {path: count for path, count in outside.items() if count}
    assert sum(counted.values()) <= ENGINE_NAME_LITERALS, counted
    assert not any(Path(path).stem in ("planner", "perfmodel") for path in counted), counted
