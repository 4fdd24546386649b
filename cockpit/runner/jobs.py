"""The workflows the faces share, below them: a sweep (the layouts it refuses before anything
launches, the line it opens with, each layout launched, benched, stopped), stopping the servers an earlier cockpit left running, and the one-line refusal of a command
that cannot run now.

The screen runs the jobs on its threads and `cockpit sweep`/`cockpit stop` in the foreground;
each face says what they report in its own words. The refusals are pure: what runs in, one line
(or None) out, the same line whichever face asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.commands import Command, Stop, Sweep, Try, Tune, Use
from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout
from cockpit.core.planner import Verdict
from cockpit.runner.events import BenchDone, Event, Ready
from cockpit.runner.experiment import journal_stopped
from cockpit.runner.registry import ServerEntry
from cockpit.runner.supervisor import Supervisor
from cockpit.store.journal import Journal

# -- what may run now ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    """What runs now, as far as a new command cares."""

    server: bool = False  # a server of ours runs or loads
    ready: bool = False  # a server of ours is ready to be benched
    benching: bool = False
    sweeping: bool = False
    tuning: bool = False
    profile: str = ""  # the open profile, which `use` would leave

    @property
    def busy(self) -> bool:
        """A server of ours runs or loads, or a job (bench, sweep, tune) is at work."""
        return self.server or self.sweeping or self.benching or self.tuning


def refusal(command: Command, running: Running) -> str | None:
    """Why ``command`` cannot run while ``running`` runs, in one line; None when it can."""
    match command:
        case Try():
            if running.sweeping:
                return "a sweep is running: `stop` ends it first"
        case BenchRequest():
            if running.benching:
                return "a benchmark is running: wait for it, or `stop`"
            if running.sweeping:
                return "a sweep is running: it benches each layout itself"
            if running.tuning:
                return "a tune is running: it benches each candidate itself"
            if not running.ready:
                return "no server is ready: `try <layout>` first, then `bench`"
        case Stop():
            if not running.busy:
                return "no server is running"
        case Sweep() | Tune():
            if running.sweeping or running.benching:
                return "a sweep or benchmark is running: `stop` ends it first"
        case Use():
            if running.server or running.sweeping or running.tuning:
                return f"a server of profile {running.profile} is running: `stop` it before `use`"
    return None


def unlaunchable(layout: Layout, verdict: Verdict, gpus: int, suggestion: str = "") -> str | None:
    """Why the planner's ``verdict`` leaves ``layout`` nothing to launch on a box of ``gpus``, in
    one line with ``suggestion`` (a layout that fits) where it helps; None when it can launch."""
    if verdict.placement is None:
        reason = str(verdict.reasons[0])
        return reason + (f"; {suggestion}" if suggestion and "nearest" not in reason else "")
    if verdict.gpus_used > gpus:
        return f"{layout} needs {verdict.gpus_used} GPUs and this box has {gpus}" + (
            f": {suggestion}" if suggestion else ""
        )
    return None


# -- servers left running --------------------------------------------------------------------------


@dataclass(frozen=True)
class LeftRunningStop:
    """One server left running, stopped (``how``) or left alone (``refused``: not verifiably
    cockpit's, so never signalled)."""

    entry: ServerEntry
    how: str = ""
    refused: str = ""


def stop_left_running(
    entries: Iterable[ServerEntry], supervisor: Supervisor, journal: Journal
) -> Iterator[LeftRunningStop]:
    """Stop each server an earlier cockpit started and journal its end, one at a time (each
    said as it goes); one that is not verifiably cockpit's is left alone and the others go on."""
    for entry in entries:
        try:
            how = supervisor.stop(supervisor.attach(entry))
        except CockpitError as exc:
            yield LeftRunningStop(entry, refused=str(exc))
            continue
        journal_stopped(journal, entry.experiment, entry)
        yield LeftRunningStop(entry, how=how)


# -- the sweep -------------------------------------------------------------------------------------


def refuse_unrunnable(verdicts: Iterable[Verdict]) -> None:
    """A layout the engine cannot express, or whose server flags it would refuse, stops the sweep
    before anything launches; one the planner says fails is tried in its turn (and refused there
    unless forced)."""
    for verdict in verdicts:
        if verdict.placement is None:
            raise CockpitError(
                f"sweep: {verdict.layout}: {verdict.reasons[0]}; nothing was launched: fix it or leave it out"
            )


def opening(layouts: Sequence[Layout], levels: Sequence[int]) -> str:
    """`sweep tp8, tp4: each is launched, benched at C=1,32, stopped`."""
    names = ", ".join(map(str, layouts))
    return f"sweep {names}: each is launched, benched at C={','.join(map(str, levels))}, stopped"


def stop_reason(index: int, total: int) -> str:
    """Why step ``index`` (from 1) of ``total`` stops its server."""
    return "sweep done" if index >= total else "sweep: next layout"


@dataclass(frozen=True)
class SweepStep:
    index: int  # 1-based
    total: int
    layout: str

    def __str__(self) -> str:
        return f"sweep {self.index}/{self.total}: {self.layout}"


@dataclass(frozen=True)
class SweepDone:
    done: int  # steps run, measured or not
    total: int
    stopped: bool = False


@dataclass
class SweepJob:
    """One sweep: each layout in turn launched, benched once ready, and stopped; a layout that
    fails is journaled by its launch and the sweep goes on. What it did stays readable when a
    signal ends it half way (``current``, ``summary``)."""

    layouts: tuple[Layout, ...]
    bench: BenchRequest
    done: int = 0
    measured: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    current: SweepStep | None = None

    @property
    def total(self) -> int:
        return len(self.layouts)

    def run(
        self,
        *,
        launch: Callable[[Layout], Event | None],
        measure: Callable[[BenchRequest], Event | None],
        stop: Callable[[str], None],
        on_step: Callable[[SweepStep], None] = lambda step: None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> SweepDone:
        """``launch`` a layout and ``measure`` it (each hands back its last event), ``stop`` its
        server whatever happened, with the reason; ``should_stop`` ends the sweep between steps
        and before a bench."""
        for index, layout in enumerate(self.layouts, 1):
            if should_stop():
                break
            self.current = SweepStep(index, self.total, str(layout))
            on_step(self.current)
            outcome = launch(layout)
            if isinstance(outcome, Ready) and not should_stop():
                outcome = measure(self.bench)
            self._count(str(layout), outcome)
            stop(stop_reason(index, self.total))  # stopped by the person or not, its server goes down
            self.done += 1
        return SweepDone(self.done, self.total, stopped=should_stop())

    def _count(self, layout: str, outcome: Event | None) -> None:
        """A layout counts as measured as `cockpit run --bench` counts it: its bench ended with levels."""
        if isinstance(outcome, BenchDone) and outcome.levels and not outcome.error:
            self.measured.append(layout)
        else:
            self.not_measured.append(layout)

    def summary(self) -> str:
        """`1 of 3 layout(s) measured; not measured: tp8, pp8`."""
        missing = f"; not measured: {', '.join(self.not_measured)}" if self.not_measured else ""
        return f"{len(self.measured)} of {self.total} layout(s) measured{missing}"
