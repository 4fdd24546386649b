"""What the screen reads of one open profile, outside any widget: its lab, verdicts and results.

No Textual here: the screen reads a Session, `cockpit run` opens the same lab
(`cockpit.lab.lab`). Opening one costs a few tens of milliseconds (YAML, the model's
config, the plan); closing it stops the monitor thread and closes the journal.
"""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.layout import Layout
from cockpit.core.model import ModelArch
from cockpit.core.outcome import LAUNCHING, READY
from cockpit.core.perfmodel import with_prediction
from cockpit.core.planner import FAILS, FITS, TIGHT, Learned, Setup, Verdict, plan_layout
from cockpit.core.secrets import shell_line
from cockpit.core.speed import KernelTimes, SpeedBackend, SpeedSource
from cockpit.engines import Placement
from cockpit.engines.options import SET_BY_COCKPIT
from cockpit.faces.tui.format import duration
from cockpit.lab.box import BoxContext
from cockpit.lab.lab import Lab
from cockpit.reports.comparison import Comparison, comparison
from cockpit.reports.measured import Against, Box, LastMeasured, calibration_mark, last_measured
from cockpit.reports.results import format_comparison
from cockpit.runner.experiment import DEFAULT_STARTUP_TIMEOUT_S
from cockpit.runner.registry import ServerEntry
from cockpit.store.paths import private_dir
from cockpit.store.profile import Profile, profile_names

EXPORT_SUFFIX = {"md": "md", "csv": "csv"}


class _Stoppable:
    """A speed backend that refuses once the session closes, so its planning thread ends."""

    def __init__(self, backend: SpeedBackend, closing: threading.Event) -> None:
        self._backend, self._closing = backend, closing

    def kernels(
        self, model: ModelArch, hardware: Hardware, engine: str, placement: Placement
    ) -> KernelTimes | SpeedSource:
        if self._closing.is_set():
            raise CockpitError("the session closed")
        return self._backend.kernels(model, hardware, engine, placement)


# Measured kernels are planned on a thread after the first frame: it waits for a screen to take
# the session (at most KERNELS_WAIT_S; a session without one plans then), then FIRST_FRAME_S more.
KERNELS_WAIT_S = 10.0
FIRST_FRAME_S = 0.5


@dataclass(frozen=True)
class PlannedLayouts:
    """The layouts planned with one setup, handed over whole: the launcher's thread plans again
    while the screen reads, and verdicts never meet the mark of another setup."""

    setup: Setup
    verdicts: list[Verdict]  # the profile's layouts first, then the plan's; never changed once made


