"""What many test files need alike: waiting for a condition, a free port, a socket that listens,
and launches and benchmark levels as the calibration fit reads them."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, step: float = 0.05) -> T:
    """The condition's first true value within ``timeout`` seconds; an AssertionError after it,
    so a test that waits says it timed out instead of checking a stale value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    value = condition()
    if value:
        return value
    raise AssertionError(
        f"timed out after {timeout} s waiting for {getattr(condition, '__name__', condition)}"
    )


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1 (the port the next bind will likely get)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_socket(backlog: int = 8) -> socket.socket:
    """A socket that accepts connections into its backlog and never answers: a port already taken,
    or a server that hangs. The caller closes it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    return s


@dataclass(frozen=True)
class Launch:
    """A journaled launch as the fit reads it (``cockpit.core.fitting.Launched``)."""

    layout: str
    argv: tuple[str, ...]
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Level:
    """A benchmark level as the fit reads it (``cockpit.core.fitting.Measured``)."""

    concurrency: int
    output_tok_s: float
    input_len: int | None = None
    output_len: int | None = None
    failed: bool = False
    client_limited: bool = False
    extra: dict = field(default_factory=dict)
    duration_s: float | None = None
    errors: int = 0
    client_limited: bool = False
    extra: dict = field(default_factory=dict)
    duration_s: float | None = 10.0
    errors: int = 0
