"""Runs the Launcher's blocking work off the event loop and hands back what happened.

The Launcher's generators block (they follow a log file and poll /health), and stopping a
server waits for its GPU memory to be released, so every job runs on a thread of its own.
Those threads are daemon threads on purpose: a server left running on quit may stay silent
for minutes, and a thread following it must not hold the process open (Textual's thread
workers run in the loop's executor, which is joined at exit).

Log lines go to a `LogBuffer` that the screen drains on a timer (never one message per line);
every other event of the experiment goes to `on_event`, a tune's progress to `on_tune`, and what
a job says about itself (a sweep's step, a stop that finished, a crash) to `on_job`; the app turns
each into a message of its own (thread-safe, non-blocking). No Textual here.

A tune is ended only between its levels (``Tuner.should_stop``): a level cut short, or a load
stopped half way, would be journaled as the candidate's goodput or as a failed launch. A stop, a
new launch, sweep or tune, and quitting wait for its current level (or load) to end.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout
from cockpit.core.tuning.events import TuneEvent
from cockpit.core.tuning.spec import TuneSpec
from cockpit.lab.tune_loop import Tuner
from cockpit.runner.events import BenchDone, Event, Failed, LogLine, Phase, Ready, Stopped
from cockpit.runner.experiment import Launcher
from cockpit.runner.jobs import SweepDone, SweepJob, SweepStep, stop_left_running
from cockpit.runner.phases import ANSI_ESCAPE
from cockpit.runner.registry import ServerEntry

if TYPE_CHECKING:
    from cockpit.faces.tui.session import Session

PHASE_MARK = "» "  # a log line that moved the engine to a new phase (a mark, not only a colour)
JOIN_TIMEOUT_S = 20.0
SETTLE_S = 5.0
TUNE_END_WAIT_S = 300.0  # a tune's current level (or load) may take this long to end before a stop goes ahead


@dataclass(frozen=True)
class JobFailed:
    """A job raised: one line for the person, the job's name for context."""

    job: str
    error: str

    def __str__(self) -> str:
        return f"{self.job} failed: {self.error}"


@dataclass(frozen=True)
class StopFinished:
    """A stop job is over, whether or not there was a server to stop (quitting waits for it)."""


@dataclass(frozen=True)
class Notice:
    """One line for the status bar from a job."""

    text: str
    error: bool = False


@dataclass(frozen=True)
class Relearned:
    """A launch or a benchmark was measured and the session fitted what the box taught: the
    screen reads the results and the plan again (the session's ``on_learned``)."""


JobEvent = JobFailed | SweepStep | SweepDone | StopFinished | Notice | Relearned


@dataclass
class TuneJob:
    """A tune's thread and the flag that ends it after its current level."""

    thread: threading.Thread
    end: threading.Event


@dataclass
class WatchJob:
    """The thread that watches a ready server until it ends, and the flag that ends the watch."""

    thread: threading.Thread
    quit: threading.Event


