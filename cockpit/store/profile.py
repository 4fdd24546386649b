"""Profiles: one YAML file per experiment setup (model, engine, box, server arguments, sweep).

Profiles live in the project's ``layouts/`` folder and in the user's config folder
(``~/.config/cockpit/profiles`` on Linux); a path to a YAML file works too. Unknown keys are
errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cockpit.core.benchrequest import MAX_CONCURRENCY, MAX_LEVELS, BenchDefaults, check_bench_number
from cockpit.core.cluster import MAX_NODES, Cluster, InterLink, Node
from cockpit.core.errors import CockpitError, shown
from cockpit.core.hardware import MAX_GPUS, Hardware, check_gpu_count, check_gpu_memory, gpu_type, hardware
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
    # Several boxes (``cluster:``, docs/clusters.md); gpu, gpus and gpu_mem_gib then describe one node.
    cluster: Cluster | None = None

    @property
    def box(self) -> Hardware:
        """The box ``hardware:`` names, or every node's GPUs of the cluster as one (with ``nodes``
        and ``inter_link``); whether it is simulated is ``cockpit.lab.box``'s to say."""
        if self.cluster is not None:
            return self.cluster.hardware
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
    "cluster",
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
    memory_gib = check_gpu_memory(memory, f"{source}: hardware.memory_gib") if memory is not None else None
    cluster = _cluster(data.get("cluster"), hardware, memory_gib, source)
    if cluster is not None and server.get("gpus") is not None:
        raise CockpitError(
            f"{source}: server.gpus picks GPUs of one box, and per-node selection is not supported with "
            "cluster: remove server.gpus (each node uses its first cluster.nodes[].gpus GPUs)"
        )
    args = _words(
        server.get("args"), "server.args", source, numbers=True, example='[--max-model-len, "32768"]'
    )
    _server_args(engine, args, "server.args", source)
    return Profile(
        name=_text(data.get("name") or name, "name", source, numbers=True),
        model=_text(data["model"], "model", source),
        engine=engine,
        gpu=cluster.gpu
        if cluster
        else _text(hardware.get("gpu", "rtx-pro-6000"), "hardware.gpu", source, numbers=True),
        gpus=cluster.gpus_per_node
        if cluster
        else check_gpu_count(hardware.get("count", 8), f"{source}: hardware.count"),
        gpu_mem_gib=memory_gib,
        port=check_port(server.get("port", 8000), f"{source}: server.port"),
        command=_words(
            server.get("command"), "server.command", source, numbers=False, example="[vllm, serve]"
        ),
        args=args,
        other_engines=_other_engines(server, engine, source),
        env=_env(server.get("env"), source, "server.env"),
        gpu_ids=_gpu_ids(server.get("gpus"), source),
        layouts=_layouts(data.get("layouts"), source),
        bench=_bench(bench, source),
        calibration=_calibration(_section(data, "calibration", source), source),
        description=_description(data.get("description"), source),
        path=source,
        speed=_speed(data.get("speed"), source),
        cluster=cluster,
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


def _env(value: Any, source: str, where: str) -> dict[str, str]:
    """Environment variables for the server (``server.env``, a node's ``env``): a mapping of names
    to string values. Values are kept as given; what is shown or journaled is blanked where a name
    says it is a secret (cockpit.core.secrets)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CockpitError(
            f"{source}: {where} must be a mapping like {{NCCL_DEBUG: INFO}} (got {shown(value)}): {_SCHEMA}"
        )
    env = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise CockpitError(
                f"{source}: {where} name {shown(key)} is not a variable name: use names like NCCL_DEBUG"
            )
        if isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
            item = str(item)  # `OMP_NUM_THREADS: 8`: the environment holds text
        if not isinstance(item, str) or "\0" in item:
            raise CockpitError(
                f'{source}: {where} {key} must be a string (got {shown(item)}): quote it in the YAML, like {key}: "1"'
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


# --- cluster: several boxes (docs/clusters.md) ---------------------------------------------------

_CLUSTER_KEYS = {"gpu", "gpus_per_node", "link", "agent", "identity", "ssh_options", "nodes"}
_NODE_KEYS = {"host", "user", "ssh_port", "address", "ifname", "gpus", "gpu", "env"}
_LINK_KEYS = {"name", "bandwidth_gbps", "latency_us"}
_CLUSTER_EXAMPLE = "cluster: {gpu: h200, nodes: [{host: gpu-a}, {host: gpu-b}]}"
MAX_LINK_GBPS = 3200.0  # per GPU: above any NIC sold (XDR is 800 Gb/s a port); a GB/s-for-Gb/s slip stays in
MAX_LINK_LATENCY_US = 100_000.0

# Each GPU's share of the network, as NICs are sold (Gb/s), and a small all-reduce's latency with
# NCCL's software included. HGX/DGX boxes have one NIC per GPU: DGX H100/H200 eight single-port
# ConnectX-7 at 400 Gb/s NDR, DGX A100 eight ConnectX-6 at 200 Gb/s HDR (NVIDIA's DGX H100/H200
# and DGX A100 datasheets and user guides); RoCE boxes the same per GPU over 400 or 200 GbE
# (ConnectX-7 / ConnectX-6 Dx datasheets). NCCL's own tuning model (NVIDIA/nccl
# src/graph/tuning.cc, baseLat and hwLat's NET row) puts a small LL all-reduce with a network step
# near 10 us; the wire's own latency (under 1 us on InfiniBand) is the small part. RoCE adds
# Ethernet switching and congestion control; TCP goes through NCCL's socket transport and the
# kernel, tens of us. tcp-100 is one 100 GbE NIC per node that its GPUs share.
LINK_PRESETS: dict[str, tuple[str, float, float, bool]] = {
    # key: (name, Gb/s, latency us, Gb/s is the node's, shared by its GPUs)
    "ndr": ("InfiniBand NDR", 400.0, 10.0, False),
    "hdr": ("InfiniBand HDR", 200.0, 10.0, False),
    "roce-400": ("RoCE 400 GbE", 400.0, 15.0, False),
    "roce-200": ("RoCE 200 GbE", 200.0, 15.0, False),
    "tcp-100": ("TCP 100 GbE", 100.0, 50.0, True),
}
# A host, user or address ssh is given: never one that ssh would read as an option (`-oProxyCommand=`).
_HOST = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.:%-]{0,252}")  # names, IPv4, IPv6 (fe80::1%ib0)
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}")  # Linux IFNAMSIZ: 15 characters
_SSH_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*=\S.*")


def _cluster(
    value: Any, hardware_section: Mapping[str, Any], memory_gib: float | None, source: str
) -> Cluster | None:
    """The ``cluster:`` section: nodes of one GPU type and count, the network between them, and how
    ssh reaches them. ``hardware:``, when given too, must describe one node the same way."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CockpitError(
            f"{source}: cluster must be a mapping like {_CLUSTER_EXAMPLE} (got {shown(value)})"
        )
    _check_keys(value, _CLUSTER_KEYS, "cluster", source)
    if value.get("gpu") is None:
        raise CockpitError(
            f"{source}: the cluster needs 'gpu:', every node's GPU type, like {_CLUSTER_EXAMPLE}"
        )
    gpu = _text(value["gpu"], "cluster.gpu", source, numbers=True)
    if "count" in hardware_section:  # one node's GPUs, said there too
        check_gpu_count(hardware_section["count"], f"{source}: hardware.count")
    per_node = check_gpu_count(
        value.get("gpus_per_node", hardware_section.get("count", 8)), f"{source}: cluster.gpus_per_node"
    )
    _agree_with_hardware(hardware_section, gpu, per_node, source)
    nodes = _nodes(value.get("nodes"), gpu, per_node, memory_gib, source)
    if len(nodes) * nodes[0].gpus > MAX_GPUS:
        raise CockpitError(
            f"{source}: the cluster has {len(nodes) * nodes[0].gpus:,} GPUs ({len(nodes)} nodes x "
            f"{nodes[0].gpus}), at most {MAX_GPUS}: list fewer nodes"
        )
    link = _link(value.get("link"), nodes[0].gpus, source)
    agent = _words(
        value.get("agent"), "cluster.agent", source, numbers=False, example="[/opt/venv/bin/cockpit]"
    )
    identity = _identity(value.get("identity"), source)
    ssh_options = _ssh_options(value.get("ssh_options"), source)
    try:
        cluster = Cluster(
            nodes=nodes, gpu=gpu, link=link, agent=agent, identity=identity, ssh_options=ssh_options
        )
        _ = cluster.hardware  # an unknown GPU type, refused now
    except CockpitError as exc:
        raise CockpitError(f"{source}: cluster: {exc}") from None
    return cluster


