"""`cockpit agent`: what cockpit runs on a cluster's node over SSH, answering in JSON lines.

The cockpit on the person's machine reaches each node with ``ssh`` (``cockpit.system.ssh``) and
asks this agent to start an engine detached, follow its log, stop it, check ports, read the GPUs
or name the engine's version. Every answer is JSON on stdout (one line, or one per round for a
stream); bad input is one ``{"error": ...}`` line and exit status 2, never a traceback, since the
caller reads the line, not a screen.

An engine is started under a small keeper (``agent keep``), the leader of its own session and
process group: the keeper runs the engine as its child, waits, and appends how it ended to the
log, which is all a log follower on another machine can see of an exit status. The engine and
the keeper carry cockpit's server token in their environment, so ``stop`` signals a group only
when its processes carry the token it was given (a PID the node reused for something else is
left alone), and ``find`` finds a server whose PID never reached the caller.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import psutil

from cockpit.core.errors import CockpitError
from cockpit.runner.registry import TOKEN_ENV
from cockpit.runner.supervisor import group_members, signal_group, wait_group_gone

BAD_INPUT = 2
FAILED = 1
KEEPER_WORDS = "cockpit agent:"
POLL_S = 0.1
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What asks for the simulated box rather than the real GPUs (cockpit.sim.box).
SIM_VARIABLES = ("COCKPIT_SIM_GPUS", "COCKPIT_SIM_STATE", "COCKPIT_SIM_NODE")


class BadInput(Exception):
    """A request the agent cannot read: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are a JSON line, not a usage block."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{self.prog}: {message}")


def _say(answer: Any) -> None:
    """One JSON line on stdout, flushed: the caller reads it as soon as it is written."""
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """Run one agent request (the words after `cockpit agent`); the exit status."""
    words = list(argv)
    head, rest = (
        (words[: words.index("--")], words[words.index("--") + 1 :]) if "--" in words else (words, [])
    )
    try:
        args = _parser().parse_args(head)
        for pair in args.env or ():
            key, value = _env_pair(pair)
            os.environ[key] = value
        if args.sub is None:
            raise BadInput("cockpit agent: name a sub-command: " + ", ".join(sorted(_HANDLERS)))
        if rest and args.sub not in ("spawn", "keep", "version"):
            raise BadInput(f"cockpit agent {args.sub}: takes no words after --")
        args.argv = rest
        return _HANDLERS[args.sub](args)
    except BadInput as bad:
        return _fail(str(bad), BAD_INPUT)
    except CockpitError as error:
        return _fail(str(error), BAD_INPUT)
    except BrokenPipeError:
        return _quiet_exit()
    except Exception as error:  # a traceback is unreadable to the caller: one line instead
        return _fail(f"{type(error).__name__}: {error}", FAILED)


def _fail(line: str, status: int) -> int:
    with contextlib.suppress(BrokenPipeError):
        _say({"error": line})
    return status


