"""Profiles: one YAML file per experiment setup (model, engine, box, server arguments, sweep).

Profiles live in the project's ``layouts/`` folder and in the user's config folder
(``~/.config/cockpit/profiles`` on Linux); a path to a YAML file works too. Unknown keys are
errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cockpit.core.benchrequest import MAX_CONCURRENCY, MAX_LEVELS, BenchDefaults, check_bench_number
from cockpit.core.errors import CockpitError, shown
from cockpit.core.hardware import MAX_GPUS, Hardware, check_gpu_count, check_gpu_memory, hardware
from cockpit.core.layout import parse_layout
from cockpit.core.model import whole_number
from cockpit.core.perfmodel import Calibration
from cockpit.core.speed import SPEEDS
from cockpit.engines import DEFAULT_ENGINE, ENGINE_NAMES, get_engine
from cockpit.engines.arguments import check_args, refuse_owned
from cockpit.engines.base import server_args
from cockpit.store.textfile import read_text


@dataclass(frozen=True)
class EngineServer:
    """The launcher and arguments a profile gives for an engine other than its own (``server.sglang:``
    in a vLLM profile). Without them cockpit translates the profile's own arguments
    (docs/placement.md#per-engine-arguments)."""

    command: tuple[str, ...] = ()  # empty: that engine's default launcher
    args: tuple[str, ...] | None = None  # None: translate the profile's own args


@dataclass(frozen=True)
class Profile:
    name: str
    model: str
    engine: str
    gpu: str = "rtx-pro-6000"
    gpus: int = 8
    gpu_mem_gib: float | None = None
    port: int = 8000
    command: tuple[str, ...] = ()  # launcher prefix; empty means the engine's default
    args: tuple[str, ...] = ()  # extra server arguments, appended to the parallel flags
    other_engines: Mapping[str, EngineServer] = field(default_factory=dict)  # server.<engine>: sections
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_ids: tuple[int, ...] | None = None  # which GPUs cockpit may use on a real box
    layouts: tuple[str, ...] = ()  # offered first in the picker
    bench: BenchDefaults = BenchDefaults()
    calibration: Mapping[str, Any] = field(default_factory=dict)  # perfmodel.Calibration overrides
    description: str = ""
    path: str = ""
    speed: str = ""  # where predicted speeds come from: "kernels", "analytic"; "": the default (kernels)

    @property
    def box(self) -> Hardware:
        """The box ``hardware:`` names; whether it is simulated is ``cockpit.lab.box``'s to say."""
        return hardware(self.gpu, self.gpus, self.gpu_mem_gib)

    @property
    def request_len(self) -> int:
        """Tokens one benchmark request holds at its end: what KV capacity is counted in."""
        return self.bench.input_len + self.bench.output_len


def profile_dirs() -> list[Path]:
    """Where profiles are looked up by name: the user's own first, then the bundled ones."""
    import platformdirs

    bundled = importlib.import_module("cockpit.layouts")  # installed from layouts/ (see pyproject.toml)
    return [Path(platformdirs.user_config_dir("cockpit")) / "profiles", Path(str(bundled.__file__)).parent]


def profile_names() -> list[str]:
    names: set[str] = set()
    for folder in profile_dirs():
        names.update(p.stem for p in folder.glob("*.yaml"))
    return sorted(names)


def find_profile(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise CockpitError(f"profile file {path} does not exist: check the path")
        return path
    for folder in profile_dirs():
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.is_file():
            return candidate
    raise CockpitError(f"no profile named '{name_or_path}': known profiles are {', '.join(profile_names())}")


MAX_PROFILE_BYTES = 1 * 2**20  # a profile is a screenful of YAML; a bigger file is not one


def load_profile(name_or_path: str) -> Profile:
    path = find_profile(name_or_path)
    text = read_text(path, limit=MAX_PROFILE_BYTES, what=f"profile {path}", fix="give a YAML profile")
    data = _parse_yaml(text, path)
    if not isinstance(data, dict):
        raise CockpitError(f"profile {path} must be a YAML mapping (model:, engine:, hardware:, ...)")
    return parse_profile(data, name=path.stem, source=str(path))


def _parse_yaml(text: str, path: Path) -> Any:
    """YAML from a profile's text; pathological files are one line each."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise CockpitError(f"profile {path} is not valid YAML{where}: fix the file") from exc
    except RecursionError:
        raise CockpitError(f"profile {path} nests YAML too deeply to be a profile: fix the file") from None
    except ValueError:  # int() refuses a number of thousands of digits
        raise CockpitError(
            f"profile {path} holds a number of thousands of digits, no setting's value: fix the file"
        ) from None


_TOP_KEYS = {
    "model",
    "engine",
    "hardware",
    "server",
    "layouts",
    "bench",
    "calibration",
    "description",
    "name",
    "speed",
}
_HARDWARE_KEYS = {"gpu", "count", "memory_gib"}
_SERVER_KEYS = {"port", "command", "args", "env", "gpus", *ENGINE_NAMES}
_ENGINE_SERVER_KEYS = {"command", "args"}
_BENCH_KEYS = {"concurrency", "input_len", "output_len", "requests", "duration_s"}
_SCHEMA = "see the profile schema in README.md"


def _check_keys(section: Mapping[str, Any], allowed: set[str], where: str, source: str) -> None:
    for key in section:
        if key not in allowed:
            raise CockpitError(
                f"{source}: unknown key {shown(key)} in {where}: allowed keys are {', '.join(sorted(allowed))}"
            )


def _section(data: Mapping[str, Any], key: str, source: str, name: str | None = None) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise CockpitError(f"{source}: '{name or key}' must be a mapping (got {shown(value)}): {_SCHEMA}")
    return value


def parse_profile(data: Mapping[str, Any], name: str = "profile", source: str = "<profile>") -> Profile:
    """A Profile from a YAML mapping; every mistyped or absurd value is one CockpitError line.

    All checks run here, before anything is planned, launched or journaled."""
    _check_keys(data, _TOP_KEYS, "the profile", source)
    if not data.get("model"):
        raise CockpitError(
            f"{source}: the profile needs 'model:' (a config.json, model folder, repo id or bundled name)"
        )
    engine = _text(data.get("engine", DEFAULT_ENGINE), "engine", source).lower()
    if engine not in ENGINE_NAMES:
        raise CockpitError(f"{source}: engine {shown(engine)} is not one of {', '.join(ENGINE_NAMES)}")
    hardware = _section(data, "hardware", source)
    server = _section(data, "server", source)
    bench = _section(data, "bench", source)
    _check_keys(hardware, _HARDWARE_KEYS, "hardware", source)
    _check_keys(server, _SERVER_KEYS, "server", source)
    _check_keys(bench, _BENCH_KEYS, "bench", source)
    memory = hardware.get("memory_gib")
    args = _words(
        server.get("args"), "server.args", source, numbers=True, example='[--max-model-len, "32768"]'
    )
    _server_args(engine, args, "server.args", source)
    return Profile(
        name=_text(data.get("name") or name, "name", source, numbers=True),
        model=_text(data["model"], "model", source),
        engine=engine,
        gpu=_text(hardware.get("gpu", "rtx-pro-6000"), "hardware.gpu", source, numbers=True),
        gpus=check_gpu_count(hardware.get("count", 8), f"{source}: hardware.count"),
        gpu_mem_gib=check_gpu_memory(memory, f"{source}: hardware.memory_gib")
        if memory is not None
        else None,
        port=check_port(server.get("port", 8000), f"{source}: server.port"),
        command=_words(
            server.get("command"), "server.command", source, numbers=False, example="[vllm, serve]"
        ),
        args=args,
        other_engines=_other_engines(server, engine, source),
        env=_env(server.get("env"), source),
        gpu_ids=_gpu_ids(server.get("gpus"), source),
        layouts=_layouts(data.get("layouts"), source),
        bench=_bench(bench, source),
        calibration=_calibration(_section(data, "calibration", source), source),
        description=_description(data.get("description"), source),
        path=source,
        speed=_speed(data.get("speed"), source),
    )


def _speed(value: Any, source: str) -> str:
    """Where predicted speeds come from: measured kernels where they cover the box, or the
    analytic model alone; absent: the default (kernels)."""
    if value is None:
        return ""
    if value not in SPEEDS:
        raise CockpitError(
            f"{source}: speed must be {' or '.join(SPEEDS)} (got {shown(value)}): "
            "kernels predicts from measured kernels where they cover the box, analytic never"
        )
    return str(value)


def check_port(value: Any, where: str) -> int:
    """A TCP port a server can listen on: 1-65535 (0 would let the OS pick one cockpit cannot find)."""
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 5:
        value = int(value)  # `port: "8000"`: quoted, but a port
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise CockpitError(f"{where} must be 1-65535 (got {shown(value)}): pick a free port like 8000")
    return value


def _text(value: Any, key: str, source: str, numbers: bool = False) -> str:
    """A name-like value: a string (or, where ``numbers``, a number YAML read from digits)."""
    allowed = (str, int, float) if numbers else (str,)
    if (
        isinstance(value, bool)
        or not isinstance(value, allowed)
        or (isinstance(value, str) and not value.strip())
    ):
        raise CockpitError(
            f"{source}: {key} must be a non-empty string (got {shown(value)}): quote it in the YAML"
        )
    return str(value)


def _description(value: Any, source: str) -> str:
    """Free text, but text: a mapping here is a mistake (and could be an alias bomb to print)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise CockpitError(f"{source}: description must be text (got {shown(value)}): quote it in the YAML")
    return str(value)


def _words(value: Any, key: str, source: str, numbers: bool, example: str) -> tuple[str, ...]:
    """A list of argv words. YAML reads `yes`/`no`/`on` as booleans and `[a, b]` strings as lists,
    so anything but a list of strings (and, for args, numbers) is refused with the fix."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CockpitError(
            f"{source}: {key} must be a list of words like {example} (got {shown(value)}): write it as a YAML list"
        )
    allowed = (str, int, float) if numbers else (str,)
    for i, word in enumerate(value):
        if isinstance(word, bool) or not isinstance(word, allowed) or word == "":
            raise CockpitError(
                f'{source}: {key}[{i}] must be a string (got {shown(word)}): quote it in the YAML, like "yes"'
            )
    return tuple(str(w) for w in value)


def _server_args(engine: str, args: tuple[str, ...], key: str, source: str) -> None:
    """Every argument checked against the engine's option table now: a typo or a bad
    --gpu-memory-utilization must not wait for a ten-minute load."""
    try:
        checked = check_args(get_engine(engine).options, args, key)
        refuse_owned(checked, key)
        server_args(checked)  # values the engine refuses at startup (a share above 1), refused now
    except CockpitError as exc:
        raise CockpitError(f"{source}: {exc}") from None


def _other_engines(server: Mapping[str, Any], engine: str, source: str) -> dict[str, EngineServer]:
    """``server.sglang: {command: [...], args: [...]}`` in a vLLM profile: what to run on SGLang."""
    out = {}
    for name in ENGINE_NAMES:
        if name not in server:
            continue
        key = f"server.{name}"
        if name == engine:
            raise CockpitError(
                f"{source}: {key} repeats the profile's own engine: put its launcher and args in "
                f"server.command and server.args"
            )
        section = _section(server, name, source, key)
        _check_keys(section, _ENGINE_SERVER_KEYS, key, source)
        command = _words(
            section.get("command"),
            f"{key}.command",
            source,
            numbers=False,
            example="[python, -m, sglang.launch_server]",
        )
        args = None
        if "args" in section:
            args = _words(
                section["args"], f"{key}.args", source, numbers=True, example='[--context-length, "32768"]'
            )
            _server_args(name, args, f"{key}.args", source)
        out[name] = EngineServer(command=command, args=args)
    return out


def _env(value: Any, source: str) -> dict[str, str]:
    """Environment variables for the server: a mapping of names to string values."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CockpitError(
            f"{source}: server.env must be a mapping like {{NCCL_DEBUG: INFO}} (got {shown(value)}): {_SCHEMA}"
        )
    env = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise CockpitError(
                f"{source}: server.env name {shown(key)} is not a variable name: use names like NCCL_DEBUG"
            )
        if isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
            item = str(item)  # `OMP_NUM_THREADS: 8`: the environment holds text
        if not isinstance(item, str) or "\0" in item:
            raise CockpitError(
                f'{source}: server.env {key} must be a string (got {shown(item)}): quote it in the YAML, like {key}: "1"'
            )
        env[key] = item
    return env


def _gpu_ids(value: Any, source: str) -> tuple[int, ...] | None:
    """Which GPUs of a real box cockpit may use: distinct indices from 0."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise CockpitError(
            f"{source}: server.gpus must be a list of GPU indices like [0, 1, 2, 3] (got {shown(value)})"
        )
    ids = tuple(
        whole_number(g, f"{source}: server.gpus[{i}]", 0, MAX_GPUS - 1, "give GPU indices like [0, 1]")
        for i, g in enumerate(value)
    )
    if len(set(ids)) != len(ids):
        raise CockpitError(
            f"{source}: server.gpus lists a GPU twice (got {shown(list(ids))}): give each index once"
        )
    return ids


def _layouts(value: Any, source: str) -> tuple[str, ...]:
    """Layouts offered first: a list of layout strings, each one that parses."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CockpitError(
            f"{source}: layouts must be a list like [tp4, tp8 ep] (got {shown(value)}): write it as a YAML list"
        )
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise CockpitError(
                f"{source}: layouts[{i}] must be a layout like tp4 (got {shown(text)}): quote it in the YAML"
            )
        try:
            parse_layout(text)
        except CockpitError as exc:
            raise CockpitError(f"{source}: layouts[{i}]: {exc}") from None
    return tuple(value)