def _same_gpu(a: str, b: str) -> bool:
    """Two spellings of one GPU type (`h200`, `H200`); unknown types compare as written."""
    try:
        return gpu_type(a).key == gpu_type(b).key
    except CockpitError:
        return a.strip().lower() == b.strip().lower()


def _agree_with_hardware(section: Mapping[str, Any], gpu: str, per_node: int, source: str) -> None:
    """``hardware:`` beside ``cluster:`` says one node; it must not say another GPU or count."""
    if "gpu" in section and not _same_gpu(str(section["gpu"]), gpu):
        raise CockpitError(
            f"{source}: hardware.gpu {shown(section['gpu'])} contradicts cluster.gpu {shown(gpu)}: "
            "remove hardware.gpu or give the same type"
        )
    if "count" in section and section["count"] != per_node:
        raise CockpitError(
            f"{source}: hardware.count {shown(section['count'])} contradicts the cluster's {per_node} GPUs "
            "per node: with cluster:, hardware.count is one node's GPUs; remove it or make them equal"
        )


def _nodes(value: Any, gpu: str, per_node: int, memory_gib: float | None, source: str) -> tuple[Node, ...]:
    if not isinstance(value, list) or not value:
        raise CockpitError(
            f"{source}: cluster.nodes must list the nodes, the head first, like "
            f"[{{host: gpu-a}}, {{host: gpu-b}}] (got {shown(value)})"
        )
    if len(value) > MAX_NODES:
        raise CockpitError(
            f"{source}: cluster.nodes lists {len(value):,} nodes, at most {MAX_NODES}: list the nodes to use"
        )
    nodes: list[Node] = []
    seen: dict[str, str] = {}  # host or address -> the entry that named it first
    for i, entry in enumerate(value):
        where = f"cluster.nodes[{i}]"
        node = _node(entry, where, gpu, per_node, memory_gib, source)
        for name in dict.fromkeys((node.host, node.reach)):
            if name in seen:
                raise CockpitError(
                    f"{source}: {where} repeats {name}, already {seen[name]}: list each node once, "
                    "with its own host and address"
                )
            seen[name] = where
        nodes.append(node)
    return tuple(nodes)


