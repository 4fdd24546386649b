"""The cockpit screen driven with Textual's Pilot, on the simulated box with real engine processes."""

from __future__ import annotations

from tuipilot import (  # noqa: F401  (fixtures)
    command,
    fast_sim,
    launch_ready,
    make_app,
    minimax,
    run,
    screen_text,
    status_text,
    stop_server,
    submit,
    until,
)

from cockpit.faces.tui.history import PromptHistory, history_path
from cockpit.faces.tui.screens.choice import ChoiceScreen
from cockpit.faces.tui.screens.confirm import ConfirmScreen
from cockpit.faces.tui.screens.main import MainScreen
from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal

GIB = 2**30


def test_try_tp4_fills_the_panes_of_gpus_0_to_3_and_reaches_ready(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app, typed=True)
            panes = app.main.gpus.panes()

            def filled() -> bool:
                return all(p.sample and p.sample.memory_used > 50 * GIB for p in panes[:4])

            await until(pilot, filled, what="GPU panes 0-3 over 50 GiB")
            assert all(p.layout_name == "tp4" and not p.idle for p in panes[:4])
            assert all(p.idle and p.sample.memory_used < GIB for p in panes[4:])
            assert "▶ tp4" in str(panes[0].render()) and "· idle" in str(panes[7].render())
            assert "ready" in app.server.label(app.clock())
            assert "READY" in app.main.log_pane.banner_text
            assert app.main.log_pane.log_view.line_count > 10
            assert any(
                line.startswith("» ") for line in app.main.log_pane.log_view.lines
            )  # phase lines marked
            await pilot.press("escape", "s")  # Escape leaves the prompt; the stop key asks first
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await until(pilot, lambda: app.server.state == "stopped", what="stopped")
        [exp] = Journal().experiments()
        assert exp.layout == "tp4" and exp.outcome == "ready" and exp.gpus == (0, 1, 2, 3)
        assert not Registry().live()

    run(scenario())


