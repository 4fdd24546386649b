"""`cockpit run`, `sweep`, `tune`, `stop` and `attach`: the experiment flow without a screen, one event a line."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import fields, replace
from typing import Any

from cockpit.bench.metrics import REQUESTS_FAILED_EXIT
from cockpit.bench.result import LevelSummary, request_failures
from cockpit.core.benchrequest import BenchRequest, check_seconds
from cockpit.core.commands import Sweep, Try
from cockpit.core.errors import CockpitError
from cockpit.core.knobs import Knobs
from cockpit.core.layout import Layout
from cockpit.core.planner import plan_layout
from cockpit.faces.prompt import parse_command
from cockpit.lab.lab import Lab
from cockpit.runner.events import BenchDone, BenchLevel, BenchTick, Event, Failed, LogLine, Phase, Ready
from cockpit.runner.experiment import Launcher
from cockpit.runner.jobs import SweepJob, SweepStep, opening, refuse_unrunnable, stop_left_running
from cockpit.runner.registry import Registry, ServerEntry
from cockpit.runner.signals import HELD, HungUp, Terminated, exit_code
from cockpit.runner.supervisor import Supervisor
from cockpit.store.journal import Journal

Print = Callable[[str], None]


def tell_learning(lab: Lab, out: Print) -> None:
    """What went wrong with learning (a fit, the calibration file), once each."""
    for line in lab.learning_notices():
        out(f"warning: {line}")


def announce_live_servers(registry: Registry, out: Print) -> None:
    """Servers left running (and spawns pending) that hold GPUs and ports this run cannot have."""
    live, pending = registry.listing()
    for entry in live:
        out(
            f"running   {entry}: `cockpit attach {entry.pid}` to follow it, `cockpit stop {entry.pid}` to stop it"
        )
    for entry in pending:
        out(f"pending   {_holds(entry)}")


def run_headless(
    text: str,
    *,
    profile: str | None,
    sim: bool,
    force: bool,
    keep: bool,
    startup_timeout: float,
    quiet: bool = False,
    bench: str | None = None,
    timeout: float | None = None,
    engine: str | None = None,
    speed: str | None = None,
    out: Print = print,
) -> int:
    command = parse_command(text)
    bench_command = _bench_command(bench)
    if timeout is not None:
        if bench_command is None:
            raise CockpitError("--timeout is the benchmark's per-request timeout: give --bench too")
        bench_command = replace(bench_command, timeout_s=check_seconds(timeout, "--timeout"))
    if not isinstance(command, Try):
        raise CockpitError(
            f'cockpit run takes a layout to try, like `cockpit run "try tp4 ep2"`; got "{text}"'
        )
    check_seconds(startup_timeout, "--startup-timeout", "if loading is just slow, give more, like 3600")
    with Lab.open(
        profile, sim=sim, engine=engine, speed=speed, interval=0.5, startup_timeout=startup_timeout
    ) as lab:
        tell_opening(lab, out)
        announce_live_servers(lab.registry, out)
        lab.monitor.start()
        return _drive(lab, command, force=force, keep=keep, quiet=quiet, out=out, bench=bench_command)


def tell_opening(lab: Lab, out: Print) -> None:
    """What the lab opened on: the simulated box or the engine version found, the notes of a
    profile run on another engine, and what went wrong with learning."""
    if lab.sim:
        out(f"simulated box: {lab.setup.hardware} (profile {lab.profile.name})")
    elif lab.box.note:
        out(f"engine    {lab.box.note}")
    for note in lab.notes:
        out(f"note: {note}")
    tell_learning(lab, out)


def raise_on_signals() -> dict[int, Any]:
    """Ctrl-C, SIGTERM and SIGHUP raise from now on (``raise_on_signal``); the handlers replaced,
    for ``restore_signals``. A signal already ignored stays ignored: under nohup a hang-up must
    not end the run."""
    return {
        sig: signal.signal(sig, raise_on_signal)
        for sig in HELD
        if signal.getsignal(sig) is not signal.SIG_IGN
    }


def restore_signals(previous: dict[int, Any], code: int) -> None:
    """Once a signal came (``code`` 128 or more), the others stay ignored until cockpit has exited."""
    if code < 128:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_tune(
    text: str,
    *,
    profile: str | None,
    sim: bool,
    engine: str | None,
    resume: bool,
    verbose: bool,
    startup_timeout: float,
    speed: str | None = None,
    out: Print = print,
) -> int:
    """`cockpit tune`: 0 with a winner, 1 without one. Ctrl-C, SIGTERM and a hang-up stop the
    candidate's server and leave the tune journaled as interrupted, for `cockpit tune --resume`."""
    from cockpit.core.tuning.spec import parse_tune
    from cockpit.lab.tune_loop import Tuner

    if resume and text.strip():
        raise CockpitError("`cockpit tune --resume` continues the last tune as it was asked: give no words")
    spec = None if resume else parse_tune(text)
    check_seconds(startup_timeout, "--startup-timeout", "if loading is just slow, give more, like 3600")
    printer = Printer(out)

    def show(event: object) -> None:
        if verbose or not isinstance(event, (LogLine, Phase, BenchTick)):
            printer(str(event))

    previous = raise_on_signals()
    code = 1
    try:
        with Lab.open(
            profile, sim=sim, engine=engine, speed=speed, interval=0.5, startup_timeout=startup_timeout
        ) as lab:
            tell_opening(lab, printer)
            try:
                tuner = Tuner.resume(lab, show) if spec is None else Tuner.start(lab, spec, show)
                lab.monitor.start()
                result = tuner.run()
            except BaseException as exc:  # a signal, or a failing journal: never leave the server up
                printer.gone = printer.gone or isinstance(exc, HungUp)
                if lab.launcher.handle is not None:
                    with contextlib.suppress(CockpitError):
                        stopped = lab.launcher.stop("tune interrupted")
                        if stopped:
                            printer(str(stopped))
                raise
            code = 0 if result.winner and not result.interrupted else 1
            return code
    except (KeyboardInterrupt, HungUp) as exc:
        code = exit_code(exc)
        return code
    finally:
        restore_signals(previous, code)