def _bench(bench: Mapping[str, Any], source: str) -> BenchDefaults:
    """The benchmark's defaults; sizes are positive and bounded like the prompt's `bench` words."""

    def size(key: str) -> Any:
        value = bench.get(key)
        if value is None:
            return getattr(BenchDefaults, key)
        return check_bench_number(key, value, f"{source}: bench.{key}", _SCHEMA)

    return BenchDefaults(
        concurrency=_levels(bench.get("concurrency", BenchDefaults.concurrency), source),
        input_len=size("input_len"),
        output_len=size("output_len"),
        requests=size("requests"),
        duration_s=size("duration_s"),
    )


def _levels(value: Any, source: str) -> tuple[int, ...]:
    levels = value if isinstance(value, (list, tuple)) else [value]
    if not levels:
        raise CockpitError(f"{source}: bench.concurrency needs at least one level, like [1, 32, 64]")
    if len(levels) > MAX_LEVELS:
        raise CockpitError(
            f"{source}: bench.concurrency has {len(levels):,} levels, at most {MAX_LEVELS} run in one sweep: "
            "pick fewer, like [1, 32, 64]"
        )
    return tuple(
        whole_number(c, f"{source}: bench.concurrency", 1, MAX_CONCURRENCY, "give levels like [1, 32, 64]")
        for c in levels
    )


def _calibration(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Performance-model overrides, checked (known names, numbers above 0) when the profile loads."""
    checked = Calibration().overridden(values, source)
    return {key: getattr(checked, key) for key in values} if values else {}
