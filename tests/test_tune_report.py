"""The tune's result as the reader gets it: the Pareto front of goal against p99 latency, the
markdown section `export md` carries, and the tune view's fold of the events. Pure: no box, no screen."""

from __future__ import annotations

from dataclasses import replace

from cockpit.core.tuning.events import (
    Margin,
    Point,
    Row,
    TuneLevel,
    TuneMeasured,
    TuneRanked,
    TuneResult,
    TuneStarted,
    TuneStep,
)
from cockpit.core.tuning.pareto import latency_axis, pareto_front
from cockpit.core.tuning.spec import parse_tune
from cockpit.faces.tui.widgets.tune_view import BEST, RUNNING, TuneBoard, render_goal_chart
from cockpit.reports.comparison import Comparison
from cockpit.reports.export import ReportContext, markdown_report
from cockpit.reports.tune import tune_markdown


def point(name: str, level: float, goal: float, itl: float | None, ttft: float | None = 100.0) -> Point:
    """A level whose requests' mean ITL is ``itl`` at p99; its token gaps' p99 is twice that (the
    stalls behind other requests' prefills), which no bound checks."""
    return Point(name, level, goal, goal, ttft, None if itl is None else 2 * itl, itl)


def test_the_front_keeps_the_points_no_other_beats_at_no_more_latency():
    fast_small = point("a", 1, 100, 10)
    slow_big = point("a", 16, 400, 60)
    middle = point("b", 4, 250, 30)
    dominated = point("b", 8, 240, 35)  # `middle` gives more at less latency
    tie_latency_lower_goal = point("c", 4, 90, 10)  # `fast_small`: same latency, more goal
    twin = point("d", 4, 250, 30)  # equal to `middle`: neither beats the other
    front = pareto_front([slow_big, dominated, fast_small, middle, tie_latency_lower_goal, twin], "itl")
    assert front == [fast_small, middle, twin, slow_big]  # by latency


def test_the_front_reads_the_latency_the_spec_bounds():
    a = point("a", 1, 100, itl=10, ttft=900)
    b = point("b", 1, 200, itl=20, ttft=100)
    assert pareto_front([a, b], "itl") == [a, b]
    assert pareto_front([a, b], "ttft") == [b]  # b: more goal at a lower TTFT
    assert pareto_front([point("x", 1, 5, None)], "itl") == []  # no latency, no place on the chart
    assert latency_axis(None, None) == "itl" and latency_axis(2000, None) == "ttft"
    assert latency_axis(2000, 50) == "itl" and latency_axis(None, 50) == "itl"


ROWS = (
    Row("tp8 ep", 8, 471.0, 494.0, 436.0, 16.0, 1, "measured"),
    Row("tp2 dp4 ep", 8, 456.0, 514.0, 421.0, 16.0, 2, "measured"),
    Row("tp8", 8, 300.0, 320.0, None, None, 3, "failed", "fp8 block 128 does not divide 192 | slices"),
    Row(
        "dp8 ep",
        8,
        410.0,
        430.0,
        state="outranked",
        note="cannot beat tp8 ep's 436: 430 at best (leave-one-out error 5%)",
    ),
    Row("tp4 pp2 ep", 8, 117.0, 123.0, state="dropped", note="dropped: tp4 pp2 failed to start (oom)"),
)


BASE = TuneResult(
    tune=3,
    spec=parse_tune("goal=tok/s itl<50ms c=4,16 in=32 out=8 n=3"),
    reason="the launch budget is spent",
    winner="tp8 ep",
    winner_goal=436.0,
    winner_level=16.0,
    argv=(
        "vllm",
        "serve",
        "MiniMaxAI/MiniMax-M2.5",
        "--tensor-parallel-size",
        "8",
        "--served-model-name",
        "a b",
    ),
    env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
    rows=ROWS,
    points=(point("tp8 ep", 16, 436, 65), point("tp8 ep", 4, 177, 29), point("tp2 dp4 ep", 16, 421, 61)),
    per_gpu=False,
    launches=3,
    fitting=15,
)


def result(**changes) -> TuneResult:
    return replace(BASE, **changes)