def raise_on_signal(signum, frame) -> None:
    """Ctrl-C, SIGTERM and SIGHUP raise once; another during the clean-up must not cut it short."""
    for sig in HELD:
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGHUP:
        raise HungUp
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


class Printer:
    """Prints until the terminal is gone (an SSH drop makes writes fail); then stays quiet."""

    def __init__(self, out: Print) -> None:
        self.out = out
        self.gone = False

    def __call__(self, line: str) -> None:
        if self.gone:
            return
        try:
            self.out(line)
        except OSError:
            self.gone = True


def _bench_command(text: str | None) -> BenchRequest | None:
    if text is None:
        return None
    command = parse_command("bench " + text)
    assert isinstance(command, BenchRequest)  # "bench ..." always parses to a BenchRequest or raises
    return command


def _drive(
    lab: Lab, command: Try, *, force: bool, keep: bool, quiet: bool, out: Print, bench: BenchRequest | None
) -> int:
    previous = raise_on_signals()
    code = 1
    errors = LoggedErrors()
    try:
        with errors.watching():
            code = _follow(lab, command, force=force, keep=keep, quiet=quiet, out=Printer(out), bench=bench)
        if code == 0 and errors.count:
            out(f"error     {errors.count} internal error(s) were logged above: this run is not a success")
            code = 1
    finally:
        restore_signals(previous, code)
    return code


