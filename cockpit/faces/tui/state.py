"""What the screen knows about the server and the benchmark, folded from events. No Textual here.

Each view is a small dataclass with `apply(event)`: the widgets render from it, the tests read it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from cockpit.bench.result import LevelSummary
from cockpit.core.outcome import FAILED, READY, STOPPED
from cockpit.faces.tui.format import duration
from cockpit.reports.numbers import format_ms
from cockpit.runner.events import (
    BenchDone,
    BenchLevel,
    BenchTick,
    Diagnosis,
    Event,
    Failed,
    Launching,
    Phase,
    Planned,
    Ready,
    Stopped,
)
from cockpit.telemetry.enginemetrics import EngineMetrics

ENGINE_HISTORY = 120  # scrapes kept for the engine line's sparklines

# The server's states on screen: the journal's outcomes, plus the steps before one is reached.
NONE, STARTING, LOADING = "none", "starting", "loading"
PHASE_WORDS = {
    "starting": "starting",
    "loading": "loading",
    "loaded": "weights loaded",
    "kv_cache": "sizing KV cache",
    "cuda_graphs": "capturing CUDA graphs",
    "serving": "warming up",
}


@dataclass
class ServerView:
    layout: str = ""
    experiment: int | None = None
    state: str = NONE
    phase: str = ""
    progress: float | None = None
    gpus: tuple[int, ...] = ()
    pid: int | None = None
    url: str = ""
    log_path: str = ""
    ready_at: float | None = None  # the clock's time when it became ready
    load_seconds: float | None = None
    diagnosis: Diagnosis | None = None
    stop_reason: str = ""
    ended: str = ""  # how it ended without cockpit stopping it, in the header's words

    @property
    def active(self) -> bool:
        """Loading or serving: a process of ours holds GPUs."""
        return self.state in (STARTING, LOADING, READY)

    def apply(self, event: Event, now: float) -> bool:
        """Fold one event in; False when it belongs to another experiment (a stale one)."""
        if isinstance(event, Planned):  # a new experiment: nothing of the last one stays
            fresh = ServerView(
                layout=event.layout, experiment=event.experiment, state=STARTING, gpus=tuple(event.gpus)
            )
            vars(self).update(vars(fresh))
            return True
        if event.experiment != self.experiment:
            return False
        if isinstance(event, Launching):
            self.pid, self.log_path = event.pid, event.log_path
        elif isinstance(event, Phase):
            self.state = LOADING
            self.phase = event.name
            if event.name == "loading" and event.progress is not None:
                self.progress = event.progress
        elif isinstance(event, Ready):
            # A re-attached server has been ready since its own start plus its load, not since now.
            ready_at = event.ready_at if event.ready_at is not None else now
            self.state, self.url, self.ready_at, self.load_seconds = (
                READY,
                event.url,
                min(ready_at, now),
                event.load_seconds,
            )
        elif isinstance(event, Failed):
            self.state, self.diagnosis = FAILED, event.diagnosis
        elif isinstance(event, Stopped):
            self.state, self.stop_reason, self.ended = STOPPED, event.reason, event.ended
        return True

    def label(self, now: float) -> str:
        """The header's words for the state, each with a mark: ○ ◐ ● ✗ ■."""
        if self.state == NONE:
            return "○ no server"
        name = self.layout
        if self.state == STARTING:
            return f"◐ {name} starting"
        if self.state == LOADING:
            if self.phase == "loading" and self.progress is not None:
                return f"◐ {name} loading {self.progress:.0%}"
            return f"◐ {name} {PHASE_WORDS.get(self.phase, self.phase)}"
        if self.state == READY:
            return f"● {name} ready {duration(now - (self.ready_at or now))}"
        if self.state == FAILED:
            return f"✗ {name} failed"
        return f"■ {name} {self.ended or 'stopped'}"


