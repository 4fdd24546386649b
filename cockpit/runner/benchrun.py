"""Run `cockpit bench --jsonl` as a child process against a ready server and turn its lines into events.

A child process keeps the load generator's event loop free of anything the caller does (printing,
drawing); it writes each finished level to the journal itself, so an interrupted sweep keeps
the levels it finished. A child that ends with ``REQUESTS_FAILED_EXIT`` measured every level,
some with failed requests: its levels say so (marked in the journal); the bench did not fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterable, Iterator, Mapping

from cockpit.bench.command import PARENT_ENV, bench_argv, describe_level
from cockpit.bench.metrics import REQUESTS_FAILED_EXIT
from cockpit.bench.result import LevelSummary, contention_note, request_failures
from cockpit.core.benchrequest import BenchRequest
from cockpit.runner.events import BenchDone, BenchLevel, BenchTick, Event
from cockpit.store.profile import Profile


def bench_flaws(levels: Iterable[LevelSummary]) -> str:
    """One line after a bench whose levels are not all clean (``BenchLevel.result``): `C=8 had
    3/9 requests fail (HTTP 500); contended: the engine held 16 requests at C=32: those levels
    are marked ...`; "" when every level is clean (or failed, which its own line says)."""
    levels = list(levels)
    parts = [
        request_failures(levels),
        *(contention_note(level) for level in levels if not level.failed),
    ]
    text = "; ".join(part for part in parts if part)
    if not text:
        return ""
    return f"{text}: those levels are marked in `cockpit results`, and a clean run of them replaces them"


def bench_child(
    url: str, model: str | None, bench: BenchRequest, profile: Profile, experiment: int
) -> list[str]:
    """The child `cockpit bench --jsonl` that runs ``bench``, the profile's defaults filling the rest."""
    filled = bench.filled(profile.bench)
    return bench_argv(
        url,
        model,
        filled.concurrency,
        input_len=filled.input_len,
        output_len=filled.output_len,
        requests=filled.requests,
        duration=filled.duration_s,
        experiment=experiment,
        timeout=filled.timeout_s,
        slo=filled.slo,
        rate=filled.rate,
    )


def run_bench_child(argv: list[str], experiment: int, api_key: str | None = None) -> Iterator[Event]:
    """Events from the child's JSON lines. Any way this generator ends early (Ctrl-C, SIGTERM,
    SIGHUP, the caller closing it) passes SIGINT on, so the child journals what it finished and
    ends; it never outlives this call. The server's API key goes by environment, not argv."""
    levels = 0
    # The key is the server's or none: a key the user exported for another service stays home.
    env: Mapping[str, str] = {**os.environ, "OPENAI_API_KEY": api_key or "", PARENT_ENV: str(os.getpid())}
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, env=env
    )
    stdout, stderr = child.stdout, child.stderr
    assert stdout is not None and stderr is not None  # both piped above
    try:
        for line in stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # not ours: a warning a library printed
            kind = str(event.get("type", ""))
            if kind == "tick":
                yield BenchTick(
                    experiment,
                    int(event.get("concurrency", 0)),
                    float(event.get("elapsed_s", 0)),
                    float(event.get("tok_s", 0)),
                )
            elif kind == "level_done":
                levels += 1
                level = LevelSummary.from_json(event.get("result", event))
                yield BenchLevel(experiment, level.concurrency, level, describe_level(level))
        code = child.wait()
        error = ""
        if code not in (0, 130, REQUESTS_FAILED_EXIT):
            lines = (stderr.read() or "").strip().splitlines()
            error = lines[-1] if lines else f"cockpit bench exited with code {code}"
        yield BenchDone(experiment, levels, interrupted=code == 130, error=error)
    except BaseException:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
        raise
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        stdout.close()
        stderr.close()
