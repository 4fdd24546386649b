"""What the Pilot tests of the screen share: the fixtures' setup, typing, waiting for a state."""

from __future__ import annotations

import asyncio
import time

import pytest
import yaml

from cockpit.faces.tui.app import CockpitApp

GIB = 2**30
SMALL_BENCH = {"concurrency": [1, 4], "input_len": 64, "output_len": 16, "requests": 4}


def fast_sim_env(tmp_path, monkeypatch) -> None:
    """A simulated box and journal of the test's own, loading weights 50 times faster."""
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(autouse=True)
def fast_sim(tmp_path, monkeypatch):
    """Autouse in a module that imports it: its own simulated box, and no engine left behind."""
    fast_sim_env(tmp_path, monkeypatch)
    yield
    from cockpit.faces.headless import stop_servers

    stop_servers("all", out=lambda _: None)  # a failed test must not leave an engine behind


@pytest.fixture
def minimax(profile_file):
    """The MiniMax profile on a free port, with a small benchmark."""
    return small_profile(profile_file)


def small_profile(profile_file, name: str = "minimax-m2.5") -> str:
    """A bundled profile on a free port, with a benchmark small enough for a test."""
    path, _ = profile_file(name)
    data = yaml.safe_load(open(path))
    data["bench"] = SMALL_BENCH
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    return path


def make_app(profile: str) -> CockpitApp:
    return CockpitApp(profile=profile, sim=True, host="testbox", cursor_blink=False, interval=0.25)


def run(coro) -> None:
    asyncio.run(coro)


async def until(pilot, predicate, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await pilot.pause(0.05)


async def command(pilot, text: str) -> None:
    """Type a command as a person would: `:` then the keys, then Enter."""
    await pilot.press("colon", *text, "enter")
    await pilot.pause(0.05)


async def submit(pilot, text: str) -> None:
    """Enter a command without typing each key (Pilot takes ~0.1 s a key)."""
    await pilot.press("colon")
    pilot.app.main.prompt.value = text
    await pilot.press("enter")
    await pilot.pause(0.05)


async def launch_ready(pilot, app: CockpitApp, layout: str = "tp4", typed: bool = False) -> None:
    await (command if typed else submit)(pilot, f"try {layout}")
    await until(pilot, lambda: app.server.state in ("ready", "failed"), what=f"{layout} ready")
    assert app.server.state == "ready", app.main.log_pane.banner_text


async def stop_server(pilot, app: CockpitApp) -> None:
    await submit(pilot, "stop")
    await until(pilot, lambda: app.server.state == "stopped" and not app.control.has_server, what="stopped")


def launched_and_left_running(profile: str, layout: str = "tp4") -> None:
    """A screen launches `layout`, then quits leaving its server running (q, then d): what a
    re-attach test starts from."""

    async def scenario():
        app = make_app(profile)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, layout)
            await leave_running(pilot, app)

    run(scenario())


async def leave_running(pilot, app: CockpitApp) -> None:
    """Quit the screen and leave its server running (q, then d)."""
    await pilot.press("escape", "q", "d")
    await until(pilot, lambda: not app.is_running, what="exit")


async def offered(pilot, app: CockpitApp) -> None:
    """Wait for the start's offer of the servers left running."""
    from cockpit.faces.tui.screens.choice import ChoiceScreen

    await until(pilot, lambda: isinstance(app.screen, ChoiceScreen), timeout=20, what="the offer")


async def re_attach(pilot, app: CockpitApp) -> None:
    """Answer the offer: re-attach, until the server is ready on the screen."""
    await offered(pilot, app)
    await pilot.press("a")
    await until(pilot, lambda: app.server.state == "ready", what="re-attached")


def status_text(app: CockpitApp) -> str:
    return str(app.main.status.content)


def screen_text(app: CockpitApp) -> str:
    """The screen as a person reads it: the compositor's lines, as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
