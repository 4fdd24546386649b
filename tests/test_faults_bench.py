"""The bench's own bounds, as a fault table: each absurd value, address, prompts file or server is
one line and a non-zero exit, never a traceback, a hang, a leaked password or memory without end.

The command-line cases run the real `cockpit bench`: in this process through `cockpit.faces.cli.main`
(a process start is most of such a case's time), except those a regression would turn into a hang
or memory without end, which run as a subprocess under a timeout and keep the console script's
path covered end to end. Each bound that the prompt knows too is typed there as well and must give
the same words. The server cases run a tiny HTTP server here (127.0.0.1, a free port) that
misbehaves one way per path: SSE comments forever, an event that never ends, a stream that
trickles, a 401 that echoes the password.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port

from cockpit.bench import aiohttp_transport as client
from cockpit.bench import raw_transport as rawclient
from cockpit.bench.transport import RequestRecord, Timeouts
from cockpit.core.benchrequest import MAX_EVENT_BYTES, MAX_LAYOUTS, MAX_LEVELS, MAX_PROMPT_LINE_BYTES
from cockpit.core.commands import Sweep
from cockpit.core.errors import CockpitError
from cockpit.faces import cli
from cockpit.faces.prompt import MAX_LINE, parse_command

PASSWORD = "hunter2-secret"
# `python -m cockpit` where the package has its __main__, else the CLI module itself.
CLI = [
    sys.executable,
    "-m",
    "cockpit" if importlib.util.find_spec("cockpit.__main__") else "cockpit.faces.cli",
]


# -- a server that misbehaves one way per path ---------------------------------------------------

TOKEN = b'data: {"choices":[{"text":" a","index":0}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _json_answer(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class Misbehaving:
    """HTTP/1.1 on 127.0.0.1, one connection a request; the first path word picks the behaviour.
    ``sent`` counts the bytes each behaviour wrote, to show the client stopped reading."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopping = threading.Event()
        self.sent: dict[str, int] = {}
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    head += piece
                path = head.split(b" ", 2)[1].decode()
                kind = path.strip("/").split("/")[0]
                getattr(self, f"_{kind.replace('-', '_')}")(conn, path)
            except OSError:
                pass  # the client closed: what these servers are for

    def _count(self, kind: str, data: bytes) -> None:
        self.sent[kind] = self.sent.get(kind, 0) + len(data)

    def _stream(self, conn: socket.socket, kind: str, pieces, gap_s: float) -> None:
        conn.sendall(STREAM_HEAD)
        for piece in pieces:
            if self.stopping.is_set():
                return
            conn.sendall(piece)
            self._count(kind, piece)
            if gap_s:
                time.sleep(gap_s)

    def _ping(self, conn: socket.socket, path: str) -> None:
        """Headers, then an SSE comment every 0.2 s, for ever: no token, ever."""
        self._stream(conn, "ping", iter(lambda: b": ping\n\n", None), 0.2)

    def _endless(self, conn: socket.socket, path: str) -> None:
        """One event that never ends: `data: xxxx...` without the blank line."""
        self._stream(conn, "endless", itertools.chain([b"data: "], iter(lambda: b"x" * 65536, None)), 0.0)

    def _trickle(self, conn: socket.socket, path: str) -> None:
        """A token every 0.3 s, for ever."""
        self._stream(conn, "trickle", iter(lambda: TOKEN, None), 0.3)

    def _good(self, conn: socket.socket, path: str) -> None:
        self._stream(conn, "good", [TOKEN, TOKEN, USAGE % 2, b"data: [DONE]\n\n"], 0.0)

    def _auth(self, conn: socket.socket, path: str) -> None:
        """401, its message echoing the URL with the password, as some proxies do."""
        body = b'{"error": {"message": "no entry for http://user:%s@proxy/"}}' % PASSWORD.encode()
        conn.sendall(_json_answer("401 Unauthorized", body))

    def _badmodel(self, conn: socket.socket, path: str) -> None:
        conn.sendall(_json_answer("404 Not Found", b'{"message": "The model `nope` does not exist."}'))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="module")
def server():
    misbehaving = Misbehaving()
    yield misbehaving
    misbehaving.stop()


# -- the command line ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # after `cockpit bench`; {url} the server, {dead} a port where nothing listens
    expect: str  # words the one stderr line holds
    prompt: str | None = None  # the same value typed at the prompt: the same words, or None
    code: int = 2  # 2: refused before sending; 1: sent, and every level failed
    # Why the case runs as its own process, or None: in this one. A regression of these would
    # block or grow without end, which a subprocess's timeout ends and this process would not.
    apart: str | None = None