def _quiet_exit() -> int:
    """The reader left: nothing more to say, and nothing for the interpreter to flush at exit."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _parser() -> _Parser:
    parser = _Parser(prog="cockpit agent", description="cockpit's agent on a cluster node (JSON lines)")
    parser.add_argument("--env", action="append", metavar="K=V", help="set in the agent's environment")
    subs = parser.add_subparsers(dest="sub", metavar="SUB")

    spawn = subs.add_parser("spawn", help="start `-- ARGV` detached under a keeper, its output in --log")
    spawn.add_argument("--log", required=True, metavar="PATH")
    spawn.add_argument("--token", required=True)
    spawn.add_argument("--env", dest="spawn_env", action="append", metavar="K=V", help="for ARGV only")
    spawn.add_argument(
        "--env-stdin",
        action="store_true",
        help="for ARGV only: a JSON object of K: V on stdin (values kept off every command line)",
    )

    keep = subs.add_parser("keep", help="run `-- ARGV`, then append how it ended to --log")
    keep.add_argument("--log", required=True, metavar="PATH")

    stop = subs.add_parser("stop", help="end the process group --pid if it carries --token")
    stop.add_argument("--pid", required=True, type=_pid)
    stop.add_argument("--token", required=True)
    stop.add_argument("--grace", type=_seconds, default=10.0, metavar="S")

    status = subs.add_parser("status", help="whether the process group --pid still runs, with --token")
    status.add_argument("--pid", required=True, type=_pid)
    status.add_argument("--token", required=True)

    find = subs.add_parser("find", help="the processes that carry --token")
    find.add_argument("--token", required=True)

    tail = subs.add_parser("tail", help="follow --log from --offset, each line after --prefix")
    tail.add_argument("--log", required=True, metavar="PATH")
    tail.add_argument("--prefix", default="")
    tail.add_argument("--offset", type=_count, default=0, metavar="N")
    tail.add_argument("--pid", type=_pid, help="end once this process is gone and the log read")

    ports = subs.add_parser("ports", help="which of PORT... are taken on --host")
    ports.add_argument("--host", default="127.0.0.1", metavar="ADDR")
    ports.add_argument("ports", nargs="+", type=_port, metavar="PORT")

    free = subs.add_parser("free-port", help="ports free on --host, as many as --count, all different")
    free.add_argument("--host", default="127.0.0.1", metavar="ADDR")
    free.add_argument("--count", type=_count, default=1, metavar="N")

    gpus = subs.add_parser("gpus", help="one JSON line of GPU samples per round")
    gpus.add_argument("--every", type=_seconds, default=1.0, metavar="S")
    gpus.add_argument("--count", type=_count, default=None, metavar="N", help="stop after N rounds")

    version = subs.add_parser("version", help="the engine's version the launcher runs")
    version.add_argument("--engine", required=True)
    version.add_argument("--command", nargs=argparse.REMAINDER, default=[], metavar="WORD")
    return parser


def _pid(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"a PID is a positive number, got {text[:20]!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:20]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = _count(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number 1-65535, got {text[:20]!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:20]!r}") from None
    if not 0 <= value < 86400:
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to a day, got {text[:20]!r}")
    return value


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not _ENV_NAME.fullmatch(key):
        raise BadInput(f"--env takes NAME=VALUE, got {text[:40]!r}")
    return key, value


# -- spawn, keep ---------------------------------------------------------------------------------


def cmd_spawn(args: argparse.Namespace) -> int:
    """Start the keeper (and under it ARGV) in its own session; answer at once."""
    if not args.argv:
        raise BadInput("cockpit agent spawn: give the command after --, like -- vllm serve MODEL")
    if not args.token:
        raise BadInput("cockpit agent spawn: --token must not be empty")
    env = {**os.environ, **dict(_env_pair(pair) for pair in args.spawn_env or ())}
    if args.env_stdin:
        env.update(_env_from_stdin())
    env[TOKEN_ENV] = args.token
    launcher = args.argv[0]
    if shutil.which(launcher, path=env.get("PATH")) is None:
        why = "No such file or directory" if not os.path.exists(launcher) else "Permission denied"
        return _fail(f"cannot start `{launcher}`: {why}", FAILED)
    log = _log_file(args.log)
    keeper = [sys.executable, "-m", "cockpit", "agent", "keep", "--log", str(log), "--", *args.argv]
    with open(log, "ab", buffering=0) as out:
        process = subprocess.Popen(
            keeper,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,  # its own session and process group: the group is the server
            close_fds=True,
        )
    _say({"pid": process.pid, "log": str(log), "started": time.time()})
    return 0


def _env_from_stdin() -> dict[str, str]:
    """The engine's environment sent on stdin: a profile's env may hold a token, which `ps` on
    either machine would show if it rode on the ssh command line."""
    try:
        data = json.loads(sys.stdin.read(1_000_000) or "{}")
    except ValueError as error:
        raise BadInput(f"cockpit agent spawn: --env-stdin wants a JSON object on stdin ({error})") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise BadInput("cockpit agent spawn: --env-stdin wants a JSON object of strings on stdin")
    return data


def _log_file(text: str) -> Path:
    """The log's path, its folders made owner-only and the file created owner-only. A relative
    path is under this node's cockpit state folder (the launching cockpit does not know it)."""
    from cockpit.store.paths import private_dir, state_dir

    path = Path(text).expanduser()
    path = path if path.is_absolute() else state_dir() / path
    private_dir(path.parent, fix="give --log a path in a folder you can write")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError as error:
        raise CockpitError(f"cannot write the log {path}: {error.strerror}") from None
    return path


