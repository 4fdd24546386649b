"""A newcomer's first hour on the screen: the prompt has the keys, dialogs never eat a command,
failures stay journaled, a re-attach shows the server's own profile, the log follows the newest
launch, `sweep` takes `bench`'s words, and the screen says when the box is simulated."""

from __future__ import annotations

import pytest
from tuipilot import (  # noqa: F401  (fixtures)
    fast_sim,
    launch_ready,
    launched_and_left_running,
    make_app,
    minimax,
    offered,
    run,
    small_profile,
    status_text,
    submit,
    until,
)

from cockpit.bench.result import LevelSummary
from cockpit.core.layout import parse_layout
from cockpit.faces.tui.screens.confirm import ConfirmScreen
from cockpit.faces.tui.screens.main import MainScreen
from cockpit.faces.tui.state import BenchView
from cockpit.runner.events import BenchLevel
from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal


def test_typing_at_start_goes_to_the_prompt_and_escape_gives_the_pane_keys_back(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            assert app.focused is app.main.prompt
            # `s` (stop), `l`, `o`, `b`, `r`, `q` are pane keys: none may fire while typing.
            await pilot.press(*"use kimi-k2.6", "enter")
            await until(
                pilot, lambda: app.session.profile.name == "kimi-k2.6", timeout=10, what="kimi opened"
            )
            assert isinstance(app.screen, MainScreen) and app.is_running
            assert app.focused is app.main.prompt  # still typing after a command
            await pilot.press("escape")
            assert app.focused is not app.main.prompt
            await pilot.press("o")  # now the pane keys work
            assert app.main.view == "log"
            await pilot.press("colon")
            assert app.focused is app.main.prompt and app.main.prompt.value == ""

    run(scenario())


def test_a_dialog_does_not_eat_the_next_command(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")  # the planner says it fails: a question
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press(*"tp4", "enter")  # the person did not read it and typed on
            await until(pilot, lambda: app.server.state in ("ready", "failed"), what="tp4 launched")
            assert app.server.layout == "tp4" and app.server.state == "ready"
            assert isinstance(app.screen, MainScreen)
        assert [e.layout for e in Journal().experiments()] == ["tp4"]  # tp8 was never launched

    run(scenario())


def test_typing_over_a_dialog_cancels_it_visibly(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("b")  # the first key of `bench`
            await until(pilot, lambda: isinstance(app.screen, MainScreen), what="the dialog gone")
            assert "Launch tp8 anyway?" in status_text(app) and "cancelled" in status_text(app)
            assert app.focused is app.main.prompt and app.main.prompt.value == "b"
        assert Journal().experiments() == []

    run(scenario())


def test_a_forced_launch_that_fails_stays_failed_with_its_diagnosis(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")
            await pilot.press("y")  # launch anyway
            await until(pilot, lambda: app.server.state == "failed", what="tp8 failed")
            assert not app.control.has_server  # a failed server is gone, not "running"
            await launch_ready(pilot, app, "tp4")  # the next launch must not rewrite tp8's outcome
            table = app.main.bench.results_table
            assert "tp8" in [table.get_row_at(i)[0] for i in range(table.row_count)]
        tp8 = next(e for e in Journal().experiments() if e.layout == "tp8")
        assert tp8.outcome == "failed" and tp8.diagnosis_kind == "fp8-block"
        assert "block_n 128" in tp8.diagnosis and "Engine core" not in tp8.diagnosis

    run(scenario())


def test_re_attach_opens_the_servers_own_profile_and_its_load_time(minimax, profile_file):
    launched_and_left_running(minimax)
    [entry] = Registry().live()
    [exp] = Journal().experiments()
    kimi = small_profile(profile_file, "kimi-k2.6")

    async def come_back_under_another_profile():
        app = make_app(kimi)
        async with app.run_test(size=(120, 40)) as pilot:
            await offered(pilot, app)
            assert (
                f"pid {entry.pid}" in app.screen.body and "ready" in app.screen.body
            )  # says ready, not loading
            await pilot.press("a")
            await until(pilot, lambda: app.server.state == "ready", what="re-attached")
            assert app.session.profile.name == "minimax-m2.5"  # the server's profile, not the one opened
            assert app.session.setup.engine.name == "vllm"
            header = app.main.header.plain
            assert "minimax-m2.5" in header and "MiniMax-M2.5" in header
            assert app.server.load_seconds == pytest.approx(exp.load_seconds)  # the server's load, journaled
            assert app.server.ready_at == pytest.approx(entry.started + exp.load_seconds, abs=1.0)
            assert app.main.bench.results_table.row_count >= 1
            await submit(pilot, "use kimi-k2.6")
            assert "minimax-m2.5 is running" in status_text(app)  # the guard names the right profile
            await submit(pilot, "stop")
            await until(pilot, lambda: app.server.state == "stopped", what="stopped")

    run(come_back_under_another_profile())
    assert not Registry().live()


def test_a_new_launch_brings_its_lines_into_view(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            log = app.main.log_pane.log_view
            # the READY banner did not push the last lines out
            await until(pilot, lambda: log.scroll_y == log.max_scroll_y, timeout=5, what="the log's tail")

            # the person scrolls up to read (again, if the banner's own scroll to the tail was
            # still queued on a loaded machine)
            def scrolled_up() -> bool:
                if log.scroll_y != 0:
                    log.scroll_home(animate=False, immediate=True)
                return log.scroll_y == 0 and log.max_scroll_y > 0

            await until(pilot, scrolled_up, timeout=5, what="the log scrolled to its top")
            await submit(pilot, "try tp8 ep")
            await until(
                pilot,
                lambda: app.server.layout == "tp8 ep" and app.server.state == "ready",
                what="tp8 ep ready",
            )
            # following the tail again (a loaded machine paints the last lines a frame or two later)
            await until(pilot, lambda: log.scroll_y == log.max_scroll_y, timeout=5, what="the log's tail")
            tail = log.lines[int(log.scroll_y) :]
            assert any(line.startswith("── tp8 ep ──") for line in log.lines)
            assert any("serving" in line.lower() or "Application startup complete" in line for line in tail)

    run(scenario())


def test_sweep_takes_the_bench_grammar(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "sweep tp4, tp8 ep c=1,2 out=8 n=2")
            await until(pilot, lambda: "sweep done" in status_text(app), timeout=45, what="sweep done")
        journal = Journal()
        for exp in journal.experiments():
            points = journal.points(exp.id)
            assert [p.concurrency for p in points] == [1, 2], exp.layout
            assert {p.output_len for p in points} == {8}

    run(scenario())


def test_a_bad_sweep_word_is_echoed_as_typed(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(80, 24)) as pilot:
            await submit(pilot, "sweep tp4 C=0,8")
            assert "'C=0,8'" in status_text(app)
            await submit(pilot, "sweep tp4 Out=x")
            assert "'Out=x'" in status_text(app)
        assert Journal().experiments() == []

    run(scenario())


def test_the_screen_says_the_box_is_simulated_and_hints_a_layout_the_engine_can_say():
    async def scenario():
        app = make_app("demo")  # vLLM: it cannot say `tp4 ep2`
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: "simulated" in app.main.header.plain, what="the header")
            assert "simulated box" in status_text(app)
            hint = app.main.prompt.placeholder
            assert "tp4 ep2" not in hint
            suggested = hint.split("try ", 1)[1].split(" ·")[0]
            verdict = app.session.verdict(parse_layout(suggested))
            assert verdict.placement is not None and verdict.verdict != "fails", suggested

    run(scenario())


def test_plan_alone_answers_and_stop_replaces_stopping(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "plan")
            assert "layouts on vLLM" in status_text(app) and "fit" in status_text(app)
            await launch_ready(pilot, app, "tp4")
            await submit(pilot, "stop")
            await until(pilot, lambda: app.server.state == "stopped", what="stopped")
            await until(
                pilot,
                lambda: "stopping" not in status_text(app) and "stopped" in status_text(app),
                timeout=5,
                what="stopped said",
            )

    run(scenario())


def test_between_levels_the_bench_status_names_the_next_level():
    view = BenchView()
    view.start(7, "tp4", (1, 8))
    view.apply(BenchLevel(7, 1, LevelSummary(concurrency=1, output_tok_s=90.0), "C=1"))
    assert "C=1" not in view.status() and "C=8 starting" in view.status()
    assert "tok/s now" not in view.status()


def test_a_thread_message_that_lands_after_the_screen_is_gone_is_dropped(minimax):
    """A thread's message (a refit's Relearned, a sweep's end, a runner's event) can be handled
    after the app began to shut down, when the screen is gone: it is dropped, not a crash at exit.
    While the app runs, a widget that is missing is a bug and still raises."""
    from textual.css.query import NoMatches

    from cockpit.faces.tui.control import Relearned
    from cockpit.faces.tui.messages import JobEventPosted
    from cockpit.runner.jobs import SweepDone

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            table = app.main.bench.results_table
            await table.remove()
            with pytest.raises(NoMatches):
                app.on_job_event_posted(JobEventPosted(Relearned()))
        assert not app.is_running
        app.on_job_event_posted(JobEventPosted(Relearned()))
        app.on_job_event_posted(JobEventPosted(SweepDone(done=1, total=1)))

    run(scenario())
