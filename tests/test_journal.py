"""The journal on real SQLite files, and the comparison table rebuilt from it."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from typing import get_args

import pytest

from cockpit.core.errors import CockpitError
from cockpit.core.outcome import FAILED, LAUNCHING, OUTCOMES, READY, STOPPED, Diagnosis, Outcome
from cockpit.core.records import LaunchFacts, LaunchPrediction, PredictedMemory
from cockpit.reports.comparison import comparison
from cockpit.reports.numbers import format_tok_s
from cockpit.reports.results import format_comparison
from cockpit.store.journal import BenchPoint, Journal, default_path

KIMI = "kimi-k2.6"
# The reference measurements (Kimi on 8 x RTX PRO 6000, SGLang; docs/performance.md#reference-measurements):
# C=1, 32, 64, and the peak at C=128.
SEED = {
    "tp8": {1: 26.3, 32: 577.8, 64: 693.1, 128: 807.9},
    "pp8": {1: 36.9, 32: 250.9, 64: 396.0, 128: 395.6},
    "tp8 ep8": {1: 65.3, 32: 546.0, 64: 795.0, 128: 961.2},
}


def launch(journal: Journal, layout: str, profile: str = KIMI, **kw) -> int:
    return journal.start_experiment(
        profile=profile,
        model="moonshotai/Kimi-K2.6",
        engine="sglang",
        layout=layout,
        argv=["python", "-m", "sglang.launch_server", "--tp-size", "8"],
        gpus=range(8),
        **kw,
    )


def served(journal: Journal, layout: str, tok_s: dict[int, float], **kw) -> int:
    exp = launch(journal, layout, **kw)
    journal.set_outcome(exp, READY, load_seconds=312.5)
    for c, value in tok_s.items():
        journal.add_point(exp, BenchPoint(c, value, requests=4 * c, ttft_ms_p50=120.0, itl_ms_p50=40.0))
    return exp


@pytest.fixture
def journal(tmp_path):
    with Journal(tmp_path / "journal.sqlite") as j:
        yield j


def test_experiment_round_trip(journal):
    exp = launch(journal, "tp8 ep", host="box1", log_path="/tmp/x.log", pid=123, port=30000)
    got = journal.experiment(exp)
    assert got.layout == "tp8 ep" and got.host == "box1" and got.profile == KIMI
    assert got.argv == ("python", "-m", "sglang.launch_server", "--tp-size", "8")
    assert got.gpus == tuple(range(8))
    assert (got.outcome, got.ended, got.pid, got.port, got.log_path) == (
        LAUNCHING,
        None,
        123,
        30000,
        "/tmp/x.log",
    )
    assert got.peak_memory == {}
    journal.update_experiment(exp, pid=456, log_path="/tmp/y.log")
    assert journal.experiment(exp).pid == 456
    assert journal.experiment(999) is None


def test_default_host_and_unknown_column(journal):
    exp = launch(journal, "tp8")
    assert journal.experiment(exp).host
    with pytest.raises(ValueError, match="colour"):
        journal.update_experiment(exp, colour="red")
    with pytest.raises(ValueError):
        journal.update_experiment(exp, id=5)
    with pytest.raises(ValueError):
        journal.set_outcome(exp, "exploded")


def test_point_round_trip_sorted_by_concurrency(journal):
    exp = launch(journal, "tp8")
    full = BenchPoint(
        64,
        693.1,
        requests=256,
        errors=1,
        duration_s=120.5,
        request_s=2.1,
        ttft_ms_p50=300.0,
        ttft_ms_p90=450.0,
        ttft_ms_p99=900.0,
        tpot_ms_p50=80.0,
        itl_ms_p50=79.0,
        itl_ms_p90=95.0,
        itl_ms_p99=130.0,
        e2e_ms_p50=8000.0,
        e2e_ms_p99=9500.0,
        input_len=1024,
        output_len=1024,
        client_limited=True,
        extra={"note": "warm"},
    )
    pid = journal.add_point(exp, full)
    journal.add_point(exp, BenchPoint(1, 26.3))
    one, sixty_four = journal.points(exp)
    assert one.concurrency == 1 and one.ttft_ms_p50 is None and one.client_limited is False
    assert sixty_four.id == pid and sixty_four.experiment_id == exp and sixty_four.created > 0
    assert sixty_four == BenchPoint(
        **{**full.__dict__, "id": pid, "experiment_id": exp, "created": sixty_four.created}
    )


def test_outcome_with_diagnosis(journal):
    exp = launch(journal, "tp4 ep2")
    oom = Diagnosis("oom", "CUDA out of memory on GPU 2 after loading", "try tp8 ep8", phase="loading", gpu=2)
    journal.set_outcome(exp, FAILED, diagnosis=oom, load_seconds=280.0)
    got = journal.experiment(exp)
    assert (got.outcome, got.diagnosis_kind, got.diagnosis, got.next_step) == (
        FAILED,
        "oom",
        "CUDA out of memory on GPU 2 after loading",
        "try tp8 ep8",
    )
    assert got.load_seconds == 280.0 and got.ended >= got.started


def test_outcome_names_are_the_strings_the_journal_stores():
    """They are in every journal file and in `results --format json`: renaming one orphans old rows."""
    assert OUTCOMES == ("launching", "ready", "failed", "stopped") == get_args(Outcome)
    assert f"{FAILED}" == "failed" and json.dumps(READY) == '"ready"'  # plain str on every Python
    from cockpit.runner import events

    assert events.Diagnosis is Diagnosis  # still importable from where the runner's events are


def test_peaks_merge_keeping_the_max(journal):
    exp = launch(journal, "tp8")
    journal.record_peak(exp, {0: 80, 1: 50})
    journal.record_peak(exp, {0: 70, 1: 90, 2: 10})
    assert journal.experiment(exp).peak_memory == {0: 80, 1: 90, 2: 10}
    with pytest.raises(ValueError):
        journal.record_peak(12345, {0: 1})


def test_experiments_newest_first_by_profile(journal):
    a = launch(journal, "tp8")
    launch(journal, "tp4", profile="minimax-m2.5")
    c = launch(journal, "pp8")
    assert [e.id for e in journal.experiments(KIMI)] == [c, a]
    assert len(journal.experiments()) == 3
    assert [e.id for e in journal.experiments(limit=1)] == [c]


def test_two_processes_share_one_file(tmp_path):
    """A cockpit and its `cockpit bench` child each hold a connection and both write."""
    path = tmp_path / "journal.sqlite"
    with Journal(path) as cockpit, Journal(path) as bench:
        exp = launch(cockpit, "tp8")
        bench.add_point(exp, BenchPoint(32, 577.8))
        cockpit.record_peak(exp, {0: 5})
        bench.record_peak(exp, {0: 3, 1: 7})
        cockpit.set_outcome(exp, STOPPED)
        assert [p.output_tok_s for p in cockpit.points(exp)] == [577.8]
        assert bench.experiment(exp).peak_memory == {0: 5, 1: 7}
        assert bench.experiment(exp).outcome == STOPPED


def test_reopen_after_close_keeps_data(tmp_path):
    path = tmp_path / "journal.sqlite"
    with Journal(path) as journal:
        exp = served(journal, "tp8", {1: 26.3})
    with Journal(path) as journal:
        assert journal.experiment(exp).outcome == READY
        assert journal.points(exp)[0].output_tok_s == 26.3


def test_crash_keeps_what_was_written(tmp_path):
    path = tmp_path / "journal.sqlite"
    crashed = Journal(path)  # never closed, as when cockpit is killed
    exp = launch(crashed, "tp8")
    crashed.add_point(exp, BenchPoint(1, 26.3))
    with Journal(path) as after:
        assert after.experiment(exp).outcome == LAUNCHING
        assert len(after.points(exp)) == 1
    crashed.close()


def test_corrupted_file_is_reported_and_kept(tmp_path):
    path = tmp_path / "journal.sqlite"
    garbage = b"\x00\xffthis is not sqlite\n" * 200
    path.write_bytes(garbage)
    with pytest.raises(CockpitError) as info:
        Journal(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "move it aside" in message
    assert path.read_bytes() == garbage


def test_default_path_follows_xdg_and_env(tmp_path, monkeypatch):
    monkeypatch.delenv("COCKPIT_JOURNAL")
    assert default_path() == tmp_path / "data" / "cockpit" / "journal.sqlite"  # conftest's XDG_DATA_HOME
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "mine.sqlite"))
    with Journal() as journal:
        assert journal.path == tmp_path / "mine.sqlite"
    assert (tmp_path / "mine.sqlite").exists()


# -- the comparison table --------------------------------------------------------------------------


def seed_journal(journal: Journal) -> None:
    for layout, tok_s in SEED.items():
        served(journal, layout, tok_s)


def test_seed_kimi_table_in_markdown(journal):
    seed_journal(journal)
    text = format_comparison(comparison(journal, KIMI), "markdown")
    assert text.splitlines() == [
        "| Layout | C=1 tok/s | C=32 | C=64 | C=128 | Peak |",
        "|---|---:|---:|---:|---:|---:|",
        "| tp8 | 26.3 | **577.8** | 693.1 | 807.9 | 807.9 (C=128) |",
        "| pp8 | 36.9 | 250.9 | 396.0 | 395.6 | 396.0 (C=64) |",
        "| tp8 ep8 | **65.3** | 546.0 | **795.0** | **961.2** | **961.2 (C=128)** |",
    ]


def test_comparison_rows_and_best(journal):
    seed_journal(journal)
    comp = comparison(journal)  # no profile: the newest experiment's
    assert comp.profile == KIMI and comp.levels == [1, 32, 64, 128]
    assert [r.layout for r in comp.rows] == ["tp8", "pp8", "tp8 ep8"]
    assert comp.best == {1: "tp8 ep8", 32: "tp8", 64: "tp8 ep8", 128: "tp8 ep8"}
    pp8 = comp.rows[1]
    assert (pp8.peak.concurrency, pp8.peak.output_tok_s) == (64, 396.0)


def test_latest_benchmarked_experiment_wins_and_failures_show(journal):
    served(journal, "tp8", {1: 20.0, 32: 500.0})
    newer = served(journal, "tp8", {1: 26.3, 32: 577.8})
    launch(journal, "tp8")  # relaunched, not benchmarked yet: the numbers stay
    failed = launch(journal, "tp4 ep2")
    journal.set_outcome(failed, FAILED, diagnosis=Diagnosis("oom", "CUDA out of memory on GPU 2", "try tp8"))
    launch(journal, "other", profile="minimax-m2.5")

    comp = comparison(journal, KIMI)
    assert [(r.layout, r.experiment) for r in comp.rows] == [("tp8", newer), ("tp4 ep2", failed)]
    assert comp.rows[0].cells[32].output_tok_s == 577.8
    assert comp.best == {}  # one layout measured: nothing to beat

    markdown = format_comparison(comp, "markdown").splitlines()
    assert markdown[-1] == "| tp4 ep2 | failed: CUDA out of memory on GPU 2 |  |  |"
    table = format_comparison(comp, "table").splitlines()
    assert table[0].split() == ["layout", "C=1", "tok/s", "C=32", "peak"]
    assert table[-1] == "tp4 ep2  failed: CUDA out of memory on GPU 2"
    assert "*" not in "\n".join(table)


def test_plain_table_marks_best_with_a_star(journal):
    seed_journal(journal)
    lines = format_comparison(comparison(journal, KIMI), "table").splitlines()
    assert lines[0].startswith("layout ")
    assert lines[2].split() == ["tp8", "26.3", "577.8*", "693.1", "807.9", "807.9", "at", "C=128"]
    assert lines[3].split() == ["pp8", "36.9", "250.9", "396.0", "395.6", "396.0", "at", "C=64"]
    assert lines[4].split() == ["tp8", "ep8", "65.3*", "546.0", "795.0*", "961.2*", "961.2*", "at", "C=128"]
    assert len({line.index(" at C=") for line in lines[2:5]}) == 1  # the numbers line up
    assert lines[-1].startswith("* ")


def test_csv_and_json_shapes(journal):
    seed_journal(journal)
    failed = launch(journal, "dp8 ep")
    journal.set_outcome(failed, FAILED, diagnosis=Diagnosis("nccl", "NCCL timeout"))
    comp = comparison(journal, KIMI)

    rows = list(csv.DictReader(io.StringIO(format_comparison(comp, "csv"))))
    assert len(rows) == 3 * 4 + 1
    first = rows[0]
    assert (first["layout"], first["engine"], first["concurrency"], first["output_tok_s"]) == (
        "tp8",
        "sglang",
        "1",
        "26.3",
    )
    assert {"ttft_ms_p50", "itl_ms_p99", "e2e_ms_p99", "client_limited", "best", "experiment"} <= set(first)
    assert first["client_limited"] == "0" and rows[1]["best"] == "1"
    assert (
        rows[-1]["outcome"] == FAILED
        and rows[-1]["diagnosis"] == "NCCL timeout"
        and rows[-1]["concurrency"] == ""
    )

    records = json.loads(format_comparison(comp, "json"))
    assert len(records) == 13
    point = next(r for r in records if r["layout"] == "tp8 ep8" and r["concurrency"] == 64)
    assert point["output_tok_s"] == 795.0 and point["best"] is True
    assert point["ttft_ms_p50"] == 120.0 and point["itl_ms_p50"] == 40.0
    assert point["engine"] == "sglang" and isinstance(point["experiment"], int)


def test_unknown_format_lists_the_formats(journal):
    with pytest.raises(CockpitError, match="table, markdown, csv, json"):
        format_comparison(comparison(journal, KIMI), "html")


def test_empty_journal_prints_a_hint(journal):
    hint = format_comparison(comparison(journal, KIMI), "table")
    assert hint == f'no benchmark results yet for profile {KIMI}: run `cockpit run "tp8" --bench c=1,32,64`'
    assert format_comparison(comparison(journal, KIMI), "markdown") == hint
    assert json.loads(format_comparison(comparison(journal), "json")) == []


@pytest.mark.parametrize(
    "value, text", [(26.3, "26.3"), (577.8, "577.8"), (999.94, "999.9"), (3982.4, "3,982")]
)
def test_tok_s_numbers(value, text):
    assert format_tok_s(value) == text


def test_a_failure_a_later_launch_of_the_same_layout_got_past_is_not_shown(journal):
    refused = launch(journal, "tp4")
    journal.set_outcome(refused, FAILED, diagnosis=Diagnosis("port-in-use", "port 8000 is already in use"))
    launch(journal, "tp4")  # the next try came up (not benchmarked yet)
    still = launch(journal, "tp8")
    journal.set_outcome(still, FAILED, diagnosis=Diagnosis("fp8-block", "192 is not a multiple of 128"))
    assert [(r.layout, r.outcome) for r in comparison(journal, KIMI).rows] == [("tp8", FAILED)]


# -- failed levels never hide good numbers -----------------------------------------------------------


def failed_point(
    c: int, error: str = "8 of 8 requests failed: cannot connect: Connection refused"
) -> BenchPoint:
    return BenchPoint(c, 0.0, errors=8, failed=True, error=error)


def test_a_failed_level_is_journaled_with_its_reason(journal):
    exp = launch(journal, "tp8")
    journal.add_point(exp, failed_point(32))
    [point] = journal.points(exp)
    assert point.failed is True and point.error.startswith("8 of 8 requests failed")


def test_a_failed_rerun_keeps_the_earlier_good_measurement(journal):
    good = served(journal, "tp8", {1: 26.3, 32: 577.8})
    journal.add_point(good, failed_point(1))  # the same experiment benched again: the server had died
    dead = launch(journal, "tp8")  # and a relaunch whose bench failed at once
    journal.add_point(dead, failed_point(1))
    journal.add_point(dead, failed_point(32))

    [row] = comparison(journal, KIMI).rows
    assert row.experiment == good and row.failed == {}
    assert {c: p.output_tok_s for c, p in row.cells.items()} == {1: 26.3, 32: 577.8}
    assert format_comparison(comparison(journal, KIMI), "markdown").splitlines()[-1] == (
        "| tp8 | 26.3 | 577.8 | 577.8 (C=32) |"
    )


def test_a_good_level_of_an_older_run_fills_a_level_the_newer_run_failed(journal):
    served(journal, "tp8", {1: 20.0, 64: 693.1})
    newer = served(journal, "tp8", {1: 26.3})
    journal.add_point(newer, failed_point(64))
    [row] = comparison(journal, KIMI).rows
    assert row.experiment == newer
    assert {c: p.output_tok_s for c, p in row.cells.items()} == {1: 26.3, 64: 693.1}


def test_a_level_with_only_failed_points_shows_failed_with_its_reason_not_zero(journal):
    exp = served(journal, "tp8", {1: 26.3})
    journal.add_point(exp, failed_point(64, "no token came back"))
    served(journal, "pp8", {1: 36.9, 64: 396.0})
    comp = comparison(journal, KIMI)
    tp8 = comp.rows[0]
    assert comp.levels == [1, 64] and 64 not in tp8.cells and tp8.failed[64].error == "no token came back"
    assert comp.best == {1: "pp8"}  # at C=64 only pp8 has a number: nothing to beat
    assert format_comparison(comp, "markdown").splitlines()[2] == "| tp8 | 26.3 | failed | 26.3 (C=1) |"
    assert format_comparison(comp, "table").splitlines()[2].split() == [
        "tp8",
        "26.3",
        "failed",
        "26.3",
        "at",
        "C=1",
    ]
    record = next(
        r
        for r in json.loads(format_comparison(comp, "json"))
        if r["layout"] == "tp8" and r["concurrency"] == 64
    )
    assert record["failed"] is True and record["error"] == "no token came back" and record["best"] is False
    rows = list(csv.DictReader(io.StringIO(format_comparison(comp, "csv"))))
    assert [(r["concurrency"], r["failed"], r["error"]) for r in rows if r["layout"] == "tp8"] == [
        ("1", "0", ""),
        ("64", "1", "no token came back"),
    ]


def test_a_layout_whose_every_level_failed_is_a_failed_row_with_the_reason(journal):
    exp = launch(journal, "tp8")
    journal.set_outcome(exp, READY)
    journal.add_point(exp, failed_point(1))
    [row] = comparison(journal, KIMI).rows
    assert row.peak is None and row.cells == {} and set(row.failed) == {1}
    assert row.diagnosis == "benchmark at C=1: 8 of 8 requests failed: cannot connect: Connection refused"
    assert (
        format_comparison(comparison(journal, KIMI), "table").splitlines()[-1]
        == f"tp8     failed: {row.diagnosis}"
    )
    [record] = json.loads(format_comparison(comparison(journal, KIMI), "json"))
    assert record["failed"] is True and record["concurrency"] == 1


# -- notes, old files, broken rows -------------------------------------------------------------------


def test_notes_are_appended_one_line_each(journal):
    exp = launch(journal, "tp8")
    assert journal.experiment(exp).note is None
    journal.add_note(exp, "cockpit got SIGHUP; the server keeps running")
    journal.add_note(exp, "re-attached\nby pid 42")
    assert (
        journal.experiment(exp).note == "cockpit got SIGHUP; the server keeps running\nre-attached by pid 42"
    )
    with pytest.raises(ValueError, match="no experiment 999"):
        journal.add_note(999, "x")


def test_a_journal_of_the_first_schema_is_migrated_keeping_its_rows(tmp_path):
    import sqlite3

    from cockpit.store.journal import _MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "journal.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(_MIGRATIONS[0])
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_version VALUES (1)")
    db.execute(
        "INSERT INTO experiments (started, host, profile, model, engine, layout) VALUES (1, 'h', 'p', 'm', 'vllm', 'tp8')"
    )
    db.execute(
        "INSERT INTO bench_points (experiment_id, created, concurrency, output_tok_s) VALUES (1, 2, 32, 577.8)"
    )
    db.execute(
        "INSERT INTO bench_points (experiment_id, created, concurrency, output_tok_s, requests, errors) VALUES (1, 3, 64, 3.0, 1, 9)"
    )
    db.close()
    with Journal(path) as journal:
        assert journal.experiment(1).note is None
        point, mostly_failed = journal.points(1)
        assert (point.output_tok_s, point.failed, point.error) == (577.8, False, None)
        assert (
            mostly_failed.failed and "most requests failed" in mostly_failed.error
        )  # marked as it would be now
        journal.add_note(1, "migrated")
    version = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0]
    assert version == SCHEMA_VERSION >= 2


def test_rows_with_broken_json_read_as_empty(tmp_path):
    import sqlite3

    path = tmp_path / "journal.sqlite"
    with Journal(path) as journal:
        exp = served(journal, "tp8", {1: 26.3})
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE experiments SET argv = '{oops', gpus = '\"zero\"', peak_memory = '[1, 2'")
    db.execute("UPDATE bench_points SET extra = 'not json'")
    db.close()
    with Journal(path) as journal:
        got = journal.experiment(exp)
        assert (got.argv, got.gpus, got.peak_memory) == ((), (), {})
        assert journal.points(exp)[0].extra == {}
        journal.record_peak(exp, {0: 5})  # a broken column is replaced, not a crash
        assert journal.experiment(exp).peak_memory == {0: 5}
        assert json.loads(format_comparison(comparison(journal, KIMI), "json"))[0]["output_tok_s"] == 26.3


def test_cockpit_results_reads_a_journal_with_broken_rows(tmp_path, capsys):
    import sqlite3

    from cockpit.faces.cli import main

    with Journal() as journal:  # conftest's COCKPIT_JOURNAL
        served(journal, "tp8", {1: 26.3})
        path = journal.path
    sqlite3.connect(path, isolation_level=None).execute("UPDATE bench_points SET extra = '{'")
    assert main(["results", "--profile", KIMI]) == 0
    out = capsys.readouterr()
    assert "26.3" in out.out and "Traceback" not in out.err


# -- the file itself: private, refused when foreign, read when read-only --------------------------------


def mode(path) -> int:
    return path.stat().st_mode & 0o777


def test_a_journal_cockpit_creates_is_private(tmp_path):
    path = tmp_path / "new" / "deeper" / "journal.sqlite"
    with Journal(path) as journal:
        launch(journal, "tp8")
        assert mode(path) == 0o600
        assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
        assert all(mode(p) == 0o600 for p in path.parent.glob("journal.sqlite-*"))  # the WAL files too
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with Journal(shared / "journal.sqlite"):
        pass
    assert (
        mode(shared) == 0o755 and mode(shared / "journal.sqlite") == 0o600
    )  # a folder it found is left alone


def unchanged(path):
    """The bytes and mtime of a file, to show it was not touched."""
    return path.read_bytes(), path.stat().st_mtime_ns


def test_an_unrelated_sqlite_database_is_refused_untouched(tmp_path):
    import sqlite3

    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("INSERT INTO users VALUES ('ada')")
    db.commit()
    db.close()
    before = unchanged(path)
    with pytest.raises(CockpitError) as info:
        Journal(path)
    message = str(info.value)
    assert "\n" not in message and "not a cockpit journal" in message and "users" in message
    assert unchanged(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_text_file_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes, not a database\n" * 100)
    before = unchanged(path)
    with pytest.raises(CockpitError) as info:
        Journal(path)
    assert "\n" not in str(info.value) and "not a cockpit journal" in str(info.value)
    assert unchanged(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_empty_file_becomes_a_journal(tmp_path):
    path = tmp_path / "journal.sqlite"
    path.touch()
    with Journal(path) as journal:
        launch(journal, "tp8")
    with Journal(path) as journal:
        assert len(journal.experiments()) == 1


DROP_OVERRIDE = [
    "setpriv",
    "--bounding-set",
    "-dac_override,-dac_read_search,-fowner",
    "--inh-caps=-all",
    "--",
]


def as_user(code: str) -> subprocess.CompletedProcess:
    """Python ``code`` in a child that file modes bind: root overrides them, so as root the child
    runs under setpriv without that power (still uid 0, so it can read the interpreter)."""
    prefix = []
    if os.geteuid() == 0:
        probe = subprocess.run([*DROP_OVERRIDE, "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip("root, and setpriv cannot drop the file-mode override here")
        prefix = DROP_OVERRIDE
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.fixture
def locked(tmp_path):
    """Folders a test makes read-only get their modes back, so pytest can clean up."""
    made = []
    yield made
    for path in made:
        path.chmod(0o700 if path.is_dir() else 0o600)


def test_a_read_only_journal_is_read_but_not_written(tmp_path, locked):
    path = tmp_path / "data" / "journal.sqlite"
    with Journal(path) as journal:
        exp = served(journal, "tp8", {1: 26.3, 32: 577.8})
    path.chmod(0o444)
    path.parent.chmod(0o555)
    locked += [path.parent, path]

    env = f"import os; os.environ['COCKPIT_JOURNAL'] = {str(path)!r}; "
    read = as_user(
        env
        + f"from cockpit.faces.cli import main; raise SystemExit(main(['results', '--profile', {KIMI!r}, '--format', 'json']))"
    )
    assert read.returncode == 0, read.stderr
    assert [r["output_tok_s"] for r in json.loads(read.stdout)] == [26.3, 577.8]

    write = as_user(
        "from cockpit.store.journal import Journal, BenchPoint; from cockpit.core.errors import CockpitError\n"
        f"journal = Journal({str(path)!r}); assert journal.readonly\n"
        f"try: journal.add_point({exp}, BenchPoint(64, 693.1))\n"
        "except CockpitError as err: print(err)"
    )
    assert write.returncode == 0, write.stderr
    message = write.stdout.strip()
    assert "\n" not in message and "read-only" in message and str(path) in message
    assert sorted(p.name for p in path.parent.iterdir()) == ["journal.sqlite"]
    with Journal(path) as journal:  # whoever runs the suite reads it: nothing was added
        assert len(journal.points(exp)) == 2


def test_an_unwritable_data_folder_is_one_line(tmp_path, locked):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    locked.append(folder)
    for path in (folder / "journal.sqlite", folder / "cockpit" / "journal.sqlite"):
        result = as_user(
            f"import os; os.environ['COCKPIT_JOURNAL'] = {str(path)!r}\n"
            "from cockpit.faces.cli import main; raise SystemExit(main(['results']))"
        )
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Permission denied" in lines[0] and "COCKPIT_JOURNAL" in lines[0], lines


# -- what the engine logged beside what the planner predicted (issue 12) -------------------------------


def test_an_experiment_keeps_the_prediction_and_the_box_it_was_launched_with(journal):
    predicted = LaunchPrediction(PredictedMemory(weights_gib=53.63, kv_tokens=492117), learned_runs=3)
    exp = launch(journal, "tp8", predicted=predicted, gpu_type="rtx-pro-6000", engine_version="0.5.23")
    got = journal.experiment(exp)
    assert (got.prediction, got.gpu_type, got.engine_version, got.launch_facts) == (
        predicted,
        "rtx-pro-6000",
        "0.5.23",
        LaunchFacts(),
    )
    assert got.predicted == {"memory": {"weights_gib": 53.63, "kv_tokens": 492117}, "learned_runs": 3}
    old = journal.experiment(launch(journal, "pp8"))  # an older caller: nothing predicted, nothing known
    assert (old.predicted, old.gpu_type, old.engine_version, old.facts) == ({}, None, None, {})
    assert (old.prediction, old.launch_facts) == (LaunchPrediction(), LaunchFacts())


def test_facts_are_set_and_a_later_reading_replaces_them(journal):
    exp = launch(journal, "tp8")
    journal.set_facts(exp, LaunchFacts(weights_gib=53.75, kv_tokens=431204))
    journal.set_facts(exp, LaunchFacts(weights_gib=53.75, kv_tokens=431204, graph_gib=0.71))
    assert journal.experiment(exp).facts == {"weights_gib": 53.75, "kv_tokens": 431204, "graph_gib": 0.71}
    assert journal.experiment(exp).launch_facts.graph_gib == 0.71
    with pytest.raises(ValueError, match="no experiment 999"):
        journal.set_facts(999, LaunchFacts(weights_gib=1.0))


def test_bench_predictions_merge_into_what_was_predicted_at_launch(journal):
    exp = launch(
        journal, "tp8", predicted=LaunchPrediction(PredictedMemory(weights_gib=53.63), learned_runs=0)
    )
    journal.merge_predicted(exp, {"tok_s": {"1024/1024": {"1": 26.0, "32": 570.0}}})
    journal.merge_predicted(exp, {"tok_s": {"1024/1024": {"64": 690.0}, "256/128": {"1": 30.0}}})
    assert journal.experiment(exp).predicted == {
        "memory": {"weights_gib": 53.63},
        "learned_runs": 0,
        "tok_s": {"1024/1024": {"1": 26.0, "32": 570.0, "64": 690.0}, "256/128": {"1": 30.0}},
    }
    with pytest.raises(ValueError, match="no experiment 999"):
        journal.merge_predicted(999, {"tok_s": {}})


def test_a_journal_of_the_second_schema_gets_the_new_columns_empty(tmp_path):
    import sqlite3

    from cockpit.store.journal import _MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "journal.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    for script in _MIGRATIONS[:2]:
        db.executescript(script)
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_version VALUES (2)")
    db.execute(
        "INSERT INTO experiments (started, host, profile, model, engine, layout) VALUES (1, 'h', 'p', 'm', 'vllm', 'tp8')"
    )
    db.execute(  # a simulated launch journaled before the mark: its argv tells
        "INSERT INTO experiments (started, host, profile, model, engine, layout, argv) "
        "VALUES (2, 'h', 'p', 'm', 'vllm', 'tp4', '[\"python\", \"-m\", \"cockpit.sim\", \"vllm\"]')"
    )
    db.close()
    with Journal(path) as journal:
        got = journal.experiment(1)
        assert (got.facts, got.predicted, got.gpu_type, got.engine_version) == ({}, {}, None, None)
        assert (got.simulated, journal.experiment(2).simulated) == (False, True)
        journal.set_facts(1, LaunchFacts(weights_gib=53.63))
        assert journal.experiment(1).facts == {"weights_gib": 53.63}
    version = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0]
    assert version == SCHEMA_VERSION >= 3


def test_broken_facts_and_predictions_read_as_empty(tmp_path):
    import sqlite3

    path = tmp_path / "journal.sqlite"
    with Journal(path) as journal:
        exp = launch(journal, "tp8", predicted=LaunchPrediction(learned_runs=1))
    sqlite3.connect(path, isolation_level=None).execute(
        "UPDATE experiments SET facts = '{oops', predicted = '[1, 2]'"
    )
    with Journal(path) as journal:
        got = journal.experiment(exp)
        assert (got.facts, got.predicted) == ({}, {})
        journal.merge_predicted(exp, {"tok_s": {"1024/1024": {"1": 26.0}}})  # replaced, not a crash
        assert journal.experiment(exp).predicted == {"tok_s": {"1024/1024": {"1": 26.0}}}
