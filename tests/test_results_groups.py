"""Results compare like with like: a table per workload (request lengths, open-loop rate) and box
(simulated or not), each saying what it was measured with and marking its own best; exports keep
every table, newest first; a simulated box says so; before any benchmark, the hint names a layout
the planner says fits, under which the launches that failed (forced ones too) are listed."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
import yaml

from cockpit.core.outcome import READY
from cockpit.core.planner import FAILS, FITS, plan_layout
from cockpit.reports.comparison import comparison
from cockpit.reports.export import context_from_setup, markdown_report
from cockpit.reports.results import format_comparison, no_results_hint
from cockpit.store.journal import BenchPoint, Journal
from cockpit.store.profile import find_profile
from cockpit.store.profile_setup import SetupOverrides, build_setup

PROFILE = "minimax-m2.5"
BANNER = "> **Simulated box**: numbers are the simulator's, not measurements."


def bench(
    journal: Journal,
    layout: str,
    levels: dict[int, float],
    lengths: tuple[int, int],
    *,
    simulated: bool = False,
    rate: float | None = None,
    engine: str = "vllm",
) -> int:
    """A launch and its levels as `cockpit run --bench` journals them."""
    exp = journal.start_experiment(
        profile=PROFILE,
        model="MiniMaxAI/MiniMax-M2.5",
        engine=engine,
        layout=layout,
        argv=[],
        simulated=simulated,
    )
    journal.set_outcome(exp, READY)
    for c, tok_s in levels.items():
        extra = {"rate": rate} if rate is not None else {}
        point = BenchPoint(c, tok_s, requests=8, input_len=lengths[0], output_len=lengths[1], extra=extra)
        journal.add_point(exp, point)
    return exp


def two_workloads(simulated: bool = False) -> None:
    """tp4 swept at in=512, then tp8 ep and tp4 again at in=128: the issue's mix."""
    with Journal() as journal:
        bench(journal, "tp4", {1: 79.0, 8: 249.0}, (512, 32), simulated=simulated)
        bench(journal, "tp8 ep", {1: 71.0, 8: 290.0}, (128, 32), simulated=simulated)
        bench(journal, "tp4", {1: 88.0, 8: 297.0}, (128, 32), simulated=simulated)


def read_comparison():
    with Journal() as journal:
        return comparison(journal, PROFILE)


def report(minimax_vllm) -> list[str]:
    """The markdown report of the profile's results, as `export md` writes it."""
    comp = read_comparison()
    return markdown_report(comp, context_from_setup(minimax_vllm, PROFILE, comp)).splitlines()


# -- a table per workload --------------------------------------------------------------------------


def test_levels_at_other_lengths_get_a_table_of_their_own_with_its_own_best():
    two_workloads()
    comp = read_comparison()
    assert [t.label for t in comp.tables] == ["in=128 out=32", "in=512 out=32"]  # newest first
    newest, older = comp.tables
    assert newest.best == {1: "tp4", 8: "tp4"} and newest.best_peak == "tp4"
    assert older.best == {} and older.rows[0].cells[8].output_tok_s == 249.0  # kept, not overwritten
    assert format_comparison(comp, "table").splitlines() == [
        "in=128 out=32",
        "layout  C=1 tok/s     C=8    peak",
        "------  ----------  ------  ------",
        "tp8 ep       71.0   290.0   290.0  at C=8",
        "tp4          88.0*  297.0*  297.0* at C=8",
        "",
        "in=512 out=32",
        "layout  C=1 tok/s     C=8    peak",
        "------  ----------  ------  ------",
        "tp4          79.0   249.0   249.0  at C=8",
        "* most tok/s at that concurrency, within its table",
    ]
    markdown = format_comparison(comp, "markdown").splitlines()
    assert markdown[0] == "**in=128 out=32**" and "**in=512 out=32**" in markdown
    assert "| tp4 | 79.0 | 249.0 | 249.0 (C=8) |" in markdown  # no best across tables


def test_an_open_loop_level_is_compared_only_with_its_rate():
    with Journal() as journal:
        bench(journal, "tp4", {8: 297.0}, (128, 32))
        bench(journal, "tp8 ep", {8: 150.0}, (128, 32), rate=4.0)
    comp = read_comparison()
    assert [t.label for t in comp.tables] == ["in=128 out=32 at 4 req/s (open loop)", "in=128 out=32"]
    assert all(t.best == {} for t in comp.tables)  # one layout in each: nothing to beat
    [record] = [r for r in json.loads(format_comparison(comp, "json")) if r["layout"] == "tp8 ep"]
    assert record["rate"] == 4.0 and record["input_len"] == 128