def cmd_keep(args: argparse.Namespace) -> int:
    """Run ARGV as a child in this process group, wait, and say in the log how it ended.

    A signal to the group (the caller's stop) reaches the child too; the keeper outlives it to
    write the last line, so it only notes such a signal and goes on waiting."""
    if not args.argv:
        raise BadInput("cockpit agent keep: give the command after --")
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    try:
        child = subprocess.Popen(args.argv, stdin=subprocess.DEVNULL)
    except OSError as error:
        _append(args.log, f"{KEEPER_WORDS} cannot start `{args.argv[0]}`: {error.strerror}")
        return 127
    code = child.wait()
    if code >= 0:
        _append(args.log, f"{KEEPER_WORDS} the engine exited with code {code}")
        return code
    _append(args.log, f"{KEEPER_WORDS} the engine was killed by signal {_signal_name(-code)}")
    return 128 - code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _append(log: str, line: str) -> None:
    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as out:
        out.write(line + "\n")


# -- stop, status, find -----------------------------------------------------------------------


def _living(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group(pgid: int) -> list[psutil.Process]:
    """The living processes of process group ``pgid`` (the supervisor's reading of a group)."""
    members = []
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            members.append(psutil.Process(pid))
    return members


def _carries(process: psutil.Process, token: str) -> bool:
    try:
        return bool(token) and process.environ().get(TOKEN_ENV) == token
    except (psutil.Error, OSError):  # gone, or not ours to read: not proven ours
        return False


def cmd_stop(args: argparse.Namespace) -> int:
    """SIGTERM the group, SIGKILL what is left after the grace; never a group without the token."""
    members = _group(args.pid)
    if not members:
        _say({"stopped": False, "why": f"process group {args.pid} has ended"})
        return 0
    if not any(_carries(process, args.token) for process in members):
        _say(
            {
                "stopped": False,
                "why": f"process group {args.pid} does not carry this server's token: "
                "its PID belongs to another process now; left alone",
            }
        )
        return 0
    signal_group(args.pid, signal.SIGTERM)
    if wait_group_gone(args.pid, args.grace):
        _say({"stopped": True, "why": "ended on SIGTERM"})
        return 0
    # SIGKILL the engine first, so its keeper can still write how it ended; then the rest.
    for process in _group(args.pid):
        if process.pid != args.pid:
            with contextlib.suppress(psutil.Error, OSError):
                process.kill()
    if not wait_group_gone(args.pid, 3.0):
        signal_group(args.pid, signal.SIGKILL)
        wait_group_gone(args.pid, 3.0)
    _say({"stopped": True, "why": f"killed: still running {args.grace:g} s after SIGTERM"})
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    _say({"alive": any(_carries(process, args.token) for process in _group(args.pid))})
    return 0


def cmd_find(args: argparse.Namespace) -> int:
    pids = []
    for process in psutil.process_iter():
        if process.pid != os.getpid() and _living(process) and _carries(process, args.token):
            pids.append(process.pid)
    groups = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    _say({"pids": sorted(pids), "groups": sorted(groups)})  # groups: what `stop --pid` takes
    return 0


# -- tail ---------------------------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace) -> int:
    """Print each complete line of the log from ``--offset`` on, after ``--prefix``, as it comes;
    with ``--pid``, end once that process is gone and the log has nothing more."""
    path = Path(args.log).expanduser()
    prefix = args.prefix.encode()
    out = sys.stdout.buffer
    pending = b""
    opened = None
    try:
        while True:
            if opened is None and path.exists():
                opened = open(path, "rb")
                opened.seek(args.offset)
            chunk = opened.read(1 << 16) if opened is not None else b""
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    out.write(prefix + line + b"\n")
                out.flush()
                continue
            if args.pid is not None and not _alive(args.pid):
                rest = opened.read() if opened is not None else b""
                *lines, pending = (pending + rest).split(b"\n")
                for line in [*lines, pending] if pending else lines:
                    out.write(prefix + line + b"\n")
                out.flush()
                return 0
            if _stdout_gone():
                return _quiet_exit()
            time.sleep(POLL_S)
    finally:
        if opened is not None:
            opened.close()


def _alive(pid: int) -> bool:
    try:
        return _living(psutil.Process(pid))
    except psutil.Error:
        return False


def _stdout_gone() -> bool:
    """Whether the reader of stdout left (its pipe or socket hung up): a quiet follower would
    otherwise outlive the ssh that started it, since nothing is written to find out."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # errors and hang-ups are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


# -- ports, free-port ---------------------------------------------------------------------------


def cmd_ports(args: argparse.Namespace) -> int:
    from cockpit.runner.supervisor import busy_port

    busy = {}
    for port in args.ports:
        who = busy_port(args.host, port)
        if who is not None:
            busy[str(port)] = who
    _say({"busy": busy})
    return 0


def cmd_free_port(args: argparse.Namespace) -> int:
    """Ports the kernel picks, every socket held until all are picked: never the same one twice."""
    if not 1 <= args.count <= 16:
        raise BadInput("cockpit agent free-port: --count takes 1 to 16")
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(args.count):
            try:
                s = held.enter_context(socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET))
                s.bind((args.host, 0))
            except OSError as error:
                raise CockpitError(
                    f"cannot bind {args.host}: {error.strerror}: give an address of this node"
                ) from None
            ports.append(s.getsockname()[1])
    _say({"port": ports[0], "ports": ports})
    return 0


# -- gpus, version ------------------------------------------------------------------------------


def gpu_source() -> Any:
    """The simulated box where the environment asks for one, else the GPUs through NVML."""
    if any(os.environ.get(name) for name in SIM_VARIABLES):
        from cockpit.sim.box import SimBox
        from cockpit.telemetry.simbox import SimBoxSource

        return SimBoxSource(SimBox.from_env().create())
    from cockpit.telemetry.nvml import NvmlSource

    return NvmlSource()


def sample_json(sample: Any) -> dict[str, Any]:
    """A GpuSample as the agent's JSON (read back by ``cockpit.telemetry.agent``)."""
    return {
        "index": sample.index,
        "name": sample.name,
        "memory_used": sample.memory_used,
        "memory_total": sample.memory_total,
        "power_w": sample.power_w,
        "power_limit_w": sample.power_limit_w,
        "utilization": sample.utilization,
        "temperature_c": sample.temperature_c,
        "processes": [[p.pid, p.name, p.used_bytes] for p in sample.processes],
        "time": sample.time,
    }


def cmd_gpus(args: argparse.Namespace) -> int:
    source = gpu_source()
    rounds = 0
    try:
        while args.count is None or rounds < args.count:
            started = time.monotonic()
            _say([sample_json(sample) for sample in source.sample()])
            rounds += 1
            if args.count is not None and rounds >= args.count:
                break
            time.sleep(max(0.0, args.every - (time.monotonic() - started)))
    finally:
        source.close()
    return 0


SIM_VERSION_ENV = "COCKPIT_SIM_ENGINE_VERSION"


def cmd_version(args: argparse.Namespace) -> int:
    from cockpit.engines import ENGINE_NAMES, get_engine
    from cockpit.system.installed import engine_version

    if args.engine not in ENGINE_NAMES:
        raise BadInput(f"--engine takes one of {', '.join(ENGINE_NAMES)}, got {args.engine[:20]!r}")
    command = list(args.command or args.argv) or list(get_engine(args.engine).default_command)
    simulated = os.environ.get(SIM_VERSION_ENV)
    version: str | None
    if simulated:  # a simulated node: the version its simulated engine speaks
        version, how = simulated, f"{SIM_VERSION_ENV} on a simulated node"
    else:
        version, how = engine_version(args.engine, command)
    from cockpit import __version__

    _say(
        {
            "engine": args.engine,
            "version": version,
            "how": how,
            "python": platform.python_version(),
            "cockpit": __version__,
        }
    )
    return 0


_HANDLERS = {
    "spawn": cmd_spawn,
    "keep": cmd_keep,
    "stop": cmd_stop,
    "status": cmd_status,
    "find": cmd_find,
    "tail": cmd_tail,
    "ports": cmd_ports,
    "free-port": cmd_free_port,
    "gpus": cmd_gpus,
    "version": cmd_version,
}


# -- the command line's hook --------------------------------------------------------------------


class _RunAgent(argparse.Action):
    """Runs the agent as soon as `cockpit agent` is parsed: its words are its own."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        raise SystemExit(main(values))


def add_agent_parser(commands: Any) -> None:
    """Register `cockpit agent ...` with the command line; every word after it goes to ``main``
    as it is (no prefix character, so `--env` and `--` reach the agent's own parser)."""
    agent = commands.add_parser(
        "agent", help="the agent cockpit runs on a cluster's nodes over SSH (JSON lines)", add_help=False,
        prefix_chars="\0",
    )  # fmt: skip
    agent.add_argument("words", nargs=argparse.REMAINDER, action=_RunAgent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
