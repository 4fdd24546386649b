"""Partial failures never replace clean numbers, and another client's load is seen: a fault table.

A level with some failed requests (3 of 9) or measured while another client loaded the server is
journaled as measured but not clean: it never replaces a clean level of the same layout and
workload, is shown (marked `[3/9 err]`, `[contended]`) only where no clean one exists, and is
never a column's best or the table's best peak, in every format `cockpit results` writes and on
the screen. Against the simulated engine as a real process, a bench on a server that already
runs requests says so in one line and journals the level as contended.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from helpers import free_port
from simproc import SimProcess

from cockpit.core.outcome import READY
from cockpit.faces.cli import main
from cockpit.faces.tui.widgets.bench_pane import result_cells
from cockpit.reports.comparison import comparison
from cockpit.reports.results import MARK_NOTE
from cockpit.store.journal import BenchPoint, Journal

PROFILE = "minimax-m2.5"
LENGTHS = (512, 128)
BUSY = {"requests_peak": 16, "running_peak": 16, "waiting_peak": 0, "concurrency": 8}


@dataclass(frozen=True)
class Level:
    """One journaled level: its tok/s, failed requests of those that ended, and anything else."""

    tok_s: float
    errors: int = 0
    requests: int = 9
    failed: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def point(self, concurrency: int) -> BenchPoint:
        return BenchPoint(
            concurrency,
            self.tok_s,
            requests=self.requests - self.errors,
            errors=self.errors,
            failed=self.failed,
            error=self.error,
            input_len=LENGTHS[0],
            output_len=LENGTHS[1],
            extra=dict(self.extra),
        )


def clean(tok_s: float) -> Level:
    return Level(tok_s)


def errored(tok_s: float, errors: int, ended: int = 9) -> Level:
    return Level(tok_s, errors=errors, requests=ended)


def contended(tok_s: float, seen: Any = None, errors: int = 0) -> Level:
    return Level(tok_s, errors=errors, extra={"contended": BUSY if seen is None else seen})


def failed(errors: int = 9) -> Level:
    return Level(0.0, errors=errors, failed=True, error=f"{errors} of {errors} requests failed: HTTP 500")


# The other layout of every case: clean at both levels, so it is what a marked level competes with.
TP4 = ("tp4", {8: clean(100.0), 32: clean(400.0)})


@dataclass(frozen=True)
class Case:
    """Runs journaled oldest first (layout, {C: Level}); what tp2's row shows, in markdown
    notation (bold: the best of its column, or the best peak); the lines under the table; what
    csv and json hold for tp2 at each level (tok/s, errors, clean)."""

    id: str
    runs: list[tuple[str, dict[int, Level]]]
    cells: dict[int, str]
    peak: str
    notes: list[str]
    records: dict[int, tuple[float, int, bool]]


CASES = [
    Case(
        "errored-run-after-a-clean-one-keeps-the-clean-numbers",
        [
            TP4,
            ("tp2", {8: clean(118.6), 32: clean(458.0)}),
            ("tp2", {8: errored(140.0, 3), 32: errored(500.0, 4)}),
        ],
        {8: "**118.6**", 32: "**458.0**"},
        "**458.0 (C=32)**",
        [
            "tp2 C=8: a newer run (3 of 9 requests failed) is set aside for the clean one shown",
            "tp2 C=32: a newer run (4 of 9 requests failed) is set aside for the clean one shown",
        ],
        {8: (118.6, 0, True), 32: (458.0, 0, True)},
    ),
    Case(
        "only-an-errored-run-is-shown-marked-and-never-best",
        [TP4, ("tp2", {8: errored(118.6, 3)})],
        {8: "118.6 [3/9 err]", 32: "-"},
        "118.6 [3/9 err] (C=8)",
        [MARK_NOTE],
        {8: (118.6, 3, False)},
    ),
    Case(
        "an-errored-level-above-the-clean-peak-is-not-the-peak",
        [TP4, ("tp2", {8: clean(118.6), 32: errored(900.0, 4)})],
        {8: "**118.6**", 32: "900.0 [4/9 err]"},
        "118.6 (C=8)",
        [MARK_NOTE],
        {8: (118.6, 0, True), 32: (900.0, 4, False)},
    ),
    Case(
        "a-contended-run-after-a-clean-one-keeps-the-clean-numbers",
        [TP4, ("tp2", {8: clean(118.6)}), ("tp2", {8: contended(60.0)})],
        {8: "**118.6**", 32: "-"},
        "118.6 (C=8)",
        [
            "tp2 C=8: a newer run (the engine held 16 requests at C=8: another client's load) "
            "is set aside for the clean one shown"
        ],
        {8: (118.6, 0, True)},
    ),
    Case(
        "only-a-contended-run-is-shown-marked",
        [TP4, ("tp2", {8: contended(160.0)})],
        {8: "160.0 [contended]", 32: "-"},
        "160.0 [contended] (C=8)",
        [MARK_NOTE],
        {8: (160.0, 0, False)},
    ),
    Case(
        "errored-and-contended-says-both",
        [TP4, ("tp2", {8: contended(60.0, errors=1)})],
        {8: "60.0 [1/9 err, contended]", 32: "-"},
        "60.0 [1/9 err, contended] (C=8)",
        [MARK_NOTE],
        {8: (60.0, 1, False)},
    ),
    Case(
        "a-contention-record-of-the-wrong-type-still-marks",
        [TP4, ("tp2", {8: contended(60.0, seen="yes")})],
        {8: "60.0 [contended]", 32: "-"},
        "60.0 [contended] (C=8)",
        [MARK_NOTE],
        {8: (60.0, 0, False)},
    ),
    Case(
        "a-failed-level-stays-failed",
        [TP4, ("tp2", {8: clean(118.6)}), ("tp2", {8: failed(), 32: failed()})],
        {8: "**118.6**", 32: "failed"},
        "118.6 (C=8)",
        [],
        {8: (118.6, 0, True), 32: (0.0, 9, False)},
    ),
]


def journal_runs(runs: list[tuple[str, dict[int, Level]]]) -> dict[int, int]:
    """Each run as one launch of the profile and its levels, as `cockpit run --bench` journals
    them: experiment id -> points written."""
    written = {}
    with Journal() as journal:
        for layout, levels in runs:
            exp = journal.start_experiment(
                profile=PROFILE, model="MiniMaxAI/MiniMax-M2.5", engine="vllm", layout=layout, argv=[]
            )
            journal.set_outcome(exp, READY)
            for concurrency, level in levels.items():
                journal.add_point(exp, level.point(concurrency))
            written[exp] = len(levels)
    return written


def results(capsys, fmt: str) -> str:
    assert main(["results", "--profile", PROFILE, "--format", fmt]) == 0
    return capsys.readouterr().out


def plain(cell: str) -> str:
    return cell.removeprefix("**").removesuffix("**")


def bold(cell: str) -> bool:
    return cell.startswith("**")


def table_row(text: str, layout: str) -> list[str]:
    """A layout's cells in the terminal table (columns are two or more spaces apart)."""
    line = next(line for line in text.splitlines() if line.startswith(layout + " "))
    return re.split(r"\s{2,}", line.strip())