LEVELS_5001 = ",".join(str(c) for c in range(1, 5002))
OK = ("--model", "m", "-c", "1", "--requests", "1")  # a valid rest, so only the fault is wrong
RATE = "must be requests per second from 0.001 to 1,000,000"
WHOLE = "must be a whole number of 1 or more and at most 10,000,000"

CLI_CASES = [
    Case("rate inf", ("--url", "{dead}", *OK, "--rate", "inf"), f"--rate {RATE} (got inf)"),
    Case("rate 1e309", ("--url", "{dead}", *OK, "--rate", "1e309"), f"--rate {RATE} (got inf)"),
    Case(
        "rate 1e-300",
        ("--url", "{dead}", *OK, "--rate", "1e-300"),
        f"--rate {RATE} (got 1e-300)",
        apart="accepted, it waits 1e300 s for the first arrival",
    ),
    Case("rate nan", ("--url", "{dead}", *OK, "--rate", "nan"), f"--rate {RATE} (got nan)"),
    Case("rate zero", ("--url", "{dead}", *OK, "--rate", "0"), f"--rate {RATE} (got 0.0)"),
    Case(
        "input-len 1e10",
        ("--url", "{dead}", *OK, "--input-len", "1e10"),
        f"{WHOLE} (got '1e10')",
        "bench in=1e10",
    ),
    Case(
        "output-len 1e12",
        ("--url", "{dead}", *OK, "--output-len", "1e12"),
        f"{WHOLE} (got '1e12')",
        "bench out=1e12",
    ),
    Case(
        "requests 1e15",
        ("--url", "{dead}", "--model", "m", "--requests", "1e15"),
        f"{WHOLE} (got '1e15')",
        "bench n=1e15",
    ),
    Case(
        "requests zero",
        ("--url", "{dead}", "--model", "m", "--requests", "0"),
        f"{WHOLE} (got 0)",
        "bench n=0",
    ),
    Case(
        "5001 levels",
        ("--url", "{dead}", "--model", "m", "-c", LEVELS_5001),
        f"at most {MAX_LEVELS} concurrency levels in one sweep, got 5,001",
        f"bench c={LEVELS_5001}",
    ),
    Case(
        "level over the bound",
        ("--url", "{dead}", "--model", "m", "-c", "1,100001"),
        "concurrency levels must be 1 or more and at most 100,000",
        "bench c=1,100001",
    ),
    Case(
        "timeout nan",
        ("--url", "{dead}", *OK, "--timeout", "nan"),
        "must be a positive number of seconds, at most 604,800 (got nan)",
        "bench timeout=nan",
    ),
    Case(
        "duration 1e9",
        ("--url", "{dead}", "--model", "m", "--duration", "1e9"),
        "must be a positive number of seconds, at most 604,800 (got 1000000000.0)",
        "bench t=1e9",
    ),
    Case("workers 0", ("--url", "{dead}", *OK, "--workers", "0"), "--workers must be a number of processes"),
    Case(
        "url unclosed IPv6",
        ("--url", "http://[::1", *OK),
        "--url 'http://[::1' is not a URL: Invalid IPv6 URL",
    ),
    Case(
        "url with a password, unclosed",
        ("--url", f"http://user:{PASSWORD}@[::1", *OK),
        "--url 'http://user:***@[::1' is not a URL",
    ),
    Case("url port out of range", ("--url", "http://127.0.0.1:99999", *OK), "Port out of range"),
    Case("url no scheme", ("--url", "localhost:8000", *OK), "--url must start with http:// or https://"),
    Case(
        "password, nothing listens, no model",
        ("--url", "{dead_pw}", "-c", "1", "--requests", "1"),
        "cannot reach http://user:***@127.0.0.1:",
    ),
    Case(
        "password, nothing listens",
        ("--url", "{dead_pw}", *OK),
        "no level got a token back (C=1 failed: 8 of 8 requests failed: cannot connect: Connection refused)",
        code=1,
    ),
    Case(
        "password, 401 listing models",
        ("--url", "{url_pw}/auth", "-c", "1", "--requests", "1"),
        "http://user:***@127.0.0.1:",
    ),
    Case(
        "password, 401 on each request",
        ("--url", "{url_pw}/auth", *OK),
        "requests failed: HTTP 401: no entry for http://user:***@proxy/",
        code=1,
    ),
    Case(
        "password, bad model",
        ("--url", "{url_pw}/badmodel", *OK),
        "requests failed: HTTP 404: The model `nope` does not exist.",
        code=1,
    ),
    Case(
        "prompts /dev/zero",
        ("--url", "{dead}", *OK, "--prompts", "/dev/zero"),
        "is a device, not a regular file",
        apart="opened, it reads zeros until memory runs out",
    ),
    Case(
        "prompts a FIFO",
        ("--url", "{dead}", *OK, "--prompts", "{fifo}"),
        "is a FIFO, not a regular file",
        apart="opened, it blocks until a writer comes, which none does",
    ),
    Case(
        "prompts a folder",
        ("--url", "{dead}", *OK, "--prompts", "{folder}"),
        "is a folder, not a regular file",
    ),
    Case(
        "prompts over 256 MiB",
        ("--url", "{dead}", *OK, "--prompts", "{sparse}"),
        "more than the 256 MiB a prompts file may",
    ),
    Case(
        "prompts a line over 16 MiB",
        ("--url", "{dead}", *OK, "--prompts", "{longline}"),
        "long.jsonl, line 2: longer than 16 MiB",  # checked as it is read, before any request
    ),
]


