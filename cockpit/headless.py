"""`cockpit run`, `stop` and `attach`: the experiment flow without a screen, one event a line."""

from __future__ import annotations

import signal
from typing import Callable

from cockpit.commands import Bench, Try, parse_command
from cockpit.errors import CockpitError
from cockpit.journal import Journal
from cockpit.resolve import SetupOverrides, build_setup
from cockpit.runner.events import BenchDone, Event, Failed, LogLine, Ready
from cockpit.runner.experiment import Launcher, check_startup_timeout
from cockpit.runner.registry import Registry
from cockpit.runner.supervisor import Supervisor
from cockpit.telemetry.base import GpuSource
from cockpit.telemetry.monitor import Monitor

Print = Callable[[str], None]


def gpu_source(hardware, sim: bool) -> GpuSource:
    """The simulated box made from the profile's hardware, or the real GPUs through NVML."""
    if sim:
        from cockpit.sim.box import SimBox
        from cockpit.telemetry.simbox import SimBoxSource

        return SimBoxSource(SimBox(hardware).create())
    from cockpit.telemetry.nvml import NvmlSource

    return NvmlSource()


def why_simulated(sim: bool) -> str:
    """Why this run uses the simulated box ("--sim given", "no NVIDIA driver found"); "" when it
    uses the real GPUs. One wording for the CLI, the screen and `cockpit gpus`."""
    from cockpit.telemetry.nvml import driver_present

    if sim:
        return "--sim given"
    return "" if driver_present() else "no NVIDIA driver found"


def use_sim(sim: bool) -> bool:
    return bool(why_simulated(sim))


def announce_live_servers(registry: Registry, out: Print) -> None:
    for entry in registry.live():
        out(f"running   {entry}: `cockpit attach {entry.pid}` to follow it, `cockpit stop {entry.pid}` to stop it")


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
    out: Print = print,
) -> int:
    command = parse_command(text)
    bench_command = _bench_command(bench)
    if not isinstance(command, Try):
        raise CockpitError(f'cockpit run takes a layout to try, like `cockpit run "try tp4 ep2"`; got "{text}"')
    check_startup_timeout(startup_timeout)
    setup, prof = build_setup(SetupOverrides(profile=profile))
    sim = use_sim(sim)
    if sim:
        out(f"simulated box: {setup.hardware} (profile {prof.name})")
    registry = Registry()
    announce_live_servers(registry, out)
    source = gpu_source(setup.hardware, sim)
    with Journal() as journal, Monitor(source, interval=0.5) as monitor:
        monitor.start()
        launcher = Launcher(prof, setup, journal, Supervisor(registry, source), monitor, sim=sim, startup_timeout=startup_timeout)
        return _drive(launcher, command, force=force, keep=keep, quiet=quiet, out=out, bench=bench_command)


def _interrupt_once(signum, frame) -> None:
    """Ctrl-C raises once; a second Ctrl-C during the clean-up must not cut the clean-up short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _bench_command(text: str | None) -> Bench | None:
    if text is None:
        return None
    command = parse_command("bench " + text)
    assert isinstance(command, Bench)  # "bench ..." always parses to Bench or raises
    return command


def _drive(launcher: Launcher, command: Try, *, force: bool, keep: bool, quiet: bool, out: Print, bench: Bench | None) -> int:
    previous = signal.signal(signal.SIGINT, _interrupt_once)
    code = _follow(launcher, command, force=force, keep=keep, quiet=quiet, out=out, bench=bench)
    if code != 130:  # once interrupted, Ctrl-C stays ignored until cockpit has exited
        signal.signal(signal.SIGINT, previous)
    return code


def _follow(launcher: Launcher, command: Try, *, force: bool, keep: bool, quiet: bool, out: Print, bench: Bench | None) -> int:
    outcome: Event | None = None
    try:
        for event in launcher.run(command.layout, force=force):
            if not (quiet and isinstance(event, LogLine)):
                out(str(event))
            outcome = event
        if isinstance(outcome, Ready) and bench is not None:
            for event in launcher.bench(bench):
                out(str(event))
                outcome = event
        if isinstance(outcome, BenchDone) and (outcome.error or not outcome.levels):
            _finish(launcher, keep, out)
            return 1
        if isinstance(outcome, (Ready, BenchDone)):
            _finish(launcher, keep, out)
            return 0
        return 1
    except KeyboardInterrupt:
        if launcher.handle is not None and not keep:
            stopped = launcher.stop("interrupted")
            if stopped:
                out(str(stopped))
        elif launcher.handle is not None:
            out(f"kept      pid {launcher.handle.pid} still runs; `cockpit stop {launcher.handle.pid}` stops it")
        return 130


def _finish(launcher: Launcher, keep: bool, out: Print) -> None:
    if launcher.handle is None:
        return
    if keep:
        out(f"kept      {launcher.handle.url} (pid {launcher.handle.pid}); `cockpit stop {launcher.handle.pid}` stops it")
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
            record = journal.experiment(entry.experiment)
            if record is not None and record.outcome == "launching":
                journal.set_outcome(entry.experiment, "stopped")
            out(f"stopped   {entry}: {how}")
    return 0


def attach_server(pid: int, *, profile: str | None, out: Print = print) -> int:
    registry = Registry()
    entry = registry.find(pid)
    if entry is None:
        raise CockpitError(f"no running server of cockpit has pid {pid}: `cockpit servers` lists them")
    setup, prof = build_setup(SetupOverrides(profile=profile or entry.profile or None))
    sim = "cockpit.sim" in " ".join(entry.argv)
    source = gpu_source(setup.hardware, use_sim(sim))
    with Journal() as journal, Monitor(source, interval=0.5) as monitor:
        launcher = Launcher(prof, setup, journal, Supervisor(registry, source), monitor, sim=sim)
        outcome = None
        for event in launcher.follow(launcher.supervisor.attach(entry)):
            out(str(event))
            outcome = event
    if isinstance(outcome, Ready):
        out(f"attached  {entry.url} is ready and still runs; `cockpit stop {pid}` stops it")
        return 0
    return 1 if isinstance(outcome, Failed) else 0