def test_tune_markdown_has_the_winner_command_what_was_tried_and_why_not_the_rest():
    text = tune_markdown(result())
    assert text.startswith("### Tune\n")
    assert "- Asked: `tune goal=tok/s itl<50ms c=4,16 in=32 out=8 n=3`" in text
    assert "- Stopped: the launch budget is spent" in text
    assert "- Launches: 3 of 15 fitting candidates (12 saved against trying every one)" in text
    assert "- Winner: **tp8 ep**, 436 tok/s at C=16" in text
    # The command, shell-quoted, in a fenced block: pasting it runs it.
    assert "```sh\nCUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve MiniMaxAI/MiniMax-M2.5" in text
    assert "--served-model-name 'a b'\n```" in text
    tried, rest = text.split("#### Tried")[1].split("#### Not tried")
    assert "| tp8 ep ★ | 8 | 471 tok/s | 436 tok/s | C=16 | 1 |" in tried
    assert "| tp2 dp4 ep | 8 | 456 tok/s | 421 tok/s | C=16 | 2 |" in tried
    assert "| tp8 | 8 | 300 tok/s | ✗ failed: fp8 block 128 does not divide 192 \\| slices | - | 3 |" in tried
    assert tried.index("tp8 ep ★") < tried.index("tp2 dp4 ep") < tried.index("| tp8 |")  # best first
    assert (
        "| dp8 ep | 8 | 410 tok/s | 430 tok/s | cannot beat tp8 ep's 436: 430 at best (leave-one-out error 5%) |"
        in rest
    )
    assert "| tp4 pp2 ep | 8 | 117 tok/s | 123 tok/s | dropped: tp4 pp2 failed to start (oom) |" in rest


def test_tune_markdown_of_an_interrupted_tune_and_one_without_a_winner():
    interrupted = tune_markdown(result(interrupted=True, reason="interrupted", launches=1))
    assert "interrupted after 1 launch(es); `tune --resume` continues it" in interrupted
    none = tune_markdown(
        result(winner=None, winner_goal=None, winner_level=None, argv=(), env={}, rows=ROWS[3:])
    )
    assert "- Winner: none" in none and "```" not in none and "Nothing was launched." in none
    rates = tune_markdown(
        result(
            spec=parse_tune("goal=tok/s/gpu rate=2,4 n=3"), per_gpu=True, winner_goal=54.5, winner_level=4.0
        )
    )
    assert "**tp8 ep**, 54.5 tok/s/GPU at 4 req/s" in rates


def test_export_md_adds_the_tune_section_and_redacts_it():
    context = ReportContext(
        model="MiniMaxAI/MiniMax-M2.5", engine="vLLM", gpu_count=8, gpu_label="RTX PRO 6000"
    )
    secret = result(argv=("vllm", "serve", "s3://user:hunter2@bucket/model"))
    text = markdown_report(Comparison(profile="p", levels=[], rows=[], best={}), context, tune=secret)
    assert "No benchmark results yet." in text and "### Tune" in text
    assert "hunter2" not in text
    assert "### Tune" not in markdown_report(Comparison(profile="p", levels=[], rows=[], best={}), context)


def test_the_tune_board_marks_the_running_and_best_and_keeps_the_stopping_bound():
    board = TuneBoard()
    board.apply(TuneStarted(3, parse_tune("goal=tok/s itl<50ms c=4,16 n=3"), 15, 29))
    rows = tuple(Row(r.name, r.gpus, r.predicted, r.bound) for r in ROWS[:2])
    board.apply(TuneRanked(3, rows, None, None, Margin(0.3, held_out=False), 514.0, False))
    board.apply(TuneStep(3, 1, "tp8 ep", 471.0, 494.0, False))
    assert [cells[0] for _, cells in board.table()] == [RUNNING, ""]
    status = "\n".join(board.status_lines())
    assert (
        "nothing measured yet · best case left 514 tok/s (model ±30%, too few measured to leave one out)"
        " · stops when the best so far ≥ the "
        "best case left" in status
    )
    assert "▶ candidate 1: tp8 ep" in status
    board.apply(TuneLevel(3, point("tp8 ep", 16, 436, 65), False))
    board.apply(TuneMeasured(3, "tp8 ep", 436.0, 16.0, False))
    board.apply(TuneRanked(3, ROWS[:2], "tp8 ep", 436.0, Margin(0.05, held_out=True), 440.0, False))
    assert board.running is None and [cells[0] for _, cells in board.table()] == [BEST, ""]
    assert "best so far tp8 ep 436 tok/s · best case left 440 tok/s" in "\n".join(board.status_lines())
    assert board.front == [point("tp8 ep", 16, 436, 65)]
    board.apply(result())
    lines = "\n".join(board.result_lines())
    assert "✓ winner tp8 ep: 436 tok/s at C=16 after 3 launch(es), 12 launch(es) saved" in lines
    assert f"command: {result().command}" in lines
    assert len(board.points) == 3 and "best case left" not in "\n".join(board.status_lines())


def test_the_goal_chart_draws_the_front_and_the_bound():
    points = result().points
    chart = render_goal_chart(points, "itl", False, 60, 14, bound_ms=50)
    assert "per-request mean ITL p99 (ms)" in chart and "*" in chart and "|" in chart
    assert chart.splitlines()[-1].startswith("* Pareto front · o dominated · | itl<50ms")
    assert render_goal_chart(points, "itl", False, 20, 14) == ""  # too small to read
    assert render_goal_chart([], "itl", False, 60, 14) == ""
