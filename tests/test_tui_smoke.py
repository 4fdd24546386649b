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


class Tmux:
    """A cockpit in its own tmux server: start it, type into it, read its screen."""

    def __init__(self, env: dict[str, str], command: str):
        self.socket = f"cockpit-test-{os.getpid()}-{time.monotonic_ns()}"
        settings = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
        self("new-session", "-d", "-s", "ck", "-x", "120", "-y", "40", *settings, command)

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        ).stdout

    def screen_until(self, text: str, timeout: float = 20, line_start: bool = False) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = self("capture-pane", "-p", "-t", "ck")
            if (
                any(line.strip().startswith(text) for line in shown.splitlines())
                if line_start
                else text in shown
            ):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} on the screen:\n{shown}")
            time.sleep(0.1)

    def type_command(self, text: str, prompt: bool = False) -> None:
        """Type until the screen shows it (keys sent before the app reads the terminal can be
        dropped), then Enter. ``prompt``: open the prompt with `:` first and match its line only,
        not the placeholder's words."""
        for _ in range(20):
            if prompt:
                self("send-keys", "-t", "ck", ":")
            self("send-keys", "-t", "ck", "-l", text)
            try:
                self.screen_until(text, timeout=1, line_start=prompt)
                break
            except AssertionError:
                self("send-keys", "-t", "ck", "C-u")
        self("send-keys", "-t", "ck", "Enter")

    def cockpit_pid(self) -> int:
        import psutil

        shell = psutil.Process(int(self("display-message", "-p", "-t", "ck", "#{pane_pid}").strip()))
        return next(p.pid for p in shell.children() if "cockpit" in " ".join(p.cmdline()))

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


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
    tmux = Tmux(
        env, f"sleep 0.3; {COCKPIT} --sim --profile {profile}; echo EXITED $?; sleep 30"
    )  # tmux sizes first
    try:
        tmux.screen_until("○ no server")
        tmux.type_command("try tp4", prompt=True)
        shown = tmux.screen_until("● tp4 ready")
        assert "GPU0 ▶ tp4" in shown and "GPU7 · idle" in shown
        assert f"serves http://127.0.0.1:{port}" in shown
        tmux("send-keys", "-t", "ck", "Escape")  # the prompt keeps the keys until Escape
        time.sleep(0.3)  # apart, or the terminal reads Escape then q as alt+q
        tmux("send-keys", "-t", "ck", "q")
        tmux.screen_until("Quit cockpit?")
        tmux("send-keys", "-t", "ck", "s")
        tmux.screen_until("EXITED 0")
    finally:
        tmux.kill()
    assert not Registry().live()


def _slow_box(tmp_path, monkeypatch) -> dict[str, str]:
    env = {
        "COCKPIT_SIM_STATE": str(tmp_path / "simbox"),
        "COCKPIT_SIM_TIME_SCALE": "0.05",  # the signal lands while the weights load
        "COCKPIT_JOURNAL": str(tmp_path / "journal.sqlite"),
        "COCKPIT_STATE_DIR": str(tmp_path / "state"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_sigterm_to_the_screen_stops_its_server_and_exits_143(tmp_path, monkeypatch, profile_file):
    import psutil

    profile, _ = profile_file("minimax-m2.5")
    env = _slow_box(tmp_path, monkeypatch)
    tmux = Tmux(env, f"sleep 0.3; {COCKPIT} --sim --profile {profile}; echo EXITED $?; sleep 30")
    try:
        tmux.screen_until("○ no server")
        tmux.type_command("try tp4")
        tmux.screen_until("loading")
        [entry] = Registry().live()
        os.kill(tmux.cockpit_pid(), 15)
        tmux.screen_until("EXITED 143")
    finally:
        tmux.kill()
    assert not Registry().live() and not psutil.pid_exists(entry.pid)


def test_sighup_to_the_screen_leaves_its_server_listed_and_journaled(tmp_path, monkeypatch, profile_file):
    import psutil

    from cockpit.store.journal import Journal

    profile, _ = profile_file("minimax-m2.5")
    env = _slow_box(tmp_path, monkeypatch)
    tmux = Tmux(env, f"sleep 0.3; exec {COCKPIT} --sim --profile {profile}")
    try:
        tmux.screen_until("○ no server")
        tmux.type_command("try tp4")
        tmux.screen_until("loading")
        [entry] = Registry().live()
        cockpit = psutil.Process(int(tmux("display-message", "-p", "-t", "ck", "#{pane_pid}").strip()))
        tmux.kill()  # the terminal goes away: SIGHUP
        cockpit.wait(timeout=20)
    finally:
        tmux.kill()
    assert [e.pid for e in Registry().live()] == [entry.pid]
    with Journal() as journal:
        [row] = journal.experiments()
    assert "SIGHUP" in (row.note or "")
    subprocess.run([str(COCKPIT), "stop", "all"], check=True, capture_output=True)
    assert not Registry().live()