def test_try_tp8_asks_first_then_shows_the_block_n_diagnosis_and_layouts_that_fit(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await command(pilot, "try tp8")
            assert isinstance(app.screen, ConfirmScreen)
            assert "block_n = 128" in app.screen.body  # the question says why
            await pilot.press("y")
            await until(pilot, lambda: app.server.state == "failed", what="tp8 failed")
            banner = app.main.log_pane.banner_text
            assert "FAILED" in banner and "block_n 128" in banner
            fitting = {str(v.layout) for v in app.session.verdicts if v.verdict != "fails"}
            suggested = [x for x in fitting if f"`{x}`" in banner]
            assert "→ next: try" in banner and suggested, banner
        [exp] = Journal().experiments()
        assert exp.outcome == "failed" and exp.diagnosis_kind == "fp8-block"

    run(scenario())


def test_bench_fills_the_sparkline_and_adds_a_row_to_the_results(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app)
            await submit(pilot, "bench c=1,32 n=8 in=64 out=32")
            assert app.bench_view.running
            await until(
                pilot,
                lambda: not app.control.benching and not app.bench_view.running,
                timeout=40,
                what="bench done",
            )
            assert not app.bench_view.error, app.bench_view.error
            assert app.main.bench.sparkline.data and max(app.main.bench.sparkline.data) > 0
            assert "TTFT p50" in str(app.main.query_one("#bench-latency").content)
            table = app.main.bench.results_table
            assert [str(c.label) for c in table.columns.values()] == ["layout", "C=1", "C=32", "peak"]
            assert table.row_count == 1 and table.get_row_at(0)[0] == "tp4"
            await pilot.pause(0.2)
            shown = screen_text(app)
            for cell in table.get_row_at(
                0
            ):  # each number whole on the screen (was cut to the header's width)
                assert str(cell) in shown, (str(cell), shown)
            await stop_server(pilot, app)
        [exp] = Journal().experiments()
        assert sorted(p.concurrency for p in Journal().points(exp.id)) == [1, 32]

    run(scenario())


def test_sweep_leaves_two_journaled_experiments(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "sweep tp4, tp8 ep")
            await until(pilot, lambda: "sweep done" in status_text(app), timeout=45, what="sweep done")
            assert not app.control.has_server
            table = app.main.bench.results_table
            assert table.row_count == 2
            assert {table.get_row_at(i)[0] for i in range(2)} == {"tp4", "tp8 ep"}
            assert any("★" in str(cell) for i in range(2) for cell in table.get_row_at(i))  # best marked
        journal = Journal()
        experiments = journal.experiments()
        assert sorted(e.layout for e in experiments) == ["tp4", "tp8 ep"]
        for exp in experiments:
            assert exp.outcome == "ready"
            assert sorted(p.concurrency for p in journal.points(exp.id)) == [1, 4]
        assert not Registry().live()

    run(scenario())


def test_a_bad_command_and_a_bad_layout_leave_an_error_line_and_launch_nothing(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await command(pilot, "tyr tp4")
            assert "did you mean 'try'" in status_text(app) and status_text(app).startswith("✗")
            assert app.main.prompt.value == "tyr tp4"  # kept, to be fixed
            await pilot.press("ctrl+u")
            await command(pilot, "try tp4x")
            assert "did you mean 'tp4'" in status_text(app)
            await submit(pilot, "try tp4 ep2")  # parses, but vLLM cannot say it
            assert "tp4 dp2 ep" in status_text(app)
            await submit(pilot, "try tp16")
            assert "needs 16 GPUs and this box has 8" in status_text(app)
            await submit(pilot, "bench")
            assert "no server is ready" in status_text(app)
            await pilot.pause(0.3)
            assert app.server.state == "none" and not app.control.has_server
            assert isinstance(app.screen, MainScreen)
        assert Journal().experiments() == []

    run(scenario())


def test_q_with_a_running_server_asks_first(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app)
            await pilot.press("escape", "q")
            assert isinstance(app.screen, ChoiceScreen)
            assert "tp4" in app.screen.body and "GPUs 0,1,2,3" in app.screen.body
            await pilot.press("c")  # cancel: nothing happens
            assert isinstance(app.screen, MainScreen) and app.server.state == "ready"
            await pilot.press("q")
            await pilot.press("s")  # stop it and quit
            await until(pilot, lambda: not app.is_running, what="exit")
        assert not Registry().live()
        [exp] = Journal().experiments()
        assert exp.ended is not None

    run(scenario())


def test_a_server_left_running_is_offered_for_re_attach_at_start(minimax):
    async def leave_running():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await launch_ready(pilot, app)
            await pilot.press("escape", "q", "d")  # leave it running
            await until(pilot, lambda: not app.is_running, what="exit")

    run(leave_running())
    [entry] = Registry().live()

    async def come_back():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ChoiceScreen), timeout=5, what="the offer")
            assert f"pid {entry.pid}" in app.screen.body
            await pilot.press("a")  # re-attach
            await until(pilot, lambda: app.server.state == "ready", what="re-attached")
            assert app.server.layout == "tp4" and app.server.gpus == (0, 1, 2, 3)
            await stop_server(pilot, app)

    run(come_back())
    assert not Registry().live()


