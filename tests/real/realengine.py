"""What the real-engine tier's tests share: cockpit and engine processes, the journal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from cockpit.store.journal import Journal

MARKER = "COCKPIT_TEST_ENGINE"  # in every engine's environment: the test's own folder
READY_S = 300.0  # a cold start on 2 busy cores is ~50 s; the engine's own imports dominate it


def cockpit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
    )


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
    )


def read_until(proc: subprocess.Popen, marker: str, timeout: float = READY_S) -> str:
    """A spawned cockpit's lines up to the one that holds ``marker``."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no line with {marker!r}:\n" + "".join(seen[-60:]))


def engines_of(folder: Path | str) -> list[psutil.Process]:
    """The live engine processes started with this test's marker."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(MARKER) == str(folder) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_gone(folder: Path | str, timeout: float = 30.0) -> list[psutil.Process]:
    """The engine processes still alive after ``timeout``: none, when all went away."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = engines_of(folder)
        if not left:
            return []
        time.sleep(0.2)
    return engines_of(folder)


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def experiments() -> list:
    with Journal() as journal:
        return journal.experiments()
