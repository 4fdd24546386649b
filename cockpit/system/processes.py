"""Telling a process cockpit recorded from a later one given the same PID.

psutil's ``create_time`` is the process's start since boot plus /proc/stat's ``btime``, which is
whole seconds and moves with every correction of the wall clock (NTP): two processes reading one
process's start can differ by a second. A PID is never reused within seconds of its last start,
so a start within that tolerance is the same process.
"""

from __future__ import annotations

import psutil

CREATE_TIME_TOLERANCE_S = 1.5


def started_at(proc: psutil.Process, create_time: float) -> bool:
    """Whether ``proc`` started when a record says (within the clock's whole-second jitter)."""
    return abs(proc.create_time() - create_time) <= CREATE_TIME_TOLERANCE_S
