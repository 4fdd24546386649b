"""The one screen: header, GPU panes, the engine line, layout picker, tune view, launch log,
benchmark pane, prompt bar, footer.

Wide terminals show the picker (or the tune view in its place), the log and the bench pane side by
side; a compact one (80x24) shows one of them at a time (l, t, o, b switch) and the GPU panes shrink
to one line. The engine line shows only while a ready server answers with its metrics.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Container
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input

from cockpit.faces.tui.history import PromptHistory
from cockpit.faces.tui.widgets.bench_pane import BenchPane
from cockpit.faces.tui.widgets.engine_line import EngineLine
from cockpit.faces.tui.widgets.gpu_pane import GpuGrid
from cockpit.faces.tui.widgets.header import StatusHeader
from cockpit.faces.tui.widgets.launch_log import LaunchLog
from cockpit.faces.tui.widgets.layout_picker import LayoutPicker
from cockpit.faces.tui.widgets.prompt_bar import Candidates, PromptBar, StatusLine
from cockpit.faces.tui.widgets.tune_view import TuneView

VIEWS = {
    "layouts": "layouts (l)",
    "tune": "tune (t)",
    "log": "launch log (o)",
    "bench": "benchmark (b) · results (r)",
}
LEFT = ("layouts", "tune")  # wide: the one shown last of these holds the left column
WIDE_MIN_WIDTH, WIDE_MIN_HEIGHT = 100, 32


class MainScreen(Screen):
    view = reactive("layouts")  # the view shown in a compact screen (and focused in a wide one)
    left = reactive("layouts")  # the view in a wide screen's left column: the picker or the tune view

    def __init__(self, history: PromptHistory, candidates: Candidates, cursor_blink: bool = True) -> None:
        super().__init__()
        self._history = history
        self._candidates = candidates
        self._cursor_blink = cursor_blink
        self.gpu_count = 0

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield GpuGrid(id="gpus")
        yield EngineLine(id="engine")
        with Container(id="main"):
            yield LayoutPicker(id="view-layouts", classes="view")
            yield TuneView(id="view-tune", classes="view")
            yield LaunchLog(id="view-log", classes="view")
            yield BenchPane(id="view-bench", classes="view")
        prompt = PromptBar(self._history, self._candidates, self.say, id="prompt")
        prompt.cursor_blink = self._cursor_blink
        yield prompt
        yield StatusLine(id="status", markup=False)
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        for name, title in VIEWS.items():
            self.query_one(f"#view-{name}").border_title = title
        self.watch_view(self.view)
        if self._history.problem:  # a history that is not text was skipped: the screen opens all the same
            self.say(self._history.problem, error=True)

    # -- parts ------------------------------------------------------------------------------

    @property
    def header(self) -> StatusHeader:
        return self.query_one(StatusHeader)

    @property
    def gpus(self) -> GpuGrid:
        return self.query_one(GpuGrid)

    @property
    def engine_line(self) -> EngineLine:
        return self.query_one(EngineLine)

    @property
    def picker(self) -> LayoutPicker:
        return self.query_one(LayoutPicker)

    @property
    def tune(self) -> TuneView:
        return self.query_one(TuneView)

    @property
    def log_pane(self) -> LaunchLog:
        return self.query_one(LaunchLog)

    @property
    def bench(self) -> BenchPane:
        return self.query_one(BenchPane)

    @property
    def prompt(self) -> PromptBar:
        return self.query_one(PromptBar)

    @property
    def status(self) -> StatusLine:
        return self.query_one(StatusLine)

    def take_typed(self, text: str) -> None:
        """Keys typed at a question that cancelled it: the prompt takes them, at once and in order
        (a `:` or `/` that only opens the prompt is not text)."""
        prompt = self.prompt
        self.set_focus(prompt)
        if not prompt.value:
            text = text.lstrip(":/") if len(text) == 1 else text
        if text:
            prompt.insert_text_at_cursor(text)

    def take_enter(self) -> None:
        """An Enter typed after the rest of a command at a question: the command runs."""
        prompt = self.prompt
        self.set_focus(prompt)
        prompt.post_message(Input.Submitted(prompt, prompt.value))

    def say(self, text: str, error: bool = False) -> None:
        self.status.say(text, error)

    # -- size -------------------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        return self.has_class("-compact")

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    async def set_gpu_count(self, count: int) -> None:
        self.gpu_count = count
        await self.gpus.set_count(count)
        self._fit(self.size.width, self.size.height)

    def _fit(self, width: int, height: int) -> None:
        if not width:
            return
        compact = width < WIDE_MIN_WIDTH or height < WIDE_MIN_HEIGHT
        self.set_class(compact, "-compact")
        self.query_one(Footer).compact = compact  # every pane key in 80 columns
        self.gpus.fit_screen(compact, height)  # columns, rows and height: by node on a cluster

    # -- views ------------------------------------------------------------------------------

    def watch_view(self, view: str) -> None:
        if view in LEFT:
            self.left = view
        for name in VIEWS:
            self.query_one(f"#view-{name}").set_class(name == view, "-active")
            self.query_one(f"#view-{name}").set_class(name in LEFT and name != self.left, "-left-hidden")
        # Wide: the log and the bench pane share the right column; the one in use gets more of it.
        self.query_one("#main").styles.grid_rows = (
            "1fr 2fr" if view == "bench" else "2fr 1fr" if view == "log" else "1fr 1fr"
        )

    def show_view(self, view: str, focus: bool = False) -> None:
        self.view = view
        if focus:
            self.focus_view()

    def focus_view(self) -> None:
        target: Widget = {
            "layouts": lambda: self.picker.table,
            "tune": lambda: self.tune.table,
            "log": lambda: self.log_pane.log_view,
            "bench": lambda: self.bench.results_table,
        }[self.view]()
        self.set_focus(target)  # the screen's focus: right even while a dialog is on top
