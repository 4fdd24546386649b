"""The tune loop on a lab: plan the candidates, launch the most promising, climb its levels, stop
it, learn, re-rank; until the best measured beats every remaining bound or the budget is spent.

Every step is journaled as it ends (``Journal.tune_step``), so a tune cut short (Ctrl-C, a crash, an
SSH drop) is continued by ``tune --resume`` without relaunching the candidates it finished. The
launches and levels are ordinary experiments and benchmark points: `results` shows them too.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import psutil

from cockpit.bench.result import LevelSummary
from cockpit.core.benchrequest import BenchRequest
from cockpit.core.errors import CockpitError
from cockpit.core.fitting import Run, engine_fell_behind
from cockpit.core.outcome import FAILED as LAUNCH_FAILED
from cockpit.core.outcome import READY
from cockpit.core.secrets import redact_argv
from cockpit.core.slo import Slo
from cockpit.core.tuning.candidates import Candidate, nothing_fits_reason, plan_candidates, repredict
from cockpit.core.tuning.events import (
    Margin,
    Point,
    Row,
    TuneEvent,
    TuneLevel,
    TuneMeasured,
    TuneNotice,
    TuneRanked,
    TuneResult,
    TuneStarted,
    TuneStep,
)
from cockpit.core.tuning.margin import UNMEASURED, out_of_sample_margin
from cockpit.core.tuning.search import (
    Decision,
    LevelClimb,
    Tried,
    best_tried,
    decide,
    optimistic_bound,
    start_level,
    why_not_tried,
)
from cockpit.core.tuning.spec import TuneSpec
from cockpit.lab.lab import Lab
from cockpit.runner.events import BenchLevel, Event, Failed, Ready, Stopped
from cockpit.runner.experiment import BOX_BUSY, INEXPRESSIBLE, PLANNED_FAILURE, journal_stopped
from cockpit.store.calibration import fit_runs
from cockpit.store.journal import TuneRecord

Listener = Callable[[TuneEvent | Event], None]
MEASURED, FAILED, RUNNING = "measured", "failed", "running"
# Open loop: requests in flight are capped far above what a server holds at once, so the cap
# never shapes the arrivals; a level measures this many seconds of them.
MAX_IN_FLIGHT = 4096
RATE_WINDOW_S = 30.0
# A level the simulated engine could not pace (calibrate.engine_fell_behind) is measured again,
# at most this many times.
SIM_RETRIES = 2
# Journaled failures that say nothing about the layout on this box: refusals before anything ran
# (the box busy, the plan), and a slow load (a timeout: the next launch may get ready).
# A bad flag value or a model whose config.json does not parse is no fault of the layout either.
NOT_THE_LAYOUT = (
    *BOX_BUSY,
    PLANNED_FAILURE,
    INEXPRESSIBLE,
    "timeout",
    "bad-argument",
    "model-config",
    "",
    None,
)


@dataclass
class Tuner:
    """One tune on one lab. ``run`` blocks until it ends; ``should_stop`` (checked between
    steps and levels) ends it early, as interrupted."""

    lab: Lab
    spec: TuneSpec
    on_event: Listener
    should_stop: Callable[[], bool] = lambda: False
    clock: Callable[[], float] = time.monotonic
    tune: int = 0
    tried: dict[str, Tried] = field(default_factory=dict)
    failures: list[tuple[Candidate, Tried]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    spent_s: float = 0.0  # time of earlier sessions of a resumed tune
    launches: int = 0
    fitting: int = 0  # candidates that can start
    busy: str = ""  # why the box could not take a launch: the tune stopped there
    nothing_fits: str = ""  # why no candidate could be planned

    @classmethod
    def start(cls, lab: Lab, spec: TuneSpec, on_event: Listener, **kwargs) -> Tuner:
        spec = resolved(spec, lab)
        tuner = cls(lab, spec, on_event, **kwargs)
        tuner.tune = lab.journal.start_tune(lab.profile.name, spec.to_json())
        return tuner

    @classmethod
    def resume(cls, lab: Lab, on_event: Listener, **kwargs) -> Tuner:
        """The newest unfinished tune of this profile, with what it finished; a server its
        killed cockpit left running is stopped first."""
        record = lab.journal.open_tune(lab.profile.name)
        if record is None:
            raise CockpitError(
                f"no unfinished tune of profile {lab.profile.name} in the journal: start one with `tune ...`"
            )
        if record.state == "running" and record.pid != os.getpid() and cockpit_alive(record.host, record.pid):
            raise CockpitError(
                f"tune {record.id} of profile {lab.profile.name} still runs in cockpit pid {record.pid}: "
                "stop it there (Ctrl-C or `stop`) before resuming it here"
            )
        tuner = cls(lab, TuneSpec.from_json(record.spec), on_event, **kwargs)
        tuner.tune = record.id
        try:
            tuner._restore(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise CockpitError(
                f"the journaled tune {record.id} cannot be read ({exc}): start a new one with `tune ...`"
            ) from None
        lab.journal.resume_tune(record.id)
        return tuner

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> TuneResult:
        lab, spec = self.lab, self.spec
        gpu_ids = lab.profile.gpu_ids
        usable = len(gpu_ids) if gpu_ids is not None else lab.setup.hardware.count
        candidates, left_out = plan_candidates(lab.setup, spec, usable)
        if not candidates:
            self.nothing_fits = nothing_fits_reason(left_out, spec, usable)
        self.fitting = len(candidates)
        self._remember_failures(candidates)
        self.on_event(
            TuneStarted(
                self.tune,
                spec,
                len(candidates),
                len(left_out),
                len(self.tried),
                tuple(self.points),
            )
        )
        began = self.clock()
        decision: Decision | None = None
        interrupted = False
        try:
            while True:
                time_left = (
                    None if spec.budget_s is None else spec.budget_s - self.spent_s - (self.clock() - began)
                )
                launches_left = None if spec.max_launches is None else spec.max_launches - self.launches
                decision = decide(
                    candidates,
                    self.tried,
                    self.failures,
                    self.margin(candidates),
                    launches_left=launches_left,
                    time_left_s=time_left,
                )
                self.on_event(self._ranked(candidates, decision))
                if decision.candidate is None:
                    break
                if self.should_stop():
                    interrupted = True
                    break
                chosen, margin = decision.candidate, decision.margin.value
                busy = self._try(
                    chosen, optimistic_bound(chosen, margin), chosen.prediction.goal_at(margin)[1]
                )
                if busy:
                    interrupted, self.busy = True, busy
                    break
                if self.should_stop():
                    interrupted = True
                    break
                # What the launch taught the box (the lab refits after each ready and level): re-rank.
                candidates = repredict(lab.setup, spec, candidates)
                self._replan_failures(candidates)
        except BaseException:  # Ctrl-C, SIGTERM, a hang-up, a journal that fails: resumable
            interrupted = True
            raise
        finally:
            self.spent_s += self.clock() - began
            result = self._result(candidates, decision, interrupted)
            with contextlib.suppress(CockpitError):  # a journal that fails now must not hide the cause
                lab.journal.finish_tune(self.tune, "interrupted" if interrupted else "done", result.to_json())
            self.on_event(result)
        return result

    def margin(self, candidates: list[Candidate]) -> Margin:
        """The bounds' margin: the model's error on each measured candidate when calibrated
        without it (``margin.out_of_sample_margin``), from the box's runs as the lab fits them."""
        setup = self.lab.setup
        return out_of_sample_margin(setup, self.spec, candidates, self.points, box_runs(self.lab))

    def _try(self, candidate: Candidate, bound: float, start: float) -> str:
        """Launch and measure one candidate, its levels climbed from ``start``; journaled when it
        ends. Returns why the box could not take it (a port or GPUs held by something else): the
        tune stops there, resumable."""
        launcher, spec = self.lab.launcher, self.spec
        self.launches += 1
        self.on_event(
            TuneStep(self.tune, self.launches, candidate.name, candidate.prediction.goal, bound, spec.per_gpu)
        )
        started = self.clock()
        outcome: Event | None = None
        experiment: int | None = None
        # Journaled before the launch: a resume finds and stops a server this step left running.
        self.lab.journal.tune_step(self.tune, candidate.name, experiment=None, state=RUNNING)
        for event in launcher.run(candidate.layout):
            if experiment is None and getattr(event, "experiment", None) is not None:
                experiment = event.experiment
                self.lab.journal.tune_step(self.tune, candidate.name, experiment=experiment, state=RUNNING)
            outcome = event
            self.on_event(event)
            if self.should_stop() and not isinstance(event, (Ready, Failed)):
                break  # a stop while it loads: the load is not waited for
        if self.should_stop() and not isinstance(outcome, Failed):
            stopped = launcher.stop("tune interrupted")
            if stopped is not None:
                self.on_event(stopped)
            return ""  # cut short, not failed: `--resume` launches it again
        if isinstance(outcome, Failed) and outcome.diagnosis.kind in BOX_BUSY:
            self.launches -= 1  # not the candidate's failure: nothing was launched
            return outcome.diagnosis.cause
        if not isinstance(outcome, Ready):
            kind = outcome.diagnosis.kind if isinstance(outcome, Failed) else ""
            cause = outcome.diagnosis.cause if isinstance(outcome, Failed) else "it did not get ready"
            tried = Tried(candidate.name, experiment, None, None, candidate.prediction.goal, kind, cause)
            self._record(candidate, tried, self.clock() - started)
            if kind not in NOT_THE_LAYOUT:
                self.failures.append((candidate, tried))
            self.on_event(TuneMeasured(self.tune, candidate.name, None, None, spec.per_gpu, cause))
            return ""
        climb = LevelClimb(spec.levels, start_level(spec.levels, start), {})
        cut_short = False
        try:
            while (level := climb.next_level()) is not None:
                goal = self.measure_level(candidate, level)
                if self.should_stop():  # a level a stop came into may be cut: it does not count
                    cut_short = True
                    break
                climb = replace(climb, measured={**climb.measured, level: goal})
        finally:
            # Measured, its server goes: the next candidate (if any) needs the GPUs. Not a failure.
            stopped = launcher.stop(
                "tune interrupted" if self.should_stop() else f"measured by tune {self.tune}"
            )
            if stopped is not None:
                self.on_event(stopped)
        if cut_short:
            return ""  # not finished: `--resume` measures it again
        best = climb.best
        goal, level = (best[1], best[0]) if best else (0.0, None)
        tried = Tried(candidate.name, experiment, goal, level, candidate.prediction.goal)
        self._record(candidate, tried, self.clock() - started)
        self.on_event(TuneMeasured(self.tune, candidate.name, goal, level, spec.per_gpu))
        return ""

    def measure_level(self, candidate: Candidate, level: float) -> float:
        """One level on the running server: its goodput, in the goal's units (0 when it failed).

        On the simulated box, a level during which the engine could not keep its clock
        (``calibrate.engine_fell_behind``) measured the machine, not the model: it is measured
        again, up to ``SIM_RETRIES`` times, and the least disturbed counts."""
        best: tuple[float, Point | None] | None = None  # (dropped share, point)
        for _ in range(1 + SIM_RETRIES):
            point, dropped_share = self._level_once(candidate, level)
            if best is None or dropped_share < best[0]:
                best = (dropped_share, point)
            if not dropped_share or self.should_stop():
                break
            self.on_event(
                TuneNotice(
                    self.tune,
                    f"{candidate.name} at {level:g}: the simulated engine dropped {dropped_share:.0%} of "
                    "the level's time (its CPU was short), so it measured the machine: measuring it again",
                )
            )
        point = best[1] if best else None
        if point is None:
            return 0.0
        self.points.append(point)
        self.on_event(TuneLevel(self.tune, point, self.spec.per_gpu))
        return point.goal

    def _level_once(self, candidate: Candidate, level: float) -> tuple[Point | None, float]:
        """The level measured once (None when it failed), and the share of its time the
        simulated engine dropped (0 on a real engine, which does not report it)."""
        spec = self.spec
        open_loop = bool(spec.rates)
        bench = BenchRequest(
            concurrency=(MAX_IN_FLIGHT if open_loop else int(level),),
            input_len=spec.input_len,
            output_len=spec.output_len,
            # Open loop: ~30 s of arrivals, not the closed loop's rounds of C (C is only a cap here).
            requests=max(8, math.ceil(level * RATE_WINDOW_S))
            if open_loop and spec.duration_s is None
            else None,
            duration_s=spec.duration_s,
            slo=Slo(spec.ttft_ms, spec.itl_ms),
            rate=level if open_loop else None,
        )
        result: LevelSummary | None = None
        for event in self.lab.launcher.bench(bench):
            self.on_event(event)
            if isinstance(event, BenchLevel):
                result = event.result
        if result is None or result.failed:
            return None, 0.0
        dropped_share = engine_fell_behind(result.engine, result.duration_s)
        divisor = candidate.gpus if spec.per_gpu else 1
        return level_point(candidate.name, level, result, divisor), dropped_share

    # -- the journal ------------------------------------------------------------------------------

    def _record(self, candidate: Candidate, tried: Tried, seconds: float) -> None:
        self.tried[candidate.name] = tried
        self.lab.journal.tune_step(
            self.tune,
            candidate.name,
            experiment=tried.experiment,
            state=MEASURED if tried.measured else FAILED,
            goal=tried.goal,
            level=tried.level,
            detail={
                "predicted": tried.predicted,
                "failure_kind": tried.failure_kind,
                "failure": tried.failure,
                "seconds": round(seconds, 3),
                "points": [p.__dict__ for p in self.points if p.name == candidate.name],
            },
        )

    def _restore(self, record: TuneRecord) -> None:
        """What the resumed tune finished; its servers still up are stopped."""
        self._stop_left_running(record)
        for step in record.steps:
            self.spent_s += float(step.detail.get("seconds", 0.0))
            if step.state not in (MEASURED, FAILED):
                continue  # cut short: measured again
            self.launches += 1
            tried = Tried(
                step.candidate,
                step.experiment,
                step.goal,
                step.level,
                float(step.detail.get("predicted", 0.0)),
                str(step.detail.get("failure_kind", "")),
                str(step.detail.get("failure", "")),
            )
            self.tried[step.candidate] = tried
            self.points += [Point(**p) for p in step.detail.get("points", ())]

    def _remember_failures(self, candidates: list[Candidate]) -> None:
        """The launches that failed: this tune's (a resumed one's included), and the box's own
        from before, journaled with the very argv a candidate would launch. Each drops its similar
        candidates (``search.dropped_as_similar``)."""
        by_name = {c.name: c for c in candidates}
        self.failures = [
            (by_name[t.name], t) for t in self.tried.values() if not t.measured and t.name in by_name
        ]
        setup = self.lab.setup
        by_argv = {tuple(redact_argv(c.verdict.argv)): c for c in candidates if c.name not in self.tried}
        for experiment in self.lab.journal.experiments(self.lab.profile.name):  # newest first
            if experiment.simulated != self.lab.sim or experiment.gpu_type != setup.hardware.gpu.key:
                continue
            if experiment.outcome == READY:  # it served since: an older failure is cleared
                by_argv.pop(tuple(experiment.argv), None)
            if experiment.outcome != LAUNCH_FAILED or experiment.diagnosis_kind in NOT_THE_LAYOUT:
                continue  # stopped while loading, the box busy, nothing launched: says nothing
            candidate = by_argv.pop(tuple(experiment.argv), None)  # the newest launch of it decides
            if candidate is None:
                continue
            why = f"{experiment.diagnosis or 'failed'} (experiment {experiment.id})"
            tried = Tried(
                candidate.name, experiment.id, None, failure_kind=experiment.diagnosis_kind or "", failure=why
            )
            self.failures.append((candidate, tried))

    def _replan_failures(self, candidates: list[Candidate]) -> None:
        """Failed candidates as planned now: a failure drops those that would fail the same way,
        compared under the same lessons of the box."""
        by_name = {c.name: c for c in candidates}
        self.failures = [(by_name.get(c.name, c), how) for c, how in self.failures]

    def _stop_left_running(self, record: TuneRecord) -> None:
        """A server of the step the tune was cut in (its cockpit killed while a candidate ran)
        would hold the GPUs and the port: stopped, and journaled so. The step is journaled before
        its launch, so its server is found even when the cockpit died before it said which."""
        journal, supervisor = self.lab.journal, self.lab.launcher.supervisor
        running = [step for step in record.steps if step.state == RUNNING]
        for entry in self.lab.registry.live():
            experiment = journal.experiment(entry.experiment)
            if experiment is None or experiment.profile != record.profile:
                continue
            ours = any(
                step.experiment == experiment.id
                or (
                    step.experiment is None
                    and step.candidate == experiment.layout
                    and experiment.started >= step.updated
                )
                for step in running
            )
            if not ours:
                continue
            try:
                supervisor.stop(supervisor.attach(entry))
            except CockpitError as exc:  # not verifiably cockpit's: left alone, said, the next one stopped
                self.on_event(TuneNotice(record.id, str(exc)))
                continue
            journal_stopped(journal, entry.experiment, entry)
            self.on_event(Stopped(entry.experiment, f"left running by the interrupted tune {record.id}"))

    # -- what the faces see -----------------------------------------------------------------------

    def _rows(self, candidates: Iterable[Candidate], margin: Margin, reason: str = "") -> tuple[Row, ...]:
        rows = []
        best = best_tried(self.tried)
        for c in candidates:
            t = self.tried.get(c.name)
            bound = optimistic_bound(c, margin.value)
            if t is None:
                state, note = (
                    why_not_tried(c, best, margin, self.failures, reason) if reason else ("untried", "")
                )
                rows.append(Row(c.name, c.gpus, c.prediction.goal, bound, state=state, note=note))
            else:
                rows.append(
                    Row(
                        c.name,
                        c.gpus,
                        c.prediction.goal,
                        bound,
                        t.goal,
                        t.level,
                        t.experiment,
                        MEASURED if t.measured else FAILED,
                        t.failure,
                    )
                )
        return tuple(rows)

    def _ranked(self, candidates: list[Candidate], decision: Decision) -> TuneRanked:
        best = best_tried(self.tried)
        return TuneRanked(
            self.tune,
            self._rows(candidates, decision.margin),
            best.name if best else None,
            best.goal if best else None,
            decision.margin,
            decision.bound,
            self.spec.per_gpu,
        )

    def _result(
        self, candidates: list[Candidate], decision: Decision | None, interrupted: bool
    ) -> TuneResult:
        margin = decision.margin if decision else UNMEASURED
        if self.busy:
            reason = f"the box is busy: {self.busy}; free it, then `tune --resume`"
        elif self.nothing_fits:
            reason = self.nothing_fits
        else:
            reason = "interrupted" if interrupted else (decision.reason if decision else "not started")
        best = best_tried(self.tried)
        argv: tuple[str, ...] = ()
        env: dict[str, str] = {}
        if best is not None and best.experiment is not None:
            record = self.lab.journal.experiment(best.experiment)
            if record is not None:
                argv = tuple(record.argv)
                if record.gpus:
                    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, record.gpus))}
        return TuneResult(
            self.tune,
            self.spec,
            reason,
            best.name if best else None,
            best.goal if best else None,
            best.level if best else None,
            argv,
            env,
            self._rows(candidates, margin, reason),
            tuple(self.points),
            self.spec.per_gpu,
            self.launches,
            self.fitting,
            interrupted,
        )