def test_q_without_a_server_quits_at_once(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("escape", "q")  # the prompt has the keys at start: Escape, then q
            await until(pilot, lambda: not app.is_running, timeout=5, what="exit")

    run(scenario())


def test_tab_completes_and_history_is_kept_across_runs(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("colon", "p", "l", "tab")
            assert app.main.prompt.value == "plan "
            await pilot.press("t", "p", "8", "space", "e", "tab")
            assert app.main.prompt.value.startswith("plan tp8 ep")
            await pilot.press("ctrl+u", *"try tp", "tab")
            assert "Tab:" in status_text(app) and "tp4" in status_text(app)  # many: listed under the bar
            await pilot.press("ctrl+u", *"plan tp8", "enter")
            assert app.main.view == "layouts" and "tp8" in status_text(app)
        assert history_path().read_text().splitlines()[-1] == "plan tp8"

        again = make_app(minimax)
        async with again.run_test(size=(80, 24)) as pilot:
            await pilot.press("colon", "up")
            assert again.main.prompt.value == "plan tp8"
            await pilot.press("down")
            assert again.main.prompt.value == ""

    run(scenario())


def test_export_writes_the_results_and_use_opens_another_profile(minimax, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "export csv")
            assert f"✓ wrote {tmp_path.resolve()}/cockpit-" in status_text(app)  # the full path
            await submit(pilot, "export pdf")
            assert "md or csv" in status_text(app)
            await submit(pilot, "use no-such-profile")
            assert "no profile named 'no-such-profile'" in status_text(app)
            await submit(pilot, "use kimi-k2.6")
            await until(
                pilot, lambda: app.session.profile.name == "kimi-k2.6", timeout=10, what="kimi opened"
            )
            assert app.session.setup.engine.name == "sglang" and "tp8 ep8" in app.main.picker.verdicts

    run(scenario())
    [written] = list(tmp_path.glob("cockpit-*.csv"))
    assert written.read_text().startswith("layout,engine,experiment")


def test_history_keeps_the_draft():
    history = PromptHistory(path=None)
    history.entries = ["try tp4", "bench"]
    history._cursor = 2
    assert history.previous("pl") == "bench"
    assert history.previous("bench") == "try tp4"
    assert history.previous("try tp4") is None
    assert history.next() == "bench"
    assert history.next() == "pl"


def test_knobs_complete_from_the_engine_table_and_launch_in_their_own_picker_row(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("colon", *"try tp4 --max-num-se", "tab")
            assert app.main.prompt.value == "try tp4 --max-num-seqs"  # the one flag of vLLM's table
            assert "--max-num-seqs" in app.session.flag_names
            assert "--tensor-parallel-size" not in app.session.flag_names  # the layout says it
            await pilot.press("ctrl+u")
            await submit(pilot, "try tp4 --max-num-sqs 64")  # a typo costs a second, not a load
            assert "did you mean --max-num-seqs?" in status_text(app)
            assert app.server.state == "none" and not Journal().experiments()
            await launch_ready(pilot, app, "tp4 --max-num-seqs 64")
            assert "tp4 --max-num-seqs 64" in app.main.picker.verdicts
            await submit(pilot, "plan tp4 --max-num-seqs 64")
            shown = app.main.picker.verdicts["tp4 --max-num-seqs 64"]
            assert shown.argv[-2:] == ("--max-num-seqs", "64")
            assert "--trust-remote-code --max-num-seqs 64" in screen_text(app)  # the argv in the detail
            await stop_server(pilot, app)
        [exp] = Journal().experiments()
        assert exp.layout == "tp4 --max-num-seqs 64" and exp.argv[-2:] == ("--max-num-seqs", "64")

    run(scenario())


def test_the_engine_line_fills_during_a_bench_and_clears_when_the_server_stops(minimax):
    """The engine's own /metrics, polled while the server is ready: running requests climb to the
    level's concurrency with the KV cache in use; the journal's points carry the same figures."""

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            line = app.main.engine_line
            assert not line.display  # no server: no line
            await launch_ready(pilot, app)
            await until(pilot, lambda: app.engine_view.last is not None, what="the engine's figures")
            assert line.display and app.engine_view.last.running == 0
            await submit(pilot, "bench c=8 t=3 in=64 out=64")
            running: list[float] = []

            def busy() -> bool:
                last = app.engine_view.last
                if last is not None and last.running:
                    running.append(last.running)
                return bool(running) and max(running) == 8

            await until(pilot, busy, timeout=40, what="8 requests running on the engine line")
            kv = app.engine_view.last.kv_usage
            assert kv is not None and kv > 0
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert "engine vLLM" in shown and "wait " in shown and "preempt 0" in shown, shown
            assert "KV " in str(line.render())
            await until(pilot, lambda: not app.control.benching, timeout=40, what="bench done")
            await stop_server(pilot, app)
            assert not line.display and app.engine_view.last is None
        [exp] = Journal().experiments()
        [point] = Journal().points(exp.id)
        engine = point.extra["engine"]
        assert engine["running_peak"] == 8 and engine["kv_usage_avg"] > 0, engine
        assert {"running_avg", "waiting_avg", "waiting_peak", "kv_usage_peak", "preemptions"} <= set(engine)

    run(scenario())


def detail_text(app) -> str:
    return str(app.main.query_one("#layout-detail").content)


def test_the_picker_sets_what_a_launch_measured_beside_the_prediction(minimax):
    import re

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            app.main.picker.select("tp4")
            assert "predicted tok/s (default, analytic model): C=1 " in detail_text(app)
            assert "measured" not in detail_text(app)  # nothing launched on this box yet
            await launch_ready(pilot, app)
            await submit(pilot, "bench")  # the profile's levels and lengths, as predicted
            await until(
                pilot,
                lambda: not app.control.benching and not app.bench_view.running,
                timeout=40,
                what="bench done",
            )
            app.main.picker.select("tp4")
            text = detail_text(app)
            [exp] = Journal().experiments()
            assert re.search(rf"measured #{exp.id}: weights [\d.]+ GiB \([+−]\d+%\) · KV ", text), text
            assert "peak " in text and "load " in text
            assert re.search(rf"measured tok/s #{exp.id}: C=1 [\d,]+ \([+−]\d+%\) · C=4 ", text), text
            await stop_server(pilot, app)

    run(scenario())


def test_the_picker_marks_calibrated_predictions_and_reads_the_journal_once_per_refresh(minimax):
    import re
    from dataclasses import replace

    from cockpit.core.planner import Learned
    from cockpit.faces.tui.session import Session
    from cockpit.faces.tui.widgets.layout_picker import describe
    from cockpit.store.journal import BenchPoint

    session = Session.open(minimax, sim=True)
    try:
        [tp4] = [v for v in session.verdicts if str(v.layout) == "tp4"]
        reads = []
        experiments = session.journal.experiments
        session.journal.experiments = lambda *a, **k: reads.append(1) or experiments(*a, **k)
        assert session.against(tp4).basis == "default" and session.against(tp4).last is None
        exp = session.journal.start_experiment(
            profile="minimax-m2.5",
            model=session.setup.model_path,
            engine="vllm",
            layout="tp4",
            argv=[],
            gpu_type=session.setup.hardware.gpu.key,
            simulated=True,  # a simulated session reads its simulated box's launches (reports.measured.Box)
        )
        session.journal.update_experiment(exp, facts={"weights_gib": 53.1, "kv_tokens": 212_992})
        session.journal.add_point(exp, BenchPoint(1, 90.0, input_len=64, output_len=16))
        session.journal.add_point(exp, BenchPoint(4, 300.0, input_len=512, output_len=16))
        for _ in range(5):  # keypresses: the answer kept
            assert session.against(tp4).last is None
        assert len(reads) == 1
        session.comparison()  # what the screen asks when an experiment ends or a level is measured
        read = len(reads)
        text = str(describe(tp4, "", against=session.against(tp4)))
        assert session.against(tp4).last is not None and len(reads) == read + 1
        assert re.search(rf"measured #{exp}: weights 53.1 GiB \([+−]\d+%\) · KV 212,992 tokens", text)
        assert re.search(r"C=1 90 \([+−]\d+%\) · C=4 300 \(in=512 out=16\)", text)  # other lengths: no %

        session.setup = replace(session.setup, learned=Learned(runs=3))  # the box taught it
        session.learned_changed()
        [tp4] = [v for v in session.verdicts if str(v.layout) == "tp4"]
        text = str(describe(tp4, "", against=session.against(tp4)))
        assert "predicted tok/s (calibrated from 3 runs, analytic model): C=1 " in text
    finally:
        session.close()


TAUGHT_RUNS = 5


def test_a_refit_on_the_launchers_thread_reloads_the_picker_and_says_its_problems_once(minimax, monkeypatch):
    """The after-measure hook runs on a job thread after `bench` (and after Ready): what it taught
    reaches the picker without another refresh, rows typed with knobs planned again with it; a
    fit that failed is one line on the status bar, said once."""
    import threading

    import pytest

    import cockpit.lab.lab
    from cockpit.core.errors import CockpitError
    from cockpit.core.layout import parse_layout
    from cockpit.core.planner import Learned, plan_layout

    taught = Learned(
        runs=TAUGHT_RUNS,
        calibration={"eta_bw": 0.42, "t_layer_us": 96.0},
        reserve_offset_gib=6.0,
        weights_factor=1.04,
    )
    fits: list[Learned | Exception] = [taught]

    def relearn(journal, setup, simulated, store):
        if isinstance(fits[-1], Exception):
            raise fits[-1]
        return fits[-1]

    monkeypatch.setattr(cockpit.lab.lab, "relearn", relearn)

    def on_a_job_thread(work) -> None:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            session = app.session
            typed = parse_layout("tp4 --max-num-seqs 64")
            before = session.verdict(typed)
            app.main.picker.add(before)
            assert "predicted tok/s (default, analytic model)" in detail_text(app)
            on_a_job_thread(lambda: session.learn(1))
            await until(
                pilot,
                lambda: f"calibrated from {TAUGHT_RUNS} runs" in detail_text(app),
                what="the picker reloaded",
            )
            assert session.planned_with == taught and session.planned.setup.learned == taught
            now = app.main.picker.verdicts[str(typed)]
            expected = plan_layout(session.setup, typed).memory
            assert now.memory.kv_budget_gib == pytest.approx(expected.kv_budget_gib)
            assert now.memory.kv_budget_gib < before.memory.kv_budget_gib - 1
            assert now.predicted_tok_s != before.predicted_tok_s
            fits.append(CockpitError("the journal cannot be read"))
            on_a_job_thread(lambda: session.learn(2))
            said = "⚠ calibration not updated after experiment 2: the journal cannot be read"
            await until(pilot, lambda: status_text(app) == said, what="the problem said")
            app.main.say("")
            on_a_job_thread(lambda: session.learn(2))  # the same problem: said already
            await pilot.pause(0.3)
            assert status_text(app) == ""

    run(scenario())


def test_the_engine_scraper_closes_with_its_line_and_one_that_fails_to_build_never_sticks(
    minimax, monkeypatch
):
    import cockpit.faces.tui.app as app_module
    from cockpit.faces.tui.state import ServerView

    made: list = []
    broken: list = []

    class Scraper:
        def __init__(self, url: str, timeout: float) -> None:
            self.server_url, self.closed = url, False
            made.append(self)

        def scrape(self):
            return None

        def close(self) -> None:
            self.closed = True

    def cannot_build(url: str, timeout: float):
        broken.append(url)
        raise ValueError("a URL its client refuses")

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            monkeypatch.setattr(app_module, "EngineScraper", Scraper)
            app.server = ServerView(layout="tp4", state="ready", url="http://127.0.0.1:9")
            await until(pilot, lambda: made and not app._engine_busy, what="a scrape")
            app.server = ServerView()  # the server stopped: the line clears, the client closes
            await until(pilot, lambda: made[0].closed, what="the scraper closed")
            assert app._engine_scraper is None
            monkeypatch.setattr(app_module, "EngineScraper", cannot_build)
            app.server = ServerView(layout="tp4", state="ready", url="http://127.0.0.1:9")
            await until(pilot, lambda: broken and not app._engine_busy, what="a failed build")
            monkeypatch.setattr(app_module, "EngineScraper", Scraper)
            await until(pilot, lambda: len(made) == 2, what="the next poll scraping again")
        assert made[1].closed  # quitting closes the last one

    run(scenario())


def test_export_predicted_writes_the_predictions_beside(minimax, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "export csv predicted")
            assert f"✓ wrote {tmp_path.resolve()}/cockpit-" in status_text(app)

    run(scenario())
    [written] = list(tmp_path.glob("cockpit-*.csv"))
    assert "predicted_tok_s" in written.read_text().splitlines()[0]


def test_a_read_of_the_measurements_that_overlaps_a_forget_is_not_kept(minimax, monkeypatch):
    """The screen reads what was measured while a job thread's refit says "read it again": the
    answer read before that word is used once, never kept as new. And a plan is handed over whole."""
    from dataclasses import replace

    import cockpit.faces.tui.session as session_module
    from cockpit.core.planner import Learned
    from cockpit.faces.tui.session import Session

    session = Session.open(minimax, sim=True)
    try:
        reads: list[int] = []

        def last_measured(journal, box):
            reads.append(1)
            if len(reads) == 1:
                session.forget_measured()  # a refit on another thread, while this read ran
            return {}

        monkeypatch.setattr(session_module, "last_measured", last_measured)
        session.last_measured()
        session.last_measured()  # read again: the first answer predates the forget
        session.last_measured()
        assert len(reads) == 2
        planned = session.planned
        session.setup = replace(session.setup, learned=Learned(runs=2))
        session.learned_changed()
        assert session.planned is not planned and planned.setup.learned == Learned()  # the old one intact
        assert session.planned_with == Learned(runs=2) and session.verdicts is session.planned.verdicts
    finally:
        session.close()