def _inputs(tmp_path: Path, server: Misbehaving) -> dict[str, str]:
    """What the cases' placeholders stand for; the files are made only when a case needs them."""
    dead = free_port()
    port = server.url.rsplit(":", 1)[1]
    return {
        "url": server.url,
        "url_pw": f"http://user:{PASSWORD}@127.0.0.1:{port}",
        "dead": f"http://127.0.0.1:{dead}",
        "dead_pw": f"http://user:{PASSWORD}@127.0.0.1:{dead}",
        "fifo": str(tmp_path / "prompts.fifo"),
        "folder": str(tmp_path / "prompts.d"),
        "sparse": str(tmp_path / "sparse.jsonl"),
        "longline": str(tmp_path / "long.jsonl"),
    }


def _make_files(args: tuple[str, ...], paths: dict[str, str]) -> None:
    if "{fifo}" in args:
        os.mkfifo(paths["fifo"])
    if "{folder}" in args:
        os.mkdir(paths["folder"])
    if "{sparse}" in args:
        with open(paths["sparse"], "wb") as file:
            file.truncate(257 << 20)  # a hole: nothing written, the size says 257 MiB
    if "{longline}" in args:
        with open(paths["longline"], "wb") as file:
            file.write(b'{"prompt": "fine"}\n{"prompt": "' + b"x" * (MAX_PROMPT_LINE_BYTES + 1) + b'"}\n')


