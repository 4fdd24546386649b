"""`cockpit bench`: a concurrency sweep against any OpenAI-compatible server.

With ``--jsonl`` it prints one JSON event a line, which is how ``cockpit run --bench`` and the
TUI drive it as a child process (so drawing never skews the timings). With ``--experiment`` each
finished level is written to the journal at once: Ctrl-C in the middle keeps what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from cockpit.bench.metrics import REQUESTS_FAILED_EXIT
from cockpit.bench.result import LevelSummary, contention_note, request_failures
from cockpit.core.benchrequest import (
    DEFAULT_INPUT_LEN,
    DEFAULT_LEVELS,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_TIMEOUT_S,
    MAX_PROMPTS_BYTES,
    TOKEN_PACE_S,
    check_rate,
    check_seconds,
    check_whole,
    check_workers,
    mib,
    parse_levels,
    request_deadline_s,
    typed_real,
    typed_whole,
)
from cockpit.core.errors import CockpitError, cut
from cockpit.core.secrets import redact_text
from cockpit.core.slo import EXAMPLE, Slo, parse_slo
from cockpit.system.children import python_module

Print = Callable[[str], None]
PARENT_ENV = "COCKPIT_BENCH_PARENT"  # set by the cockpit that starts `cockpit bench --jsonl`
PARENT_POLL_S = 0.5


def add_bench_parser(commands) -> argparse.ArgumentParser:
    bench = commands.add_parser("bench", help="a concurrency sweep against an OpenAI-compatible server")
    bench.add_argument(
        "--url",
        required=True,
        help="the server, e.g. http://127.0.0.1:8000 (a password in it is never shown; an API key "
        "goes in OPENAI_API_KEY)",
    )
    bench.add_argument("--model", help="the served model id (default: the first of /v1/models)")
    levels = ",".join(map(str, DEFAULT_LEVELS))
    bench.add_argument(
        "-c", "--concurrency", default=levels, metavar="C,C,...", help=f"levels (default {levels})"
    )
    # The numbers are read as text and checked by cockpit.core.benchrequest, as the prompt's words are:
    # the same spellings, the same bounds, the same one line; the defaults are a profile's too.
    bench.add_argument(
        "--input-len",
        default=str(DEFAULT_INPUT_LEN),
        metavar="N",
        help=f"prompt tokens (default {DEFAULT_INPUT_LEN})",
    )
    bench.add_argument(
        "--output-len",
        default=str(DEFAULT_OUTPUT_LEN),
        metavar="N",
        help=f"output tokens (default {DEFAULT_OUTPUT_LEN})",
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--requests", metavar="N", help="measured requests per level")
    size.add_argument("--duration", metavar="S", help="measured seconds per level")
    bench.add_argument("--rate", metavar="R", help="open loop: Poisson arrivals at R requests/s")
    bench.add_argument(
        "--prompts",
        metavar="FILE",
        help='a JSONL file of prompts ({"prompt": ...} or {"messages": [...]}), at most '
        f"{mib(MAX_PROMPTS_BYTES)}",
    )
    bench.add_argument(
        "--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions"
    )
    bench.add_argument(
        "--workers",
        default="auto",
        metavar="N|auto",
        help="processes per level, one event loop each: 1 sends from this process; auto (the "
        "default) adds workers when the level before says one core will not keep up",
    )
    bench.add_argument(
        "--goodput",
        metavar="BOUNDS",
        help=f"latency bounds in ms, e.g. {EXAMPLE}: each level also reports its goodput, the "
        "output tok/s of the requests whose TTFT and mean inter-token latency met them",
    )
    bench.add_argument("--jsonl", action="store_true", help="print one JSON event a line")
    bench.add_argument(
        "--experiment", type=int, metavar="ID", help="journal each level under this experiment"
    )
    bench.add_argument(
        "--timeout",
        default=f"{DEFAULT_TIMEOUT_S:g}",
        metavar="S",
        help="give up on a request after S seconds without a token: connecting and the first token "
        "included, SSE comments and keep-alives not counted; after its first S seconds a request "
        f"must also average a token every {TOKEN_PACE_S:g} s, and at most S + {TOKEN_PACE_S:g} s "
        f"per output token asked (default {DEFAULT_TIMEOUT_S:g})",
    )
    return bench


def config_from_args(args: argparse.Namespace):
    """The sweep the flags ask for, every value checked against cockpit.core.benchrequest before
    anything is sent; a bad one is one line naming its flag."""
    from cockpit.bench.config import BenchConfig

    url = check_url(args.url)
    sizes = {
        name: check_whole(name, typed_whole(text), _flag(name), _FIXES[name])
        for name in ("input_len", "output_len", "requests")
        if (text := getattr(args, name)) is not None
    }
    duration = None
    if args.duration is not None:
        duration = check_seconds(typed_real(args.duration, seconds=True), "--duration", "like --duration 60")
    rate = check_rate(typed_real(args.rate), "--rate", "like --rate 4") if args.rate is not None else None
    timeout = check_seconds(typed_real(args.timeout, seconds=True), "--timeout", "like --timeout 600")
    levels = parse_levels(args.concurrency, "-c")
    workers = _workers(args.workers)
    slo = parse_slo(args.goodput, "--goodput") if args.goodput is not None else None
    if args.prompts is not None:
        check_prompts_file(args.prompts)
    output_len = sizes["output_len"]
    return BenchConfig(
        url=url,
        model=args.model,
        endpoint="chat" if args.chat else "completions",
        concurrency=levels,
        input_len=sizes["input_len"],
        output_len=output_len,
        requests=sizes.get("requests"),
        duration_s=duration,
        rate=rate,
        jsonl=args.prompts,
        api_key=os.environ.get("OPENAI_API_KEY") or None,  # never on argv, where `ps` shows it
        timeout=timeout,
        # A prompts file's lines may ask for other lengths: the transports' pace bounds those.
        request_timeout_s=None if args.prompts else request_deadline_s(timeout, output_len),
        workers=workers,
        slo=slo,
    )


_FIXES = {
    "input_len": "like --input-len 1024",
    "output_len": "like --output-len 256",
    "requests": "like --requests 200",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_url(text: str) -> str:
    """``--url`` as a URL a transport can open: http(s), a host, a port that is one; the text
    shown in the error has its password blanked."""
    seen = cut(redact_text(text), 80)
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - reading it checks it: "Port out of range", "could not be cast"
    except ValueError as err:
        raise CockpitError(
            f"--url {seen!r} is not a URL: {redact_text(str(err))}: give one like http://127.0.0.1:8000"
        ) from None
    if parts.scheme not in ("http", "https"):
        raise CockpitError(f"--url must start with http:// or https://, got {seen!r}")
    if not parts.hostname:
        raise CockpitError(f"--url {seen!r} names no host: give one like http://127.0.0.1:8000")
    return text.rstrip("/")


def check_prompts_file(path: str) -> None:
    """``--prompts`` before anything is sent: a regular file within the size bound (a FIFO, a
    device or a folder is refused without being opened); its lines are checked as they are read."""
    from cockpit.bench.workload import check_prompts_path

    check_prompts_path(path)


def _workers(text: str) -> int | None:
    """``--workers``: a whole number from 1, or ``auto`` (None)."""
    if text.strip().lower() == "auto":
        return None
    return check_workers(typed_whole(text), "--workers")


def describe_level(level: LevelSummary) -> str:
    """One line per finished level, for people."""
    line = (
        f"C={level.concurrency:<5} {level.output_tok_s:>10,.1f} tok/s  "
        f"{level.request_s or 0:6.2f} req/s  "
        f"TTFT p50 {_ms(level.ttft_ms.p50)} p99 {_ms(level.ttft_ms.p99)}  "
        f"ITL p50 {_ms(level.itl_ms.p50)} p99 {_ms(level.itl_ms.p99)}  "
        f"errors {level.errors}"
    )
    if level.error_reasons:
        reason, count = max(level.error_reasons.items(), key=lambda item: item[1])
        line += f" ({count}x {reason})"
    if level.failed:
        line += "  FAILED: not comparable"
    if note := contention_note(level):
        line += f"  [{note}]"
    if level.goodput_tok_s is not None:
        line += f"  {_goodput(level, level.goodput_tok_s)}"
    if (level.workers or 1) > 1:
        line += f"  ({level.workers} workers)"
    if level.client_limited:
        line += f"  [client-limited: {level.client_note}]"
    return line


def _goodput(level: LevelSummary, goodput_tok_s: float) -> str:
    """``goodput 812 tok/s (94% of requests within ttft<=2000ms itl<=50ms)``."""
    bounds = level.slo.describe() if level.slo is not None else "the bounds"
    requests, good = level.requests or 0, level.good_requests or 0
    share = f"{100 * good / requests:.0f}%" if requests else "0%"
    return f"goodput {goodput_tok_s:,.1f} tok/s ({share} of requests within {bounds})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def run_bench(args: argparse.Namespace, out: Print = print) -> int:
    """`cockpit bench`; any error it ends with has the URL's password blanked."""
    try:
        return _run_bench(args, out)
    except CockpitError as err:
        raise CockpitError(redact_text(str(err))) from None


