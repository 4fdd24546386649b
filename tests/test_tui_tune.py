"""`tune` on the screen: the tune view follows a small tune on the simulated box (candidates with
predicted and measured goals, the running and best marks, the stopping bound, the goal-latency
chart), shows the winner's command at the end, and `export md` carries the result; `stop` ends a
tune after its current level, resumable."""

from __future__ import annotations

import asyncio

from tuipilot import fast_sim, make_app, minimax, run, status_text, submit, until  # noqa: F401  (fixtures)

from cockpit.faces.tui.app import CockpitApp
from cockpit.faces.tui.widgets.tune_view import BEST, RUNNING
from cockpit.store.journal import Journal

SMALL_TUNE = "tune itl<50ms in=32 out=8 c=4,16 n=2"
TUNE_TIMEOUT_S = 90.0  # two launches and their levels on a loaded 2-core machine


def table_cells(app: CockpitApp) -> list[dict[str, str]]:
    """Each row's cells by column key (the columns shown depend on the table's width)."""
    table = app.main.tune.table
    keys = [str(column.key.value) for column in table.ordered_columns]
    return [dict(zip(keys, map(str, table.get_row_at(i)))) for i in range(table.row_count)]


def shown(app: CockpitApp, widget_id: str) -> str:
    return str(app.main.tune.query_one(widget_id).content)


def test_a_small_tune_fills_the_tune_view_and_export_md_carries_its_result(minimax, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `export md` writes in the working folder

    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(160, 60)) as pilot:
            await submit(pilot, SMALL_TUNE)
            assert app.main.view == "tune"
            marks: set[str] = set()
            bound_lines: list[str] = []

            def watch() -> bool:
                """Every mark and stopping line the view showed on the way, until the result."""
                marks.update(cells["mark"] for cells in table_cells(app) if cells["mark"])
                status = shown(app, "#tune-status")
                if "best case left" in status:
                    bound_lines.append(status)
                return app.tune_board.result is not None

            await until(pilot, watch, timeout=TUNE_TIMEOUT_S, what="the tune's result")
            board = app.tune_board
            result = board.result
            assert result is not None and not result.interrupted, result
            assert RUNNING in marks  # a candidate was shown running
            assert any("stops when the best so far ≥ the best case left" in line for line in bound_lines)

            # Every candidate with its prediction; the measured ones with their goal and level.
            rows = table_cells(app)
            assert len(rows) == result.fitting == len(result.rows)
            assert all(
                cells["predicted"].replace(",", "").isdigit() for cells in rows
            )  # the goal's unit above
            measured = [cells for cells in rows if cells["measured"] != "-"]
            assert len(measured) == result.launches == 2
            assert all(cells["level"].startswith("C=") for cells in measured)
            assert rows[0]["mark"] == BEST and rows[0]["candidate"] == result.winner  # the best first, marked
            assert all(cells["state"] for cells in rows[2:])  # why the rest were not tried
            assert all(cells["state"] not in ("measured", "running") for cells in rows[2:])

            # The chart holds every measured level, the front marked; the front's line names them.
            assert len(board.points) >= 2 and board.front
            chart = app.main.tune.chart.text
            assert "per-request mean ITL p99 (ms)" in chart and "*" in chart and "Pareto front" in chart
            assert "Pareto front (per-request mean ITL p99)" in shown(app, "#tune-front")

            # The winner, and its command whole, to copy.
            winner = shown(app, "#tune-result")
            assert f"✓ winner {result.winner}" in winner
            assert f"command: {result.command}" in winner and "vllm serve" in result.command
            assert "✓ tune done" in status_text(app)
            assert not app.control.tuning and not app.control.has_server
            # The last server went because it was measured, not as a failure of a "next candidate".
            banner = app.main.log_pane.banner_text
            assert "measured by tune" in banner and "next candidate" not in banner, banner
            # Every level whose requests all met itl<50ms is drawn left of that bound's line.
            assert all(
                p.tpot_p99_ms is not None and p.tpot_p99_ms <= 50 for p in board.points if p.goal >= p.tok_s
            )

            await submit(pilot, "export md")
            await until(pilot, lambda: "✓ wrote" in status_text(app), what="the export")
        [path] = list(tmp_path.glob("cockpit-minimax-m2.5-*.md"))
        text = path.read_text()
        assert "### Tune" in text and f"`{result.spec.describe()}`" in text
        assert f"```sh\n{result.command}\n```" in text
        assert "#### Tried" in text and "#### Not tried" in text
        assert f"2 of {result.fitting} fitting candidates ({result.fitting - 2} saved" in text
        return result

    result = asyncio.run(scenario())

    async def reopened():
        """A later cockpit shows the profile's last tune under `t`, its command to copy."""
        app = make_app(minimax)
        async with app.run_test(size=(160, 60)) as pilot:
            await pilot.press("escape", "t")
            assert app.main.view == "tune" and app.focused is app.main.tune.table
            assert app.tune_board.result is not None and app.tune_board.result.winner == result.winner
            assert f"command: {result.command}" in shown(app, "#tune-result")

    run(reopened())


def test_stop_ends_a_tune_after_its_level_and_tune_resume_finishes_it(minimax):
    async def scenario():
        app = make_app(minimax)
        async with app.run_test(size=(160, 60)) as pilot:
            await submit(pilot, SMALL_TUNE)
            await until(pilot, lambda: app.tune_board.points, timeout=TUNE_TIMEOUT_S, what="a level measured")
            await submit(pilot, "stop")
            await until(
                pilot,
                lambda: app.tune_board.result is not None and not app.control.tuning,
                timeout=TUNE_TIMEOUT_S,
                what="the tune interrupted",
            )
            assert app.tune_board.result is not None and app.tune_board.result.interrupted
            assert "tune --resume" in shown(app, "#tune-result")
            interrupted = app.tune_board.result
            assert (
                f"tune {interrupted.tune}: interrupted after launching 1 of {interrupted.fitting} candidates; "
                "`tune --resume` continues it" in status_text(app)
            )
            await until(pilot, lambda: not app.control.has_server, what="its server stopped")
            with Journal() as journal:
                assert journal.open_tune("minimax-m2.5") is not None  # resumable

            await submit(pilot, "tune --resume")
            await until(
                pilot,
                lambda: app.tune_board.result is not None and not app.tune_board.result.interrupted,
                timeout=TUNE_TIMEOUT_S,
                what="the resumed tune's result",
            )
            result = app.tune_board.result
            assert result.winner is not None and result.launches <= 2
            assert not app.control.tuning
        with Journal() as journal:
            assert journal.open_tune("minimax-m2.5") is None

    run(scenario())