class LogBuffer:
    """Lines from the job threads, waiting for the screen's next flush. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self.total = 0

    def append(self, line: str) -> None:
        line = ANSI_ESCAPE.sub("", line)
        with self._lock:
            self._pending.append(line)
            self.total += 1

    def mark_last(self, prefix: str = PHASE_MARK) -> None:
        with self._lock:
            if self._pending and not self._pending[-1].startswith(prefix):
                self._pending[-1] = prefix + self._pending[-1]

    def drain(self) -> list[str]:
        with self._lock:
            lines, self._pending = self._pending, []
        return lines


class Control:
    """One server at a time: launch, bench, stop, sweep, re-attach, each on its own thread."""

    def __init__(
        self,
        session: Session,
        log: LogBuffer,
        *,
        on_event: Callable[[Event], None],
        on_job: Callable[[JobEvent], None],
        on_tune: Callable[[TuneEvent], None],
    ) -> None:
        """`on_event`, `on_job` and `on_tune` are called on the job threads: they must not block."""
        self.session = session
        self.log = log
        self.on_event = on_event
        self.on_job = on_job
        self.on_tune = on_tune
        self._lock = threading.Lock()
        self._server_thread: threading.Thread | None = None  # follows the current launch
        self._bench_thread: threading.Thread | None = None
        self._stop_thread: threading.Thread | None = None
        self._sweep_thread: threading.Thread | None = None
        self._tune: TuneJob | None = None
        self._watch: WatchJob | None = None  # the ready server launched or re-attached here
        self._closed = threading.Event()

    # -- state ------------------------------------------------------------------------------

    @property
    def launcher(self) -> Launcher:
        return self.session.launcher

    @staticmethod
    def _alive(thread: threading.Thread | None) -> bool:
        return thread is not None and thread.is_alive()

    @property
    def launching(self) -> bool:
        return self._alive(self._server_thread)

    @property
    def benching(self) -> bool:
        return self._alive(self._bench_thread)

    @property
    def sweeping(self) -> bool:
        return self._alive(self._sweep_thread)

    @property
    def tuning(self) -> bool:
        return self._tune is not None and self._alive(self._tune.thread)

    @property
    def stopping(self) -> bool:
        return self._alive(self._stop_thread)

    @property
    def has_server(self) -> bool:
        """A server of ours runs or loads."""
        return self.launcher.handle is not None or self.launching

    def _spawn(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # a job's bug must reach the screen, not vanish with the thread
                self.on_job(JobFailed(name, f"{type(exc).__name__}: {exc}"))

        thread = threading.Thread(target=guarded, name=f"cockpit-{name}", daemon=True)
        thread.start()
        return thread

    # -- jobs -------------------------------------------------------------------------------

    def launch(self, layout: Layout, force: bool = False) -> None:
        """Stop what runs (if anything), then launch `layout` and follow it to Ready or Failed."""

        with self._lock:
            previous = self._server_thread
            since = self.launcher.cancels  # a stop asked for after this launch cancels it

            def job() -> None:
                self._end_tune()
                self._stop_current(f"to launch {layout}", previous, replacing=True)
                self._watch_ready(self._run(layout, force, since))

            self._server_thread = self._spawn("launch", job)

    def attach(self, entry: ServerEntry) -> None:
        """Follow a server an earlier cockpit started, as if we had launched it."""

        def job() -> None:
            handle = self.launcher.supervisor.attach(entry)
            self.launcher.experiment = entry.experiment
            record = self.session.journal.experiment(entry.experiment)
            self.session.monitor.track(entry.experiment, record.gpus if record else ())
            self._watch_ready(self._consume(self.launcher.follow(handle)))

        with self._lock:
            self._server_thread = self._spawn("attach", job)

    def bench(self, bench: BenchRequest) -> None:
        def job() -> None:
            self._consume(self.launcher.bench(bench))

        with self._lock:
            self._bench_thread = self._spawn("bench", job)

    def stop(self, reason: str = "stopped by the user") -> None:
        """Stop the bench (if any) and the server; ends a sweep after its current step, a tune
        after its current level (it stops its own server)."""
        self.launcher.cancel_launches()

        def job() -> None:
            try:
                self._end_tune()
                self._stop_current(reason)
            finally:
                self.on_job(StopFinished())

        with self._lock:
            self._stop_thread = self._spawn("stop", job)

    def stop_entries(self, entries: Iterable[ServerEntry]) -> None:
        """Stop servers an earlier cockpit left running (found in the registry at start)."""

        def job() -> None:
            for stop in stop_left_running(entries, self.launcher.supervisor, self.session.journal):
                if stop.refused:  # not verifiably cockpit's: left alone, the others stopped
                    self.on_job(Notice(f"stop: {stop.refused}", error=True))
                else:
                    self.on_job(Notice(f"✓ stopped {stop.entry}: {stop.how}"))

        self._spawn("stop-left-running", job)

    def sweep(self, layouts: Iterable[Layout], bench: BenchRequest) -> None:
        """Each layout in turn (``runner.jobs.SweepJob``): launch, bench, stop; a layout that fails
        is journaled and skipped."""
        sweep = SweepJob(tuple(layouts), bench)
        launcher, since = self.launcher, self.launcher.cancels  # a stop after this ends the sweep

        def stopped() -> bool:
            return launcher.cancels != since

        def job() -> None:
            self._end_tune()
            self._stop_current(f"to sweep {', '.join(map(str, sweep.layouts))}", replacing=True)
            sweep.run(
                launch=lambda layout: self._run(layout, False, since),
                measure=lambda bench: self._consume(self.launcher.bench(bench)),
                stop=self._stop_current,
                on_step=self.on_job,
                should_stop=lambda: stopped() or self._closed.is_set(),
            )
            self.on_job(SweepDone(sweep.done, sweep.total, stopped=stopped()))

        with self._lock:
            self._sweep_thread = self._spawn("sweep", job)

    def tune(self, spec: TuneSpec | None) -> None:
        """End what runs (a tune after its current level), then tune: launch the most promising
        candidates in turn, bench, stop, learn (cockpit.lab.tune_loop). ``spec`` None resumes the profile's
        unfinished tune. Ends as interrupted (resumable) after `stop`, a replacing job, or quit."""
        launcher, since = self.launcher, self.launcher.cancels
        end = threading.Event()

        def should_stop() -> bool:
            return end.is_set() or self._closed.is_set() or launcher.cancels != since

        def on_event(event: TuneEvent | Event) -> None:
            if not isinstance(event, TuneEvent):
                self._hand_on(event)
                return
            self.on_tune(event)

        with self._lock:
            previous = self._tune

            def job() -> None:
                if previous is not None:
                    self._end_tune(previous)
                self._stop_current("to tune" if spec is not None else "to resume the tune", replacing=True)
                if should_stop():
                    return
                try:
                    if spec is None:
                        tuner = Tuner.resume(self.session, on_event, should_stop=should_stop)
                    else:
                        tuner = Tuner.start(self.session, spec, on_event, should_stop=should_stop)
                    tuner.run()
                except CockpitError as exc:
                    self.on_job(Notice(f"tune: {exc}", error=True))

            self._tune = TuneJob(self._spawn("tune", job), end)

    def close(self) -> None:
        """The screen is going away: end our bench child; a server keeps running (detached)."""
        self._closed.set()
        self.launcher.cancel_launches()
        watch = self._end_watch()
        interrupt_bench_children()
        if watch is not None and watch is not threading.current_thread():
            watch.join(JOIN_TIMEOUT_S)  # an end it is recording is journaled before the journal closes

    def wait(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Wait for the jobs that are running (tests, and quitting with "stop it")."""
        tune = self._tune.thread if self._tune is not None else None
        for thread in (self._stop_thread, tune, self._sweep_thread, self._bench_thread, self._server_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)

    # -- inside the threads -----------------------------------------------------------------

    def _run(self, layout: Layout, force: bool, since: int | None = None) -> Event | None:
        return self._consume(self.launcher.run(layout, force=force, since=since))

    def _consume(self, events: Iterable[Event]) -> Event | None:
        """Hand every event on; log lines to the buffer. Returns the last event."""
        last: Event | None = None
        for event in events:
            last = event
            self._hand_on(event)
            if self._closed.is_set() and isinstance(event, (Ready, Failed, BenchDone)):
                break
        return last

    def _hand_on(self, event: Event) -> None:
        """A log line to the buffer (a phase marks the line that started it), the rest to `on_event`."""
        if isinstance(event, LogLine):
            self.log.append(event.text)
            return
        if isinstance(event, Phase):
            self.log.mark_last()
        self.on_event(event)

    def _watch_ready(self, outcome: Event | None) -> None:
        """A server that came up is watched on a thread of its own until it ends: an end that
        cockpit did not cause reaches the screen as ``Stopped`` (cockpit.runner.experiment)."""
        handle = self.launcher.handle
        if not isinstance(outcome, Ready) or handle is None or handle.entry.experiment != outcome.experiment:
            return
        if self._closed.is_set():
            return
        quit = threading.Event()

        def job() -> None:
            self._consume(self.launcher.watch(handle, quit))

        with self._lock:
            self._end_watch()
            self._watch = WatchJob(self._spawn("watch", job), quit)

    def _end_watch(self) -> threading.Thread | None:
        """End the watch (cockpit stops the server itself, or the screen goes); its thread."""
        watch = self._watch
        if watch is None:
            return None
        watch.quit.set()
        return watch.thread

    def _end_tune(self, tune: TuneJob | None = None) -> None:
        """End a running tune after its current level and wait for it (it stops its own server)."""
        tune = tune if tune is not None else self._tune
        if tune is None or tune.thread is threading.current_thread():
            return
        tune.end.set()
        tune.thread.join(TUNE_END_WAIT_S)

    def _stop_current(
        self, reason: str, follower: threading.Thread | None = None, *, replacing: bool = False
    ) -> None:
        """Stop the bench and the server, wait for the threads that follow them, journal `stopped`.
        A job ``replacing`` the server leaves a line in the launch log that says what it stopped
        ("■ stopped tp8 ep (pid N) to launch tp4 ep2: stopped with SIGTERM")."""
        launcher = self.launcher
        interrupt_bench_children()  # a bench of ours (its own job, or a sweep's step) ends first
        self._join(self._bench_thread)
        followers: list[threading.Thread | None] = [follower or self._server_thread, self._sweep_thread]
        handle = launcher.handle
        deadline = time.monotonic() + SETTLE_S
        settling = self._server_thread is not threading.current_thread() and self.launching
        while handle is None and settling and self.launching and time.monotonic() < deadline:
            time.sleep(0.05)  # a launch still planning: let its server start, then stop it
            handle = launcher.handle
        if handle is None:  # none, or one that ended on its own: its watch may still be saying so
            self._join(self._end_watch())
            return
        exp = handle.entry.experiment
        followers.append(self._end_watch())
        stopped = launcher.stop(reason)
        for thread in followers:
            self._join(thread)
        if stopped is None and launcher.ended(exp) is not None:
            return  # it ended on its own meanwhile: the watch said so
        if stopped is not None and replacing:
            self.log.append(f"■ stopped {handle.entry.layout} (pid {handle.pid}) {stopped.reason}")
        self.on_event(stopped or Stopped(exp, reason))

    @staticmethod
    def _join(thread: threading.Thread | None) -> None:
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)


_BENCH_CHILD = re.compile(r"\bcockpit\.cli\b.*\bbench\b.*--jsonl")


def interrupt_bench_children() -> int:
    """SIGINT our `cockpit bench --jsonl` children: they journal what they finished and exit."""
    count = 0
    try:
        children = psutil.Process(os.getpid()).children()
    except psutil.Error:
        return 0
    for child in children:
        try:
            if _BENCH_CHILD.search(" ".join(child.cmdline())):
                child.send_signal(signal.SIGINT)
                count += 1
        except psutil.Error:
            continue
    return count