def test_a_simulated_and_a_real_run_at_the_same_lengths_never_share_a_table(minimax_vllm):
    with Journal() as journal:
        bench(journal, "tp4", {1: 88.0}, (128, 32), simulated=True)
        bench(journal, "tp8 ep", {1: 71.0}, (128, 32))
    comp = read_comparison()
    assert [t.label for t in comp.tables] == ["in=128 out=32", "in=128 out=32 · simulated box"]
    lines = report(minimax_vllm)
    assert lines[2].startswith("> **Partly simulated**: tables marked *simulated box*")
    assert "### Output tok/s · in=128 out=32 · simulated box" in lines
    assert (
        "- Workloads: in=128 out=32; in=128 out=32 · simulated box (a table for each, newest first)" in lines
    )


def test_csv_and_json_carry_lengths_simulation_and_best_within_the_table():
    two_workloads(simulated=True)
    comp = read_comparison()
    rows = list(csv.DictReader(io.StringIO(format_comparison(comp, "csv"))))
    got = [(r["layout"], r["input_len"], r["concurrency"], r["simulated"], r["best"]) for r in rows]
    assert got == [
        ("tp8 ep", "128", "1", "1", "0"),
        ("tp8 ep", "128", "8", "1", "0"),
        ("tp4", "128", "1", "1", "1"),
        ("tp4", "128", "8", "1", "1"),
        ("tp4", "512", "1", "1", "0"),
        ("tp4", "512", "8", "1", "0"),
    ]
    records = json.loads(format_comparison(comp, "json"))
    assert {(r["input_len"], r["output_len"], r["simulated"]) for r in records} == {
        (128, 32, True),
        (512, 32, True),
    }


# -- the report to paste ---------------------------------------------------------------------------


def test_the_report_keeps_every_workload_and_says_a_simulated_box_under_the_title(minimax_vllm):
    two_workloads(simulated=True)
    lines = report(minimax_vllm)
    assert lines[0] == "## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM" and lines[2] == BANNER
    headings = [line for line in lines if line.startswith("### ")]
    assert headings == [
        "### Output tok/s · in=128 out=32 · simulated box",
        "### Latency (ms) · in=128 out=32 · simulated box",
        "### Output tok/s · in=512 out=32 · simulated box",
        "### Latency (ms) · in=512 out=32 · simulated box",
    ]
    assert "| tp4 | 79.0 | 249.0 | 249.0 (C=8) |" in lines  # the earlier sweep is still there
    assert "- Workloads: in=128 out=32; in=512 out=32 (a table for each, newest first)" in lines


def test_a_report_of_real_gpus_has_no_banner(minimax_vllm):
    two_workloads()
    assert not any("imulat" in line for line in report(minimax_vllm))


def test_export_md_keeps_earlier_sweeps_and_the_screen_shows_the_newest(tmp_path):
    from cockpit.faces.tui.session import Session

    two_workloads(simulated=True)
    session = Session.open(PROFILE, sim=True)
    try:
        text = session.export("md", folder=tmp_path).read_text()
        shown = session.comparison()
    finally:
        session.close()
    lines = text.splitlines()
    assert lines[2] == BANNER
    assert lines.index("### Output tok/s · in=128 out=32 · simulated box") < lines.index(
        "### Output tok/s · in=512 out=32 · simulated box"
    )
    assert "| tp4 | 79.0 | 249.0 | 249.0 (C=8) |" in lines
    # the screen's one table compares like with like: the newest workload's levels only
    assert [(r.layout, r.cells[8].output_tok_s) for r in shown.rows] == [("tp8 ep", 290.0), ("tp4", 297.0)]
    # and says where the others are: the screen's `results` shows its one table, not theirs
    from cockpit.faces.tui.widgets.bench_pane import workload_line

    assert workload_line(shown).endswith("1 other workload(s): `export md` and `cockpit results` show them")


# -- before any benchmark --------------------------------------------------------------------------


def test_the_first_run_hint_names_a_layout_the_planner_says_fits():
    setup, _ = build_setup(SetupOverrides())
    assert plan_layout(setup, "tp8").verdict == FAILS  # what the hint used to name on this profile
    assert no_results_hint(None) == (
        'no benchmark results yet for profile demo: the planner says tp4 fits; run `cockpit run "tp4" --bench c=1,32,64`'
    )
    assert plan_layout(setup, "tp4").verdict == FITS
    assert no_results_hint("kimi-k2.6").endswith(
        'run `cockpit run "tp8" --profile kimi-k2.6 --bench c=1,32,64`'
    )