def _in_a_process(argv: list[str]) -> tuple[int, str, str]:
    """`cockpit bench` as the console script runs it: (exit code, stdout, stderr)."""
    result = subprocess.run(
        [*CLI, "bench", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    return result.returncode, result.stdout, result.stderr


def _in_this_process(argv: list[str], capsys, caplog, monkeypatch) -> tuple[int, str, str]:
    """`cockpit bench` through ``cli.main``: (exit code, stdout, stderr). No traceback here
    means main() returned an int and nothing escaped it. A process's logging prints a warning on
    stderr by its last resort; pytest takes those records, so they are counted back in."""
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    caplog.clear()
    code = cli.main(["bench", *argv])
    out, err = capsys.readouterr()
    assert type(code) is int, code
    logged = "".join(f"{r.getMessage()}\n" for r in caplog.records if r.levelno >= logging.WARNING)
    return code, out, err + logged


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_each_bad_bench_input_is_one_line_and_a_non_zero_exit(
    case, tmp_path, server, capsys, caplog, monkeypatch
):
    paths = _inputs(tmp_path, server)
    _make_files(case.args, paths)
    argv = [arg.format(**paths) if "{" in arg else arg for arg in case.args]
    if case.apart:
        code, out, err = _in_a_process(argv)
    else:
        code, out, err = _in_this_process(argv, capsys, caplog, monkeypatch)
    lines = err.strip().splitlines()
    assert code == case.code, err[-2000:]
    assert "Traceback" not in err + out
    assert len(lines) == 1 and case.expect in lines[0], err[-2000:]
    # nothing lost, nothing leaked: the password nowhere, nothing written to cockpit's state
    assert PASSWORD not in err + out
    assert not Path(os.environ["COCKPIT_STATE_DIR"]).exists()
    assert not Path(os.environ["COCKPIT_JOURNAL"]).exists()
    if case.code == 2:
        assert out == ""  # refused before anything was sent
    if case.prompt is not None:  # the prompt says the same words
        with pytest.raises(CockpitError) as typed:
            parse_command(case.prompt)
        assert case.expect.removeprefix("--rate ") in str(typed.value)
        assert "\n" not in str(typed.value) and len(str(typed.value)) < 200


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    """Nothing ever opens the FIFO for writing: opening it to read would block for ever."""
    from cockpit.bench.workload import check_prompts_path, jsonl_workload

    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    for read in (check_prompts_path, lambda path: jsonl_workload(path, "m")):
        with pytest.raises(CockpitError, match="is a FIFO, not a regular file"):
            read(fifo)


# -- the prompt grammar's own bounds ------------------------------------------------------------------


def _layouts(count: int) -> str:
    return ", ".join("tp4" for _ in range(count))


PROMPT_CASES = [
    # (id, the line, the words of the one line)
    ("a 10 MB line", "try tp4 --a '" + "b " * 5_000_000, f"a command is at most {MAX_LINE:,} characters"),
    ("a 10 MB unknown command", "x" * 10_000_000, f"a command is at most {MAX_LINE:,} characters"),
    ("a 60 KB unknown command", "frob" + "x" * 60_000, "unknown command 'frobxxxx"),
    ("65 levels", "bench c=" + ",".join(map(str, range(1, 66))), f"at most {MAX_LEVELS} concurrency levels"),
    (
        "65 layouts",
        "sweep " + _layouts(MAX_LAYOUTS + 1),
        f"at most {MAX_LAYOUTS} layouts in one sweep, got 65",
    ),
    ("60 KB of equals", "sweep tp4 " + "= " * 30_000, "is neither a layout nor a bench setting"),
    ("a 5000-digit count", "bench n=" + "9" * 5000, WHOLE),
]


@pytest.mark.parametrize(
    "text,expect", [(t, e) for _, t, e in PROMPT_CASES], ids=[c[0] for c in PROMPT_CASES]
)
def test_each_absurd_prompt_line_is_one_short_line(text, expect):
    with pytest.raises(CockpitError) as err:
        parse_command(text)
    message = str(err.value)
    assert expect in message and "\n" not in message and len(message) < 250, message[:300]
    # nothing lost: the grammar still reads a good line after it
    assert isinstance(parse_command("sweep " + _layouts(MAX_LAYOUTS) + " c=1,8"), Sweep)


# -- a request's total bound and an event's size --------------------------------------------------

TRANSPORTS: dict[str, tuple[Any, Any]] = {  # (new_session, transport class)
    "raw": (rawclient.new_session, rawclient.RawTransport),
    "aiohttp": (client.new_session, client.AiohttpTransport),
}

SSE_CASES = [
    # (path, Timeouts, the record's error): each fails within seconds, whatever its keep-alives
    ("ping", Timeouts.of(30.0, read_s=1.0), "timed out after 1 s (no token, only keep-alives)"),
    (
        "endless",
        Timeouts.of(30.0, read_s=5.0),
        "an SSE event without its end (a blank line) over 1 MiB: the server's stream is malformed",
    ),
    (
        "trickle",
        Timeouts(request_s=30.0, read_s=1.0, connect_s=1.0, pace_s=0.1),
        "timed out after 1 s + 0.1 s a token (the stream fell behind)",
    ),
]


def _fetch_twice(
    server: Misbehaving, transport: str, path: str, timeouts: Timeouts
) -> tuple[RequestRecord, RequestRecord, int]:
    """The misbehaving request, then a good one on the same transport; and the peak of memory
    Python allocated meanwhile."""
    new_session, transport_class = TRANSPORTS[transport]

    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with new_session() as session:
            bad = transport_class(session, f"{server.url}/{path}/v1/completions", timeouts=timeouts)
            good = transport_class(session, f"{server.url}/good/v1/completions", timeouts=timeouts)
            body = b'{"prompt": "hi", "stream": true}'
            return await bad.request(body), await good.request(body)

    tracemalloc.start()
    try:
        bad, good = asyncio.run(go())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return bad, good, peak


@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("path,timeouts,error", SSE_CASES, ids=[c[0] for c in SSE_CASES])
def test_a_stream_that_never_ends_fails_with_one_reason_and_bounded_memory(
    server, transport, path, timeouts, error
):
    bad, good, peak = _fetch_twice(server, transport, path, timeouts)
    assert bad.error == error and not bad.ok
    assert bad.end - bad.start < timeouts.request_s  # ended by its own bound, not the last resort
    assert peak < 8 * MAX_EVENT_BYTES, f"{peak / 2**20:.1f} MiB held"
    # nothing lost: the same transport serves the next request in full
    assert good.ok and good.output_tokens == 2, good.error


def test_the_cli_fails_a_pinging_server_in_its_timeout(server):
    """`cockpit bench --timeout 1` against SSE comments every 0.2 s: the level fails with the
    reason, instead of max(3600, timeout) per request."""
    result = subprocess.run(
        [
            *CLI,
            "bench",
            "--url",
            f"{server.url}/ping",
            "--model",
            "m",
            "-c",
            "1",
            "--requests",
            "1",
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "timed out after 1 s (no token, only keep-alives)" in line
    assert "errors 1 (1x timed out after 1 s (no token, only keep-alives))" in result.stdout


def test_an_endless_event_fails_each_request_in_the_cli(server):
    result = subprocess.run(
        [*CLI, "bench", "--url", f"{server.url}/endless", "--model", "m", "-c", "1", "--requests", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "an SSE event without its end (a blank line) over 1 MiB" in line
