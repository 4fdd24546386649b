"""Typed messages from the threads (GPU monitor, job threads) to the screen.

`post_message` is thread-safe and never blocks the sender; a GPU poll whose message has not
been handled yet is replaced by the next one (only the newest samples matter).
"""

from __future__ import annotations

from textual.message import Message

from cockpit.telemetry.base import GpuSample


class GpuSamples(Message):
    def __init__(self, samples: list[GpuSample]) -> None:
        super().__init__()
        self.samples = samples

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuSamples)


class RunnerEvent(Message):
    """An event of the experiment (Planned, Phase, Ready, Failed, Bench*...) or of a job (SweepStep, JobFailed)."""

    def __init__(self, event: object) -> None:
        super().__init__()
        self.event = event


class SessionOpened(Message):
    """`use <profile>` (or a re-attach) opened a new session on a thread; the screen swaps to it,
    then follows `attach`, the server that was left running, if there is one."""

    def __init__(self, session: object, attach: object | None = None) -> None:
        super().__init__()
        self.session = session
        self.attach = attach


class LaunchRequested(Message):
    """The picker's Enter on a layout: the app decides (confirmation for a `fails` layout)."""

    def __init__(self, layout: object) -> None:
        super().__init__()
        self.layout = layout