@dataclass
class Session(Lab):
    """A lab as the screen reads it: with its layouts planned and ordered for the picker."""

    planned: PlannedLayouts | None = None  # set by open; replaced whole, never changed in place
    # Told (on the launcher's thread, without waiting) after each fit that follows a measurement:
    # what was measured, planned or went wrong may have changed. The screen reloads from it.
    on_learned: Callable[[], None] | None = field(default=None, repr=False)
    # layout -> what this box last measured of it, read from the journal once when first asked
    # after a refresh, never per keypress; tagged with the generation it was read in, so a read
    # that overlapped `forget_measured` is not kept as new
    _measured: tuple[int, dict[str, LastMeasured]] | None = field(default=None, init=False, repr=False)
    _generation: int = field(default=0, init=False, repr=False)
    _closing: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    # Set once the layouts stand as planned with the speed the box was given: at once with the
    # analytic model alone, else when the measured-kernels thread has handed its list over (or
    # given up). A test that shows predictions waits for it.
    kernels_settled: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def close(self) -> None:
        """Stop planning with measured kernels (between two layouts), then close the lab."""
        self._closing.set()
        super().close()

    @classmethod
    def open(
        cls,
        profile: Profile | str | None = None,
        *,
        box: BoxContext | None = None,
        sim: bool = False,
        engine: str | None = None,
        speed: str | None = None,
        interval: float = 1.0,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        collect_problems: bool = True,
    ) -> Session:
        """Open the profile's lab (on ``box`` when the caller decided it, as ``Lab.open``) and plan
        every layout; the monitor is not started yet. Damaged records read back are collected for
        the screen to say (it owns the terminal)."""
        session = super().open(
            profile,
            box=box,
            sim=sim,
            engine=engine,
            speed=speed,
            interval=interval,
            startup_timeout=startup_timeout,
            collect_problems=collect_problems,
        )
        try:
            if session.setup.speed is None:
                session.planned = session._plan(session.setup)
                session.kernels_settled.set()
            else:  # the first frame from the analytic model; measured kernels on a thread
                session.planned = session._plan(replace(session.setup, speed=None))
                # Not a daemon: one stopped at exit inside the library's native code aborts the
                # process; ``close`` stops it between layouts instead, and exit waits for that.
                threading.Thread(
                    target=session._plan_with_kernels, args=(session.planned,), name="kernels"
                ).start()
        except BaseException:
            session.close()
            raise
        return session

    def _plan_with_kernels(self, first: PlannedLayouts) -> None:
        """Plan again with the setup's measured kernels (importing AIConfigurator and compiling
        each layout takes seconds) off the screen's thread, and hand the list over as a refit
        does, unless a refit has already planned again (with them). It starts once a screen
        has taken the session (``on_learned`` set) and drawn its first frame: importing the
        library holds the interpreter, which would delay that frame by seconds."""
        try:
            self._hand_over_kernels(first)
        finally:
            self.kernels_settled.set()

    def _hand_over_kernels(self, first: PlannedLayouts) -> None:
        deadline = time.monotonic() + KERNELS_WAIT_S
        while self.on_learned is None and time.monotonic() < deadline and not self._closing.is_set():
            time.sleep(0.05)
        if self._closing.wait(FIRST_FRAME_S) or self.setup.speed is None:
            return
        try:
            planned = self._plan(replace(self.setup, speed=_Stoppable(self.setup.speed, self._closing)))
        except Exception:  # closed meanwhile, or the library failed: the analytic list stands
            return
        if self.planned is first:
            self.planned = planned
            if self.on_learned is not None:
                self.on_learned()

    # -- the plan ---------------------------------------------------------------------------

    @property
    def verdicts(self) -> list[Verdict]:
        """The profile's layouts first, then the plan's, with their predictions."""
        return self.planned.verdicts if self.planned is not None else []

    @property
    def planned_with(self) -> Learned:
        """What the verdicts were planned with: their predictions' mark, "calibrated from n runs"
        or "default"."""
        return self.planned.setup.learned if self.planned is not None else Learned()

    def learn(self, experiment: int) -> None:
        """The launcher's after-measure hook (set by Lab.open), after a launch got ready or a
        benchmark finished: fit again, read this box's measurements again when next asked, and
        tell ``on_learned``."""
        super().learn(experiment)
        self.forget_measured()
        if self.on_learned is not None:
            self.on_learned()

    def learned_changed(self) -> None:
        """The box taught the planner something (on the launcher's thread): plan the layouts again
        with it and hand them over in one assignment, predictions and mark together."""
        self.planned = self._plan(self.setup)

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(self.profile.bench.concurrency)

    def _plan(self, setup: Setup) -> PlannedLayouts:
        return PlannedLayouts(setup, self._ordered(setup, self.launcher.verdicts(setup)))

    def _predicted(self, setup: Setup, verdict: Verdict) -> Verdict:
        bench = self.profile.bench
        return with_prediction(setup, verdict, self.levels, bench.input_len, bench.output_len)

    def _ordered(self, setup: Setup, verdicts: list[Verdict]) -> list[Verdict]:
        by_name = {str(v.layout): v for v in verdicts}
        first: list[Verdict] = []
        for text in self.profile.layouts:
            try:
                verdict = plan_layout(setup, text)
            except Exception:  # a profile's odd layout must not keep the screen from opening
                continue
            by_name.pop(str(verdict.layout), None)
            if str(verdict.layout) not in {str(v.layout) for v in first}:
                first.append(verdict)
        return [self._predicted(setup, v) for v in [*first, *by_name.values()]]

    def verdict(self, layout: Layout, planned: PlannedLayouts | None = None) -> Verdict:
        """The layout's verdict as listed, else planned with the setup the list was planned with
        (a layout typed with knobs): its mark is the list's. ``planned``: that list, when the
        caller already holds it (the launcher's thread may replace ``self.planned`` meanwhile)."""
        planned = planned or self.planned
        verdicts = planned.verdicts if planned is not None else []
        for v in verdicts:
            if v.layout == layout:
                return v
        setup = planned.setup if planned is not None else self.setup
        return self._predicted(setup, plan_layout(setup, layout))

    def layout_names(self) -> tuple[str, ...]:
        return tuple(str(v.layout) for v in self.verdicts)

    @cached_property
    def flag_names(self) -> tuple[str, ...]:
        """The engine version's server flags for Tab after a layout (Tab asks at every key, so
        once), less those the layout and cockpit say."""
        options = self.box.options
        return tuple(n for n in options.names if (o := options.find(n)) and o.dest not in SET_BY_COCKPIT)

    @staticmethod
    def profile_names() -> tuple[str, ...]:
        return tuple(profile_names())

    def plan_summary(self) -> str:
        """`plan` alone: how many layouts fit, and the fastest predicted of those."""
        counts = {mark: sum(v.verdict == mark for v in self.verdicts) for mark in (FITS, TIGHT, FAILS)}
        runnable = [v for v in self.verdicts if v.verdict != FAILS and v.predicted_tok_s]
        best = max(runnable, key=lambda v: max(v.predicted_tok_s.values()), default=None)
        text = f"{len(self.verdicts)} layouts on {self.setup.engine.label}: {counts[FITS]} fit, {counts[TIGHT]} tight, {counts[FAILS]} fail"
        if best is not None:
            text += f"; fastest predicted: {best.layout} ({max(best.predicted_tok_s.values()):,.0f} tok/s)"
        return text + " · ↑↓ in the picker shows each one's reasons"

    def prompt_hint(self) -> str:
        """The prompt's placeholder, with layouts this engine can say and this box can hold."""
        runnable = [str(v.layout) for v in self.verdicts if v.verdict != FAILS]
        first = next((x for x in runnable if "ep" in x), runnable[0] if runnable else "tp2")
        second = next((x for x in runnable if x != first), first)
        return f":  try {first} · bench c=1,32 · sweep {second}, {first} · help"  # Tab and ↑ are in help

    def is_profile(self, name_or_path: str) -> bool:
        """Whether a registry entry's profile (a file, or a name in older entries) is the open one."""
        if name_or_path == self.profile.name:
            return True
        try:
            return (
                bool(self.profile.path) and Path(name_or_path).resolve() == Path(self.profile.path).resolve()
            )
        except OSError:
            return False

    def server_state(self, entry: ServerEntry, now: float) -> str:
        """What a server left running is doing, from the journal: loading, or ready since when."""
        record = self.journal.experiment(entry.experiment)
        if record is None or record.outcome == LAUNCHING:
            return f"loading (started {duration(now - entry.started)} ago)" if entry.started else "loading"
        if record.outcome == READY:
            since = (
                f" for {duration(now - entry.started - (record.load_seconds or 0))}" if entry.started else ""
            )
            return f"ready{since} (loaded in {record.load_seconds or 0:.0f} s)"
        return record.outcome

    def argv_text(self, verdict: Verdict) -> str:
        """The exact command line cockpit would run for this layout: the verdict's argv, the
        simulated engine's launcher included on a simulated box."""
        return shell_line(verdict.argv)

    def suggest(self, verdict: Verdict) -> str:
        return self.launcher.suggest(verdict)

    # -- predicted against measured ---------------------------------------------------------

    def against(self, verdict: Verdict) -> Against:
        """How the verdict's predictions were made, and what this box last measured of its layout."""
        bench = self.profile.bench
        return Against(
            calibration_mark(self.planned_with),
            self.last_measured().get(str(verdict.layout)),
            (bench.input_len, bench.output_len),
            verdict.predicted_by.short if verdict.predicted_by is not None else "",
        )

    def last_measured(self) -> dict[str, LastMeasured]:
        """Each layout's newest numbers on this box (host, GPU type, engine, model), kept until
        `forget_measured`: one pass over the journal per refresh."""
        generation, cached = self._generation, self._measured
        if cached is not None and cached[0] == generation:
            return cached[1]
        # the host the journal files launches under; a simulated box's own launches only
        box = Box(self.box.key, socket.gethostname(), self.setup.model_path)
        measured = last_measured(self.journal, box)
        self._measured = (generation, measured)  # kept only while no forget came since it began
        return measured

    def forget_measured(self) -> None:
        """Read the measurements again when next asked (from any thread)."""
        self._generation += 1

    # -- what the header shows --------------------------------------------------------------

    def describe(self) -> dict[str, str]:
        hw = self.setup.hardware
        model = self.setup.model
        name = model.name.rsplit("/", 1)[-1]
        return {
            "profile": self.profile.name,
            "engine": self.setup.engine.label,
            "model": f"{name} {model.quant.label}" + (" (approximate)" if model.approximate else ""),
            "model_short": f"{name} {model.quant.label.split()[0]}",
            "gpus": f"{hw.count}× {hw.gpu.label}" + (" (simulated)" if self.sim else ""),
            "gpus_short": f"{hw.count}×{hw.gpu.key}" + (" (sim)" if self.sim else ""),
        }

    # -- servers from earlier runs ----------------------------------------------------------

    def live_servers(self) -> list[ServerEntry]:
        return self.registry.live()

    # -- results ----------------------------------------------------------------------------

    def comparison(self) -> Comparison:
        """The results, read again: the table of the newest workload measured, the one the screen
        shows (the other workloads' in ``earlier``, which exports keep). The screen asks when an
        experiment fails or a level ends, so the measurements are read again too."""
        self.forget_measured()
        return comparison(self.journal, self.profile.name)

    def export(
        self, fmt: str, folder: Path | None = None, now: float | None = None, predicted: bool = False
    ) -> Path:
        """Write the results in `folder` (the cwd, else the data folder): md as a titled report with
        the context a reader needs, a table per workload newest first, and the profile's newest tune
        (cockpit.reports.export.markdown_report), csv as one record per level, with its lengths and
        whether the box was simulated. `predicted` adds the tok/s predicted at launch beside each
        measured one."""
        from cockpit.reports.export import context_from_setup, markdown_report
        from cockpit.reports.tune import newest_tune

        comp = self.comparison()
        if fmt == "md":
            context = context_from_setup(self.setup, self.profile.name, comp, now=now)
            tune = newest_tune(self.journal, self.profile.name)
            text = markdown_report(comp, context, predicted, tune=tune) + "\n"
        else:
            text = format_comparison(comp, fmt, predicted) + "\n"
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        name = f"cockpit-{self.profile.name}-{stamp}.{EXPORT_SUFFIX[fmt]}"
        folders = [folder] if folder is not None else [Path.cwd(), _data_dir() / "exports"]
        error: OSError | CockpitError | None = None
        for where in folders:
            try:
                private_dir(where, fix="export from a writable folder")  # 0700 whatever the umask
                path = where / name
                path.write_text(text)
                return path
            except (OSError, CockpitError) as exc:
                error = exc
        assert error is not None
        raise error


def _data_dir() -> Path:
    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_data_dir("cockpit"))


def hostname() -> str:
    return socket.gethostname().split(".")[0]
