"""The ``cockpit`` command: argument parsing and printing, nothing else.

Every failure a person can fix is a ``CockpitError`` and prints as one line; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from cockpit import __version__
from cockpit.core.errors import CockpitError
from cockpit.core.speed import SPEEDS
from cockpit.core.tuning.spec import USAGE as TUNE_USAGE
from cockpit.engines import ENGINE_NAMES
from cockpit.store.profile_setup import SetupOverrides, build_setup, resolve

if TYPE_CHECKING:
    from cockpit.core.planner import Setup
    from cockpit.lab.box import BoxContext
    from cockpit.store.calibration import Key
    from cockpit.store.profile import Profile
    from cockpit.telemetry.base import GpuSource


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line that says where to look (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}: see `{self.prog} --help`\n")


def _port(text: str) -> int:
    """A TCP port a server can bind: 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is a number 1-65535, got '{text[:20]}'") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number 1-65535, got {port}")
    return port


def _add_setup_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile", metavar="NAME|FILE", help="a profile from layouts/ or a YAML file (default: demo)"
    )
    parser.add_argument(
        "--model",
        metavar="DIR|FILE|REPO_ID",
        help="the model's config.json, folder, repo id or bundled name; without --profile, on the "
        "engine's own defaults",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        help="run the profile on this engine: its launcher, and the profile's args translated (notes on stderr)",
    )
    parser.add_argument("--gpus", type=int, metavar="N", help="number of GPUs on the box")
    parser.add_argument("--gpu", metavar="TYPE", help="GPU type, e.g. rtx-pro-6000, h100, h200")
    parser.add_argument(
        "--gpu-mem", type=float, metavar="GIB", help="memory per GPU in GiB (overrides the type's)"
    )


def _add_speed_option(parser: argparse.ArgumentParser, default: Any) -> None:
    """--speed: where predicted speeds come from (docs/speed.md#speed-sources). SUPPRESS on a
    subcommand: given before it (`cockpit --speed analytic plan`), cockpit's own stands."""
    parser.add_argument(
        "--speed",
        choices=SPEEDS,
        default=default,
        help="predict speeds from measured kernels where they cover the box (the default; "
        "the kernels extra) or from the analytic model alone",
    )