def _run_bench(args: argparse.Namespace, out: Print) -> int:
    from cockpit.bench.concurrency_sweep import Busy, LevelDone, run, run_sweep

    cfg = config_from_args(args)
    # The parent names itself: a parent that died while we imported would be missed by getppid().
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    if args.jsonl:
        _listen_for_interrupt()
        _exit_with_parent(parent)
    journal = None
    if args.experiment is not None:
        from cockpit.store.journal import Journal

        journal = Journal()
        if journal.experiment(args.experiment) is None:
            journal.close()
            raise CockpitError(f"no experiment {args.experiment} in the journal {journal.path}: check the id")
    done: list[LevelSummary] = []

    def on_event(event) -> None:
        if isinstance(event, LevelDone):
            if args.jsonl and os.getppid() != parent:
                os._exit(1)  # orphaned between two polls: this level is not the parent's to keep
            done.append(event.result)
            if journal is not None:
                journal.add_point(args.experiment, event.result.to_bench_point())
        if args.jsonl:
            out(json.dumps(event.to_json()))
        elif isinstance(event, LevelDone):
            out(redact_text(describe_level(event.result)))
        elif isinstance(event, Busy):
            print(f"cockpit bench: {event.message}", file=sys.stderr)
        sys.stdout.flush()

    try:
        run(run_sweep(cfg, on_event))
    except KeyboardInterrupt:
        kept = ", ".join(f"C={r.concurrency}" for r in done) or "none"
        print(f"cockpit bench: interrupted; finished levels kept: {kept}", file=sys.stderr)
        return 130
    finally:
        if journal is not None:
            journal.close()
    return _exit_code(done)


