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

from cockpit.children import python_module
from cockpit.commands import check_seconds, parse_levels
from cockpit.errors import CockpitError
from cockpit.slo import EXAMPLE, Slo, parse_slo

Print = Callable[[str], None]
PARENT_ENV = "COCKPIT_BENCH_PARENT"  # set by the cockpit that starts `cockpit bench --jsonl`
PARENT_POLL_S = 0.5


def add_bench_parser(commands) -> argparse.ArgumentParser:
    bench = commands.add_parser("bench", help="a concurrency sweep against an OpenAI-compatible server")
    bench.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    bench.add_argument("--model", help="the served model id (default: the first of /v1/models)")
    bench.add_argument(
        "-c", "--concurrency", default="1,32,64", metavar="C,C,...", help="levels (default 1,32,64)"
    )
    bench.add_argument(
        "--input-len", type=int, default=1024, metavar="N", help="prompt tokens (default 1024)"
    )
    bench.add_argument(
        "--output-len", type=int, default=1024, metavar="N", help="output tokens (default 1024)"
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--requests", type=int, metavar="N", help="measured requests per level")
    size.add_argument("--duration", type=float, metavar="S", help="measured seconds per level")
    bench.add_argument("--rate", type=float, metavar="R", help="open loop: Poisson arrivals at R requests/s")
    bench.add_argument(
        "--prompts", metavar="FILE", help='a JSONL file of prompts ({"prompt": ...} or {"messages": [...]})'
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
        type=float,
        default=600.0,
        metavar="S",
        help="give up on a request after S seconds without a byte: connecting, "
        "waiting for the answer, or mid-stream (default 600)",
    )
    return bench


def config_from_args(args: argparse.Namespace):
    from cockpit.bench.loadgen import BenchConfig

    for name in ("input_len", "output_len", "requests"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CockpitError(f"--{name.replace('_', '-')} must be 1 or more, got {value}")
    if args.duration is not None:
        check_seconds(args.duration, "--duration")
    if args.rate is not None and args.rate <= 0:
        raise CockpitError(f"--rate must be a positive number of requests per second, got {args.rate}")
    check_seconds(args.timeout, "--timeout")
    workers = _workers(args.workers)
    slo = parse_slo(args.goodput, "--goodput") if args.goodput is not None else None
    if not args.url.startswith(("http://", "https://")):
        raise CockpitError(f"--url must start with http:// or https://, got '{args.url}'")
    return BenchConfig(
        url=args.url.rstrip("/"),
        model=args.model,
        endpoint="chat" if args.chat else "completions",
        concurrency=parse_levels(args.concurrency, "-c"),
        input_len=args.input_len,
        output_len=args.output_len,
        requests=args.requests,
        duration_s=args.duration,
        rate=args.rate,
        jsonl=args.prompts,
        api_key=os.environ.get("OPENAI_API_KEY") or None,  # never on argv, where `ps` shows it
        timeout=args.timeout,
        workers=workers,
        slo=slo,
    )


def _workers(text: str) -> int | None:
    """``--workers``: a whole number from 1, or ``auto`` (None)."""
    if text.strip().lower() == "auto":
        return None
    from cockpit.bench.loadgen import MAX_WORKERS

    try:
        workers = int(text)
    except ValueError:
        raise CockpitError(f"--workers must be a number of processes or 'auto', got '{text}'") from None
    if not 1 <= workers <= MAX_WORKERS:
        raise CockpitError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    return workers


def describe_level(result) -> str:
    """One line per finished level, for people."""
    data = result.to_json()
    line = (
        f"C={data['concurrency']:<5} {data['output_tok_s']:>10,.1f} tok/s  "
        f"{data.get('request_s', 0) or 0:6.2f} req/s  "
        f"TTFT p50 {_ms(data, 'ttft_ms', 'p50')} p99 {_ms(data, 'ttft_ms', 'p99')}  "
        f"ITL p50 {_ms(data, 'itl_ms', 'p50')} p99 {_ms(data, 'itl_ms', 'p99')}  "
        f"errors {data['errors']}"
    )
    reasons = data.get("error_reasons") or {}
    if reasons:
        reason, count = max(reasons.items(), key=lambda item: item[1])
        line += f" ({count}x {reason})"
    if data.get("failed"):
        line += "  FAILED: not comparable"
    if data.get("goodput_tok_s") is not None:
        line += f"  {_goodput(data)}"
    if (data.get("workers") or 1) > 1:
        line += f"  ({data['workers']} workers)"
    if data.get("client_limited"):
        line += f"  [client-limited: {data.get('client_note', '')}]"
    return line


def _goodput(data: dict) -> str:
    """``goodput 812 tok/s (94% of requests within ttft<=2000ms itl<=50ms)``."""
    slo = Slo.from_json(data.get("slo"))
    bounds = slo.describe() if slo is not None else "the bounds"
    requests, good = data.get("requests") or 0, data.get("good_requests") or 0
    share = f"{100 * good / requests:.0f}%" if requests else "0%"
    return f"goodput {data['goodput_tok_s']:,.1f} tok/s ({share} of requests within {bounds})"


def _ms(data: dict, metric: str, stat: str) -> str:
    value = (data.get(metric) or {}).get(stat)
    return "-" if value is None else f"{value:.1f} ms"


def run_bench(args: argparse.Namespace, out: Print = print) -> int:
    from cockpit.bench.loadgen import LevelDone, run, run_sweep

    cfg = config_from_args(args)
    # The parent names itself: a parent that died while we imported would be missed by getppid().
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    if args.jsonl:
        _listen_for_interrupt()
        _exit_with_parent(parent)
    journal = None
    if args.experiment is not None:
        from cockpit.journal import Journal

        journal = Journal()
        if journal.experiment(args.experiment) is None:
            journal.close()
            raise CockpitError(f"no experiment {args.experiment} in the journal {journal.path}: check the id")
    done: list = []

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
            out(describe_level(event.result))
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


def _exit_code(done: Sequence) -> int:
    """1 with one line naming the failed levels, when any failed; they are journaled as failed."""
    failed = [r for r in done if r.failed]
    if not failed:
        return 0
    levels = ", ".join(f"C={r.concurrency}" for r in failed)
    reason = failed[0].error or "no cause recorded"
    if not any(r.output_tok_s > 0 for r in done):
        print(f"cockpit bench: no level got a token back ({levels} failed: {reason})", file=sys.stderr)
    else:
        print(f"cockpit bench: {levels} failed ({reason}): see the errors above", file=sys.stderr)
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
        *python_module("cockpit.cli"),
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
