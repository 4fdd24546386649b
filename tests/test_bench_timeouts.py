"""Every wait of a request is bounded by `--timeout`: servers that hang one way each.

A server that sends headers and then nothing, one that accepts and never answers, a listen
queue that never accepts, and a port where nothing listens: each level ends within its bound,
in both transports, with every request it sent counted once, as an error or as cancelled.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import free_port

from cockpit.bench.command import bench_argv
from cockpit.bench.concurrency_sweep import run_sweep
from cockpit.bench.config import BenchConfig

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class Hanging:
    """A TCP server on 127.0.0.1 that misbehaves one way; its connections stay open till stop()."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.conns: list[socket.socket] = []
        self.stopping = threading.Event()
        if kind == "backlog":
            self.sock.listen(0)  # never accept()ed: fill the queue so a new connect hangs
            self.fillers = [self._fill() for _ in range(4)]
            return
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _fill(self) -> socket.socket:
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", self.port))
        return filler

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.kind == "headers-then-nothing":
                threading.Thread(target=self._headers, args=(conn,), daemon=True).start()

    def _headers(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            conn.recv(65536)  # the request (its head at least)
            conn.sendall(SSE_HEAD)
        except OSError:
            pass

    def stop(self) -> None:
        self.stopping.set()
        if self.kind != "backlog":
            self.thread.join(timeout=5)
        for s in [*self.conns, *getattr(self, "fillers", []), self.sock]:
            s.close()


KINDS = ["headers-then-nothing", "never-answers", "backlog", "nothing-listens"]


@pytest.fixture
def servers():
    """One server of each kind, all at once: the tests run the kinds side by side (each wait is
    seconds of sleeping, not of work)."""
    hanging = {kind: Hanging(kind) for kind in KINDS if kind != "nothing-listens"}
    urls = {kind: server.url for kind, server in hanging.items()}
    urls["nothing-listens"] = f"http://127.0.0.1:{free_port()}"
    yield urls
    for server in hanging.values():
        server.stop()


def expected_reasons(kind: str, timeout: str) -> set[str]:
    no_bytes, connecting = (
        f"timed out after {timeout} s (no bytes)",
        f"timed out after {timeout} s (connecting)",
    )
    return {
        "headers-then-nothing": {no_bytes},
        "never-answers": {no_bytes},
        # a connect beyond the full queue hangs; one the kernel queued just before it filled is "connected"
        "backlog": {connecting, no_bytes},
        "nothing-listens": {"cannot connect: Connection refused"},
    }[kind]


def assert_counted_once(result) -> None:
    """Every request the level sent ended once: completed, failed or cancelled at the end."""
    assert result.requests + result.errors + result.cancelled <= result.sent
    assert result.errors <= result.sent and sum(result.error_reasons.values()) == result.errors


@pytest.mark.parametrize("transport", ["raw", "aiohttp"])
def test_each_hanging_server_ends_within_the_timeout_in_both_transports(servers, transport):
    async def sweep(url: str):
        cfg = BenchConfig(
            url=url,
            model="m",
            concurrency=(1, 3),
            input_len=4,
            output_len=4,
            requests=2,
            timeout=1.0,
            transport=transport,
        )
        started = time.perf_counter()
        results = await run_sweep(cfg, lambda event: None)
        return results, time.perf_counter() - started

    async def all_kinds():
        return await asyncio.gather(*(sweep(servers[kind]) for kind in KINDS))

    for kind, (results, elapsed) in zip(KINDS, asyncio.run(all_kinds())):
        assert elapsed < 12, (kind, elapsed)  # two levels of ~1 s each, with room for a loaded machine
        for result in results:
            assert result.failed and result.requests == 0 and result.output_tok_s == 0
            assert set(result.error_reasons) <= expected_reasons(kind, "1"), (kind, result.error_reasons)
            assert result.errors >= result.concurrency
            assert result.errors + result.cancelled == result.sent
            assert_counted_once(result)
            assert result.error.startswith(f"{result.errors} of {result.errors} requests failed: ")
        assert results[0].errors == results[0].sent  # C=1: nothing was in flight when it gave up


def _bench_cli(url: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cockpit.faces.cli",
            "bench",
            "--url",
            url,
            "--model",
            "m",
            "-c",
            "1",
            "--requests",
            "2",
            "--input-len",
            "4",
            "--output-len",
            "4",
            "--timeout",
            "5",
            "--jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return result, time.perf_counter() - started


def test_cockpit_bench_with_timeout_5_ends_within_20_s_and_fails(servers):
    """The CLI (raw transport, as `cockpit run --bench` uses it): exit 1, the level named."""
    with ThreadPoolExecutor(max_workers=len(KINDS)) as pool:
        runs = dict(zip(KINDS, pool.map(_bench_cli, (servers[kind] for kind in KINDS))))
    for kind, (result, elapsed) in runs.items():
        print(f"{kind}: cockpit bench --timeout 5 ended in {elapsed:.1f} s")
        assert elapsed < 20, (kind, elapsed)
        assert result.returncode == 1, result.stderr
        assert (
            result.stderr.strip()
            .splitlines()[-1]
            .startswith("cockpit bench: no level got a token back (C=1 failed: ")
        )
        [level] = [
            json.loads(line)["result"] for line in result.stdout.splitlines() if '"level_done"' in line
        ]
        assert level["failed"] is True and level["errors"] == level["sent"] >= 1
        assert set(level["error_reasons"]) <= expected_reasons(kind, "5"), (kind, level["error_reasons"])


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_the_timeout_must_be_positive_and_finite(value, capsys):
    from cockpit.faces.cli import main

    assert main(["bench", "--url", "http://127.0.0.1:1", "--timeout", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout must be a positive number of seconds" in err[0]


def test_bench_argv_passes_the_timeout_only_when_given():
    plain = bench_argv("http://h:1", None, [1], input_len=4, output_len=4)
    assert "--timeout" not in plain
    argv = bench_argv("http://h:1", None, [1], input_len=4, output_len=4, timeout=5.0)
    assert argv[argv.index("--timeout") + 1] == "5.0"


def test_the_default_bounds_are_finite_and_generous():
    cfg = BenchConfig(url="http://h:1")
    assert cfg.timeout == 600 and cfg.request_limit_s == 3600
    assert BenchConfig(url="http://h:1", timeout=7200).request_limit_s == 7200  # never shorter than a gap
    with pytest.raises(Exception, match="finite"):
        BenchConfig(url="http://h:1", timeout=float("inf"))
