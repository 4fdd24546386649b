"""What the screen reads of one open profile, outside any widget: its lab, verdicts and results.

No Textual here: the screen reads a Session, `cockpit run` opens the same lab
(`cockpit.lab`). Opening one costs a few tens of milliseconds (YAML, the model's
config, the plan); closing it stops the monitor thread and closes the journal.
"""

from __future__ import annotations

import socket
import time
import warnings
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from cockpit.engines.options import SET_BY_COCKPIT
from cockpit.lab import Lab
from cockpit.layout import Layout
from cockpit.outcome import LAUNCHING, READY
from cockpit.perfmodel import predict_tok_s
from cockpit.planner import FAILS, FITS, TIGHT, Learned, Verdict, plan_layout
from cockpit.profile import Profile, profile_names
from cockpit.reports.comparison import Comparison, comparison
from cockpit.reports.measured import Against, Box, LastMeasured, calibration_mark, last_measured
from cockpit.reports.results import format_comparison
from cockpit.runner.experiment import DEFAULT_STARTUP_TIMEOUT_S
from cockpit.runner.registry import ServerEntry
from cockpit.secrets import shell_line
from cockpit.tui.format import duration

EXPORT_SUFFIX = {"md": "md", "csv": "csv"}


@dataclass
class Session(Lab):
    """A lab as the screen reads it: with its layouts planned and ordered for the picker."""

    verdicts: list[Verdict] = field(default_factory=list)  # the profile's layouts first, then the plan's
    # what the verdicts were planned with: their predictions' mark, "calibrated from n runs" or "default"
    planned_with: Learned = field(default_factory=Learned)
    # layout -> what this box last measured of it: read from the journal once, when first asked
    # after a refresh, never per keypress (None: to be read again)
    _measured: dict[str, LastMeasured] | None = field(default=None, init=False, repr=False)

    @classmethod
    def open(
        cls,
        profile: Profile | str | None = None,
        *,
        sim: bool = False,
        engine: str | None = None,
        interval: float = 1.0,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> Session:
        """Open the profile's lab and plan every layout; the monitor is not started yet."""
        session = super().open(
            profile, sim=sim, engine=engine, interval=interval, startup_timeout=startup_timeout
        )
        try:
            session.planned_with = session.setup.learned
            session.verdicts = session._ordered(session.launcher.verdicts())
        except BaseException:
            session.close()
            raise
        return session

    # -- the plan ---------------------------------------------------------------------------

    def learn(self, experiment: int) -> None:
        """The launcher's after-measure hook (set by Lab.open), after a launch got ready or a
        benchmark finished: fit again, and read this box's measurements again when next asked."""
        super().learn(experiment)
        self.forget_measured()

    def learned_changed(self) -> None:
        """The box taught the planner something (on the launcher's thread): plan the layouts again
        with it, so the picker's predictions and their mark agree once it reloads them."""
        learned = self.setup.learned
        self.verdicts = self._ordered(self.launcher.verdicts())
        self.planned_with = learned

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(self.profile.bench.concurrency)

    def _predicted(self, verdict: Verdict) -> Verdict:
        bench = self.profile.bench
        return replace(
            verdict,
            predicted_tok_s=predict_tok_s(
                self.setup, verdict, self.levels, bench.input_len, bench.output_len
            ),
        )

    def _ordered(self, verdicts: list[Verdict]) -> list[Verdict]:
        by_name = {str(v.layout): v for v in verdicts}
        first: list[Verdict] = []
        for text in self.profile.layouts:
            try:
                verdict = plan_layout(self.setup, text)
            except Exception:  # a profile's odd layout must not keep the screen from opening
                continue
            by_name.pop(str(verdict.layout), None)
            if str(verdict.layout) not in {str(v.layout) for v in first}:
                first.append(verdict)
        return [self._predicted(v) for v in [*first, *by_name.values()]]

    def verdict(self, layout: Layout) -> Verdict:
        for v in self.verdicts:
            if v.layout == layout:
                return v
        return self._predicted(plan_layout(self.setup, layout))

    def layout_names(self) -> tuple[str, ...]:
        return tuple(str(v.layout) for v in self.verdicts)

    @cached_property
    def flag_names(self) -> tuple[str, ...]:
        """The engine version's server flags for Tab after a layout (Tab asks at every key, so
        once), less those the layout and cockpit say."""
        options = self.setup.engine.options
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
        )

    def last_measured(self) -> dict[str, LastMeasured]:
        """Each layout's newest numbers on this box (host, GPU type, engine, model), kept until
        `forget_measured`: one pass over the journal per refresh."""
        measured = self._measured
        if measured is None:
            box = Box.of(self.setup, socket.gethostname())  # the host the journal files launches under
            measured = self._measured = last_measured(self.journal, box)
        return measured

    def forget_measured(self) -> None:
        """Read the measurements again when next asked."""
        self._measured = None

    # -- what the header shows --------------------------------------------------------------

    def describe(self) -> dict[str, str]:
        hw = self.setup.hardware
        model = self.setup.model
        name = model.name.rsplit("/", 1)[-1]
        return {
            "profile": self.profile.name,
            "engine": self.setup.engine.label,
            "model": f"{name} {model.quant.label}",
            "model_short": f"{name} {model.quant.label.split()[0]}",
            "gpus": f"{hw.count}× {hw.gpu.label}" + (" (simulated)" if self.sim else ""),
            "gpus_short": f"{hw.count}×{hw.gpu.key}" + (" (sim)" if self.sim else ""),
        }

    # -- servers from earlier runs ----------------------------------------------------------

    def live_servers(self) -> list[ServerEntry]:
        return self.registry.live()

    # -- results ----------------------------------------------------------------------------

    def comparison(self) -> Comparison:
        """The results, read again; the screen asks when an experiment fails or a level ends, so
        the measurements are read again too."""
        self.forget_measured()
        return comparison(self.journal, self.profile.name)

    def export(
        self, fmt: str, folder: Path | None = None, now: float | None = None, predicted: bool = False
    ) -> Path:
        """Write the results in `folder` (the cwd, else the data folder): md as a titled report with
        the context a reader needs (cockpit.reports.export.markdown_report), csv as one record per level.
        `predicted` adds the tok/s predicted at launch beside each measured one."""
        from cockpit.reports.export import context_from_setup, markdown_report

        comp = self.comparison()
        if fmt == "md":
            context = context_from_setup(self.setup, self.profile.name, comp, now=now)
            text = markdown_report(comp, context, predicted) + "\n"
        else:
            text = format_comparison(comp, fmt, predicted) + "\n"
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        name = f"cockpit-{self.profile.name}-{stamp}.{EXPORT_SUFFIX[fmt]}"
        folders = [folder] if folder is not None else [Path.cwd(), _data_dir() / "exports"]
        error: OSError | None = None
        for where in folders:
            try:
                where.mkdir(parents=True, exist_ok=True)
                path = where / name
                path.write_text(text)
                return path
            except OSError as exc:
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