def _exit_code(done: Sequence[LevelSummary]) -> int:
    """1 with one line naming the failed levels, when any failed; they are journaled as failed.
    REQUESTS_FAILED_EXIT with one line naming the levels where some requests failed: journaled
    as measured, marked, and never in place of a clean level in `cockpit results`."""
    failed = [r for r in done if r.failed]
    partly = redact_text(request_failures(done))
    if not failed:
        if not partly:
            return 0
        print(
            f"cockpit bench: {partly}: those levels are marked, never in place of a clean run",
            file=sys.stderr,
        )
        return REQUESTS_FAILED_EXIT
    levels = ", ".join(f"C={r.concurrency}" for r in failed)
    reason = redact_text(failed[0].error or "no cause recorded")
    if not any(r.output_tok_s > 0 for r in done):
        print(f"cockpit bench: no level got a token back ({levels} failed: {reason})", file=sys.stderr)
    else:
        also = f"; {partly}" if partly else ""
        print(f"cockpit bench: {levels} failed ({reason}){also}: see the errors above", file=sys.stderr)
    return 1


def _listen_for_interrupt() -> None:
    """As cockpit's child (`--jsonl`), SIGINT is how the parent stops the sweep, keeping the
    levels done. A child started from a shell's background job inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt: it would run on, still sending requests."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_with_parent(parent: int) -> None:
    """As cockpit's child, never outlive it: a parent killed (-9, a crash) cannot stop us, so a
    thread watches for the re-parenting and ends the process at once, journaling nothing more."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


def bench_argv(
    url: str,
    model: str | None,
    levels: Sequence[int],
    *,
    input_len: int,
    output_len: int,
    requests: int | None = None,
    duration: float | None = None,
    experiment: int | None = None,
    timeout: float | None = None,
    slo: Slo | None = None,
    rate: float | None = None,
) -> list[str]:
    """The argv of `cockpit bench --jsonl` as a child process (how `run` and the TUI start it).
    An API key goes in the child's environment (OPENAI_API_KEY), never here."""
    argv = [
        *python_module("cockpit.faces.cli"),
        "bench",
        "--url",
        url,
        "--jsonl",
        "-c",
        ",".join(map(str, levels)),
        "--input-len",
        str(input_len),
        "--output-len",
        str(output_len),
    ]
    if model:
        argv += ["--model", model]
    if requests is not None:
        argv += ["--requests", str(requests)]
    if duration is not None:
        argv += ["--duration", str(duration)]
    if experiment is not None:
        argv += ["--experiment", str(experiment)]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if slo is not None:
        argv += ["--goodput", slo.to_arg()]
    if rate is not None:
        argv += ["--rate", repr(float(rate))]
    return argv
