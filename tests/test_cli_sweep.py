"""`cockpit sweep` unattended on the simulated box: real cockpit and engine processes, real journal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from test_run import cockpit, fast_sim, journal_rows  # noqa: F401  (fast_sim: sim, journal and state dirs)

from cockpit.faces.cli import main
from cockpit.runner.registry import Registry
from cockpit.store.journal import Journal

BENCH = "c=1,4 in=32 out=8 n=4"


def start_sweep(*args: str, hangup_ignored: bool = False) -> subprocess.Popen:
    """`cockpit sweep` in the background, its output a pipe (as a file under nohup: Python buffers
    it unless cockpit flushes each line), SIGHUP ignored as nohup leaves it when asked."""
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.faces.cli", "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
        preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if hangup_ignored else None,
    )


def read_until(proc: subprocess.Popen, start: str) -> list[str]:
    """The lines of a running sweep up to the first that starts with ``start``."""
    assert proc.stdout is not None and proc.stderr is not None  # both piped by start_sweep
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(start):
            return seen
    raise AssertionError("".join(seen) + proc.stderr.read())


def test_sweep_measures_each_layout_skips_a_planned_failure_and_ends_with_the_table(profile_file):
    profile, port = profile_file("minimax-m2.5")
    result = cockpit(
        "sweep",
        "tp4, tp8",
        "--profile",
        profile,
        "--sim",
        "--bench",
        BENCH,
        "--max-num-batched-tokens",
        "4096",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    step = [line for line in lines if line.startswith("sweep     ")]
    assert step[0] == (
        "sweep     tp4 --max-num-batched-tokens 4096, tp8 --max-num-batched-tokens 4096: "
        "each is launched, benched at C=1,4, stopped"
    )
    assert step[1].startswith("sweep     1/2: tp4 --max-num-batched-tokens 4096 at ")
    assert step[2].startswith("sweep     2/2: tp8 --max-num-batched-tokens 4096 at ")
    launching = next(line for line in lines if line.startswith("launching"))
    assert f"--port {port}" in launching and launching.endswith("--max-num-batched-tokens 4096")
    assert "bench     done: 2 level(s) journaled" in lines
    assert "stopped   sweep: next layout: stopped with SIGTERM" in lines
    assert any(line.startswith("failed    not launched: the planner says tp8") for line in lines)
    assert "1 of 2 layout(s) measured; not measured: tp8 --max-num-batched-tokens 4096" in step[3]
    assert step[3].startswith("sweep     done at ")
    # the table of `cockpit results`, last
    table = lines[lines.index(step[3]) + 1 :]
    assert (
        table[0]
        == "results of profile minimax-m2.5 (`cockpit results --profile minimax-m2.5` shows them again):"
    )
    rows = {line.split("  ")[0]: line for line in table if line.startswith("tp")}
    assert rows["tp4 --max-num-batched-tokens 4096"].endswith("at C=4")
    assert "failed: not launched: the planner says tp8" in rows["tp8 --max-num-batched-tokens 4096"]
    journaled = {row.layout: row for row in journal_rows()}
    assert journaled["tp4 --max-num-batched-tokens 4096"].outcome == "ready"
    assert journaled["tp8 --max-num-batched-tokens 4096"].outcome == "failed"
    with Journal() as journal:
        points = journal.points(journaled["tp4 --max-num-batched-tokens 4096"].id)
    assert sorted(p.concurrency for p in points) == [1, 4]
    assert not Registry().live()


def test_sweep_that_measures_nothing_exits_1(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("sweep", "tp8", "--profile", profile, "--sim")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sweep     done at " in result.stdout
    assert "0 of 1 layout(s) measured; not measured: tp8" in result.stdout
    assert "launching" not in result.stdout


def test_a_layout_the_engine_cannot_run_stops_the_sweep_before_any_launch(profile_file):
    profile, _ = profile_file("minimax-m2.5")
    result = cockpit("sweep", "tp4, tp4 --max-num-seqz 8", "--profile", profile, "--sim")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "cockpit: sweep: tp4 --max-num-seqz 8: knob --max-num-seqz is not a vLLM 0.33.0 server flag: "
        "did you mean --max-num-seqs?; nothing was launched: fix it or leave it out"
    )
    assert "launching" not in result.stdout and not journal_rows()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["sweep"],
            'sweep needs layouts separated by commas: `cockpit sweep "tp8, tp4 ep" --max-num-seqs 512`',
        ),
        (
            ["sweep", "--max-num-seqs", "512", "tp8, tp4"],
            'sweep: the layouts come first, then server flags for all of them: `cockpit sweep "tp8, tp4 ep" '
            "--max-num-seqs 512`",
        ),
        (
            ["sweep", "tp8 c=1,32", "--bench", "c=1"],
            "c= given twice, in --bench and after the layouts: give each once",
        ),
        (
            ["sweep", "tp8", "n=4", "--bench", "c=1 t=2"],
            "sweep takes n= (requests) or t= (seconds), not both",
        ),
        (["sweep", "tp4", "--bench", "c=0"], "concurrency levels must be 1 or more"),
        (["sweep", "tp4", "--timeout", "soon"], "--timeout takes seconds, like 600; got 'soon'"),
        (["sweep", "tp4", "--bench"], '--bench needs a value, like --bench "c=1,32 in=1024 out=1024"'),
        (["sweep", "tq4"], "did you mean 'tp4'"),
    ],
)
def test_bad_sweep_command_lines_are_one_line_and_launch_nothing(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cockpit: ") and message in err and "\n" not in err, err
    assert not journal_rows()


def test_unquoted_layouts_and_bench_words_read_as_one_sweep():
    from cockpit.core.benchrequest import BenchRequest
    from cockpit.core.layout import parse_layout
    from cockpit.faces.cli import _parse, _sweep_words, build_parser
    from cockpit.faces.headless import sweep_command

    argv = ["sweep", "tp8,", "tp4", "ep", "--bench", "c=1,32", "in=64", "out=8", "--max-num-seqs", "512"]
    args = _parse(build_parser(), argv)
    layouts, knobs = _sweep_words(args.words)
    assert (layouts, knobs) == ("tp8, tp4 ep in=64 out=8", ("--max-num-seqs", "512"))
    sweep = sweep_command(layouts, knobs, args.bench, 30)
    assert sweep.layouts == (
        parse_layout("tp8 --max-num-seqs 512"),
        parse_layout("tp4 ep --max-num-seqs 512"),
    )
    assert sweep.bench == BenchRequest(concurrency=(1, 32), input_len=64, output_len=8, timeout_s=30.0)


def test_sigterm_stops_the_running_server_keeps_what_was_measured_and_exits_143(profile_file):
    """Each line comes as it happens (a log file is read while the sweep runs): the signal lands
    while the second layout is on its way."""
    profile, _ = profile_file("minimax-m2.5")
    sweep = start_sweep("tp4, tp4 ep", "--profile", profile, "--sim", "--bench", BENCH)
    seen = read_until(sweep, "sweep     2/2")
    sweep.send_signal(signal.SIGTERM)
    out, err = sweep.communicate(timeout=60)
    out = "".join(seen) + out
    assert sweep.returncode == 143, out + err
    lines = out.splitlines()
    assert lines[-1] == (
        "sweep     terminated (SIGTERM) at 2/2 (tp4 ep): 1 of 2 layout(s) measured; what was measured is journaled"
    )
    table = lines[lines.index(next(x for x in lines if x.startswith("results of profile"))) :]
    assert any(line.startswith("tp4 ") and line.endswith("at C=4") for line in table), table
    assert not Registry().live()
    rows = {row.layout: row for row in journal_rows()}
    assert rows["tp4"].outcome == "ready"
    assert rows.get("tp4 ep") is None or rows["tp4 ep"].outcome in ("stopped", "ready")


def test_under_nohup_a_hangup_does_not_end_the_sweep(profile_file):
    """nohup starts it with SIGHUP ignored: the SSH drop that sends it must not stop the sweep."""
    profile, _ = profile_file("minimax-m2.5")
    sweep = start_sweep("tp4", "--profile", profile, "--sim", "--bench", BENCH, hangup_ignored=True)
    seen = read_until(sweep, "sweep     1/1")
    sweep.send_signal(signal.SIGHUP)
    out, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 0, "".join(seen) + out + err
    assert "1 of 1 layout(s) measured" in out and "bench     done: 2 level(s) journaled" in out


def test_a_hangup_stops_the_running_server_and_exits_129(profile_file):
    """Not under nohup, the terminal's end ends the sweep: its server must not stay up unwatched."""
    profile, _ = profile_file("minimax-m2.5")
    sweep = start_sweep("tp4, tp4 ep", "--profile", profile, "--sim", "--bench", BENCH)
    read_until(sweep, "ready     ")
    [entry] = Registry().live()
    sweep.send_signal(signal.SIGHUP)
    out, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 129, out + err
    assert not Registry().live() and "sweep     2/2" not in out
    assert {row.pid: row for row in journal_rows()}[entry.pid].ended is not None
