"""The tune's words where a person reads them: a level placed on the chart by what its bound
checks, how a tune ended in one sentence, why a candidate was not tried in a word (the line under
the table says it whole), and a table whose state column stays in view at 160, 120 and 80 columns."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from test_tune_report import BASE
from tuipilot import fast_sim, screen_text, small_profile, until  # noqa: F401  (fast_sim: autouse)

from cockpit.bench.metrics import Summary
from cockpit.bench.result import LevelSummary
from cockpit.core.tuning.candidates import plan_candidates
from cockpit.core.tuning.events import Margin, Row
from cockpit.core.tuning.pareto import latency
from cockpit.core.tuning.search import OUTRANKED, Tried, optimistic_bound, why_not_tried
from cockpit.core.tuning.spec import parse_tune
from cockpit.faces.tui.app import CockpitApp
from cockpit.faces.tui.widgets.tune_view import render_goal_chart
from cockpit.lab.tune_loop import level_point
from cockpit.store.journal import Journal


def bench_level(tok_s: float, ttft: float, token_gap_p99: float, request_itl_p99: float) -> LevelSummary:
    """A bench level's result as the tuner reads it, every request within the bounds."""
    return LevelSummary(
        output_tok_s=tok_s,
        goodput_tok_s=tok_s,
        ttft_ms=Summary(p99=ttft),
        itl_ms=Summary(p99=token_gap_p99),
        tpot_ms=Summary(p99=request_itl_p99),
    )


def test_a_level_sits_left_of_the_bound_its_requests_all_met():
    """itl<50ms bounds each request's mean ITL; a level whose requests all met it is drawn left of
    the bound's line, though a few of its token gaps waited 68 ms behind other prompts."""
    winner = level_point("tp8 ep", 16, bench_level(433.0, 95.0, 67.8, 34.0))
    lighter = level_point("tp8 ep", 4, bench_level(178.0, 61.0, 32.4, 19.0))
    assert winner.goal == winner.tok_s and latency(winner, "itl") == 34.0
    chart = render_goal_chart([winner, lighter], "itl", False, 60, 14, bound_ms=50)
    plot = [line for line in chart.splitlines() if "┤" in line or "│" in line]
    marked = [line for line in plot if "*" in line and "|" in line]
    assert marked, chart
    for line in marked:
        assert line.rindex("*") < line.index("|"), chart
    assert chart.splitlines()[-1].endswith("| itl<50ms")


def test_how_a_tune_ended_is_one_sentence():
    interrupted = replace(BASE, interrupted=True, reason="interrupted", launches=1)
    assert str(interrupted) == (
        "tune 3: interrupted after launching 1 of 15 candidates; `tune --resume` continues it"
    )
    busy = "the box is busy: port 8000 is already in use by pid 7 (python3); free it, then `tune --resume`"
    assert str(replace(interrupted, reason=busy, launches=0)) == (
        f"tune 3: interrupted after launching 0 of 15 candidates: {busy}"
    )
    assert str(replace(BASE, winner=None)) == "tune 3: done, no winner: the launch budget is spent"
    assert BASE.ending == "tune 3: done, tp8 ep wins after launching 3 of 15 candidates"


def test_a_candidate_left_for_the_best_says_its_best_case_not_its_prediction_plus_the_margin(
    minimax_vllm,
):
    """The best case loosens the latency bounds as well as the speed: a candidate whose predicted
    lowest level alone keeps within itl<30ms may reach far more than its prediction + 5%."""
    candidates, _ = plan_candidates(minimax_vllm, parse_tune("itl<30ms in=32 out=8 c=4,16,64"), 8)
    loosened = [c for c in candidates if optimistic_bound(c, 0.05) > 1.5 * c.prediction.goal > 0]
    assert loosened, [(c.name, c.prediction.goal, optimistic_bound(c, 0.05)) for c in candidates]
    candidate = loosened[0]
    bound = optimistic_bound(candidate, 0.05)
    best = Tried("tp8 ep", 1, bound + 10, 16.0, bound)
    state, note = why_not_tried(
        candidate, best, Margin(0.05, held_out=True), [], "the launch budget is spent"
    )
    assert state == OUTRANKED
    assert note == f"cannot beat tp8 ep's {bound + 10:,.0f}: {bound:,.0f} at best (leave-one-out error 5%)"


KNOBBED = "tp2 dp4 ep --max-num-seqs 512 --kv-cache-dtype fp8_e4m3"
SHOWN = (
    Row("tp8 ep", 8, 435.0, 457.0, 433.0, 16.0, 1, "measured"),
    Row(KNOBBED, 8, 422.0, 443.0, None, None, 2, "failed", "CUDA out of memory on GPU 2 (tried 2.1 GiB)"),
    Row("tp4 dp2 ep", 8, 405.0, 425.0, state=OUTRANKED, note="cannot beat tp8 ep's 433: 425 at best"),
    Row("tp2 pp4", 8, 113.0, 298.0, state="not-reached", note="not reached: the launch budget is spent"),
    Row("pp8", 8, 0.0, 0.0, state="out-of-bounds", note="predicted to miss the latency bounds"),
)
# How each row starts on the screen, and the state it says in a word or two.
STATES = {
    "tp8 ep ": "measured",
    "tp2 dp4 ep": "failed",
    "tp4 dp2 ep": "can't win",
    "tp2 pp4": "not reached",
    "pp8": "misses bounds",
}


def test_the_state_column_stays_in_view_as_the_screen_narrows(profile_file):
    """A journaled tune under `t` at 160, 120 and 80 columns: the candidate and its state in a word
    on each row, the columns that do not fit left out, and the highlighted row whole under it."""
    profile = small_profile(profile_file)
    result = replace(BASE, rows=SHOWN, winner="tp8 ep", winner_goal=433.0)
    with Journal() as journal:
        tune = journal.start_tune("minimax-m2.5", result.spec.to_json())
        journal.finish_tune(tune, "done", replace(result, tune=tune).to_json())

    async def scenario():
        app = CockpitApp(profile=profile, sim=True, host="testbox", cursor_blink=False, interval=0.25)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("escape", "t")
            view = app.main.tune
            await until(pilot, lambda: app.main.view == "tune" and view.table.row_count == len(SHOWN))
            await pilot.pause()
            seen = {160: screen_text(app).splitlines()}
            for width, height in ((120, 40), (80, 24)):
                before = view.content_size.width
                await pilot.resize_terminal(width, height)
                await until(
                    pilot, lambda before=before: view.content_size.width != before, what=f"{width} columns"
                )
                await pilot.pause()
                seen[width] = screen_text(app).splitlines()
            return seen, str(view.query_one("#tune-detail").content)

    seen, detail = asyncio.run(scenario())
    headers = {}
    for width, lines in seen.items():
        headers[width] = next(line for line in lines if "  candidate  " in line)
        assert "state" in headers[width], (width, headers[width])
        for start, word in STATES.items():
            [line] = [line for line in lines if f"  {start}" in line and "predicted" not in line]
            assert word in line, (width, line)
    assert all("measured" in header for header in headers.values())
    assert "predicted" in headers[160] and "predicted" in headers[80]  # the left pane, the whole screen
    assert "predicted" not in headers[120]  # left out for the state
    assert "tp2 dp4 ep --max-num-seqs" in "\n".join(seen[160]) and "…" in "\n".join(seen[160])
    assert detail == "tp8 ep: predicted 435 tok/s, best case 457 tok/s, measured 433 tok/s"
