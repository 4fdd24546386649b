"""Profiles: one YAML file per experiment setup (model, engine, box, server arguments, sweep).

Profiles live in the project's ``layouts/`` folder and in the user's config folder
(``~/.config/cockpit/profiles`` on Linux); a path to a YAML file works too. Unknown keys are
errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from cockpit.errors import CockpitError

ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class BenchDefaults:
    concurrency: tuple[int, ...] = (1, 32, 64, 256, 1024)
    input_len: int = 1024
    output_len: int = 1024
    requests: int | None = None  # per level; None means a few times the concurrency
    duration_s: float | None = None


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
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_ids: tuple[int, ...] | None = None  # which GPUs cockpit may use on a real box
    layouts: tuple[str, ...] = ()  # offered first in the picker
    bench: BenchDefaults = BenchDefaults()
    calibration: Mapping[str, Any] = field(default_factory=dict)  # perfmodel.Calibration overrides
    description: str = ""
    path: str = ""

    @property
    def request_len(self) -> int:
        """Tokens one benchmark request holds at its end: what KV capacity is counted in."""
        return self.bench.input_len + self.bench.output_len


def profile_dirs() -> list[Path]:
    """Where profiles are looked up by name: the user's own first, then the bundled ones."""
    import platformdirs

    import cockpit.layouts as bundled

    return [Path(platformdirs.user_config_dir("cockpit")) / "profiles", Path(bundled.__file__).parent]


def profile_names() -> list[str]:
    names = set()
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


def load_profile(name_or_path: str) -> Profile:
    path = find_profile(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise CockpitError(f"profile {path} is not valid YAML{where}: fix the file") from exc
    if not isinstance(data, dict):
        raise CockpitError(f"profile {path} must be a YAML mapping (model:, engine:, hardware:, ...)")
    return parse_profile(data, name=path.stem, source=str(path))


_TOP_KEYS = {"model", "engine", "hardware", "server", "layouts", "bench", "calibration", "description", "name"}
_HARDWARE_KEYS = {"gpu", "count", "memory_gib"}
_SERVER_KEYS = {"port", "command", "args", "env", "gpus"}
_BENCH_KEYS = {"concurrency", "input_len", "output_len", "requests", "duration_s"}


def _check_keys(section: Mapping[str, Any], allowed: set[str], where: str, source: str) -> None:
    for key in section:
        if key not in allowed:
            raise CockpitError(f"{source}: unknown key '{key}' in {where}: allowed keys are {', '.join(sorted(allowed))}")


def _section(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise CockpitError(f"{source}: '{key}' must be a mapping")
    return value


def parse_profile(data: Mapping[str, Any], name: str = "profile", source: str = "<profile>") -> Profile:
    _check_keys(data, _TOP_KEYS, "the profile", source)
    if not data.get("model"):
        raise CockpitError(f"{source}: the profile needs 'model:' (a config.json, model folder, repo id or bundled name)")
    engine = str(data.get("engine", "vllm")).lower()
    if engine not in ENGINES:
        raise CockpitError(f"{source}: engine '{engine}' is not one of {', '.join(ENGINES)}")
    hardware = _section(data, "hardware", source)
    server = _section(data, "server", source)
    bench = _section(data, "bench", source)
    _check_keys(hardware, _HARDWARE_KEYS, "hardware", source)
    _check_keys(server, _SERVER_KEYS, "server", source)
    _check_keys(bench, _BENCH_KEYS, "bench", source)
    try:
        gpu_ids = server.get("gpus")
        bench_defaults = BenchDefaults(
            concurrency=tuple(int(c) for c in bench.get("concurrency", BenchDefaults.concurrency)),
            input_len=int(bench.get("input_len", BenchDefaults.input_len)),
            output_len=int(bench.get("output_len", BenchDefaults.output_len)),
            requests=int(bench["requests"]) if bench.get("requests") else None,
            duration_s=float(bench["duration_s"]) if bench.get("duration_s") else None,
        )
        return Profile(
            name=str(data.get("name", name)),
            model=str(data["model"]),
            engine=engine,
            gpu=str(hardware.get("gpu", "rtx-pro-6000")),
            gpus=int(hardware.get("count", 8)),
            gpu_mem_gib=float(hardware["memory_gib"]) if hardware.get("memory_gib") else None,
            port=int(server.get("port", 8000)),
            command=tuple(str(a) for a in server.get("command") or ()),
            args=tuple(str(a) for a in server.get("args") or ()),
            env={str(k): str(v) for k, v in (server.get("env") or {}).items()},
            gpu_ids=tuple(int(g) for g in gpu_ids) if gpu_ids is not None else None,
            layouts=tuple(str(x) for x in data.get("layouts") or ()),
            bench=bench_defaults,
            calibration=dict(_section(data, "calibration", source)),
            description=str(data.get("description", "")),
            path=source,
        )
    except (TypeError, ValueError) as exc:
        raise CockpitError(f"{source}: a value has the wrong type ({exc}): see the profile schema in README.md") from exc