@dataclass
class BenchView:
    experiment: int | None = None
    layout: str = ""
    running: bool = False
    levels: tuple[int, ...] = ()  # the sweep's levels, where known
    level: int | None = None  # the concurrency being measured (or next, between levels)
    levels_done: int = 0
    tok_s: float | None = None  # the latest tick
    ticks: deque[float] = field(default_factory=lambda: deque(maxlen=600))  # tok/s, one a tick
    last: LevelSummary | None = None  # the last finished level
    error: str = ""
    interrupted: bool = False

    def start(self, experiment: int | None, layout: str, levels: tuple[int, ...]) -> None:
        """A new benchmark: nothing of the last one stays."""
        fresh = BenchView(
            experiment=experiment,
            layout=layout,
            running=True,
            levels=tuple(levels),
            level=levels[0] if levels else None,
        )
        vars(self).update(vars(fresh))

    def apply(self, event: Event) -> bool:
        """Fold a benchmark's event in; False for any other event."""
        if isinstance(event, BenchTick):
            self.running, self.level, self.tok_s = True, event.concurrency, event.tok_s
            self.experiment = event.experiment
            self.ticks.append(event.tok_s)
        elif isinstance(event, BenchLevel):
            self.levels_done += 1
            self.last = event.result
            # Between levels nothing runs: the status names the next level, without a stale rate.
            later = [c for c in self.levels if c > event.concurrency]
            self.level, self.tok_s = (later[0] if later else None), None
        elif isinstance(event, BenchDone):
            self.running = False
            self.error, self.interrupted = event.error, event.interrupted
        else:
            return False
        return True

    def status(self) -> str:
        if self.running:
            done = f"{self.levels_done} level(s) done"
            if self.tok_s is None:  # starting, or between two levels
                level = f"C={self.level} starting" if self.level is not None else "starting"
                return f"▶ bench {self.layout} {level} · {done}"
            return f"▶ bench {self.layout} C={self.level} running · {done} · {self.tok_s:,.0f} tok/s now"
        if self.error:
            return f"✗ bench failed: {self.error}"
        if self.experiment is None:
            return "no benchmark yet: `bench` once a server is ready"
        how = "interrupted" if self.interrupted else "done"
        return f"■ bench {self.layout} {how}: {self.levels_done} level(s) journaled"

    def latency(self) -> str:
        level = self.last
        if level is None:
            return ""
        ttft, itl = level.ttft_ms, level.itl_ms
        return (
            f"C={level.concurrency}: {level.output_tok_s:,.1f} tok/s · "
            f"TTFT p50 {format_ms(ttft.p50)} p99 {format_ms(ttft.p99)} ms · "
            f"ITL p50 {format_ms(itl.p50)} p99 {format_ms(itl.p99)} ms"
        )


@dataclass
class EngineView:
    """The ready server's own figures, one scrape a poll: the engine line renders from it.

    Bound to one server (its URL); `clear()` when it stops. Preemptions count from the first
    scrape of this server, so the line shows the ones that happened while it was watched.
    """

    url: str = ""
    last: EngineMetrics | None = None
    running: deque[float | None] = field(default_factory=lambda: deque(maxlen=ENGINE_HISTORY))
    waiting: deque[float | None] = field(default_factory=lambda: deque(maxlen=ENGINE_HISTORY))
    kv_usage: deque[float | None] = field(default_factory=lambda: deque(maxlen=ENGINE_HISTORY))
    first_preemptions: float | None = None

    def watch(self, url: str) -> None:
        """Follow the server at `url`; nothing of another server's stays."""
        if url != self.url:
            self.clear()
            self.url = url

    def clear(self) -> None:
        vars(self).update(vars(EngineView()))

    def apply(self, metrics: EngineMetrics) -> None:
        self.last = metrics
        self.running.append(metrics.running)
        self.waiting.append(metrics.waiting)
        self.kv_usage.append(metrics.kv_usage)
        if self.first_preemptions is None:
            self.first_preemptions = metrics.preemptions_total

    @property
    def preemptions(self) -> float | None:
        """Preemptions since this server was first scraped; None when the engine does not count them."""
        if self.last is None or self.last.preemptions_total is None:
            return None
        since = self.first_preemptions or 0.0
        return max(0.0, self.last.preemptions_total - since)
