"""The simulated GPU box: a folder where simulated engine processes publish what they hold.

Each engine process writes `proc-<pid>.json` with its per-GPU memory, utilization and power;
readers (`telemetry/simbox.py`) add them up like a driver would. The files live in the user's
runtime directory, so separate processes (the cockpit, its simulated engines, tests) share one
box without talking to each other. A file whose process has died is deleted when read: as on a
real GPU, a dead process's allocations vanish.

    <root>/<box-name>/box.json         the box: GPU type, count, memory, power limit
    <root>/<box-name>/proc-<pid>.json  {"pid", "name", "create_time", "time",
                                        "gpus": {"0": {"used_bytes", "utilization", "power_w"}}}

A simulated cluster runs its nodes on one machine: with COCKPIT_SIM_NODE set (the node's host,
``127.0.0.3``) the box is that node's own, its folder named after the node (``127.0.0.3-8xh200``),
so two nodes of the same GPUs hold memory on separate GPUs, as two machines would.

Memory a process publishes is what NVML would list for it, CUDA context included: the
simulated engine takes its figures from the planner, which already counts the context, so
readers add no baseline of their own.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs
import psutil

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import CATALOG, GIB, Hardware, parse_box
from cockpit.store.paths import private_dir
from cockpit.system.processes import started_at

DEFAULT_BOX = "8xrtx-pro-6000"
SIM_STATE_FIX = "set COCKPIT_SIM_STATE to a writable folder"

# Power and temperature model, as fractions of the board's power limit
# (docs/simulator.md#the-simulated-box).
IDLE_POWER_FRACTION = 0.055  # nothing loaded: 33 W of 600 W on an RTX PRO 6000
LOADED_POWER_FRACTION = 0.12  # memory held but no kernels running: clocks stay up
IDLE_TEMPERATURE_C = 30.0
TEMPERATURE_RISE_C = 45.0  # above idle, at the power limit: 75 C flat out

_PROC_FILE = re.compile(r"proc-(\d+)\.json")


@dataclass(frozen=True)
class GpuLoad:
    """What one process does on one GPU: memory held (bytes), utilization 0-100, board power (W)."""

    used_bytes: int = 0
    utilization: float = 0.0
    power_w: float = 0.0


@dataclass(frozen=True)
class SimProcess:
    """One simulated engine process as read from its file."""

    pid: int
    name: str
    gpus: dict[int, GpuLoad] = field(hash=False)
    time: float = 0.0


@dataclass(frozen=True)
class BoxState:
    """The box at one moment: its live processes, and the per-GPU totals a driver would show."""

    hardware: Hardware
    processes: tuple[SimProcess, ...]
    time: float

    def loads(self, index: int) -> list[tuple[SimProcess, GpuLoad]]:
        """The processes on GPU `index`, each with its load there, by PID."""
        return [(p, p.gpus[index]) for p in self.processes if index in p.gpus]

    def used_bytes(self, index: int) -> int:
        return sum(load.used_bytes for _, load in self.loads(index))

    def utilization(self, index: int) -> float:
        return max((load.utilization for _, load in self.loads(index)), default=0.0)

    def power_w(self, index: int) -> float:
        return board_power_w(self.hardware, [load for _, load in self.loads(index)])

    def temperature_c(self, index: int) -> float:
        return temperature_c(self.hardware, self.power_w(index))


def board_power_w(hardware: Hardware, loads: list[GpuLoad]) -> float:
    """The processes' power added up, never under the idle floor nor over the board limit."""
    limit = hardware.gpu.power_w
    loaded = any(load.used_bytes > 0 for load in loads)
    floor = limit * (LOADED_POWER_FRACTION if loaded else IDLE_POWER_FRACTION)
    return min(limit, max(floor, sum(load.power_w for load in loads)))


def temperature_c(hardware: Hardware, power_w: float) -> float:
    """A GPU's temperature from its power: warm at idle, hot at the limit."""
    return IDLE_TEMPERATURE_C + TEMPERATURE_RISE_C * power_w / hardware.gpu.power_w