class LoggedErrors(logging.Handler):
    """Counts the errors the experiment's modules log while a run goes on (a hook that failed
    after a measurement logs its traceback and goes on): a run with one does not exit 0. The
    records are still shown as they would be without it. A GPU source that fails (the monitor's
    own log) is the box's trouble, shown as n/a, not the run's."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if not logging.getLogger().handlers and logging.lastResort is not None:
            logging.lastResort.handle(record)  # what Python shows when no handler is set

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        logger = logging.getLogger("cockpit.runner")
        logger.addHandler(self)
        try:
            yield
        finally:
            logger.removeHandler(self)


def _follow(
    lab: Lab,
    command: Try,
    *,
    force: bool,
    keep: bool,
    quiet: bool,
    out: Printer,
    bench: BenchRequest | None,
) -> int:
    launcher = lab.launcher
    outcome: Event | None = None
    levels: list[LevelSummary] = []  # the bench's levels, as its child reported them
    try:
        for event in launcher.run(command.layout, force=force):
            if not (quiet and isinstance(event, LogLine)):
                out(str(event))
            outcome = event
        tell_learning(lab, out)  # the refit after Ready or Failed ran when the launch's events ended
        if isinstance(outcome, Ready) and bench is not None:
            for event in launcher.bench(bench):
                out(str(event))
                outcome = event
                if isinstance(event, BenchLevel):
                    levels.append(event.result)
            _say_flaws(levels, out)
            tell_learning(lab, out)
        if isinstance(outcome, BenchDone) and (outcome.error or not outcome.levels):
            _finish(launcher, keep, out)
            return 1
        if isinstance(outcome, (Ready, BenchDone)):
            _finish(launcher, keep, out)
            return REQUESTS_FAILED_EXIT if request_failures(levels) else 0
        return 1
    except HungUp as exc:
        out.gone = True  # the terminal is gone: nothing more to print
        if launcher.handle is not None:
            with contextlib.suppress(CockpitError):  # the server stays listed in the registry anyway
                launcher.note_hangup(launcher.handle)
        return exit_code(exc)
    except CockpitError:  # the journal failed under a running server: stop it unless it is kept
        if launcher.handle is not None and not keep:
            launcher.stop("cockpit failed")
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
        if launcher.handle is not None and not keep:
            stopped = launcher.stop(
                "interrupted" if not isinstance(exc, Terminated) else "terminated (SIGTERM)"
            )
            if stopped:
                out(str(stopped))
        elif launcher.handle is not None:
            out(
                f"kept      pid {launcher.handle.pid} still runs; `cockpit stop {launcher.handle.pid}` stops it"
            )
        return exit_code(exc)


def _finish(launcher: Launcher, keep: bool, out: Print) -> None:
    if launcher.handle is None:
        return
    if keep:
        out(
            f"kept      {launcher.handle.url} (pid {launcher.handle.pid}); `cockpit stop {launcher.handle.pid}` stops it"
        )
        return
    stopped = launcher.stop("done")
    if stopped:
        out(str(stopped))


# -- cockpit sweep -------------------------------------------------------------------------------


def print_line(line: str) -> None:
    """One line out at once: under nohup stdout is a file, which Python would otherwise buffer
    (a `tail -f` of the log would see nothing for minutes)."""
    print(line, flush=True)


def run_sweep(
    text: str,
    *,
    knobs: tuple[str, ...] = (),
    profile: str | None,
    sim: bool,
    engine: str | None,
    force: bool,
    startup_timeout: float,
    verbose: bool = False,
    bench: str | None = None,
    timeout: float | None = None,
    speed: str | None = None,
    out: Print = print_line,
) -> int:
    """`cockpit sweep`: each layout in turn launched, benched and stopped, as the screen's `sweep`
    does; a layout that fails is journaled and the sweep goes on. Ends with the comparison table.
    0 when at least one layout was measured, 1 when none was; Ctrl-C, SIGTERM and a hang-up stop
    the running server, keep what was measured and exit 128 + the signal."""
    command = sweep_command(text, knobs, bench, timeout)
    check_seconds(startup_timeout, "--startup-timeout", "if loading is just slow, give more, like 3600")
    printer = Printer(out)
    previous = raise_on_signals()
    code = 1
    try:
        with Lab.open(
            profile, sim=sim, engine=engine, speed=speed, interval=0.5, startup_timeout=startup_timeout
        ) as lab:
            tell_opening(lab, printer)
            announce_live_servers(lab.registry, printer)
            refuse_unrunnable(plan_layout(lab.setup, layout) for layout in command.layouts)
            lab.monitor.start()
            code = _sweep(lab, command, force=force, verbose=verbose, out=printer)
            return code
    except (KeyboardInterrupt, HungUp) as exc:  # before the first launch: nothing to stop
        code = exit_code(exc)
        return code
    finally:
        restore_signals(previous, code)


def sweep_command(text: str, knobs: tuple[str, ...], bench: str | None, timeout: float | None) -> Sweep:
    """The layouts as the screen's `sweep` reads them (each with its knobs, bench words after
    them), ``knobs`` given to every one of them before its own, and the bench of those words and
    --bench together (`--bench c=1,32 in=64 out=8` unquoted leaves `in=64 out=8` among the
    layouts' words), each word given once; --timeout bounds each request of it."""
    command = _sweep_of("sweep " + text)
    if bench is not None:
        _refuse_twice(command.bench, _bench_command(bench))
        command = _sweep_of(f"sweep {text} {bench}")  # n= and t= checked together
    sweep_bench = command.bench
    if timeout is not None:
        sweep_bench = replace(sweep_bench, timeout_s=check_seconds(timeout, "--timeout"))
    layouts = tuple(replace(layout, knobs=Knobs((*knobs, *layout.knobs))) for layout in command.layouts)
    return Sweep(layouts, sweep_bench)


def _sweep_of(text: str) -> Sweep:
    command = parse_command(text)
    assert isinstance(command, Sweep)  # "sweep ..." always parses to a Sweep or raises
    return command


# The bench's fields as they are typed (cockpit.core.commands reads them)
BENCH_WORDS = {
    "concurrency": "c=",
    "input_len": "in=",
    "output_len": "out=",
    "requests": "n=",
    "duration_s": "t=",
    "timeout_s": "timeout=",
}


def _refuse_twice(after_layouts: BenchRequest, given: BenchRequest | None) -> None:
    """A bench word in --bench and after the layouts too: which one was meant is not for cockpit to guess."""
    unset = BenchRequest()
    both = [
        BENCH_WORDS.get(f.name, f.name)
        for f in fields(BenchRequest)
        if given is not None
        and getattr(given, f.name) != getattr(unset, f.name)
        and getattr(after_layouts, f.name) != getattr(unset, f.name)
    ]
    if both:
        raise CockpitError(
            f"{' '.join(both)} given twice, in --bench and after the layouts: give each once, "
            'like `cockpit sweep "tp8, tp4 ep" --bench "c=1,32 out=256"`'
        )


def _sweep(lab: Lab, command: Sweep, *, force: bool, verbose: bool, out: Printer) -> int:
    """Each layout in turn (``runner.jobs.SweepJob``, as the screen's `sweep`); a signal stops the
    running server and ends the sweep with what it has."""
    job = SweepJob(command.layouts, command.bench)
    levels = command.bench.filled(lab.profile.bench).concurrency
    out("sweep     " + opening(command.layouts, levels).removeprefix("sweep "))

    def step(step: SweepStep) -> None:
        out(f"sweep     {step.index}/{step.total}: {step.layout} at {time.strftime('%Y-%m-%d %H:%M:%S')}")

    try:
        job.run(
            launch=lambda layout: _launched(lab, layout, force=force, verbose=verbose, out=out),
            measure=lambda bench: _measured(lab, bench, verbose=verbose, out=out),
            stop=lambda reason: _stop_server(lab.launcher, reason, out),
            on_step=step,
        )
    except (KeyboardInterrupt, HungUp) as exc:
        # the terminal is gone: nothing more to print there (a log file it was sent to stays writable)
        out.gone = out.gone or (isinstance(exc, HungUp) and sys.stdout.isatty())
        how = SIGNAL_WORDS.get(type(exc), "interrupted")
        with contextlib.suppress(CockpitError):  # a failing journal must not keep the server up
            _stop_server(lab.launcher, how, out)
        _show_comparison(lab, out)
        current = f"{job.current.index}/{job.total} ({job.current.layout})" if job.current else ""
        out(f"sweep     {how} at {current}: {job.summary()}; what was measured is journaled")
        return exit_code(exc)
    except BaseException:  # a failing journal: never leave the server up
        with contextlib.suppress(CockpitError):
            _stop_server(lab.launcher, "cockpit failed", out)
        raise
    out(f"sweep     done at {time.strftime('%Y-%m-%d %H:%M:%S')}: {job.summary()}")
    _show_comparison(lab, out)
    return 0 if job.measured else 1


SIGNAL_WORDS = {
    KeyboardInterrupt: "interrupted",
    Terminated: "terminated (SIGTERM)",
    HungUp: "hung up (SIGHUP)",
}


def _launched(lab: Lab, layout: Layout, *, force: bool, verbose: bool, out: Print) -> Event | None:
    """Launch one layout of a sweep; its last event (Ready or Failed)."""
    outcome = _shown(lab.launcher.run(layout, force=force), verbose, out)
    tell_learning(lab, out)  # the refit after Ready or Failed ran when the launch's events ended
    return outcome


def _measured(lab: Lab, bench: BenchRequest, *, verbose: bool, out: Print) -> Event | None:
    """Bench the ready server of a sweep's step; the bench's last event."""
    levels: list[LevelSummary] = []
    outcome = _shown(lab.launcher.bench(bench), verbose, out, levels)
    _say_flaws(levels, out)
    tell_learning(lab, out)
    return outcome


def _say_flaws(levels: list[LevelSummary], out: Print) -> None:
    """After a bench: one line naming the levels whose numbers are not clean (failed requests,
    another client's load), which `cockpit results` marks."""
    from cockpit.runner.benchrun import bench_flaws

    if flaws := bench_flaws(levels):
        out(f"bench     {flaws}")


def _shown(
    events: Iterable[Event], verbose: bool, out: Print, levels: list[LevelSummary] | None = None
) -> Event | None:
    """Print each event (the server's log lines, phases and bench ticks only when verbose): one
    line each, for a log file; the last one back. A bench's levels go into ``levels``, if given."""
    last: Event | None = None
    try:
        for event in events:
            if verbose or not isinstance(event, (LogLine, Phase, BenchTick)):
                out(str(event))
            if levels is not None and isinstance(event, BenchLevel):
                levels.append(event.result)
            last = event
    finally:  # a signal here: end the launch's follower or the bench's child now, before the stop
        if isinstance(events, Generator):
            events.close()
    return last


def _stop_server(launcher: Launcher, reason: str, out: Print) -> None:
    stopped = launcher.stop(reason) if launcher.handle is not None else None
    if stopped:
        out(str(stopped))


def _show_comparison(lab: Lab, out: Print) -> None:
    """The profile's comparison, as `cockpit results` prints it: this sweep's layouts beside
    what was measured of the profile before."""
    from cockpit.reports.comparison import comparison
    from cockpit.reports.results import format_comparison

    name = lab.profile.name
    out(f"results of profile {name} (`cockpit results --profile {name}` shows them again):")
    out(format_comparison(comparison(lab.journal, name), "table"))


def list_servers(out: Print = print) -> int:
    """`cockpit servers`: the servers cockpit started that run, and the spawns still pending
    (they hold a port and GPUs until they resolve); a damaged entry is one warning, set aside."""
    live, pending = Registry().listing()
    if not live and not pending:
        out("no servers started by cockpit are running")
    for entry in live:
        out(str(entry))
    for entry in pending:
        out(_holds(entry))
    return 0


def _holds(pending: ServerEntry) -> str:
    """A spawn not resolved yet, as `servers` and `run` list it."""
    return f"{pending}: holds its port and GPUs until it starts or its cockpit is gone"


def stop_servers(which: str, out: Print = print) -> int:
    """`cockpit stop PID|all`: each server cockpit verifies it started is stopped and journaled;
    one it cannot verify is left alone, said in one line (exit 1). 0 when all were stopped."""
    registry = Registry()
    # A spawn whose cockpit was killed mid-launch may still turn into an engine: waited out, so
    # that `stop all` stops it (or finds it never started) instead of leaving it for later.
    live, pending = registry.settled() if which == "all" else registry.listing()
    if which != "all":
        try:
            pid = int(which)
        except ValueError:
            raise CockpitError(f"cockpit stop takes a PID or `all`, got '{which}'") from None
        live, pending = [e for e in live if e.pid == pid], []
        if not live:
            raise CockpitError(f"no running server of cockpit has pid {pid}: `cockpit servers` lists them")
    if not live and not pending:
        out("no servers started by cockpit are running")
    for entry in pending:
        out(
            f"pending   {entry}: being started, not stopped; `cockpit stop all` again once it "
            "runs (or its cockpit is gone)"
        )
    code = 1 if pending else 0
    with Journal() as journal:
        for stop in stop_left_running(live, Supervisor(registry), journal):
            if stop.refused:  # not verified as cockpit's: never signalled
                out(f"skipped   {stop.refused}")
                code = 1
            else:
                out(f"stopped   {stop.entry}: {stop.how}")
    return code


def attach_server(pid: int | None, *, profile: str | None, out: Print = print) -> int:
    """Follow a server until it is ready or fails; without a PID, the only one running."""
    entry = _server_to_attach(Registry(), pid)
    pid = entry.pid
    engine = entry.engine or None  # the engine it runs, which may not be its profile's (`use P on sglang`)
    with Lab.open(profile or entry.profile or None, sim=entry.simulated, engine=engine, interval=0.5) as lab:
        lab.monitor.start()
        launcher = lab.launcher
        outcome = None
        for event in launcher.follow(launcher.supervisor.attach(entry)):
            out(str(event))
            outcome = event
        tell_learning(lab, out)
    if isinstance(outcome, Ready):
        out(f"attached  {entry.url} is ready and still runs; `cockpit stop {pid}` stops it")
        return 0
    return 1 if isinstance(outcome, Failed) else 0


def _server_to_attach(registry: Registry, pid: int | None) -> ServerEntry:
    """The server of ``pid``; without one, the only server cockpit started that still runs."""
    if pid is not None:
        entry = registry.find(pid)
        if entry is None:
            raise CockpitError(f"no running server of cockpit has pid {pid}: `cockpit servers` lists them")
        return entry
    live = registry.live()
    if not live:
        raise CockpitError("no server started by cockpit is running: nothing to attach to")
    if len(live) > 1:
        pids = sorted(e.pid for e in live)
        raise CockpitError(
            f"{len(pids)} servers of cockpit run (pids {', '.join(map(str, pids))}): give one, like "
            f"`cockpit attach {pids[0]}`"
        )
    return live[0]