def test_the_first_run_hint_says_when_no_layout_fits(tmp_path):
    data = yaml.safe_load(find_profile("demo").read_text())
    data["hardware"]["count"] = 2  # MiniMax-M2.5's weights need more than two of these GPUs
    path = tmp_path / "two-gpus.yaml"
    path.write_text(yaml.safe_dump(data))
    hint = no_results_hint(str(path))
    assert hint.startswith(
        "no benchmark results yet for profile two-gpus, and the planner says no layout fits"
    )
    assert hint.endswith(f"`cockpit plan --profile {path}` says why") and "\n" not in hint


@pytest.fixture
def sim_env(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_a_forced_launch_that_failed_is_listed_under_the_hint(sim_env, profile_file, minimax_vllm):
    path, _ = profile_file("demo")
    result = cockpit("run", "tp8", "--profile", path, "--sim", "--force", "--quiet")
    assert result.returncode != 0 and "failed" in result.stdout
    with Journal() as journal:
        comp = comparison(journal, "demo")
    lines = format_comparison(comp, "table", hint=no_results_hint(path)).splitlines()
    assert lines[0] == (
        "no benchmark results yet for profile demo: the planner says tp4 fits; "
        f'run `cockpit run "tp4" --profile {path} --bench c=1,32,64`'
    )
    assert lines[2] == "launches that failed:"
    assert lines[3].startswith("tp8  failed: FP8 block quantization: gate/up shard width 192")
    markdown = markdown_report(comp, context_from_setup(minimax_vllm, "demo", comp)).splitlines()
    assert "No benchmark results yet." in markdown and "### Launches that failed" in markdown
    assert any(line.startswith("| tp8 | FP8 block quantization") for line in markdown)
    shown = cockpit("results", "--profile", path).stdout.splitlines()  # as the command prints it
    assert shown[0] == lines[0] and "tp8  failed: FP8 block quantization" in "\n".join(shown)


def test_a_simulated_run_says_so_in_every_format(sim_env, profile_file):
    path, _ = profile_file("demo")
    result = cockpit("run", "tp4", "--profile", path, "--sim", "--quiet", "--bench", "c=1 in=32 out=8 n=2")
    assert result.returncode == 0, result.stdout + result.stderr
    markdown = cockpit("results", "--profile", path, "--format", "markdown").stdout.splitlines()
    assert markdown[2] == BANNER and "### Output tok/s · in=32 out=8 · simulated box" in markdown
    with Journal() as journal:  # the other formats, as `cockpit results` prints them
        comp = comparison(journal, "demo")
    table = format_comparison(comp, "table").splitlines()
    assert table[0] == "in=32 out=8 · simulated box" and table[1].startswith("layout")
    [row] = csv.DictReader(io.StringIO(format_comparison(comp, "csv")))
    assert (row["simulated"], row["input_len"], row["output_len"]) == ("1", "32", "8")
    [record] = json.loads(format_comparison(comp, "json"))
    assert record["simulated"] is True and (record["input_len"], record["output_len"]) == (32, 8)


def test_the_same_layout_on_two_engines_is_two_tables_each_naming_its_engine():
    """`use P on sglang` runs the profile's layouts on SGLang: its tp4 is not vLLM's tp4."""
    with Journal() as journal:
        bench(journal, "tp4", {1: 79.0, 8: 249.0}, (128, 32))
        bench(journal, "tp4", {1: 90.0, 8: 280.0}, (128, 32), engine="sglang")
    comp = read_comparison()
    assert [t.label for t in comp.tables] == ["in=128 out=32 · SGLang", "in=128 out=32 · vLLM"]
    assert [t.rows[0].cells[8].output_tok_s for t in comp.tables] == [280.0, 249.0]


def test_the_report_names_the_engine_its_launches_ran_not_the_one_open_now(minimax_vllm):
    """Launched `on sglang`, reported while the profile is open on vLLM (or the reverse): the
    title is the launches' engine, never one engine's name with the other's version."""
    with Journal() as journal:
        exp = bench(journal, "tp4", {1: 90.0, 8: 280.0}, (128, 32), engine="sglang")
        journal.set_facts(exp, {"engine_version": "0.5.23"})  # as the engine logged it
    lines = report(minimax_vllm)
    assert lines[0].endswith("· SGLang 0.5.23"), lines[0]
    assert "vLLM" not in lines[0]
    with Journal() as journal:
        bench(journal, "tp4", {1: 79.0, 8: 249.0}, (128, 32))
    lines = report(minimax_vllm)
    assert "vLLM" in lines[0] and "SGLang" in lines[0]
    assert (
        "- Workloads: in=128 out=32 · vLLM; in=128 out=32 · SGLang (a table for each, newest first)" in lines
    )