def box_from_env(env: Mapping[str, str] | None = None) -> Hardware:
    """The simulated box from COCKPIT_SIM_GPUS (`8xrtx-pro-6000`, `4xh200`), else the default."""
    env = os.environ if env is None else env
    spec = env.get("COCKPIT_SIM_GPUS", "").strip() or DEFAULT_BOX
    try:
        return parse_box(spec)
    except CockpitError as err:
        raise CockpitError(
            f"COCKPIT_SIM_GPUS={spec!r} is not a box: set it to COUNTxTYPE, "
            f"like 8xrtx-pro-6000, with TYPE one of {', '.join(CATALOG)}."
        ) from err


def default_root(env: Mapping[str, str] | None = None) -> Path:
    """Where boxes live: COCKPIT_SIM_STATE, else `simbox` in the user's runtime directory."""
    env = os.environ if env is None else env
    if env.get("COCKPIT_SIM_STATE"):
        return Path(env["COCKPIT_SIM_STATE"]).expanduser()
    with warnings.catch_warnings():  # no XDG_RUNTIME_DIR (ssh, containers): /tmp/runtime-UID is fine
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir("cockpit")) / "simbox"


def node_from_env(env: Mapping[str, str] | None = None) -> str:
    """The simulated node this process runs on (COCKPIT_SIM_NODE: its host), "" on a lone box."""
    env = os.environ if env is None else env
    return env.get("COCKPIT_SIM_NODE", "").strip()


def box_name(hardware: Hardware, node: str = "") -> str:
    """A folder name per box, so an 8 x H200 box never reads an RTX box's processes; a node's box
    is prefixed by the node, so the nodes of a simulated cluster never share GPUs."""
    name = _hardware_name(hardware)
    if not node:
        return name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", node).strip("-.")
    if not safe:
        raise CockpitError(
            f"COCKPIT_SIM_NODE={node!r} names no node: set it to the node's host, like 127.0.0.3"
        )
    return f"{safe}-{name}"


def _hardware_name(hardware: Hardware) -> str:
    gpu = hardware.gpu
    kind = gpu.key
    if kind not in CATALOG:  # a GPU given only by its memory: name the folder after it
        kind = re.sub(r"[^a-z0-9]+", "-", gpu.name.lower()).strip("-")
    name = f"{hardware.count}x{kind or 'gpu'}"
    if gpu.key not in CATALOG or not math.isclose(hardware.memory_gib, gpu.memory_gib):
        name += f"-{hardware.memory_gib:g}gib"
    return name