def _node(entry: Any, where: str, gpu: str, per_node: int, memory_gib: float | None, source: str) -> Node:
    """One node: ``{host: gpu-a, user: me, ...}``, or just its host."""
    if isinstance(entry, str):
        entry = {"host": entry}
    if not isinstance(entry, dict):
        raise CockpitError(
            f"{source}: {where} must be a mapping like {{host: gpu-a, user: me}} (got {shown(entry)})"
        )
    _check_keys(entry, _NODE_KEYS, where, source)
    if entry.get("host") is None:
        raise CockpitError(f"{source}: {where} needs 'host:', the name or address ssh reaches it at")
    node_gpu = entry.get("gpu")
    if node_gpu is not None and not _same_gpu(_text(node_gpu, f"{where}.gpu", source, numbers=True), gpu):
        raise CockpitError(
            f"{source}: {where}.gpu {shown(node_gpu)} is not the cluster's {shown(gpu)}: every node needs "
            "the same GPU type; remove the node or fix its gpu"
        )
    port = entry.get("ssh_port")
    return Node(
        host=_host(entry["host"], f"{where}.host", source),
        user=_user(entry.get("user"), f"{where}.user", source),
        gpus=check_gpu_count(entry.get("gpus", per_node), f"{source}: {where}.gpus"),
        gpu="",  # the cluster's: checked the same above
        memory_gib=memory_gib,
        ssh_port=22 if port is None else _ssh_port(port, f"{where}.ssh_port", source),
        address=_host(entry["address"], f"{where}.address", source) if entry.get("address") else "",
        ifname=_ifname(entry.get("ifname"), f"{where}.ifname", source),
        env=_env(entry.get("env"), source, f"{where}.env"),
    )


def _host(value: Any, key: str, source: str) -> str:
    """A host name or IP address ssh and the engines can use: never one ssh would read as an option."""
    if not isinstance(value, str) or not _HOST.fullmatch(value):
        fix = "put the user in 'user:'" if isinstance(value, str) and "@" in value else "quote it in the YAML"
        raise CockpitError(
            f"{source}: {key} must be a host name or IP address like gpu-a or 10.0.0.1, without spaces, "
            f"a leading '-' or a user@ (got {shown(value)}): {fix}"
        )
    return value


