"""A server that ends after ready, on the screen: stopped from another shell or dead on its own,
it is noticed, reaped, unlisted and journaled, and the header, the log and the GPU panes say so;
a launch that replaces a running server says in the log what it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
from tuipilot import (  # noqa: F401  (fixtures)
    fast_sim,
    launch_ready,
    launched_and_left_running,
    make_app,
    minimax,
    re_attach,
    run,
    status_text,
    submit,
    until,
)

from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal


def _zombies() -> list[int]:
    """This process's children that ended and were never reaped (`<defunct>` in ps)."""
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def _log(app) -> str:
    app.flush_log()
    return "\n".join(app.main.log_pane.log_view.lines)


def test_a_server_killed_from_outside_is_noticed_reaped_and_journaled(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            pid = app.session.launcher.handle.pid
            os.killpg(pid, signal.SIGKILL)  # `kill -9` from another shell, or the OOM killer
            await until(pilot, lambda: app.server.state == "stopped", what="the end noticed")
            assert "■ tp4 killed (SIGKILL)" in app.main.header.plain
            banner = app.main.log_pane.banner_text
            assert "killed (SIGKILL)" in banner and "`try tp4` launches it again" in banner
            assert "killed (SIGKILL)" in status_text(app)
            assert not app.control.has_server and app.session.launcher.handle is None
            assert pid not in _zombies()  # reaped: no <defunct> child of the screen
            panes = app.main.gpus.panes()
            await until(pilot, lambda: not any(p.layout_name for p in panes), what="panes freed")
            await until(pilot, lambda: all(p.sample.memory_used == 0 for p in panes[:4]), what="memory gone")
        [row] = Journal().experiments()
        assert row.outcome == "ready" and row.ended is not None and "killed (SIGKILL)" in row.note
        assert not Registry().live()

    run(scenario())


def test_cockpit_stop_all_from_another_shell_ends_the_ready_state(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            pid = app.session.launcher.handle.pid
            other_shell = subprocess.run(
                [sys.executable, "-m", "cockpit.faces.cli", "stop", "all"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert other_shell.returncode == 0, other_shell.stderr
            await until(pilot, lambda: app.server.state == "stopped", what="the end noticed")
            assert "■ tp4 ended (exit code 0)" in app.main.header.plain
            assert "exited cleanly, as on `cockpit stop`" in app.main.log_pane.banner_text
            assert status_text(app).count("code 0") == 1  # the exit code said once
            assert pid not in _zombies()
            await submit(pilot, "bench")  # the next bench is refused on the spot, not "cannot reach"
            assert "no server is ready" in status_text(app)
        [row] = Journal().experiments()
        assert row.ended is not None and "exited cleanly" in row.note

    run(scenario())


def test_a_bench_whose_server_ends_says_the_server_ended(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            pid = app.session.launcher.handle.pid
            await submit(pilot, "bench c=4 t=60 in=64 out=16")
            await until(pilot, lambda: app.bench_view.tok_s, what="requests in flight")
            os.killpg(pid, signal.SIGTERM)
            await until(pilot, lambda: not app.control.benching, timeout=60, what="bench over")
            await until(pilot, lambda: app.server.state == "stopped", what="the end noticed")
            # The bench's own end reaches the bench view as a message of its own: wait for it too.
            await until(
                pilot,
                lambda: "the server ended during the bench" in app.bench_view.status(),
                what="the bench view told why the bench ended",
            )
            assert "exited cleanly" in app.bench_view.status()  # the simulated engine ends cleanly on SIGTERM

    run(scenario())


def test_a_launch_that_replaces_a_running_server_says_what_it_stopped(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            pid = app.session.launcher.handle.pid
            await submit(pilot, "try tp8 ep")
            await until(
                pilot, lambda: app.server.layout == "tp8 ep" and app.server.state == "ready", what="tp8 ep"
            )
            assert f"■ stopped tp4 (pid {pid}) to launch tp8 ep: stopped with SIGTERM" in _log(app)
            assert "ended" not in app.main.header.plain  # stopped by cockpit: no word from the watch

    run(scenario())


def test_a_re_attached_server_that_ends_is_noticed_by_its_pid(minimax):
    launched_and_left_running(minimax)
    [entry] = Registry().live()

    async def come_back():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await re_attach(pilot, app)
            os.killpg(entry.pgid, signal.SIGKILL)
            await until(pilot, lambda: app.server.state == "stopped", what="the end noticed")
            assert "■ tp4 ended" in app.main.header.plain
            assert "re-attached server" in app.main.log_pane.banner_text
            assert not app.control.has_server

    run(come_back())
    assert not Registry().live()
    [row] = Journal().experiments()
    assert row.ended is not None