class SimBox:
    """One simulated box: its folder, the processes publishing into it, and reading it back."""

    def __init__(self, hardware: Hardware, root: Path | None = None, node: str = "") -> None:
        self.hardware = hardware
        self.node = node
        self.name = box_name(hardware, node)
        self.folder = Path(root if root is not None else default_root()) / self.name

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SimBox:
        """The box COCKPIT_SIM_GPUS names, in COCKPIT_SIM_STATE or the user's runtime directory;
        with COCKPIT_SIM_NODE, that node's own box."""
        return cls(box_from_env(env), default_root(env), node_from_env(env))

    @property
    def memory_bytes(self) -> int:
        return int(self.hardware.memory_gib * GIB)

    def create(self) -> SimBox:
        """Make the folder (0700, as every folder cockpit makes) and write box.json; running it
        again changes nothing."""
        private_dir(self.folder, fix=SIM_STATE_FIX)
        spec = {
            "gpu": self.hardware.gpu.key,
            "name": self.hardware.gpu.name,
            "count": self.hardware.count,
            "memory_gib": self.hardware.memory_gib,
            "power_limit_w": self.hardware.gpu.power_w,
        }
        if self.node:
            spec["node"] = self.node
        path = self.folder / "box.json"
        if _read_json(path) != spec:
            _write_json(path, spec)
        return self

    def publisher(self, pid: int, name: str) -> Publisher:
        """A publisher for one engine process (usually `os.getpid()`)."""
        self.create()
        return Publisher(self, pid, name)

    def read(self) -> BoxState:
        """The live processes. Files of dead processes are deleted; unreadable ones skipped."""
        processes = []
        for path in self.folder.glob("proc-*.json"):
            match = _PROC_FILE.fullmatch(path.name)
            if match is None:
                continue
            data = _read_json(path)
            create_time = data.get("create_time") if isinstance(data, dict) else None
            if not _alive(int(match[1]), create_time):
                with contextlib.suppress(OSError):  # another reader got there first
                    path.unlink()
                continue
            process = self._parse(data, int(match[1]))
            if process is not None:
                processes.append(process)
        processes.sort(key=lambda p: p.pid)
        return BoxState(self.hardware, tuple(processes), time.time())

    def _parse(self, data: object, pid: int) -> SimProcess | None:
        """A process from its file's JSON, or None when the file is not what a publisher writes."""
        if not isinstance(data, dict):
            return None
        try:
            gpus = {}
            for key, load in data["gpus"].items():
                index = int(key)
                if 0 <= index < self.hardware.count:
                    gpus[index] = GpuLoad(
                        int(load["used_bytes"]), float(load["utilization"]), float(load["power_w"])
                    )
            return SimProcess(pid, str(data["name"]), gpus, float(data.get("time", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def __repr__(self) -> str:
        node = f", node={self.node!r}" if self.node else ""
        return f"SimBox({self.hardware}, {str(self.folder)!r}{node})"


class Publisher:
    """What one simulated engine process holds on the box's GPUs; one file, rewritten whole."""

    def __init__(self, box: SimBox, pid: int, name: str) -> None:
        self.box = box
        self.pid = pid
        self.name = name
        self.path = box.folder / f"proc-{pid}.json"
        self._create_time = _create_time(pid)

    def publish(self, gpus: Mapping[int, GpuLoad]) -> None:
        """Replace what this process holds with `gpus` (GPU index -> load), atomically."""
        count = self.box.hardware.count
        for index, load in gpus.items():
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise CockpitError(
                    f"GPU index {index!r} is not on this box of {count} GPUs: "
                    f"publish loads for GPUs 0 to {count - 1}."
                )
            possible = 0 <= load.utilization <= 100 and 0 <= load.power_w < math.inf
            if load.used_bytes < 0 or not possible:
                raise CockpitError(
                    f"GPU {index} load {load} is impossible: "
                    "give used_bytes >= 0, utilization 0-100 and power_w >= 0."
                )
        private_dir(self.box.folder, fix=SIM_STATE_FIX)
        _write_json(
            self.path,
            {
                "pid": self.pid,
                "name": self.name,
                "create_time": self._create_time,
                "time": time.time(),
                "gpus": {str(index): asdict(load) for index, load in sorted(gpus.items())},
            },
        )

    def clear(self) -> None:
        """Give everything back, as a process exiting cleanly (or on SIGTERM) does."""
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()


def _create_time(pid: int) -> float | None:
    """When `pid` started, to tell it from a later process given the same PID.

    A process already gone gets 0.0, which no live process matches, so its file is dropped
    on the next read; None (not ours to inspect) means "trust the PID alone".
    """
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return 0.0
    except psutil.Error:
        return None


def _alive(pid: int, create_time: object) -> bool:
    """Whether a file's process still runs: not gone, not a zombie, not a reused PID."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if isinstance(create_time, (int, float)) and not isinstance(create_time, bool):
            return started_at(process, create_time)
        return True
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.Error:  # exists, but belongs to someone we may not inspect
        return True


def _read_json(path: Path) -> object:
    """The file's JSON, or None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: object) -> None:
    """Write beside the target, then rename over it: readers see the old file or the new one."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
