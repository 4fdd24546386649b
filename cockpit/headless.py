"""`cockpit run`, `tune`, `stop` and `attach`: the experiment flow without a screen, one event a line."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cockpit.commands import Bench, Try, check_seconds, parse_command
from cockpit.errors import CockpitError
from cockpit.journal import Journal
from cockpit.lab import Lab
from cockpit.runner.events import BenchDone, BenchTick, Event, Failed, LogLine, Phase, Ready
from cockpit.runner.experiment import Launcher, journal_stopped
from cockpit.runner.registry import Registry
from cockpit.runner.signals import HELD, HungUp, Terminated, exit_code
from cockpit.runner.supervisor import Supervisor

Print = Callable[[str], None]


def tell_learning(lab: Lab, out: Print) -> None:
    """What went wrong with learning (a fit, the calibration file), once each."""
    for line in lab.learning_notices():
        out(f"warning: {line}")


def announce_live_servers(registry: Registry, out: Print) -> None:
    for entry in registry.live():
        out(
            f"running   {entry}: `cockpit attach {entry.pid}` to follow it, `cockpit stop {entry.pid}` to stop it"
        )


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
    with Lab.open(profile, sim=sim, engine=engine, interval=0.5, startup_timeout=startup_timeout) as lab:
        tell_opening(lab, out)
        announce_live_servers(lab.registry, out)
        lab.monitor.start()
        return _drive(lab, command, force=force, keep=keep, quiet=quiet, out=out, bench=bench_command)


def tell_opening(lab: Lab, out: Print) -> None:
    """What the lab opened on: the simulated box or the engine version found, the notes of a
    profile run on another engine, and what went wrong with learning."""
    if lab.sim:
        out(f"simulated box: {lab.setup.hardware} (profile {lab.profile.name})")
    elif lab.engine_note:
        out(f"engine    {lab.engine_note}")
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
    out: Print = print,
) -> int:
    """`cockpit tune`: 0 with a winner, 1 without one. Ctrl-C, SIGTERM and a hang-up stop the
    candidate's server and leave the tune journaled as interrupted, for `cockpit tune --resume`."""
    from cockpit.tune.spec import parse_tune
    from cockpit.tuner import Tuner

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
        with Lab.open(profile, sim=sim, engine=engine, interval=0.5, startup_timeout=startup_timeout) as lab:
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


def _bench_command(text: str | None) -> Bench | None:
    if text is None:
        return None
    command = parse_command("bench " + text)
    assert isinstance(command, Bench)  # "bench ..." always parses to Bench or raises
    return command


def _drive(
    lab: Lab, command: Try, *, force: bool, keep: bool, quiet: bool, out: Print, bench: Bench | None
) -> int:
    previous = raise_on_signals()
    code = 1
    try:
        code = _follow(lab, command, force=force, keep=keep, quiet=quiet, out=Printer(out), bench=bench)
    finally:
        restore_signals(previous, code)
    return code


def _follow(
    lab: Lab,
    command: Try,
    *,
    force: bool,
    keep: bool,
    quiet: bool,
    out: Printer,
    bench: Bench | None,
) -> int:
    launcher = lab.launcher
    outcome: Event | None = None
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
            tell_learning(lab, out)
        if isinstance(outcome, BenchDone) and (outcome.error or not outcome.levels):
            _finish(launcher, keep, out)
            return 1
        if isinstance(outcome, (Ready, BenchDone)):
            _finish(launcher, keep, out)
            return 0
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


def stop_servers(which: str, out: Print = print) -> int:
    registry = Registry()
    live = registry.live()
    if which != "all":
        try:
            pid = int(which)
        except ValueError:
            raise CockpitError(f"cockpit stop takes a PID or `all`, got '{which}'") from None
        live = [e for e in live if e.pid == pid]
        if not live:
            raise CockpitError(f"no running server of cockpit has pid {pid}: `cockpit servers` lists them")
    if not live:
        out("no servers started by cockpit are running")
    supervisor = Supervisor(registry)
    with Journal() as journal:
        for entry in live:
            how = supervisor.stop(supervisor.attach(entry))
            journal_stopped(journal, entry.experiment)
            out(f"stopped   {entry}: {how}")
    return 0


def attach_server(pid: int, *, profile: str | None, out: Print = print) -> int:
    registry = Registry()
    entry = registry.find(pid)
    if entry is None:
        raise CockpitError(f"no running server of cockpit has pid {pid}: `cockpit servers` lists them")
    with Lab.open(profile or entry.profile or None, sim=entry.simulated, interval=0.5) as lab:
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
