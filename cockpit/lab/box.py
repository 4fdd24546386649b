"""The box a command works on, decided once: simulated or real, and which engine version it speaks.

Only here is it decided whether the box is simulated (``--sim``, or no NVIDIA driver found) and
which version of the engine is in force. A real box speaks the version its launcher runs (asked
of the launcher the first time someone needs it, never before); a simulated one speaks the
newest table cockpit has, as the simulated engine does, and no launcher is asked at all. The
lab, ``cockpit plan``, the calibration commands and the screen all read one context, so they
plan with one option table and file what they learn under one calibration key. It also decides
where speeds come from: measured kernels where they cover a layout (``cockpit.kernels``, loaded
the first time a prediction asks), unless ``--speed analytic`` keeps the analytic model alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.planner import Setup
from cockpit.core.speed import ANALYTIC, KERNELS
from cockpit.engines import Engine, get_engine
from cockpit.engines.options import OptionTable
from cockpit.kernels import MeasuredKernels
from cockpit.store.calibration import Key, engine_version
from cockpit.store.profile import Profile
from cockpit.store.profile_setup import setup_for
from cockpit.system.installed import found_note, installed_engine

SIM_GIVEN = "--sim given"


def simulated_reason(sim: bool, hardware: Hardware) -> str:
    """Why the box is simulated ("--sim given", "no NVIDIA driver found"); "" when cockpit uses
    the real box: the GPUs, or the host itself for a CPU box (``hardware.on_cpu``: vLLM's CPU
    build runs anywhere, no driver needed). One wording for the CLI, the screen and `cockpit gpus`."""
    from cockpit.telemetry.nvml import driver_present

    if sim:
        return SIM_GIVEN
    if hardware.on_cpu:
        return ""
    return "" if driver_present() else "no NVIDIA driver found"


@dataclass(frozen=True)
class BoxContext:
    """One box as every face sees it: its GPUs, whether they are simulated and why, and the
    engine version in force with the option table that checks its flags."""

    hardware: Hardware
    engine_name: str
    launcher: tuple[str, ...]  # the words that start the engine here: asked which version it runs
    reason: str = ""  # why the box is simulated; "" on the real box
    speed: str = KERNELS  # KERNELS: measured kernels where they cover a layout; ANALYTIC: never

    @property
    def simulated(self) -> bool:
        return bool(self.reason)

    @property
    def sim_asked(self) -> bool:
        """Simulated because the person said --sim (another profile opened later is too), not
        because this machine has no driver (which the next context finds again, and says)."""
        return self.reason == SIM_GIVEN

    @cached_property
    def _found(self) -> tuple[Engine, str]:
        """The adapter in force and the note that goes with it, found the first time asked."""
        template = get_engine(self.engine_name)
        if self.simulated:  # the simulated engine speaks the newest table, whatever is installed
            return template, ""
        engine, how = installed_engine(template, self.launcher)
        return engine, found_note(engine, how)

    @property
    def engine(self) -> Engine:
        """The adapter for the engine version in force (asking the launcher on a real box)."""
        return self._found[0]

    @property
    def version(self) -> str:
        """The engine version in force, as a calibration key holds it."""
        return engine_version(self.engine.version)

    @property
    def note(self) -> str:
        """On a real box: the version found and the option table in force (another version's
        own, said so), or why none was found; "" on a simulated box."""
        return self._found[1]

    @property
    def options(self) -> OptionTable:
        """The option table the engine's flags are checked with."""
        return self.engine.options

    @property
    def key(self) -> Key:
        """What this box learns and plans with is filed under (``cockpit.store.calibration``)."""
        return Key(self.hardware.gpu.key, self.engine_name, self.version, self.simulated)

    def setup(self, profile: Profile) -> Setup:
        """``profile``'s setup (the one this context was made from) with the engine in force and,
        unless the analytic model was asked for, measured kernels for its engine version."""
        setup = replace(setup_for(profile), engine=self.engine)
        if self.speed == ANALYTIC:
            return setup
        return replace(setup, speed=MeasuredKernels(self.version, _kv_cache_dtype(setup)))


def _kv_cache_dtype(setup: Setup) -> str:
    """The KV cache dtype the profile asks for; ``auto`` where its arguments do not check (the
    verdict says why, in the engine's words, when the layout is planned)."""
    try:
        return setup.server.kv_cache_dtype
    except CockpitError:
        return "auto"


def box_context(profile: Profile, *, sim: bool, real: bool = False, speed: str | None = None) -> BoxContext:
    """The box ``profile`` names, decided: simulated with ``sim`` or where no driver is found,
    real with ``real`` (a driver or not: `calibration reset --real`). ``speed``: ``analytic``
    keeps measured kernels out (``--speed``); None: the profile's ``speed:``, else kernels where
    they cover."""
    hardware = profile.box
    if profile.cluster is not None:  # this machine's driver says nothing of the nodes'
        reason = SIM_GIVEN if sim and not real else ""
    else:
        reason = "" if real and not sim else simulated_reason(sim, hardware)
    return BoxContext(
        hardware,
        profile.engine,
        _launcher(profile),
        reason=reason,
        speed=speed or profile.speed or KERNELS,
    )


def _launcher(profile: Profile) -> tuple[str, ...]:
    command: Sequence[str] = profile.command or get_engine(profile.engine).default_command
    return tuple(command)
