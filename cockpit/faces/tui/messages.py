"""Typed messages from the threads (GPU monitor, job threads) and the widgets to the app.

`post_message` is thread-safe and never blocks the sender; a GPU poll whose message has not
been handled yet is replaced by the next one (only the newest samples matter). The experiment's
own events (`RunnerEventPosted`) and the jobs' reports about themselves (`JobEventPosted`) are
two messages, so each has a handler of its own; a tune's progress (`TuneEventPosted`) is a third.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from cockpit.core.layout import Layout
    from cockpit.core.tuning.events import TuneEvent
    from cockpit.faces.tui.control import JobEvent
    from cockpit.faces.tui.session import Session
    from cockpit.runner.events import Event
    from cockpit.runner.registry import ServerEntry
    from cockpit.telemetry.base import GpuSample


@dataclass
class GpuSamples(Message):
    """One poll of every GPU, from the monitor thread."""

    samples: list[GpuSample]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuSamples)


@dataclass
class RunnerEventPosted(Message):
    """An event of the experiment, from a job thread: Planned, Launching, Phase, Ready, Failed,
    Stopped, or a benchmark's BenchTick, BenchLevel, BenchDone (log lines go to the LogBuffer)."""

    event: Event


@dataclass
class JobEventPosted(Message):
    """A job's report about itself: a sweep's step or end, a stop that finished, a notice, a crash."""

    event: JobEvent


@dataclass
class TuneEventPosted(Message):
    """A tune's progress, from its job thread: started, ranked, a candidate launched, a level's
    goodput, a candidate measured, the result (its launches' own events come as RunnerEventPosted)."""

    event: TuneEvent


@dataclass
class SessionOpened(Message):
    """`use <profile>` (or a re-attach) opened a new session on a thread; the screen swaps to it,
    then follows `attach`, the server that was left running, if there is one."""

    session: Session
    attach: ServerEntry | None = None


@dataclass
class LaunchRequested(Message):
    """The picker's Enter on a layout: the app decides (confirmation for a `fails` layout)."""

    layout: Layout
