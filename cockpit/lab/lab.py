"""One open lab: a profile on a box, with its journal, GPU monitor, server registry and launcher.

The command line (`cockpit run`, `attach`) and the screen open a lab here, on the box
``cockpit.lab.box`` decided (simulated with ``--sim`` or where no NVIDIA driver is found, and
the engine version in force). A simulated lab reads the simulated box and launches the simulated
engine, whose launcher words go into the setup, so the planner's argv is the one shown,
journaled and launched.

The lab plans with what the box taught (``cockpit.store.calibration``): loaded at open, fitted again after
every launch that gets ready and every benchmark, so the next prediction already uses it. What
goes wrong on the way (a fit that fails, a calibration file that cannot be read or written) is
kept as one line each, for the faces to show once (``learning_notices``).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field, replace
from typing import TypeVar

from cockpit.core.cluster import Cluster, Node
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.planner import Setup
from cockpit.lab.box import BoxContext, box_context
from cockpit.runner.experiment import DEFAULT_STARTUP_TIMEOUT_S, Launcher
from cockpit.runner.registry import Registry
from cockpit.runner.supervisor import Supervisor
from cockpit.store.calibration import CalibrationStore, relearn
from cockpit.store.journal import Journal
from cockpit.store.profile import Profile
from cockpit.store.profile_setup import SetupOverrides, profile_for_engine, resolve
from cockpit.system.children import simulated_engine
from cockpit.telemetry.base import GpuSource
from cockpit.telemetry.monitor import Monitor


def gpu_source(hardware: Hardware, sim: bool, cluster: Cluster | None = None) -> GpuSource:
    """The simulated box made from the profile's hardware, the host for a CPU box, or the real
    GPUs through NVML; on a cluster, every node's GPUs from its agent over SSH (each simulated
    node reads its own simulated box)."""
    if cluster is not None:
        from cockpit.runner.cluster import agent_env, simulated_node_env
        from cockpit.telemetry.agent import ClusterSource

        def node_env(node: Node) -> dict[str, str]:
            if not sim:
                return {}
            return {**agent_env(True), **simulated_node_env(node.host, hardware)}

        return ClusterSource(cluster, env=node_env)
    if sim:
        from cockpit.sim.box import SimBox
        from cockpit.telemetry.simbox import SimBoxSource

        return SimBoxSource(SimBox(hardware).create())
    if hardware.on_cpu:
        from cockpit.telemetry.host import HostSource

        return HostSource(hardware.count)
    from cockpit.telemetry.nvml import NvmlSource

    return NvmlSource()


def lab_setup(profile: Profile, box: BoxContext) -> Setup:
    """The profile's setup on ``box`` (the context made from it): the engine version in force; a
    simulated one launches the simulated engine in front of the engine's default launcher (the
    profile's own launcher names a real install)."""
    setup = box.setup(profile)
    if box.simulated:
        return replace(setup, command=simulated_engine(setup.engine.name, setup.engine.default_command))
    return setup


_L = TypeVar("_L", bound="Lab")  # Lab.open builds the subclass it is called on (the screen's Session)


