"""The installed `cockpit` in a real terminal: tmux types a command, capture-pane reads the screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit.runner.registry import Registry

COCKPIT = Path(sys.executable).parent / "cockpit"
pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or not COCKPIT.exists(), reason="needs tmux and the installed cockpit script"
)


def test_installed_cockpit_in_tmux_launches_a_layout_and_quits(tmp_path, monkeypatch, profile_file):
    profile, port = profile_file("minimax-m2.5")
    env = {
        "COCKPIT_SIM_STATE": str(tmp_path / "simbox"),
        "COCKPIT_SIM_TIME_SCALE": "50",
        "COCKPIT_JOURNAL": str(tmp_path / "journal.sqlite"),
        "COCKPIT_STATE_DIR": str(tmp_path / "state"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    socket = f"cockpit-test-{os.getpid()}"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=True).stdout

    def screen_until(text: str, timeout: float = 20, line_start: bool = False) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = tmux("capture-pane", "-p", "-t", "ck")
            if any(line.strip().startswith(text) for line in shown.splitlines()) if line_start else text in shown:
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} on the screen:\n{shown}")
            time.sleep(0.1)

    settings = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    command = f"sleep 0.3; {COCKPIT} --sim --profile {profile}; echo EXITED $?; sleep 30"  # tmux sizes first
    tmux("new-session", "-d", "-s", "ck", "-x", "120", "-y", "40", *settings, command)
    try:
        screen_until("○ no server")
        for _ in range(20):  # keys sent before the app reads the terminal can be dropped: type until shown
            tmux("send-keys", "-t", "ck", ":")
            tmux("send-keys", "-t", "ck", "-l", "try tp4")
            try:
                screen_until("try tp4", timeout=1, line_start=True)  # the prompt line, not its placeholder
                break
            except AssertionError:
                tmux("send-keys", "-t", "ck", "C-u")
        tmux("send-keys", "-t", "ck", "Enter")
        shown = screen_until("● tp4 ready")
        assert "GPU0 ▶ tp4" in shown and "GPU7 · idle" in shown
        assert f"serves http://127.0.0.1:{port}" in shown
        tmux("send-keys", "-t", "ck", "Escape")  # the prompt keeps the keys until Escape
        time.sleep(0.3)  # apart, or the terminal reads Escape then q as alt+q
        tmux("send-keys", "-t", "ck", "q")
        screen_until("Quit cockpit?")
        tmux("send-keys", "-t", "ck", "s")
        screen_until("EXITED 0")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    assert not Registry().live()
