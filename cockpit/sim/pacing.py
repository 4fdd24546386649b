"""How the simulated engine keeps its clock, and how it says so when it cannot.

The batcher's steps are due at absolute deadlines. The rule, in full (docs/simulator.md#keeping-the-clock):

- The schedule is kept: a step is due at the previous step's deadline plus its own modelled
  duration, however late the previous one woke. Handing a step's tokens out (the host's work)
  runs while the next modelled step does, as a real engine's output processing overlaps its
  next forward pass.
- Lateness is measured when the clock wakes: the wake time minus the deadline. A wake more than
  ``SLIP_S`` late is a slip: the host (this machine's CPU), not the modelled GPU, set the pace.
- A late step's successor is shortened by the lateness, but never below half its own duration:
  the next deadline is at least the wake time plus half the next step. A hiccup of up to half a
  step (a garbage collection, a busy neighbour) is caught up by the next step, without a burst
  of zero-length steps; lateness beyond that is dropped from the schedule and counted as
  ``dropped_s``: the engine then runs slower than its model, and reports it.
- Every slip is counted (``cockpit_sim_step_slips_total`` in /metrics; steps, slips, lateness
  percentiles and the time dropped in /cockpit/truth). The engine cannot keep its clock when,
  over a window of ``WARN_EVERY_S`` of load (or a stretch of load that ends sooner, when the
  engine goes idle; idle time is no part of a window), at least ``WARN_MIN_SLIPS`` of its steps
  slipped and more than ``WARN_SHARE`` of them (of at least ``WARN_MIN_STEPS``), or it dropped
  more than ``WARN_SHARE`` of the window's time: then its log gets one line saying so and what
  it means, at most one every ``WARN_EVERY_S``. A lone late wake (a hiccup the next step
  absorbs) is counted but not logged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

SLIP_S = 0.002
"""A step waking later than this behind its deadline is a slip."""
WARN_EVERY_S = 10.0
"""The window a warning looks at, and at most one warning line this often (the batcher's clock)."""
WARN_SHARE = 0.01
"""More than this share of a window's steps slipping, or of its time dropped, is a clock the
engine cannot keep."""
WARN_MIN_SLIPS = 2
"""Fewer slips than this in a window are hiccups, however short the window."""
WARN_MIN_STEPS = 100
"""The share of slips is taken of at least this many steps: one slip in a short stretch is no trend."""
KEEP = 100_000
"""Wakes kept for /cockpit/truth: minutes of steps at any batch."""


class Pace:
    """The clock discipline of one batcher: deadlines, the lateness of every wake, warnings."""

    def __init__(self, warn: Callable[[str], None], keep: int = KEEP) -> None:
        self.steps = 0
        self.slips = 0
        self.dropped_s = 0.0
        self.wakes: deque[tuple[float, float]] = deque(maxlen=keep)  # (deadline, lateness)
        self.drops: deque[tuple[float, float]] = deque(maxlen=keep)  # (wake, seconds dropped)
        self._warn = warn
        self._warned_at: float | None = None
        self._window = _Window()  # the steps the next warning looks at

    def next_deadline(self, deadline: float, woke: float, duration: float) -> float:
        """When the step after the one due at ``deadline`` (which woke at ``woke``) is due, if it
        lasts ``duration``: the schedule kept, catching up at most half the step."""
        kept = deadline + duration
        earliest = woke + duration / 2
        if kept >= earliest:
            return kept
        dropped = earliest - kept
        self.dropped_s += dropped
        self.drops.append((woke, dropped))
        self._window.dropped_s += dropped
        return earliest

    def woke(self, deadline: float, now: float) -> None:
        """The clock woke at ``now`` for the step due at ``deadline``."""
        lateness = max(0.0, now - deadline)
        self.steps += 1
        self.wakes.append((deadline, lateness))
        window = self._window
        if window.stretch_since is None:
            window.stretch_since = deadline
        window.steps += 1
        if lateness > SLIP_S:
            self.slips += 1
            window.slips += 1
            window.worst_s = max(window.worst_s, lateness)
        if window.span(now) >= WARN_EVERY_S:
            self._close_window(now)

    def idle(self, now: float) -> None:
        """The engine has nothing to do: the stretch of load that ended is a window of its own
        (or, held back by the rate limit, the window pauses: idle time is not counted)."""
        window = self._window
        if window.steps:
            window.pause(now)
            self._close_window(now)

    def _close_window(self, now: float) -> None:
        """Warn if the window's clock was not kept; a warning held back by the rate limit keeps
        its window open, to be told at the next chance."""
        window = self._window
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            return
        span = window.span(now)
        slipped = window.slips >= WARN_MIN_SLIPS and window.slips > WARN_SHARE * max(
            window.steps, WARN_MIN_STEPS
        )
        if slipped or window.dropped_s > WARN_SHARE * span:
            self._warn(window.sentence(span))
            self._warned_at = now
        self._window = _Window()

    def summary(self, since: float = float("-inf")) -> dict[str, Any]:
        """Steps due at ``since`` or later: how many, how many slipped, how late they woke, and
        the schedule time dropped (for /cockpit/truth)."""
        lateness = [late for due, late in self.wakes if due >= since]
        return {
            "steps": len(lateness),
            "slips": sum(late > SLIP_S for late in lateness),
            "slip_ms": SLIP_S * 1e3,
            "lateness_ms": summary_ms(lateness),
            "dropped_s": sum(dropped for at, dropped in self.drops if at >= since),
        }

    def reset(self) -> None:
        """Forget the samples (a new /cockpit/truth window); the counters keep counting."""
        self.wakes.clear()
        self.drops.clear()


class _Window:
    """The steps a warning looks at: since the last line, or the last window that was fine."""

    def __init__(self) -> None:
        self.busy_s = 0.0  # the stretches of load that ended while the window stayed open
        self.stretch_since: float | None = None  # the running stretch's first deadline
        self.steps = 0
        self.slips = 0
        self.worst_s = 0.0
        self.dropped_s = 0.0

    def span(self, now: float) -> float:
        """Seconds of load the window covers by ``now``, idle time left out."""
        since = self.stretch_since
        return self.busy_s + (max(0.0, now - since) if since is not None else 0.0)

    def pause(self, now: float) -> None:
        """The stretch of load ended at ``now``."""
        self.busy_s = self.span(now)
        self.stretch_since = None

    def sentence(self, span_s: float) -> str:
        over = f" over {span_s:.0f} s" if span_s >= 1 else ""
        dropped = f"; {self.dropped_s:.2f} s of modelled time lost" if self.dropped_s >= 0.005 else ""
        return (
            f"The simulated engine is behind its clock: {self.slips} of its last {self.steps} steps"
            f"{over} started more than {SLIP_S * 1e3:.0f} ms late (worst {self.worst_s * 1e3:.1f} ms"
            f"{dropped}). The CPU running the simulator, not the modelled GPU, is setting the pace: "
            "tokens arrive later than the model says and measured speeds read low."
        )


def summary_ms(seconds: Iterable[float]) -> dict[str, Any]:
    """n, mean, p50, p99 and max in milliseconds (just n when empty)."""
    ordered = sorted(v * 1e3 for v in seconds)
    if not ordered:
        return {"n": 0}

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    n = len(ordered)
    return {"n": n, "mean": sum(ordered) / n, "p50": pct(0.5), "p99": pct(0.99), "max": ordered[-1]}