@dataclass
class Lab:
    """What one open profile needs besides a face, wired once; ``close`` (or ``with``) ends it."""

    profile: Profile
    setup: Setup
    box: BoxContext  # simulated or not, the engine version in force
    source: GpuSource
    journal: Journal
    monitor: Monitor  # not started: the face starts it when it wants samples
    registry: Registry
    launcher: Launcher
    store: CalibrationStore  # what the box taught, kept
    notes: tuple[str, ...] = ()  # what running the profile on another engine translated or dropped
    learning_problem: str | None = None  # the last fit that failed, one line
    # Damaged records read back (a registry entry set aside, a journal row skipped), one line
    # each, for a face that shows them itself: ``Lab.open(..., collect_problems=True)``.
    problems: list[str] = field(default_factory=list)
    _learning: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _told: set[str] = field(default_factory=set, init=False, repr=False)  # notices already shown

    @property
    def sim(self) -> bool:
        return self.box.simulated

    @classmethod
    def open(
        cls: type[_L],
        profile: Profile | str | None = None,
        *,
        box: BoxContext | None = None,
        sim: bool = False,
        engine: str | None = None,
        speed: str | None = None,
        interval: float = 1.0,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        collect_problems: bool = False,
    ) -> _L:
        """Resolve the profile (a name or file; None for the demo one) and open its lab.
        ``box``: the box the caller decided for this profile (``cockpit.lab.box``); else it is
        decided here, ``sim`` simulating even where a driver is found (``--sim``, or a server
        started simulated).
        ``engine``: run the profile on this engine (its launcher, its arguments; ``notes`` say
        what was translated). ``collect_problems``: damaged records go to ``problems`` instead
        of stderr (a screen owns the terminal). ``speed``: where predicted speeds come from
        (``cockpit.lab.box``: measured kernels where they cover, or ``analytic``)."""
        notes: tuple[str, ...] = ()
        problems: list[str] = []
        warn = problems.append if collect_problems else None
        if not isinstance(profile, Profile):
            profile, notes = resolve(SetupOverrides(profile=profile, engine=engine))
        elif engine:
            profile, notes = profile_for_engine(profile, engine)
        if box is None:
            box = box_context(profile, sim=sim, speed=speed)
        setup = lab_setup(profile, box)
        store = CalibrationStore()
        setup = replace(setup, learned=store.learned(box.key, setup.model_path))  # a bad file: a notice
        with contextlib.ExitStack() as undo:  # a part that fails to open closes those opened before it
            source = gpu_source(box.hardware, box.simulated, profile.cluster)
            undo.callback(source.close)
            journal = Journal(warn=warn)
            undo.callback(journal.close)
            monitor = Monitor(source, interval=interval)
            registry = Registry(warn=warn)
            supervisor = Supervisor(registry, source)
            launcher = Launcher(
                profile,
                setup,
                journal,
                supervisor,
                monitor,
                sim=box.simulated,
                startup_timeout=startup_timeout,
            )
            undo.pop_all()
        lab = cls(
            profile,
            setup,
            box,
            source,
            journal,
            monitor,
            registry,
            launcher,
            store,
            notes,
            problems=problems,
        )
        launcher.after_measure = lab.learn
        return lab

    def learn(self, experiment: int) -> None:
        """A launch got ready or a benchmark finished (``experiment``): fit the box's constants
        again and plan with them from now on. A fit that fails keeps the last one: it must never
        cost the measurement that triggered it. A launch's hook and a benchmark's may run at once
        (two threads): one fit at a time."""
        with self._learning:
            try:
                learned = relearn(self.journal, self.setup, self.sim, self.store)
            except CockpitError as exc:
                self.learning_problem = f"calibration not updated after experiment {experiment}: {exc}"
                return
            if learned == self.setup.learned:
                return
            self.setup = replace(self.setup, learned=learned)
            self.launcher.replan(self.setup)
            self.learned_changed()

    def learned_changed(self) -> None:
        """What the box taught changed; a face that keeps planned layouts plans them again."""

    def learning_notices(self) -> list[str]:
        """What went wrong with learning and was not shown yet, one line each, each shown once:
        the last fit that failed, the calibration file that could not be read or written (what
        was learned then holds for this session only)."""
        lines = (self.learning_problem, self.store.warning)
        fresh = [line for line in dict.fromkeys(lines) if line and line not in self._told]
        self._told.update(fresh)
        return fresh

    def close(self) -> None:
        """Stop the monitor's thread, release the GPU source, close the journal: each of them
        even when one before it fails."""
        with contextlib.ExitStack() as stack:
            stack.callback(self.journal.close)
            stack.callback(self.source.close)
            stack.callback(self.monitor.stop)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
