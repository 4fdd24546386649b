"""What the signals a cockpit gets mean, and a way to hold them over a step that must not be cut.

Ctrl-C (SIGINT) and SIGTERM both mean "stop what you started and exit"; SIGHUP means the
terminal went away (an SSH drop): the server keeps running, listed, and the journal says so.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM: stop the server and the bench, as Ctrl-C does (exit 143, not 130)."""


class HungUp(BaseException):
    """SIGHUP: the terminal is gone; leave the server running and listed."""


def exit_code(exc: BaseException) -> int:
    """The shell's convention, 128 + the signal's number."""
    if isinstance(exc, Terminated):
        return 128 + signal.SIGTERM
    if isinstance(exc, HungUp):
        return 128 + signal.SIGHUP
    return 128 + signal.SIGINT


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block is done, then deliver them.

    Spawning an engine and registering it is such a block: an interrupt in between would leave
    an engine running that the caller never learnt about. Signal handlers are Python's (the
    process's signal mask would be inherited by the engine), and only the main thread can set
    them; elsewhere the block runs as it is (the registry's token still finds the engine).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in HELD}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)
