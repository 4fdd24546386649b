"""CockpitApp: one screen over the same Launcher, Monitor and Journal that `cockpit run` drives.

Data flow:
    Monitor thread --post_message(GpuSamples)--> GPU panes (1 Hz, newest replaces unhandled)
    engine timer (1 Hz, while a server is ready) --a worker: GET /metrics on a thread--> EngineView --> engine line
    Control threads --LogBuffer--> flush timer (10 Hz) --> Log.write_lines (batches)
                    --post_message(RunnerEventPosted)--> ServerView / BenchView --> header, banner, bench pane
                    --post_message(JobEventPosted)--> status line (sweep steps, notices, job failures)
                    --post_message(TuneEventPosted)--> TuneBoard --> tune view (candidates, bound, chart, winner)
    Session.on_learned (a launch's or bench's refit, on its job thread) --post_message(JobEventPosted(Relearned))-->
                    picker and results read again, learning problems on the status line once each
    prompt text --prompt.parse_command--> cmd_* --> Control (launch, bench, stop, sweep, tune)
Nothing here blocks the loop: the Launcher's generators run on Control's threads; short
one-off jobs (opening a profile, looking for servers left running) are Textual thread workers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Input

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.commands import Command, Export, Help, Plan, Quit, Results, Stop, Sweep, Try, Tune, Use
from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout
from cockpit.core.planner import FAILS, Verdict
from cockpit.core.tuning.events import TuneEvent, TuneNotice, TuneResult, TuneStep
from cockpit.core.tuning.spec import TuneSpec
from cockpit.faces.prompt import parse_command
from cockpit.faces.tui.control import (
    Control,
    JobEvent,
    JobFailed,
    LogBuffer,
    Notice,
    Relearned,
    StopFinished,
)
from cockpit.faces.tui.history import PromptHistory
from cockpit.faces.tui.messages import (
    GpuSamples,
    JobEventPosted,
    LaunchRequested,
    RunnerEventPosted,
    SessionOpened,
    TuneEventPosted,
)
from cockpit.faces.tui.screens.choice import profile_name, quit_screen, server_lines, servers_screen
from cockpit.faces.tui.screens.confirm import ConfirmScreen
from cockpit.faces.tui.screens.dialog import TypedPast
from cockpit.faces.tui.screens.help import HelpScreen
from cockpit.faces.tui.screens.main import MainScreen
from cockpit.faces.tui.session import Session, hostname
from cockpit.faces.tui.state import READY, BenchView, EngineView, ServerView
from cockpit.faces.tui.widgets.layout_picker import describe
from cockpit.faces.tui.widgets.prompt_bar import complete
from cockpit.faces.tui.widgets.tune_view import TuneBoard
from cockpit.reports.tune import level_text, newest_tune
from cockpit.runner.events import (
    BenchDone,
    BenchLevel,
    BenchTick,
    Event,
    Failed,
    Launching,
    Phase,
    Planned,
    Ready,
    Stopped,
)
from cockpit.runner.jobs import (
    Running,
    SweepDone,
    SweepStep,
    opening,
    refusal,
    refuse_unrunnable,
    unlaunchable,
)
from cockpit.runner.registry import ServerEntry
from cockpit.store.profile import find_profile
from cockpit.telemetry.base import GpuSample
from cockpit.telemetry.enginemetrics import EngineMetrics, EngineScraper

log = logging.getLogger(__name__)


def _dropped_at_shutdown(handler: Callable) -> Callable:
    """A message posted by a thread (a refit, a runner, a sampler) can be handled after the app
    began to shut down, when its panes' children are already gone: then it is dropped, not raised.
    While the app runs, a missing widget is a bug and still raises."""

    @functools.wraps(handler)
    def handle(app: App, message: object) -> None:
        try:
            handler(app, message)
        except NoMatches:
            if app.is_running:
                raise

    return handle


ENDING_TUNE = "; the running tune ends first, after its current level"

SCREEN_ACTIONS = {"help", "focus_prompt", "view", "results", "stop", "quit", "leave_prompt"}
LOG_FLUSH_S = 0.1
HEADER_TICK_S = 1.0
ENGINE_TIMEOUT_S = 1.0  # a /metrics slower than this leaves the engine line as it was for one poll
HANGUP_GRACE_S = 5.0  # after SIGHUP, how long a clean exit may take before the process just ends
KEYS = (  # the screen's keys; the help lists the shown ones
    Binding("f1,question_mark", "help", "Help", key_display="F1/?", id="help"),
    Binding("colon,slash", "focus_prompt", "Command", key_display=":", id="prompt"),
    Binding("l", "view('layouts')", "Layouts", id="layouts"),
    Binding("o", "view('log')", "Log", id="log"),
    Binding("b", "view('bench')", "Bench", id="bench"),
    Binding("t", "view('tune')", "Tune", id="tune"),
    Binding("r", "results", "Results", id="results"),
    Binding("s", "stop", "Stop", id="stop"),
    Binding("q", "quit", "Quit", id="quit"),
    Binding("escape", "leave_prompt", "Back", show=False),
)

KEY_WORDS = {  # what each key does, for the help (the footer has room for one word)
    "help": "this help",
    "prompt": "back to the prompt (type a command)",
    "layouts": "the layout picker: every layout's verdict, memory and predicted tok/s",
    "log": "the launch log of the newest server",
    "bench": "the benchmark pane: live tok/s, the results table and chart",
    "tune": "the tune view: candidates, bounds, what was measured",
    "results": "the comparison table of this profile's results",
    "stop": "stop the running server (asks first)",
    "quit": "quit (with a server up: stop it, leave it running, or cancel)",
}


class CockpitApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "cockpit"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [*KEYS]

    def __init__(
        self,
        session: Session | None = None,
        *,
        profile: str | None = None,
        sim: bool = False,
        host: str | None = None,
        clock: Callable[[], float] = time.time,
        poll: bool = True,
        look_for_servers: bool = True,
        cursor_blink: bool = True,
        history: PromptHistory | None = None,
        interval: float = 1.0,
    ) -> None:
        """`poll=False` starts no GPU monitor thread and scrapes no engine metrics (snapshots feed
        samples themselves); `interval` is both polls' period."""
        super().__init__()
        self.session = session if session is not None else Session.open(profile, sim=sim, interval=interval)
        self.host = host or hostname()
        self.clock = clock
        self.poll = poll
        self.look_for_servers = look_for_servers
        self.history = history if history is not None else PromptHistory()
        self.server = ServerView()
        self.bench_view = BenchView()
        self.engine_view = EngineView()
        self.engine_interval = interval
        self._engine_scraper: EngineScraper | None = None
        self._engine_busy = False  # a scrape is in flight: the next poll waits for it
        self.log_buffer = LogBuffer()
        self.control = Control(
            self.session,
            self.log_buffer,
            on_event=self._post_runner_event,
            on_job=self._post_job_event,
            on_tune=self._post_tune_event,
        )
        self.tune_board = TuneBoard()
        self.main = MainScreen(self.history, self._candidates, cursor_blink=cursor_blink)
        self._unsubscribe: Callable[[], None] | None = None
        self._quitting = False
        self._exit_code = 0  # 128 + the signal that made the app quit
        self._last_samples: list[GpuSample] = []
        self._bench_levels: tuple[int, ...] = ()  # the levels of the bench or sweep running

    # -- life -------------------------------------------------------------------------------

    async def on_mount(self) -> None:
        await self.push_screen(self.main)
        await self._open(self.session)
        self.set_interval(LOG_FLUSH_S, self.flush_log)
        self.set_interval(HEADER_TICK_S, self._tick_header)
        if self.poll:
            self.set_interval(self.engine_interval, self._poll_engine)
        if self.look_for_servers:
            self.find_live_servers()
        self.main.prompt.focus()  # typed words go to the prompt, never to the pane keys
        self._listen_for_signals()
        if self.session.sim:
            self.main.say(
                f"{self.session.box.reason}: a simulated box ({self.session.setup.hardware}); nothing runs on real GPUs"
            )
        elif self.session.box.note:
            self.main.say(self.session.box.note)
        self._tell_learning()  # a calibration file that could not be read: after, so it stays in sight
        self._tell_problems()

    def on_unmount(self) -> None:
        self.control.close()
        self._close_session()
        self._release_scraper()

    def _listen_for_signals(self) -> None:
        """SIGTERM stops the server and the bench, then quits (143); SIGHUP (the terminal is
        gone) leaves the server running and listed, says so in the journal, and quits (129)."""
        import asyncio
        import signal

        loop = asyncio.get_running_loop()
        for sig, handler in ((signal.SIGTERM, self._terminated), (signal.SIGHUP, self._hung_up)):
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # nohup: a hang-up stays ignored
            try:
                loop.add_signal_handler(sig, handler)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests, web)
                return

    def _terminated(self) -> None:
        self._exit_code = 143
        if not self._busy:
            self.exit(return_code=143)
            return
        self._quitting = True
        self.control.stop("cockpit got SIGTERM")

    def _hung_up(self) -> None:
        handle = self.session.launcher.handle
        try:
            if handle is not None:
                self.session.launcher.note_hangup(handle)
        except CockpitError:
            pass  # the server stays listed in the registry; the note is a courtesy
        finally:
            self.control.close()
            self.exit(return_code=129)
            # With the terminal gone, a clean shutdown may block on it; the server is listed and
            # the note written, so after a grace period the process ends regardless.
            deadline = threading.Timer(HANGUP_GRACE_S, os._exit, (129,))
            deadline.daemon = True  # a clean exit in time ends it with the process
            deadline.start()

    async def _open(self, session: Session) -> None:
        """Show a session: GPU panes, picker, results; subscribe to its monitor."""
        self.session = session
        self.control.session = session
        main = self.main
        await main.set_gpu_count(session.setup.hardware.count)
        main.picker.load(session.verdicts, self._describe)
        self.refresh_header()
        self.refresh_results()
        main.bench.show_live(self.bench_view)
        self.tune_board = TuneBoard.of_result(newest_tune(session.journal, session.profile.name))
        main.tune.show(self.tune_board)
        if main.view == "tune" and not self.tune_board.rows:
            main.show_view("layouts")  # another profile's tune is not this one's
        main.log_pane.hide_banner()
        main.prompt.placeholder = session.prompt_hint()
        session.on_learned = self._post_learned
        self._unsubscribe = session.monitor.subscribe(self._post_samples)
        if self.poll:
            session.monitor.start()

    def _close_session(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.session.on_learned = None
        self.session.close()

    # Called on the monitor's and Control's threads: each hands its news to the loop without waiting.

    def _post_samples(self, samples: list[GpuSample]) -> None:
        self.post_message(GpuSamples(samples))

    def _post_runner_event(self, event: Event) -> None:
        self.post_message(RunnerEventPosted(event))

    def _post_job_event(self, event: JobEvent) -> None:
        self.post_message(JobEventPosted(event))

    def _post_tune_event(self, event: TuneEvent) -> None:
        self.post_message(TuneEventPosted(event))

    def _post_learned(self) -> None:
        self.post_message(JobEventPosted(Relearned()))

    def _describe(self, verdict: Verdict) -> Text:
        suggestion = self.session.suggest(verdict) if verdict.verdict == FAILS else ""
        return describe(verdict, self.session.argv_text(verdict), suggestion, self.session.against(verdict))

    def _candidates(self, text: str) -> list[str]:
        return complete(
            text, self.session.layout_names(), self.session.profile_names(), self.session.flag_names
        )

    # -- periodic ---------------------------------------------------------------------------

    def flush_log(self) -> None:
        lines = self.log_buffer.drain()
        if lines:
            self.main.log_pane.write_lines(lines)

    def _tick_header(self) -> None:
        if self.server.state == READY:  # only "ready 2m13s" moves with the clock
            self.refresh_header()
        self._tell_problems()

    def _tell_problems(self) -> None:
        """Damaged records read back since the last tick (an entry set aside, a journal row
        skipped), each said once; threads append them, the loop says them."""
        problems = self.session.problems
        while problems:
            try:
                self.main.say(problems[0], error=True)
            except NoMatches:  # the screen is built or torn down: said on the next tick
                return
            problems.pop(0)

    def refresh_header(self) -> None:
        try:
            header = self.main.header
        except NoMatches:  # the clock's tick can land while the screen is built or torn down
            return
        header.show(self.host, self.session.describe(), self.server, self.clock())

    def _poll_engine(self) -> None:
        """While a server is ready, scrape its /metrics off the loop; once it is not, clear the line."""
        url = self.server.url if self.server.state == READY else ""
        if not url:
            self._clear_engine()
            return
        if not self._engine_busy:
            self._engine_busy = True
            self.scrape_engine(url)

    def _clear_engine(self) -> None:
        """No server is ready: the line goes, and so does its scraper's connection."""
        self._release_scraper()
        if self.engine_view.url or self.engine_view.last is not None:
            self.engine_view.clear()
            self._show_engine()

    def _release_scraper(self) -> None:
        """Close the scraper's HTTP client now, or (a scrape in flight uses it) when that scrape ends."""
        scraper, self._engine_scraper = self._engine_scraper, None
        if scraper is not None and not self._engine_busy:
            scraper.close()

    def _show_engine(self) -> None:
        try:
            line = self.main.engine_line
        except NoMatches:  # a scrape can land while the screen is built or torn down
            return
        line.show(self.engine_view)

    def _engine_sampled(self, url: str, metrics: EngineMetrics | None) -> None:
        """A scrape's figures, unless its server is no longer the ready one (a late answer)."""
        if metrics is None or self.server.state != READY or self.server.url != url:
            return
        self.engine_view.watch(url)
        self.engine_view.apply(metrics)
        self._show_engine()

    def refresh_results(self) -> None:
        """The comparison, and the picker: measured again, and planned again if the box taught
        (rows typed with knobs too, with the setup the list was planned with)."""
        try:
            bench, picker = self.main.bench, self.main.picker
        except NoMatches:  # a refit finished in its thread can land while the screen is torn down
            return
        bench.show_comparison(self.session.comparison())
        planned = self.session.planned  # read once: the launcher's thread may replan meanwhile
        if planned is not None:
            picker.reload(planned.verdicts, lambda layout: self.session.verdict(layout, planned))

    def _tell_learning(self) -> None:
        """What went wrong with learning (a fit, the calibration file), on the status line once."""
        notices = self.session.learning_notices()
        if notices:
            self.main.say("⚠ " + " · ".join(notices))

    def refresh_gpus(self) -> None:
        if not self._last_samples:
            return
        try:
            grid = self.main.gpus
        except NoMatches:  # samples from the monitor thread can land while the screen is built or torn down
            return
        grid.show(
            self._last_samples,
            self.session.monitor.history,
            self.server.layout,
            self.server.gpus,
            self.server.active,
        )

    # -- messages from the threads ----------------------------------------------------------

    @_dropped_at_shutdown
    def on_gpu_samples(self, message: GpuSamples) -> None:
        self._last_samples = message.samples
        self.refresh_gpus()

    @_dropped_at_shutdown
    def on_job_event_posted(self, message: JobEventPosted) -> None:
        """What a job says about itself goes to the status line; a finished stop may end a quit."""
        main = self.main
        match message.event:
            case SweepStep() as step:
                main.say(str(step))
            case SweepDone(done=done, total=total, stopped=stopped):
                how = "stopped" if stopped else "done"
                main.say(f"✓ sweep {how}: {done} of {total} layout(s) journaled; `results` compares them")
                self.refresh_results()
            case JobFailed() as failed:
                main.say(str(failed), error=True)
            case Notice(text=text, error=error):
                main.say(text, error)
            case StopFinished():
                if self._quitting:
                    self.exit(return_code=self._exit_code)
            case Relearned():
                self.refresh_results()
                self._tell_learning()

    @_dropped_at_shutdown
    def on_runner_event_posted(self, message: RunnerEventPosted) -> None:
        """The experiment's events: a benchmark's go to the bench pane, the rest to the server's view."""
        event = message.event
        if isinstance(event, (BenchTick, BenchLevel, BenchDone)):
            self._bench_event(event)
        elif self.server.apply(event, self.clock()):  # False: an earlier experiment's late event
            self._server_event(event)
            self.refresh_header()

    def _server_event(self, event: Event) -> None:
        """The log pane, the status line and the view shown follow the server's life."""
        main = self.main
        if self.server.state != READY:
            self._clear_engine()
        match event:
            case Planned():
                self.flush_log()  # the last launch's lines stay above this one's separator
                main.log_pane.begin(event.layout, f"{event.verdict}; {event.placement}")
                self.refresh_gpus()
            case Launching():
                main.log_pane.note(str(event))
            case Ready():
                self.flush_log()
                main.log_pane.show_ready(
                    self.server.layout, event.url, event.load_seconds, self.session.levels
                )
                self.refresh_results()  # what it logged is measured now, beside the prediction
                if not self._batch:
                    main.say(f"✓ {self.server.layout} is ready: `bench` measures it, `stop` stops it")
            case Failed():
                self.flush_log()
                main.log_pane.show_failure(self.server.layout, event.diagnosis)
                if not self._batch:
                    main.say(f"{self.server.layout} failed: see the banner above the log", error=True)
                if not self.control.tuning:  # the tune view stays in front: its row says it failed
                    main.show_view("log")
                self.refresh_results()
                self.refresh_gpus()
            case Stopped():
                self.flush_log()
                main.log_pane.show_stopped(self.server.layout, event.reason)
                if event.ended:  # it ended without cockpit: said even in a sweep or a tune
                    main.say(f"{self.server.layout} {event.ended}: {event.reason}", error=True)
                elif not self._batch:
                    main.say(f"■ {self.server.layout} stopped: {event.reason}")
                self.refresh_gpus()
            case Phase(name="loading", progress=None) if not self.control.tuning:
                main.show_view("log")

    @property
    def _batch(self) -> bool:
        """A sweep or a tune runs the servers: their status lines speak for each step."""
        return self.control.sweeping or self.control.tuning

    @_dropped_at_shutdown
    def on_tune_event_posted(self, message: TuneEventPosted) -> None:
        """A tune's progress: the tune view, and its steps and end on the status line."""
        event = message.event
        self.tune_board.apply(event)
        self.main.tune.show(self.tune_board)
        match event:
            case TuneStep():
                self.main.say(f"tune: {event}")
            case TuneNotice():
                self.main.say(f"tune: {event.text}")
            case TuneResult() if event.interrupted:
                self.main.say(str(event))
                self.refresh_results()
            case TuneResult():
                self.main.say(self._tune_end_words(event))
                self.refresh_results()

    def _tune_end_words(self, result: TuneResult) -> str:
        if result.winner is None:
            return f"tune done, no winner: {result.reason}"
        rates = bool(self.tune_board.spec and self.tune_board.spec.rates)
        return (
            f"✓ tune done: {result.winner} wins at {level_text(result.winner_level, rates)}; "
            f"{result.launches} launch(es), {result.saved} saved · its command is in the tune view (t) · `export md` writes it"
        )

    def _bench_event(self, event: BenchTick | BenchLevel | BenchDone) -> None:
        view = self.bench_view
        if view.experiment != event.experiment or (isinstance(event, BenchTick) and not view.running):
            view.start(event.experiment, self.server.layout, self._bench_levels)
        view.apply(event)
        self.main.bench.show_live(view)
        if isinstance(event, (BenchLevel, BenchDone)):
            self.refresh_results()
        if isinstance(event, BenchDone) and not self._batch:  # "bench … in a child" is over
            self.main.say(view.status(), error=bool(event.error))

    @on(SessionOpened)
    async def _session_opened(self, message: SessionOpened) -> None:
        self._close_session()
        self.server = ServerView()
        self.bench_view = BenchView()
        session = message.session
        await self._open(session)
        model_notes = tuple(f"model: {note}" for note in session.setup.model.notes)
        notes = (*session.notes, *model_notes, *session.learning_notices())
        opened = (
            f"profile {session.profile.name}: {session.setup.model.name} on {session.setup.hardware}"
            f" with {session.setup.engine.label}"
        )
        self.main.log_pane.open_profile(opened, notes)
        # The notes (arguments translated for the other engine) are longer than a status line, and
        # the box is in the header: the log has them whole.
        more = f" · {len(notes)} note(s) in the log (o)" if notes else ""
        self.main.say(
            f"✓ profile {session.profile.name}: {session.setup.model.name} with {session.setup.engine.label}{more}"
        )
        if message.attach is not None:
            self._attach_server(message.attach)

    @on(TypedPast)
    def _typed_past(self, message: TypedPast) -> None:
        """A question was cancelled by typing (the keys went to the prompt): the bar says so."""
        self.main.say(f"“{message.title}” cancelled: what you type goes to the prompt")

    @on(LaunchRequested)
    def _launch_requested(self, message: LaunchRequested) -> None:
        try:
            self.request_launch(message.layout)
        except CockpitError as exc:
            self.main.say(str(exc), error=True)

    # -- the prompt -------------------------------------------------------------------------

    @on(Input.Submitted, "#prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip().lstrip(":/").strip()
        if not text:
            self.action_leave_prompt()
            return
        self.history.add(text)
        try:
            self.run_command(text)
        except CockpitError as exc:
            self.main.say(str(exc), error=True)  # the text stays in the bar, to be fixed
            return
        self.main.prompt.value = ""  # the prompt keeps the keyboard: Escape leaves it for the pane keys

    def run_command(self, text: str) -> None:
        """Parse and run one prompt line; a CockpitError (changing nothing) is the one-line error to show."""
        match parse_command(text):
            case Try() as command:
                self.cmd_try(command)
            case BenchRequest() as command:
                self.cmd_bench(command)
            case Stop() as command:
                self.cmd_stop(command)
            case Plan() as command:
                self.cmd_plan(command)
            case Sweep() as command:
                self.cmd_sweep(command)
            case Tune() as command:
                self.cmd_tune(command)
            case Results() as command:
                self.cmd_results(command)
            case Export() as command:
                self.cmd_export(command)
            case Use() as command:
                self.cmd_use(command)
            case Help() as command:
                self.cmd_help(command)
            case Quit() as command:
                self.cmd_quit(command)

    def cmd_try(self, command: Try) -> None:
        self.request_launch(command.layout)

    def _what_runs(self) -> Running:
        """What runs now, for the refusals (``runner.jobs.refusal``)."""
        control = self.control
        return Running(
            server=control.has_server,
            ready=self.server.state == READY and self.session.launcher.handle is not None,
            benching=control.benching,
            sweeping=control.sweeping,
            tuning=control.tuning,
            profile=self.session.profile.name,
        )

    def _refuse(self, command: Command) -> None:
        """A command that cannot run now is one line on the status bar, and changes nothing."""
        why = refusal(command, self._what_runs())
        if why is not None:
            raise CockpitError(why)

    def request_launch(self, layout: Layout) -> None:
        """Launch a layout; one the planner says fails asks first, one that cannot run is refused."""
        self._refuse(Try(layout))
        verdict = self.session.verdict(layout)
        if layout.knobs and verdict.placement is not None:
            self.main.picker.add(verdict)  # its argv, knobs and all, in the picker's detail
        for warning in verdict.warnings:  # a deprecated spelling: it still runs, the engine warns
            self.main.say(f"⚠ {warning}")
        engine = self.session.setup.engine.label
        suggestion = self.session.suggest(verdict)
        why = unlaunchable(layout, verdict, self.session.setup.hardware.count, suggestion)
        if why is not None:
            raise CockpitError(why)
        if verdict.verdict == FAILS:
            reasons = "\n".join(f"✗ {r}" for r in verdict.reasons)
            body = f"The planner says {layout} fails on {engine}:\n{reasons}"
            if suggestion:
                body += f"\n→ {suggestion}"
            body += "\n\nLaunching it costs a load and shows the engine's own error."

            def answered(yes: bool | None) -> None:
                if yes:
                    self._launch(layout, force=True)
                elif yes is False:  # None: cancelled by typing, which the status line says itself
                    self.main.say(f"{layout} not launched")

            self.push_screen(
                ConfirmScreen(f"Launch {layout} anyway?", body, yes="Launch anyway", no="Cancel"), answered
            )
            return
        self._launch(layout, force=False)

    def _launch(self, layout: Layout, force: bool) -> None:
        self.main.say(
            f"launching {layout}"
            + (" (forced)" if force else "")
            + ("; stopping the running server first" if self.control.has_server else "")
            + (ENDING_TUNE if self.control.tuning else "")
        )
        self.control.launch(layout, force=force)
        self.main.show_view("log")

    def cmd_bench(self, command: BenchRequest) -> None:
        self._refuse(command)
        levels = self._bench_levels = command.filled(self.session.profile.bench).concurrency
        self.bench_view.start(self.server.experiment, self.server.layout, levels)
        self.main.bench.show_live(self.bench_view)
        self.control.bench(command)
        self.main.show_view("bench")
        self.main.say(
            f"bench {self.server.layout}: C={','.join(map(str, levels))} in a child `cockpit bench --jsonl`"
        )

    @property
    def _busy(self) -> bool:
        """A server of ours runs or loads, or a job (bench, sweep, tune) is at work."""
        return self._what_runs().busy

    def cmd_stop(self, command: Stop | None = None) -> None:
        self._refuse(command or Stop())
        if self.control.tuning:
            self.main.say(
                "ending the tune after its current level, then its server stops (`tune --resume` continues it) …"
            )
        else:
            self.main.say(f"stopping {self.server.layout or 'the server'} …")
        self.control.stop()

    def cmd_plan(self, command: Plan) -> None:
        self.main.show_view("layouts")
        if command.layout is None:
            self.main.say(self.session.plan_summary())
            return
        verdict = self.session.verdict(command.layout)
        if not self.main.picker.select(str(verdict.layout)):
            self.main.picker.show(verdict)
        self.main.say(f"{verdict}")

    def cmd_sweep(self, command: Sweep) -> None:
        self._refuse(command)
        refuse_unrunnable(self.session.verdict(layout) for layout in command.layouts)
        self._bench_levels = command.bench.filled(self.session.profile.bench).concurrency
        self.control.sweep(command.layouts, command.bench)
        self.main.say(
            opening(command.layouts, self._bench_levels) + (ENDING_TUNE if self.control.tuning else "")
        )
        self.main.show_view("log")

    def cmd_tune(self, command: Tune) -> None:
        """Tune (or `tune --resume`): what runs ends first; the tune view comes to the front."""
        self._refuse(command)
        spec = command.spec
        if spec is None:
            record = self.session.journal.open_tune(self.session.profile.name)
            if record is None:
                raise CockpitError(
                    f"no unfinished tune of profile {self.session.profile.name}: start one with `tune ...`"
                )
            spec = TuneSpec.from_json(record.spec)
        self._bench_levels = () if spec.rates else spec.concurrency
        replacing = (
            ENDING_TUNE
            if self.control.tuning
            else "; stopping the running server first"
            if self.control.has_server
            else ""
        )
        self.control.tune(command.spec)
        what = "resuming the last tune" if command.spec is None else spec.describe()
        self.main.say(f"{what}: `stop` ends it after the current level{replacing}")
        self.main.show_view("tune")

    def cmd_results(self, command: Results | None = None) -> None:
        self.refresh_results()
        self.main.show_view("bench")

    def cmd_export(self, command: Export) -> None:
        try:
            path = self.session.export(command.fmt, predicted=command.predicted)
        except OSError as exc:
            raise CockpitError(f"could not write the {command.fmt} file: {exc.strerror or exc}") from None
        self.main.say(f"✓ wrote {path.resolve()}")

    def cmd_use(self, command: Use) -> None:
        self._refuse(command)
        find_profile(command.profile)  # an unknown name fails here, in one line
        on = f" on {command.engine}" if command.engine else ""
        self.main.say(f"opening profile {command.profile}{on} …")
        self.open_profile(command.profile, engine=command.engine)

    def cmd_help(self, command: Help | None = None) -> None:
        self.action_help()

    def cmd_quit(self, command: Quit | None = None) -> None:
        self._ask_quit()

    # -- workers for short jobs -------------------------------------------------------------

    @work(thread=True, exclusive=True, group="profile")
    def open_profile(self, name: str, attach: ServerEntry | None = None, engine: str | None = None) -> None:
        """Open a profile off the loop (on ``engine`` if given); with `attach`, follow that server once it is open."""
        try:
            session = Session.open(
                name, sim=self.session.box.sim_asked, engine=engine, interval=self.session.monitor.interval
            )
        except CockpitError as exc:
            if attach is not None:  # its profile is gone: follow it under the open one
                self.call_from_thread(
                    self.main.say,
                    f"{exc}; following pid {attach.pid} under profile {self.session.profile.name}",
                    True,
                )
                self.call_from_thread(self._attach_server, attach)
                return
            self.call_from_thread(self.main.say, str(exc), True)
            return
        self.post_message(SessionOpened(session, attach))

    @work(exclusive=True, group="engine")
    async def scrape_engine(self, url: str) -> None:
        """One GET of the ready server's /metrics on a thread (the parse too: a DP engine's text
        is long); a down or silent server gives nothing within ENGINE_TIMEOUT_S."""
        scraper: EngineScraper | None = None
        metrics: EngineMetrics | None = None
        try:
            scraper = self._scraper_for(url)
            metrics = await asyncio.to_thread(scraper.scrape)
        except Exception:  # a URL its HTTP client refuses: no figures, never a crash (nor a stuck poll)
            log.debug("no engine metrics from %s", url, exc_info=True)
        finally:
            self._engine_busy = False
            if scraper is not None and scraper is not self._engine_scraper:
                scraper.close()  # released while it scraped (the server went, or the app quit)
        self._engine_sampled(url, metrics)

    def _scraper_for(self, url: str) -> EngineScraper:
        """The scraper of ``url``'s server, kept between polls; another server's is closed."""
        scraper = self._engine_scraper
        if scraper is None or scraper.server_url != url:
            if scraper is not None:
                scraper.close()  # no scrape uses it: this one is the only one in flight
            scraper = self._engine_scraper = EngineScraper(url, timeout=ENGINE_TIMEOUT_S)
        return scraper

    @work(thread=True, exclusive=True, group="servers")
    def find_live_servers(self) -> None:
        live = self.session.live_servers()
        if live:
            self.call_from_thread(self._offer_live_servers, live)

    def _offer_live_servers(self, live: list[ServerEntry]) -> None:
        lines = [server_lines(entry, self.session.server_state(entry, self.clock())) for entry in live]

        def answered(choice: str | None) -> None:
            # The question came before the prompt took the keys: without this, they would land on
            # the layouts pane, where `r` opens results and `s` asks to stop the server.
            self.main.prompt.focus()
            if choice == "attach":
                self._reattach(live[0])
            elif choice == "stop":
                self.main.say(f"stopping {len(live)} server(s) left running …")
                self.control.stop_entries(live)

        self.push_screen(servers_screen(lines), answered)

    def _reattach(self, entry: ServerEntry) -> None:
        """Follow a server left running under its own profile and engine (header, model, argv,
        guard, results): a profile opened `on sglang` comes back on SGLang."""
        engine = entry.engine or self.session.setup.engine.name
        same_profile = not entry.profile or self.session.is_profile(entry.profile)
        if same_profile and engine == self.session.setup.engine.name:
            self._attach_server(entry)
            return
        profile = entry.profile or self.session.profile.path or self.session.profile.name
        self.main.say(f"opening profile {profile_name(profile)} on {engine} of pid {entry.pid} …")
        self.open_profile(profile, attach=entry, engine=engine)

    def _attach_server(self, entry: ServerEntry) -> None:
        """Follow a server left running under the open profile: its view, its log, its events."""
        record = self.session.journal.experiment(entry.experiment)
        gpus = record.gpus if record else ()
        self.server = ServerView(
            layout=entry.layout, experiment=entry.experiment, state="starting", pid=entry.pid, gpus=gpus
        )
        self.main.log_pane.begin(entry.layout, f"re-attached to pid {entry.pid}")
        self.control.attach(entry)
        self.refresh_header()

    # -- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A dialog has the keys to itself: the screen's keys wait until it is answered."""
        return not (isinstance(self.screen, ModalScreen) and action in SCREEN_ACTIONS)

    def action_focus_prompt(self) -> None:
        self.main.prompt.focus()

    def action_leave_prompt(self) -> None:
        if self.focused is self.main.prompt:
            self.main.say("")
            self.main.focus_view()

    def action_view(self, view: str) -> None:
        self.main.show_view(view, focus=True)

    def action_results(self) -> None:
        self.cmd_results()
        self.main.bench.results_table.focus()

    def action_help(self) -> None:
        keys = [(b.key_display or b.key, KEY_WORDS.get(b.id or "", b.description)) for b in KEYS if b.show]
        keys += [
            ("Enter", "launch the highlighted layout"),
            ("Esc", "leave the prompt or a dialog"),
            ("ctrl+q", "quit"),
        ]
        self.push_screen(HelpScreen(keys))

    def action_stop(self) -> None:
        why = refusal(Stop(), self._what_runs())
        if why is not None:
            self.main.say(why, error=True)
            return
        what = self._server_words()

        def answered(yes: bool | None) -> None:
            if yes:
                self.cmd_stop()

        self.push_screen(
            ConfirmScreen(
                f"Stop {self.server.layout or 'the server'}?",
                f"{what} will be stopped (SIGTERM to its process group).",
                yes="Stop it",
            ),
            answered,
        )

    async def action_quit(self) -> None:
        """`q` and ctrl+q: with a server up, ask whether to stop it or leave it running."""
        self._ask_quit()

    def _ask_quit(self) -> None:
        if not (self.control.has_server or self.control.sweeping or self.control.tuning):
            self.exit()
            return

        def answered(choice: str | None) -> None:
            if choice == "stop":
                self._quitting = True
                self.main.say("stopping the server, then quitting …")
                self.control.stop("cockpit quit")
            elif choice == "detach":
                handle = self.session.launcher.handle
                if handle is not None:
                    self.exit(
                        message=f"left running: pid {handle.pid} at {handle.url}; `cockpit stop {handle.pid}` stops it"
                    )
                else:
                    self.exit()

        self.push_screen(quit_screen(self._server_words()), answered)

    def _server_words(self) -> str:
        handle = self.session.launcher.handle
        pid = f" (pid {handle.pid})" if handle is not None else ""
        gpus = ",".join(map(str, self.server.gpus)) or "?"
        return f"{self.server.layout or 'the server'}{pid} on GPUs {gpus}"