def _add_tune_parser(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser(
        "tune",
        help="find the best layout and knobs for a goal under latency bounds, measured on the box",
        description=f"{TUNE_USAGE}. Launches the most promising candidates, measures each one's goodput, "
        "and stops when the best measured beats what is left.",
    )
    tune.add_argument(
        "words",
        nargs="*",
        help="the tune words, as in the prompt: goal=tok/s itl<50ms n=6 --max-num-seqs 256,512 "
        "(server flags to try may stand anywhere among them)",
    )
    tune.add_argument("--resume", action="store_true", help="continue this profile's unfinished tune")
    _add_lab_options(tune)
    _add_startup_timeout(tune, "seconds to wait for each ready")
    tune.add_argument("--verbose", action="store_true", help="also print the servers' log lines")


SWEEP_EXIT = (
    "It prints one line per event (a log file's lines: run it under nohup or tmux to outlive an SSH "
    "drop) and ends with the comparison table of the profile, as `cockpit results` shows it. "
    "Exit status: 0 when at least one layout was measured, 1 when none was (each failed or was "
    "skipped), 2 for a command line or profile it cannot use (nothing launched), 130 on Ctrl-C, "
    "143 on SIGTERM and 129 on SIGHUP: each stops the running server and keeps what was measured."
)


def _add_sweep_parser(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser(
        "sweep",
        help='launch, bench and stop each layout in turn, unattended: cockpit sweep "tp8, tp4 ep" --bench c=1,32',
        description="Launch each layout in turn, benchmark it once ready, stop it, and go on to the next; a "
        "layout that fails is journaled with its cause and the sweep goes on. A layout the planner says "
        "fails is not launched without --force; one the engine cannot run at all (a layout it cannot "
        "express, a server flag it does not have) stops the sweep before anything launches. " + SWEEP_EXIT,
    )
    sweep.add_argument(
        "words",
        nargs="*",
        metavar='"LAYOUT [--flag V], LAYOUT, ..." [--flag V ...]',
        help="the layouts separated by commas, each with its own server flags, as in the screen's "
        '`sweep` ("tp8 --max-num-seqs 512, tp4 ep"); server flags after them go to every layout',
    )
    _add_lab_options(sweep)
    sweep.add_argument("--force", action="store_true", help="launch the layouts the planner says fail too")
    _add_bench_options(
        sweep,
        "the benchmark each layout gets (default: the profile's)",
        "seconds a benchmark request may wait for its next token (as `cockpit bench --timeout`)",
    )
    _add_startup_timeout(sweep, "seconds to wait for each ready")
    sweep.add_argument(
        "--verbose", action="store_true", help="also print the servers' log lines, phases and bench ticks"
    )


def _sweep_words(words: list[str]) -> tuple[str, tuple[str, ...]]:
    """`"tp8, tp4 ep" --max-num-seqs 512` -> the layouts' text and the server flags for every
    layout: the words before the first flag are the layouts (quoted as one or not), the rest flags."""
    first_flag = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
    layouts, knobs = " ".join(words[:first_flag]).strip(), tuple(words[first_flag:])
    if not layouts:
        example = 'cockpit sweep "tp8, tp4 ep" --max-num-seqs 512'
        if knobs:
            raise CockpitError(
                f"sweep: the layouts come first, then server flags for all of them: `{example}`"
            )
        raise CockpitError(f"sweep needs layouts separated by commas: `{example}`")
    return layouts, knobs


# The options of the commands whose words hold server flags (`tune`, `sweep`), which argparse
# cannot know: each command's own flags and valued options, read by ``_own_options``.
_OWN_FLAGS = {
    "tune": {"--resume": "resume", "--sim": "sim", "--verbose": "verbose"},
    "sweep": {"--sim": "sim", "--force": "force", "--verbose": "verbose"},
}
_OWN_VALUED = {
    "tune": {
        "--profile": "profile",
        "--engine": "engine",
        "--speed": "speed",
        "--startup-timeout": "startup_timeout",
    },
    "sweep": {
        "--profile": "profile",
        "--engine": "engine",
        "--speed": "speed",
        "--startup-timeout": "startup_timeout",
        "--bench": "bench",
        "--timeout": "timeout",
    },
}
_OWN_EXAMPLES = {
    "--profile": "minimax-m2.5",
    "--engine": "sglang",
    "--speed": "analytic",
    "--startup-timeout": "3600",
    "--bench": '"c=1,32 in=1024 out=1024"',
    "--timeout": "600",
}


def _own_options(args: argparse.Namespace, words: list[str], command: str) -> list[str]:
    """The words after `tune` (or `sweep`) hold server flags (`--max-num-seqs 256,512`), which
    argparse cannot know; cockpit's own options among them are taken out here."""
    flags, valued = _OWN_FLAGS[command], _OWN_VALUED[command]
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if word in flags:
            setattr(args, flags[word], True)
        elif name in valued:
            if not eq and i + 1 >= len(words):
                raise CockpitError(f"{name} needs a value, like {name} {_OWN_EXAMPLES[name]}")
            value = inline if eq else words[i + 1]
            i += 0 if eq else 1
            setattr(args, valued[name], _own_value(name, value))
        elif word != "--":
            rest.append(word)
        i += 1
    return rest


def _own_value(name: str, value: str) -> str | float:
    """An option's value as its command wants it: seconds as a number, an engine cockpit knows."""
    if name == "--engine" and value not in ENGINE_NAMES:
        raise CockpitError(f"--engine is vllm or sglang, not {value!r}")
    if name == "--speed" and value not in SPEEDS:
        raise CockpitError(f"--speed is {' or '.join(SPEEDS)}, not {value!r}")
    if name in ("--startup-timeout", "--timeout"):
        return _seconds(value, name)
    return value


_GLOBAL_VALUED = ("--profile", "--engine")
_OWN_WORDS = ("tune", "sweep")


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command line. `cockpit tune` and `cockpit sweep` take server flags
    (`--max-num-seqs 256,512`), which argparse cannot know: the words after the command are read
    by ``_own_options``."""
    at = _command_index(argv)
    if at is None or argv[at] not in _OWN_WORDS:
        return parser.parse_args(argv)
    rest = argv[at + 1 :]
    if "-h" in rest or "--help" in rest:
        parser.parse_args([*argv[: at + 1], "--help"])
    args = parser.parse_args(argv[: at + 1])
    args.words = _own_options(args, rest, argv[at])
    return args


def _command_index(argv: list[str]) -> int | None:
    """Where the command word stands, after cockpit's own options."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            return i
        i += 2 if word in _GLOBAL_VALUED else 1
    return None


def _seconds(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CockpitError(f"{name} takes seconds, like {_OWN_EXAMPLES[name]}; got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cockpit",
        description="Try parallelism layouts of an LLM on a multi-GPU box with vLLM or SGLang.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--profile", metavar="NAME|FILE", help="the profile to open (default: demo)")
    parser.add_argument(
        "--engine", choices=ENGINE_NAMES, help="open the profile on this engine (its args translated)"
    )
    parser.add_argument(
        "--sim", action="store_true", help="use the simulated GPU box even where NVIDIA GPUs are found"
    )
    _add_speed_option(parser, default=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    plan = commands.add_parser("plan", help="which layouts fit, what each GPU holds, and why a layout fails")
    _add_setup_options(plan)
    plan.add_argument(
        "--layout",
        action="append",
        metavar="LAYOUT",
        help='a layout such as "tp4 ep2" (repeatable; default: all)',
    )
    plan.add_argument("--concurrency", metavar="C,C,...", help="concurrency levels for predicted tok/s")
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_speed_option(plan, default=argparse.SUPPRESS)

    run = commands.add_parser("run", help='launch a layout headless: cockpit run "try tp4 ep2"')
    run.add_argument(
        "text", metavar='"try LAYOUT"', help='what you would type in the prompt bar, e.g. "try tp4 ep2"'
    )
    _add_lab_options(run)
    run.add_argument(
        "--force", action="store_true", help="launch even when the planner says the layout fails"
    )
    run.add_argument("--keep", action="store_true", help="leave the server running when done or on Ctrl-C")
    _add_startup_timeout(run, "seconds to wait for ready")
    run.add_argument("--quiet", action="store_true", help="do not print the server's log lines")
    _add_bench_options(
        run,
        "benchmark the server once it is ready",
        "with --bench: seconds a request may wait for its next token (as `cockpit bench --timeout`)",
    )

    from cockpit.bench.command import add_bench_parser

    add_bench_parser(commands)
    from cockpit.faces.agent import add_agent_parser

    add_agent_parser(commands)

    _add_tune_parser(commands)
    _add_sweep_parser(commands)

    gpus = commands.add_parser(
        "gpus", help="one line per GPU: memory, power, utilisation, temperature, processes"
    )
    gpus.add_argument("--profile", metavar="NAME|FILE", help="the profile whose box to simulate (with --sim)")
    gpus.add_argument("--sim", action="store_true", help="read the simulated box")
    gpus.add_argument(
        "--dcgm", metavar="URL", help="read an NVIDIA dcgm-exporter endpoint, e.g. http://node1:9400/metrics"
    )

    web = commands.add_parser("web", help="the same screen in a browser (textual-serve; no authentication)")
    web.add_argument("--port", type=_port, default=8765, help="port to serve on (default 8765)")
    web.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: reach it by SSH tunnel)"
    )
    web.add_argument("--profile", metavar="NAME|FILE", help="the profile to open")
    web.add_argument("--sim", action="store_true", help="use the simulated box")

    commands.add_parser("servers", help="list servers cockpit started that still run")
    stop = commands.add_parser("stop", help="stop a server cockpit started (by PID, or all)")
    stop.add_argument("pid", metavar="PID|all")
    attach = commands.add_parser("attach", help="follow a running server's log until it is ready or fails")
    attach.add_argument(
        "pid", type=int, nargs="?", metavar="PID", help="the server's PID; without it, the only one running"
    )
    attach.add_argument("--profile", metavar="NAME|FILE")

    results = commands.add_parser("results", help="the comparison table of journaled benchmark results")
    results.add_argument("--profile", metavar="NAME|FILE", help="only this profile's experiments")
    results.add_argument("--format", default="table", choices=("table", "markdown", "csv", "json"))
    _add_calibration_parser(commands)
    results.add_argument(
        "--predicted",
        action="store_true",
        help="beside each measured tok/s, the one predicted at launch (json always has it)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    except CockpitError as exc:
        print(f"cockpit: {exc}", file=sys.stderr)
        return 2
    try:
        handlers = {
            "plan": cmd_plan,
            "run": cmd_run,
            "servers": cmd_servers,
            "stop": cmd_stop,
            "attach": cmd_attach,
            "results": cmd_results,
            "bench": cmd_bench,
            "gpus": cmd_gpus,
            "web": cmd_web,
            "calibration": cmd_calibration,
            "tune": cmd_tune,
            "sweep": cmd_sweep,
        }
        return handlers.get(args.command, cmd_cockpit)(args)
    except CockpitError as exc:
        if args.debug:
            raise
        print(f"cockpit: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cockpit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cockpit plan | head`: the reader left, nothing is lost
        sys.stderr.close()
        return 0


def _add_lab_options(parser: argparse.ArgumentParser) -> None:
    """--profile, --engine and --sim on a subcommand. SUPPRESS: given before it (`cockpit
    --profile P tune`), cockpit's own option stands."""
    parser.add_argument(
        "--profile", metavar="NAME|FILE", default=argparse.SUPPRESS, help="the profile (default: demo)"
    )
    parser.add_argument(
        "--engine", choices=ENGINE_NAMES, default=argparse.SUPPRESS, help="run the profile on this engine"
    )
    parser.add_argument(
        "--sim", action="store_true", default=argparse.SUPPRESS, help="use the simulated box and engine"
    )
    _add_speed_option(parser, default=argparse.SUPPRESS)


def _add_startup_timeout(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--startup-timeout", type=float, default=1800.0, metavar="S", help=help)


def _add_bench_options(parser: argparse.ArgumentParser, bench_help: str, timeout_help: str) -> None:
    """--bench in the prompt's words, and --timeout for each request (run and sweep)."""
    parser.add_argument("--bench", metavar='"c=1,32,64 in=N out=N n=N|t=S timeout=S"', help=bench_help)
    parser.add_argument("--timeout", type=float, metavar="S", help=timeout_help)


def cmd_tune(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import run_tune

    return run_tune(
        " ".join(args.words),
        profile=args.profile,
        sim=args.sim,
        engine=args.engine,
        speed=args.speed,
        resume=args.resume,
        verbose=args.verbose,
        startup_timeout=args.startup_timeout,
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import run_sweep

    layouts, knobs = _sweep_words(args.words)
    return run_sweep(
        layouts,
        knobs=knobs,
        profile=args.profile,
        sim=args.sim,
        engine=args.engine,
        speed=args.speed,
        force=args.force,
        startup_timeout=args.startup_timeout,
        verbose=args.verbose,
        bench=args.bench,
        timeout=args.timeout,
    )


def cmd_cockpit(args: argparse.Namespace) -> int:
    """``cockpit`` alone: the screen over a profile (the demo one by default) on this box.

    Without a terminal (a pipe, a test) it prints the plan instead of drawing the screen.
    """
    from cockpit.lab.box import box_context

    profile, notes = resolve(SetupOverrides(profile=args.profile, engine=args.engine))
    box = box_context(profile, sim=args.sim, speed=args.speed)
    if box.simulated:
        print(f"{box.reason}: using the simulated box ({box.hardware}) and profile {profile.name}")
    served = bool(os.environ.get("TEXTUAL_DRIVER"))  # `cockpit web`: textual-serve drives the app
    if not served and not (sys.stdin.isatty() and sys.stdout.isatty()):
        plan_args = argparse.Namespace(
            profile=args.profile,
            model=None,
            engine=args.engine,
            gpus=None,
            gpu=None,
            gpu_mem=None,
            layout=None,
            concurrency=None,
            json=False,
        )
        return _print_plan(plan_args, profile, notes, box)
    from cockpit.faces.tui.app import CockpitApp
    from cockpit.faces.tui.session import Session

    app = CockpitApp(Session.open(args.profile, box=box, engine=args.engine))
    app.run()
    return app.return_code or 0


def _overrides(args: argparse.Namespace) -> SetupOverrides:
    return SetupOverrides(
        profile=args.profile,
        model=args.model,
        engine=args.engine,
        gpus=args.gpus,
        gpu=args.gpu,
        gpu_mem=args.gpu_mem,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from cockpit.lab.box import box_context

    profile, notes = resolve(_overrides(args))
    # Simulated with --sim or where no driver is found (where `cockpit run` would launch the
    # simulator): its option table, what it learned and measured; else the GPUs' and the engine
    # version the launcher runs here (the flags `try` will launch with).
    return _print_plan(args, profile, notes, box_context(profile, sim=args.sim, speed=args.speed))


def _print_plan(args: argparse.Namespace, profile: Profile, notes: tuple[str, ...], box: BoxContext) -> int:
    """The plan of ``profile`` on ``box`` (the context made from it), as `cockpit plan` prints it."""

    from cockpit.core.perfmodel import with_prediction
    from cockpit.core.planner import plan_all
    from cockpit.reports.plan import plan_table, terminal_width

    setup = box.setup(profile)
    notes += tuple(f"model: {note}" for note in setup.model.notes)
    notes += (box.note,) if box.note else ()
    setup, learning_note = _with_learned(setup, box)
    notes += (learning_note,) if learning_note else ()
    for note in notes:  # on stderr: stdout stays the table or valid JSON
        print(f"note: {note}", file=sys.stderr)
    from cockpit.core.benchrequest import BenchRequest, parse_levels

    asked = () if args.concurrency is None else parse_levels(args.concurrency, "--concurrency")
    bench = BenchRequest(concurrency=asked).filled(profile.bench)
    levels = bench.concurrency
    verdicts = [
        with_prediction(setup, v, levels, bench.input_len, bench.output_len)
        for v in plan_all(setup, args.layout or None)
    ]
    for warning in dict.fromkeys(w for v in verdicts for w in v.warnings):  # e.g. a deprecated flag
        print(f"warning: {warning}", file=sys.stderr)
    from cockpit.reports.measured import MEASURED_NOTE, measured_here, prediction_basis

    measured, unread = measured_here(setup, simulated=box.simulated)  # this box's newest of each layout
    if unread:
        print(f"note: {unread}", file=sys.stderr)
    from cockpit.reports.speed import layout_sources, speed_lines

    sources = layout_sources(verdicts)  # which backend and data predicted each layout
    if args.json:
        rows = [v.to_json() for v in verdicts]
        for row in rows:  # the newest numbers this box measured of the layout, or null
            last = measured.get(row["layout"])
            row["last_measured"] = last.to_json() if last else None
            source = sources.get(row["layout"])
            row["speed"] = source.to_json() if source else None
        print(json.dumps(rows, indent=2))
    else:
        print(
            f"{setup.model}  on  {setup.hardware}  with {setup.engine.label}  ({_plan_of(args, profile.name)})"
        )
        print(plan_table(verdicts, levels, width=terminal_width(), measured=measured))
        if any(str(v.layout) in measured for v in verdicts):
            print(MEASURED_NOTE)
        print(
            f"tok/s: predicted output throughput at each concurrency, prompts prefilled (input {bench.input_len}, "
            f"output {bench.output_len} tokens), from the performance model {prediction_basis(setup)}"
        )
        for line in speed_lines(sources):
            print(line)
    return 0


def _plan_of(args: argparse.Namespace, profile: str) -> str:
    """What the plan is of: a profile, or a model given alone on the engine's own defaults (its
    profile's name is only the model's)."""
    if args.model and not args.profile:
        return "the engine's own defaults, no profile"
    if args.model:
        return f"profile {profile}, its model from --model"
    return f"profile {profile}"


def cmd_run(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import run_headless

    return run_headless(
        args.text,
        profile=args.profile,
        sim=args.sim,
        force=args.force,
        keep=args.keep,
        startup_timeout=args.startup_timeout,
        quiet=args.quiet,
        bench=args.bench,
        timeout=args.timeout,
        engine=args.engine,
        speed=args.speed,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from cockpit.bench.command import run_bench

    return run_bench(args)


def cmd_gpus(args: argparse.Namespace) -> int:
    from cockpit.reports.gpus import gpu_lines

    source: GpuSource
    if args.dcgm:
        from cockpit.telemetry.prometheus import PrometheusSource

        source = PrometheusSource(args.dcgm, warn=False)
    else:
        from cockpit.lab.box import box_context
        from cockpit.lab.lab import gpu_source

        profile, _ = resolve(SetupOverrides(profile=args.profile))
        box = box_context(profile, sim=args.sim)
        source = gpu_source(box.hardware, box.simulated)
        if box.simulated:
            print(
                f"{box.reason}: these are the simulated box's GPUs ({box.hardware}, profile {profile.name})",
                file=sys.stderr,
            )
    try:
        samples = source.sample()
    finally:
        source.close()
    if not samples:
        why = f" ({source.last_error})" if source.last_error else ""
        raise CockpitError(f"no GPUs answered from {source.name}{why}: check the address or the driver")
    print("\n".join(gpu_lines(samples)))
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the app to a browser. textual-serve starts one app per browser tab from a command
    line that it hands to a shell, so the line is built from an argv list with shlex quoting; its
    websocket refuses pages from other origins (cockpit.faces.webserve)."""
    import shlex

    from cockpit.runner.supervisor import busy_port

    holder = busy_port(args.host, args.port)
    if holder is not None:
        raise CockpitError(f"port {args.port} is already in use by {holder}: pick another with --port")
    from cockpit.system.children import python_module

    argv = python_module("cockpit.faces.cli")
    if args.profile:
        argv += ["--profile", args.profile]
    if args.sim:
        argv.append("--sim")
    if args.speed:
        argv += ["--speed", args.speed]
    from cockpit.faces.webserve import OriginCheckedServer

    print(
        f"cockpit web on http://{args.host}:{args.port} (no authentication: reach it through an SSH tunnel)"
    )
    OriginCheckedServer(shlex.join(argv), host=args.host, port=args.port, title="cockpit").serve()
    return 0


def cmd_servers(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import list_servers

    return list_servers()


def cmd_stop(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import stop_servers

    return stop_servers(args.pid)


def cmd_attach(args: argparse.Namespace) -> int:
    from cockpit.faces.headless import attach_server

    return attach_server(args.pid, profile=args.profile)


def cmd_results(args: argparse.Namespace) -> int:
    """The comparison of one profile; without --profile the newest experiment's, and it says so
    (on stderr for csv and json, so stdout stays machine-readable)."""
    from cockpit.reports.comparison import comparison
    from cockpit.reports.export import markdown_report
    from cockpit.reports.results import format_comparison, no_results_hint
    from cockpit.reports.tune import newest_tune
    from cockpit.store.journal import Journal

    with Journal() as journal:
        comp = comparison(journal, _journal_profile(args.profile) if args.profile else None)
        picked = args.profile is None and comp.profile is not None
        if picked:
            note = f"profile {comp.profile} (the newest experiment's; --profile NAME picks another)"
            print(note, file=sys.stdout if args.format == "table" else sys.stderr)
        if args.format == "markdown" and comp.rows:
            note = "the newest experiment's" if picked else ""
            context = _results_context(journal, comp, args.profile or comp.profile, note)
            tune = newest_tune(journal, comp.profile) if comp.profile else None
            text = markdown_report(comp, context, predicted=args.predicted, tune=tune)
        else:
            # nothing benchmarked: a layout the planner says fits, as the command to run first
            first = args.format in ("table", "markdown") and not comp.benched
            hint = no_results_hint(args.profile or comp.profile) if first else None
            text = format_comparison(comp, args.format, predicted=args.predicted, hint=hint)
    print(text)
    return 0


def _journal_profile(text: str) -> str:
    """The name the journal files a profile under (a YAML path's `name:` or stem), so
    `results --profile path/x.yaml` finds what `run --profile path/x.yaml` wrote; a name that
    no longer loads (a deleted profile) is taken as it is."""
    from cockpit.store.profile import load_profile

    try:
        return load_profile(text).name
    except CockpitError:
        return text


def _results_context(journal, comp, profile: str | None, note: str):
    """The report's context from the profile when it still resolves, else from the journal."""
    from cockpit.reports.export import context_from_journal, context_from_setup

    try:
        setup, _ = build_setup(SetupOverrides(profile=profile))
    except CockpitError:
        experiments = [journal.experiment(row.experiment) for row in comp.rows]
        return context_from_journal([e for e in experiments if e is not None], comp, note=note)
    return context_from_setup(setup, comp.profile, comp, note=note)


# -- what the box taught the planner -----------------------------------------------------------


def _with_learned(setup: Setup, box: BoxContext) -> tuple[Setup, str | None]:
    """The setup with what this box's launches taught (the simulated box's or the GPUs', filed
    under the box's key), and a note when the file could not be read."""
    from dataclasses import replace

    from cockpit.store.calibration import CalibrationStore

    store = CalibrationStore()
    learned = store.learned(box.key, setup.model_path)
    return replace(setup, learned=learned), store.warning


def _add_calibration_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    calibration = commands.add_parser(
        "calibration", help="what launches taught the planner about each box: show it, or reset it"
    )
    calibration.add_argument(
        "action", nargs="?", default="show", choices=("show", "reset"), help="show (the default) or reset"
    )
    calibration.add_argument("--all", action="store_true", help="with reset: forget every box")
    calibration.add_argument(
        "--profile", metavar="NAME|FILE", help="with reset: the box of this profile (default: demo)"
    )
    calibration.add_argument(
        "--gpu", metavar="TYPE", help="with reset: this GPU type (default: the profile's)"
    )
    calibration.add_argument(
        "--engine", choices=ENGINE_NAMES, help="with reset: this engine (default: the profile's)"
    )
    calibration.add_argument(
        "--version",
        dest="engine_version",
        metavar="V",
        help="with reset: this engine version (default: the one the profile's launcher runs here; on the "
        "simulated box, the newest cockpit knows, as the simulated engine speaks it)",
    )
    which = calibration.add_mutually_exclusive_group()
    which.add_argument(
        "--sim",
        action="store_true",
        help="with reset: the simulated box's (default: simulated where no NVIDIA driver is found)",
    )
    which.add_argument("--real", action="store_true", help="with reset: the real box's")
    calibration.add_argument("--json", action="store_true", help="show: print JSON")


def cmd_calibration(args: argparse.Namespace) -> int:
    """`calibration show`: each box's fitted constants beside the defaults; `reset`: forget one box
    (the profile's, or --gpu/--engine/--version) or all of them."""
    from cockpit.reports.calibration import calibration_json, calibration_lines
    from cockpit.store.calibration import CalibrationStore

    store = CalibrationStore()
    if args.action == "show":
        selectors = [args.all, args.profile, args.gpu, args.engine, args.engine_version, args.sim, args.real]
        if any(selectors):
            raise CockpitError(
                "calibration show lists every box: --all, --profile, --gpu, --engine, --version, --sim and "
                "--real choose what `calibration reset` forgets"
            )
        entries = store.entries()
        if store.warning:
            print(f"warning: {store.warning}", file=sys.stderr)
        if args.json:
            print(json.dumps(calibration_json(entries), indent=2))
        else:
            print("\n".join(calibration_lines(entries, store.path)))
        return 0
    if args.json:
        raise CockpitError("--json is for `calibration show`")
    if args.all:
        if any([args.profile, args.gpu, args.engine, args.engine_version, args.sim, args.real]):
            raise CockpitError("reset --all forgets every box: give it alone, or name one box without --all")
        removed, which = store.remove(), "every box"
    else:
        key = _calibration_key(args)
        removed, which = store.remove([key]), str(key)
    # The reset is written whatever the file held: a file it could not read is a note (the reset
    # mended it); only one it could not write fails.
    if store.write_warning:
        raise CockpitError(store.write_warning)
    if store.read_problem:
        print(f"note: {store.read_problem}; the reset wrote the file afresh", file=sys.stderr)
    elif not removed and not args.all:
        raise CockpitError(
            f"nothing learned for {key} (launches journaled until now no longer teach it): "
            "`cockpit calibration show` lists the boxes that have a calibration"
        )
    for entry in removed:
        print(
            f"forgot {entry.key} (from {entry.runs} run(s)): it plans with the defaults again, and launches "
            "journaled until now no longer teach it"
        )
    if not removed:
        if store.read_problem:
            print(
                f"reset {which}: it plans with the defaults again, and launches journaled until now no "
                "longer teach it"
            )
        else:
            print(f"nothing was learned yet ({store.path})")
    return 0


def _calibration_key(args: argparse.Namespace) -> Key:
    """The box `calibration reset` forgets: the profile's (``cockpit.lab.box``: the version its
    launcher runs on the real box, the newest cockpit knows on the simulated one, as the simulated
    engine speaks it), each part replaced by the option given."""
    from cockpit.core.hardware import gpu_type
    from cockpit.lab.box import box_context
    from cockpit.store.calibration import Key, engine_version

    if args.engine_version is not None and not engine_version(args.engine_version):
        raise CockpitError("--version needs an engine version, like --version 0.33.0")
    profile, _ = resolve(SetupOverrides(profile=args.profile, engine=args.engine))
    box = box_context(profile, sim=args.sim, real=args.real)
    if args.gpu:  # a type without figures plans (and learns) as "unknown"
        gpu = "unknown" if args.gpu.strip().lower() == "unknown" else gpu_type(args.gpu).key
    else:
        gpu = box.hardware.gpu.key
    version = engine_version(args.engine_version) or box.version  # the launcher asked only if needed
    return Key(gpu, box.engine_name, version, box.simulated)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