def _ssh_port(value: Any, key: str, source: str) -> int:
    try:
        return check_port(value, key)
    except CockpitError:
        raise CockpitError(
            f"{source}: {key} must be 1-65535 (got {shown(value)}): the port the node's sshd listens on "
            "(22 when not given)"
        ) from None


def _user(value: Any, key: str, source: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise CockpitError(
            f"{source}: {key} must be a login name like me or ubuntu (got {shown(value)}): "
            "letters, digits, '_', '.', '-', not starting with '-'"
        )
    return value


def _ifname(value: Any, key: str, source: str) -> str:
    """The interface NCCL and Gloo use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME): one Linux name."""
    if value is None:
        return ""
    if not isinstance(value, str) or not _IFNAME.fullmatch(value):
        raise CockpitError(
            f"{source}: {key} must be one network interface name like ib0 or eth0, at most 15 characters "
            f"(got {shown(value)}): `ip -br link` on the node lists them"
        )
    return value


def _identity(value: Any, source: str) -> str:
    """An SSH private key file (ssh -i), ``~`` expanded; whether it exists is ssh's to say."""
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip() or "\0" in value or value.startswith("-"):
        raise CockpitError(
            f"{source}: cluster.identity must be the path of an SSH private key like ~/.ssh/id_ed25519 "
            f"(got {shown(value)})"
        )
    return str(Path(value).expanduser())


def _ssh_options(value: Any, source: str) -> tuple[str, ...]:
    """Extra ``ssh -o`` values, each ``Key=Value``."""
    words = _words(
        value, "cluster.ssh_options", source, numbers=False, example="[StrictHostKeyChecking=accept-new]"
    )
    for i, word in enumerate(words):
        if not _SSH_OPTION.fullmatch(word) or "\0" in word or "\n" in word:
            raise CockpitError(
                f"{source}: cluster.ssh_options[{i}] must be an ssh -o option written Key=Value, like "
                f"StrictHostKeyChecking=accept-new (got {shown(word)})"
            )
    return words


def _link(value: Any, gpus_per_node: int, source: str) -> InterLink:
    """The network between nodes: a preset's name, or ``{name, bandwidth_gbps, latency_us}`` per GPU
    in Gb/s as NICs are sold (InterLink holds GB/s: Gb/s / 8)."""
    presets = ", ".join(LINK_PRESETS)
    if value is None:
        return InterLink()
    if isinstance(value, str):
        if value.strip().lower() not in LINK_PRESETS:
            raise CockpitError(
                f"{source}: cluster.link {shown(value)} is not a known network: give one of {presets}, "
                "or {name: ..., bandwidth_gbps: 400, latency_us: 10} per GPU"
            )
        name, gbps, latency, shared = LINK_PRESETS[value.strip().lower()]
        return InterLink(name, gbps / 8 / (gpus_per_node if shared else 1), latency)
    if not isinstance(value, dict):
        raise CockpitError(
            f"{source}: cluster.link must be one of {presets} or a mapping like "
            f"{{name: InfiniBand NDR, bandwidth_gbps: 400, latency_us: 10}} (got {shown(value)})"
        )
    _check_keys(value, _LINK_KEYS, "cluster.link", source)
    if value.get("bandwidth_gbps") is None:
        raise CockpitError(
            f"{source}: cluster.link needs bandwidth_gbps, each GPU's share in Gb/s as NICs are sold "
            "(one 400 Gb/s NIC per GPU: 400), or a preset name instead of the mapping: " + presets
        )
    gbps = _positive(value["bandwidth_gbps"], "cluster.link.bandwidth_gbps", MAX_LINK_GBPS, "Gb/s", source)
    given = value.get("latency_us")
    return InterLink(
        name=_text(value.get("name", "network"), "cluster.link.name", source, numbers=True),
        bandwidth_gbs=gbps / 8,
        latency_us=InterLink.latency_us
        if given is None
        else _positive(given, "cluster.link.latency_us", MAX_LINK_LATENCY_US, "us", source),
    )


def _positive(value: Any, key: str, high: float, unit: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise CockpitError(
            f"{source}: {key} must be a number above 0 and at most {high:,g} {unit} (got {shown(value)})"
        )
    return float(value)