def box_runs(lab: Lab) -> list[Run]:
    """The box's journaled launches of the lab's model with their levels, as the lab's own fit
    reads them (``calibration.relearn``): since the box was last reset, each typed as the setup
    types the model."""
    return fit_runs(lab.journal, lab.setup, lab.sim, lab.store)


def resolved(spec: TuneSpec, lab: Lab) -> TuneSpec:
    """The spec with the profile's request lengths where it gives none: journaled as run."""
    bench = BenchRequest(input_len=spec.input_len, output_len=spec.output_len).filled(lab.profile.bench)
    return replace(spec, input_len=bench.input_len, output_len=bench.output_len)


def cockpit_alive(host: str, pid: int | None) -> bool:
    """Whether the cockpit that journaled a tune still runs (on this host; another host's is
    taken to be gone: its tune is resumed here)."""
    if pid is None or host != socket.gethostname():
        return False
    try:
        return "cockpit" in " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def level_point(name: str, level: float, result: LevelSummary, divisor: int = 1) -> Point:
    """A bench level's result as the tune's point: its goodput (per GPU: ``divisor``), and the
    latencies the bounds check, per request (TTFT, and the mean inter-token latency, TPOT)."""
    tok_s = float(result.output_tok_s or 0.0)
    good = result.goodput_tok_s
    goodput = tok_s if good is None else float(good)
    return Point(
        name,
        level,
        goodput / divisor,
        tok_s,
        result.ttft_ms.p99,
        result.itl_ms.p99,
        result.tpot_ms.p99,
    )
