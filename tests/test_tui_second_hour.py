"""The second hour on the screen: a paste over a question, a re-attached server on the other
engine, help that says what each key does, panes that follow their state."""

from __future__ import annotations

import pytest
from textual import events
from tuipilot import (  # noqa: F401  (fixtures)
    fast_sim,
    launch_ready,
    leave_running,
    make_app,
    minimax,
    offered,
    re_attach,
    run,
    status_text,
    submit,
    until,
)

from cockpit.core.layout import parse_layout
from cockpit.faces.tui.screens.confirm import ConfirmScreen
from cockpit.faces.tui.screens.main import MainScreen
from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal


def burst(app, text: str) -> None:
    """Keys as a paste without bracketed-paste mode sends them (tmux send-keys): all queued
    before the first is handled."""
    for character in text:
        key = "space" if character == " " else character
        app.post_message(events.Key(key, character))


def test_a_burst_of_keys_over_a_question_goes_to_the_prompt_whole(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")  # the planner says it fails: a question
            assert isinstance(app.screen, ConfirmScreen)
            burst(app, "try tp8 ep")  # `y` and `n` answer the question alone, not inside a paste
            await until(pilot, lambda: app.main.prompt.value == "try tp8 ep", timeout=20, what="the paste")
            assert isinstance(app.screen, MainScreen) and app.is_running
            assert app.focused is app.main.prompt
            await until(pilot, lambda: "cancelled" in status_text(app), timeout=20, what="said cancelled")
        assert Journal().experiments() == []  # the question was not answered yes

    run(scenario())


def test_a_bracketed_paste_over_a_question_goes_to_the_prompt(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")
            assert isinstance(app.screen, ConfirmScreen)
            app.screen.post_message(events.Paste("tp4 ep2"))
            await until(pilot, lambda: app.main.prompt.value == "tp4 ep2", timeout=20, what="the paste")
            assert isinstance(app.screen, MainScreen) and app.focused is app.main.prompt
        assert Journal().experiments() == []

    run(scenario())


def test_a_pasted_command_with_its_enter_runs_once_the_question_is_gone(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "try tp8")
            assert isinstance(app.screen, ConfirmScreen)
            burst(app, "plan tp4")
            app.post_message(events.Key("enter", "\r"))
            await until(pilot, lambda: "tp4" in status_text(app) and app.main.prompt.value == "", timeout=20)
            assert isinstance(app.screen, MainScreen) and app.is_running
        assert Journal().experiments() == []

    run(scenario())


def test_a_server_left_on_sglang_comes_back_on_sglang(minimax, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `export md` writes here

    async def launch_on_sglang_and_leave():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, f"use {minimax} on sglang")
            await until(
                pilot, lambda: app.session.setup.engine.name == "sglang", timeout=10, what="on sglang"
            )
            await launch_ready(pilot, app, "tp4")
            await leave_running(pilot, app)

    run(launch_on_sglang_and_leave())
    [entry] = Registry().live()

    async def come_back():
        app = make_app(minimax)  # the same profile, which runs on vLLM by itself
        async with app.run_test(size=(120, 40)) as pilot:
            await offered(pilot, app)
            body = app.screen.body
            assert "of profile minimax-m2.5 on sglang" in body  # the question names both
            assert all(len(line) <= 76 for line in body.splitlines())  # the log path broken at a /
            await pilot.press("a")
            await until(pilot, lambda: app.server.state == "ready", what="re-attached")
            assert app.session.setup.engine.name == "sglang"
            assert "SGLang" in app.main.header.plain and "vLLM" not in app.main.header.plain
            assert "sglang" in app.session.argv_text(app.session.verdict(parse_layout("tp4")))
            path = app.session.export("md")
            assert "vLLM" not in path.read_text().splitlines()[0]
            await submit(pilot, "stop")
            await until(pilot, lambda: app.server.state == "stopped", what="stopped")
        assert entry.pid not in [e.pid for e in Registry().live()]

    run(come_back())


@pytest.mark.parametrize("width", [68, 96, 150])
def test_help_gives_every_command_and_key_its_words_at_any_width(width):
    from rich.console import Console

    from cockpit.faces.prompt import COMMANDS
    from cockpit.faces.tui.app import KEY_WORDS, KEYS
    from cockpit.faces.tui.screens.help import MARKS, TUNE_MARKS, help_table

    keys = [(b.key_display or b.key, KEY_WORDS[b.id or ""]) for b in KEYS if b.show]
    console = Console(width=width, record=True, color_system=None)
    console.print(help_table(keys))
    text = " ".join(console.export_text().split())  # the words, however they wrapped
    for spec in COMMANDS:
        assert " ".join(spec.usage.split()) in text  # the tune usage whole
        assert " ".join(spec.summary.split()) in text
    for key, words in [*keys, *MARKS, *TUNE_MARKS]:
        assert f"{key} {words}" in text  # each key beside its words


def test_the_log_keeps_its_end_in_view_when_its_pane_shrinks(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 48)) as pilot:
            await launch_ready(pilot, app, "tp4")
            await pilot.press("escape", "o")
            log = app.main.log_pane.log_view
            await until(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, timeout=20)
            tall = log.size.height
            await pilot.press("b")  # the bench pane takes rows from the log
            await until(pilot, lambda: log.size.height < tall, timeout=20, what="the pane shrunk")
            await until(pilot, lambda: log.scroll_y == log.max_scroll_y, timeout=20, what="the log's tail")
            await pilot.resize_terminal(120, 30)  # and so does a smaller terminal
            await until(pilot, lambda: log.size.height < tall - 10, timeout=20, what="the pane shrunk")
            await until(pilot, lambda: log.scroll_y == log.max_scroll_y, timeout=20, what="the log's tail")

    run(scenario())


def test_the_status_line_says_the_bench_ended_and_a_re_attach_shows_the_results(minimax):
    async def bench_and_leave():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            assert "next: `bench c=1,4`" in app.main.log_pane.banner_text  # the profile's levels
            await submit(pilot, "bench c=1 in=16 out=4 n=2")
            # said while it runs, unless this short bench already ended (then it must say so below)
            assert "in a child" in status_text(app) or "bench tp4 done" in status_text(app)
            await until(pilot, lambda: not app.bench_view.running and not app.control.benching, timeout=60)
            await until(pilot, lambda: "bench tp4 done" in status_text(app), timeout=20, what="said done")
            await leave_running(pilot, app)

    run(bench_and_leave())

    async def come_back():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await re_attach(pilot, app)
            assert app.focused is app.main.prompt  # typing `results` is a command, not `r` then `s`
            await pilot.press("escape", "b")
            bench = app.main.bench
            await until(pilot, lambda: bench.results_table.row_count == 1, timeout=20, what="the results")
            status = str(bench.query_one("#bench-status").content)
            assert "no benchmark yet" not in status and "1 result row(s) below" in status
            label = str(bench.query_one("#results-label").content)  # which requests the table compares
            assert label == "results at in=16 out=4 · simulated box"
            chart = bench.query_one("#bench-chart")
            await until(pilot, lambda: "concurrency" in str(chart.content), timeout=20, what="the chart")
            await submit(pilot, "stop")
            await until(pilot, lambda: app.server.state == "stopped", what="stopped")

    run(come_back())


def test_use_says_its_notes_whole_and_leaves_the_last_profiles_panes(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, "tp4")
            await submit(pilot, "stop")
            await until(pilot, lambda: app.server.state == "stopped" and not app.control.has_server)
            await pilot.press("escape", "t")
            assert app.main.view == "tune"
            await submit(pilot, f"use {minimax} on sglang")
            await until(
                pilot, lambda: app.session.setup.engine.name == "sglang", timeout=10, what="on sglang"
            )
            notes = app.session.notes
            assert notes  # vLLM's arguments translated for SGLang
            status = status_text(app)
            assert f"{len(notes)} note(s) in the log" in status and len(status) < 120
            log_view = app.main.log_pane.log_view
            width = max(40, log_view.content_size.width)
            assert all(len(line) <= width for line in log_view.lines if line.startswith("   "))  # wrapped
            log = " ".join(" ".join(line.split()) for line in log_view.lines)
            assert all(" ".join(note.split()) in log for note in notes)
            assert "tp4" not in log  # the last server's lines are in its own log file
            assert app.main.view == "layouts"  # not the last profile's tune view

    run(scenario())


def test_the_picker_says_by_how_much_a_layout_does_not_fit(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: bool(app.session.verdicts), timeout=20)
            text = app._describe(app.session.verdict(parse_layout("tp2 ep"))).plain
            assert "does not fit by" in text and "KV cache -" not in text

    run(scenario())


def test_a_sweep_the_engine_cannot_run_says_so_as_cockpit_sweep_does(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "sweep tp4 --max-num-seqz 8, tp8 ep")
            await until(pilot, lambda: "nothing was launched" in status_text(app), timeout=20)
            assert "sweep: tp4 --max-num-seqz 8: " in status_text(app)  # cockpit sweep's words
            assert not app.control.sweeping
        assert Journal().experiments() == []

    run(scenario())