def markdown_row(lines: list[str], layout: str) -> list[str]:
    """A layout's cells in the report's first (tok/s) table."""
    line = next(line for line in lines if line.startswith(f"| {layout} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_results_keep_clean_numbers_and_mark_the_rest(case: Case, capsys):
    written = journal_runs(case.runs)
    levels = sorted(case.cells)

    # table: `118.6*` for a best, `118.6 [3/9 err]` marked, the lines under the table
    text = results(capsys, "table")
    row = table_row(text, "tp2")
    for i, level in enumerate(levels, 1):
        cell = case.cells[level]
        assert row[i] == plain(cell) + ("*" if bold(cell) else ""), (level, row, text)
    peak = row[len(levels) + 1].split(" at C=")[0]
    assert peak.removesuffix("*") == plain(case.peak).split(" (C=")[0], text
    assert peak.endswith("*") == bold(case.peak), text
    for note in case.notes:
        assert note in text.splitlines(), text
    assert (MARK_NOTE in text) == (MARK_NOTE in case.notes), text

    # markdown (`cockpit results --format markdown` is the `export md` report)
    lines = results(capsys, "markdown").splitlines()
    assert markdown_row(lines, "tp2")[1:] == [case.cells[c] for c in levels] + [case.peak], lines
    for note in case.notes:
        assert f"_{note}_" in lines, lines

    # csv and json: a record per level, with its errors, requests and whether it is clean
    rows = list(csv.DictReader(io.StringIO(results(capsys, "csv"))))
    records = json.loads(results(capsys, "json"))
    for level, (tok_s, errors, is_clean) in case.records.items():
        [row_csv] = [r for r in rows if r["layout"] == "tp2" and r["concurrency"] == str(level)]
        [record] = [r for r in records if r["layout"] == "tp2" and r["concurrency"] == level]
        assert (float(row_csv["output_tok_s"]), int(row_csv["errors"]), row_csv["clean"]) == (
            tok_s,
            errors,
            str(int(is_clean)),
        )
        assert (record["output_tok_s"], record["errors"], record["clean"]) == (tok_s, errors, is_clean)
        assert record["requests"] + record["errors"] == 9
        assert record["best"] is bold(case.cells[level])
        assert (record["contended"] is not None) == ("contended" in case.cells[level])

    # the screen's table marks the same cells
    with Journal() as journal:
        comp = comparison(journal, PROFILE)
    [tp2] = [row for row in comp.rows if row.layout == "tp2"]
    shown = [str(cell) for cell in result_cells(tp2, comp)]
    expected = [plain(case.cells[c]) + (" ★" if bold(case.cells[c]) else "") for c in levels]
    assert shown[1:-1] == [cell.replace("failed", "-") for cell in expected]  # the screen: `-` for failed

    # nothing lost: the other layout is still there, and every point is still in the journal
    assert table_row(text, "tp4")[0] == "tp4" and markdown_row(lines, "tp4")[0] == "tp4"
    with Journal() as journal:
        assert {exp: len(journal.points(exp)) for exp in written} == written


# -- another client's load, against the simulated engine ------------------------------------------

MODEL = "qwen3-30b-a3b-fp8"
BUSY_LINE = re.compile(
    r"the server already runs (\d+) requests not from this bench: numbers at C=4 are contended"
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    port = free_port()
    flags = ["--tensor-parallel-size", "2", "--max-num-seqs", "256", "--port", str(port)]
    sim = SimProcess("vllm", ["serve", MODEL, *flags], tmp_path_factory.mktemp("simbox"))
    url = f"http://127.0.0.1:{port}"
    try:
        sim.wait_ready(url)
        yield url
    finally:
        sim.stop()


def bench_argv(url: str, experiment: int, *options: str) -> list[str]:
    return [
        sys.executable, "-m", "cockpit", "bench", "--url", url, "--jsonl", "--experiment", str(experiment),
        "--input-len", "16", "--output-len", "16", *options,
    ]  # fmt: skip


def launch(layout: str) -> int:
    """The experiment a bench journals under (as `cockpit run` starts one)."""
    with Journal() as journal:
        exp = journal.start_experiment(
            profile=PROFILE, model=MODEL, engine="vllm", layout=layout, argv=[], simulated=True
        )
        journal.set_outcome(exp, READY)
        return exp


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


class Background:
    """A steady load of another client: 8 streams, each sending its next request as its last ends."""

    def __init__(self, url: str, streams: int = 8) -> None:
        self.url, self.stop = url, threading.Event()
        body = {"model": MODEL, "prompt": "hello " * 16, "max_tokens": 64, "ignore_eos": True}
        self.threads = [
            threading.Thread(target=self._stream, args=(body,), daemon=True) for _ in range(streams)
        ]

    def _stream(self, body: dict) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                client.post(self.url + "/v1/completions", json=body)

    def __enter__(self) -> Background:
        for thread in self.threads:
            thread.start()
        for _ in range(1000):  # every stream admitted before the bench begins
            if running(self.url) >= len(self.threads):
                return self
            time.sleep(0.01)
        raise AssertionError(f"the background load never reached {len(self.threads)} requests")

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def running(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running")
    )


def alone(url: str) -> list[tuple[int, subprocess.CompletedProcess]]:
    exp = launch("tp2")
    return [
        (
            exp,
            subprocess.run(
                bench_argv(url, exp, "-c", "4", "--requests", "8"), capture_output=True, text=True
            ),
        )
    ]


def beside_background(url: str) -> list[tuple[int, subprocess.CompletedProcess]]:
    exp = launch("tp2")
    with Background(url):
        bench = subprocess.run(
            bench_argv(url, exp, "-c", "4", "--requests", "8"), capture_output=True, text=True
        )
    return [(exp, bench)]


def two_benches(url: str) -> list[tuple[int, subprocess.CompletedProcess]]:
    """A first bench at C=8 for 5 s; a second at C=4 starts once the first's level has begun."""
    first_exp, second_exp = launch("tp4"), launch("tp2")
    first = subprocess.Popen(
        bench_argv(url, first_exp, "-c", "8", "--duration", "5"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    seen = [first.stdout.readline()]  # level_start: its requests go out as the second starts
    second = subprocess.run(
        bench_argv(url, second_exp, "-c", "4", "--duration", "1.2"), capture_output=True, text=True
    )
    out, err = first.communicate(timeout=60)
    return [
        (first_exp, subprocess.CompletedProcess(first.args, first.returncode, "".join(seen) + out, err)),
        (second_exp, second),
    ]


@pytest.mark.parametrize(
    ("load", "warned", "marked"),
    [
        pytest.param(alone, [False], [False], id="alone-on-the-server-no-warning-nothing-marked"),
        pytest.param(beside_background, [True], [True], id="another-clients-steady-load-warns-and-marks"),
        pytest.param(two_benches, [False, True], [True, True], id="two-benches-at-once-both-marked"),
    ],
)
def test_a_bench_on_a_busy_server_warns_and_journals_the_contention(engine, load, warned, marked, capsys):
    runs = load(engine)
    with Journal() as journal:
        for (exp, bench), warns, marks in zip(runs, warned, marked):
            assert bench.returncode == 0, bench.stderr
            seen = events(bench.stdout)
            busy = [e for e in seen if e["type"] == "busy"]
            if warns:
                [line] = busy
                found = BUSY_LINE.fullmatch(line["message"])
                assert found and int(found.group(1)) > 0, line
            elif len(runs) == 1:  # the first of two benches may or may not find the second begun
                assert busy == [], busy
            [point] = journal.points(exp)  # the level is journaled, marked or not: nothing lost
            assert point.output_tok_s > 0 and point.errors == 0
            seen_load = point.extra.get("contended")
            if marks:
                assert seen_load and seen_load["concurrency"] == point.concurrency, point.extra
                assert (
                    seen_load.get("requests_peak", 0) > point.concurrency
                    or seen_load.get("busy_before", 0) > 0
                )
            else:
                assert seen_load is None, point.extra
    text = results(capsys, "table")
    assert ("[contended]" in text) == any(marked), text


# -- a level where some requests failed, measured against a server that fails one in three ----------


class OneInThreeFails:
    """A little OpenAI-compatible server on 127.0.0.1 whose every third completion answers HTTP 500;
    the others stream 4 tokens. Its own loop, in a thread; no /metrics."""

    def __init__(self) -> None:
        from aiohttp import web

        self.count = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._complete)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)

    async def _start(self) -> None:
        from aiohttp import web

        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def _models(self, request):
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _complete(self, request):
        from aiohttp import web
        from test_bench_client import DONE, sse, token, usage

        await request.read()
        self.count += 1
        if self.count % 3 == 0:
            return web.json_response({"object": "error", "message": "boom", "code": 500}, status=500)
        return await sse(request, *(token(" a") for _ in range(3)), token(" b", "length", usage(4)), DONE)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture
def one_in_three():
    server = OneInThreeFails()
    yield server
    server.stop()


def bench_partly_failing(url: str, experiment: int) -> subprocess.CompletedProcess:
    """`cockpit bench` at C=1: one request in three fails, so the level is measured, not failed."""
    argv = [*bench_argv(url, experiment, "-c", "1", "--requests", "9", "--timeout", "10")]
    argv.remove("--jsonl")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def headless_partly_failing(url: str, experiment: int) -> tuple[list[Any], str]:
    """The same bench as `cockpit run --bench` and `cockpit sweep` run it: a child, its events,
    and the one line they print after it."""
    from cockpit.runner.benchrun import bench_flaws, run_bench_child
    from cockpit.runner.events import BenchLevel

    seen = list(
        run_bench_child(
            bench_argv(url, experiment, "-c", "1", "--requests", "9", "--timeout", "10"), experiment
        )
    )
    return seen, bench_flaws(e.result for e in seen if isinstance(e, BenchLevel))


def test_a_level_with_failed_requests_is_journaled_marked_and_said_in_one_line(one_in_three, capsys):
    """The headless paths (`cockpit run --bench`, `cockpit sweep`): the bench did not fail, one
    line says which level had failures, and the level is journaled measured, with its errors."""
    from cockpit.runner.events import BenchDone

    exp = launch("tp2")
    seen, flaws = headless_partly_failing(one_in_three.url, exp)
    assert isinstance(seen[-1], BenchDone) and seen[-1].error == "" and seen[-1].levels == 1
    assert re.fullmatch(r"C=1 had \d/\d+ requests fail \(.*500.*\): those levels are marked .*", flaws), flaws

    with Journal() as journal:  # nothing lost: the level is journaled, measured, with its errors
        [point] = journal.points(exp)
    assert point.errors > 0 and not point.failed and point.output_tok_s > 0
    text = results(capsys, "table")
    assert re.search(r"^tp2 +[\d.,]+ \[\d/\d+ err\]", text, re.M) and MARK_NOTE in text, text


def test_cockpit_bench_exits_not_0_when_some_requests_failed(one_in_three):
    """`cockpit bench`: not 0 (the numbers are not clean), not 1 (no level failed), one line."""
    from cockpit.bench.metrics import REQUESTS_FAILED_EXIT

    exp = launch("tp2")
    bench = bench_partly_failing(one_in_three.url, exp)
    assert bench.returncode == REQUESTS_FAILED_EXIT, bench.stdout + bench.stderr
    [line] = bench.stderr.strip().splitlines()
    assert re.fullmatch(r"cockpit bench: C=1 had \d/\d+ requests fail \(.*500.*\): .*", line), line
    with Journal() as journal:
        [point] = journal.points(exp)
    assert point.errors > 0 and not point.failed
