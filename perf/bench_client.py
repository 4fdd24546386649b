"""Benchmark of the benchmark: how fast, and how truthful, is each load generator on one core?

Throughput and truthfulness of each client, in one command. Starts two mock servers
(perf/mockserver.py, pinned to CPU 0): one that streams as fast as it can (0 ms decode step,
256-token streams) and one that paces tokens exactly 10 ms apart (100-token streams), each
recording the true per-token gaps and TTFT. Then, pinned to ``--client-cpus`` (CPU 1), runs
each client at C = 1, 64, 256, 1024 against both:

* ``cockpit``  -- cockpit's own load generator, as ``cockpit run`` drives it, one process
  (``python -m cockpit.faces.cli bench --jsonl --workers 1``; ``cockpit.bench.concurrency_sweep.run_sweep`` in
  a child process when the CLI has no ``bench``);
* ``cockpit-workers`` -- the same with each level spread over ``--workers-count`` (2) worker
  processes, at ``--workers-levels`` (1024) only. On CPU 1 alone both workers share one core:
  that shows the merge and its cost, not the speed-up, which needs ``--client-cpus 1-2`` or more
  on a machine with the cores for it;
* ``minimal``  -- perf/minimal_client.py, the plain aiohttp baseline (read as vLLM's bench reads);
* ``vllm``     -- ``vllm bench serve`` from ``--pubclients-venv`` (fixed N prompts, ~window s);
* ``guidellm`` -- ``guidellm run`` from ``--pubclients-venv`` (all levels in one run);
* ``aiperf``   -- NVIDIA AIPerf's ``aiperf profile`` from ``--pubclients-venv`` (all levels in
  one run, counting tokens from the server's usage: ``--use-server-token-count``).

A client that is not installed gets a row saying so. For every level the script takes the
client's own measured window (wall clock) and asks the server for the truth over the same
window (``/stats?since=&until=``), and reads the client CPUs' busy time from /proc/stat over it
(so the client CPU includes every worker process, and start-up/imports are excluded). Prints one
markdown table per test and a JSON dump (also written to ``--json-out``).

Run (~12 min with every client, ~3 min for cockpit + minimal on a 2-vCPU machine):
    .venv/bin/python perf/bench_client.py --pubclients-venv /tmp/pubclients-venv
    .venv/bin/python perf/bench_client.py --clients cockpit,minimal --levels 1,256
Published clients go into a throwaway venv outside the repo (see perf/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERF = ROOT / "perf"
SERVER_CPU = 0
CLIENT_CPUS = [1]  # --client-cpus: where every client runs (all its processes)
ALL_CLIENTS = ("cockpit", "cockpit-workers", "minimal", "vllm", "guidellm", "aiperf")

TESTS = {
    "zero": {
        "delay_ms": 0.0,
        "output_len": 256,
        "title": "0 ms server, 256-token streams: streamed tok/s per client core",
    },
    "paced": {
        "delay_ms": 10.0,
        "output_len": 100,
        "title": "10 ms server, 100-token streams: timing accuracy",
    },
}

TOKENIZER_SCRIPT = r"""
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
words = ("the quick brown fox jumps over a lazy dog while serving tokens from many streams at once "
         "load generator measures latency throughput inter token time first token request response").split()
text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
trainer = trainers.BpeTrainer(vocab_size=351, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(text, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                               unk_token="<|endoftext|>")
fast.model_max_length = 1 << 20
fast.save_pretrained(sys.argv[1])
"""


# -- small helpers ------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pin(cpus: int | list[int]) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", ",".join(map(str, cpus)) if isinstance(cpus, list) else str(cpus)]
    return []


def pin_client() -> list[str]:
    return pin(CLIENT_CPUS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def last_line(text: str, default: str = "") -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):  # prefer the line that says what went wrong
        if "Error" in ln or "error" in ln:
            return ln[:200]
    return (lines[-1] if lines else default)[:200]


def run_capture(cmd: list[str], timeout: float, env: dict | None = None, cwd: str | None = None):
    """Run a child in its own process group, its CPU watched; kill the whole group on timeout."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    SAMPLER.watch(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return 124, out
    return proc.returncode, out


class CpuSampler(threading.Thread):
    """Per-CPU busy jiffies (/proc/stat) and the client's CPU time every 0.25 s, to read any past
    window afterwards."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, list[tuple[int, int]], float | None]] = []
        self.stop = threading.Event()
        # The client process whose tree's CPU time is sampled too, with the last CPU seconds seen
        # of each process of the tree (exited ones kept); swapped as one tuple (no races).
        self.watched: tuple | None = None

    def watch(self, pid: int) -> None:
        self.watched = (pid, [None], {}, [[], 0.0])  # the psutil handle is made by the sampling thread

    @staticmethod
    def _handle(pid: int):
        try:
            import psutil

            return psutil.Process(pid)
        except Exception:  # no psutil, or gone already
            return None

    def tree_cpu(self) -> tuple[int, float] | None:
        watched = self.watched
        if watched is None:
            return None
        pid, handle, seen, kids = watched
        if handle[0] is None:
            handle[0] = self._handle(pid)
            if handle[0] is None:
                return None
        root = handle[0]
        if time.time() - kids[1] > 1.0:  # scanning for children is the costly part: once a second
            try:
                kids[0] = root.children(recursive=True)
            except Exception:
                kids[0] = []
            kids[1] = time.time()
        for p in [root] + kids[0]:
            try:
                t = p.cpu_times()
                seen[p.pid] = max(seen.get(p.pid, 0.0), t.user + t.system)
            except Exception:
                pass
        return pid, sum(seen.values())

    @staticmethod
    def read() -> list[tuple[int, int]]:
        out = []
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3].isdigit():
                    v = [int(x) for x in line.split()[1:]]
                    idle = v[3] + (v[4] if len(v) > 4 else 0)
                    out.append((sum(v[:8]) - idle, sum(v[:8])))
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), self.read(), self.tree_cpu()))
            self.stop.wait(0.25)  # light: this shares CPU 0 with the server

    def busy(self, t0: float, t1: float) -> list[float] | None:
        """Busy fraction of each CPU over [t0, t1] (nearest samples inside the window)."""
        inside = [s for s in self.samples if t0 - 0.13 <= s[0] <= t1 + 0.13]
        if len(inside) < 2:
            return None
        (_, a, _), (_, b, _) = inside[0], inside[-1]
        return [(b[i][0] - a[i][0]) / max(1, b[i][1] - a[i][1]) for i in range(min(len(a), len(b)))]

    def client_cores(self, t0: float, t1: float) -> float | None:
        """CPU of the watched client's process tree over [t0, t1], in cores."""
        inside = [s for s in self.samples if t0 - 0.13 <= s[0] <= t1 + 0.13 and s[2] is not None]
        if inside:
            pid = inside[-1][2][0]  # the process that ran at the end of the window
            inside = [s for s in inside if s[2][0] == pid]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return max(0.0, inside[-1][2][1] - inside[0][2][1]) / (inside[-1][0] - inside[0][0])

    def wait_quiet(self, limit: float = 0.15, max_s: float = 15.0) -> float:
        """Wait (up to max_s) for the machine to be under `limit` cores busy over 0.5 s; returns it."""
        end = time.time() + max_s
        while True:
            a = self.read()
            time.sleep(0.5)
            b = self.read()
            load = sum((b[i][0] - a[i][0]) / max(1, b[i][1] - a[i][1]) for i in range(len(a)))
            if load < limit or time.time() > end:
                return load


# -- the servers ----------------------------------------------------------------------------------


def python_with(module: str, candidates: list[str]) -> str | None:
    for py in candidates:
        if py and Path(py).exists():
            rc = subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode
            if rc == 0:
                return py
    return None


class MockServer:
    def __init__(self, python: str, delay_ms: float, max_seconds: float):
        self.port = free_port()
        self.delay_ms = delay_ms
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = pin(SERVER_CPU) + [
            python,
            str(PERF / "mockserver.py"),
            "--port",
            str(self.port),
            "--delay-ms",
            str(delay_ms),
            "--max-seconds",
            str(int(max_seconds)),
        ]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(100):
            try:
                get_json(self.url + "/stats", timeout=1)
                break
            except OSError:
                if self.proc.poll() is not None:
                    self.log.seek(0)
                    raise SystemExit(
                        f"mock server on port {self.port} exited: {last_line(self.log.read())}"
                    ) from None
                time.sleep(0.1)
        self.log.seek(0)
        self.banner = self.log.read().strip()

    def truth(self, t0: float, t1: float) -> dict:
        return get_json(f"{self.url}/stats?since={t0:.3f}&until={t1:.3f}", timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# -- the clients: each returns one record per level with its own window and its own report -------


def level(client: str, c: int, **kw) -> dict:
    rec = {
        "client": client,
        "concurrency": c,
        "status": "ok",
        "t0": None,
        "t1": None,
        "reported": {},
        "extra": {},
    }
    rec.update(kw)
    return rec


def _ms(summary: dict | None, key: str):
    return None if not summary else summary.get(key)


def run_cockpit_workers(test: str, server: MockServer, levels: list[int], args) -> list[dict]:
    """cockpit with its level spread over ``--workers-count`` processes, at ``--workers-levels``."""
    wanted = [c for c in levels if c in args.workers_levels] or args.workers_levels
    return run_cockpit(test, server, wanted, args, workers=args.workers_count)


def run_cockpit(test: str, server: MockServer, levels: list[int], args, workers: int = 1) -> list[dict]:
    spec = TESTS[test]
    name = "cockpit" if workers == 1 else f"cockpit --workers {workers}"
    py = sys.executable
    has_cli = (
        subprocess.run(
            [py, "-m", "cockpit.faces.cli", "bench", "--help"], capture_output=True, cwd=ROOT
        ).returncode
        == 0
    )
    if has_cli:
        cmd = [
            py,
            "-m",
            "cockpit.faces.cli",
            "bench",
            "--url",
            server.url,
            "--model",
            "mock",
            "--jsonl",
            "-c",
            ",".join(map(str, levels)),
            "--input-len",
            "16",
            "--output-len",
            str(spec["output_len"]),
            "--duration",
            str(args.window),
            "--workers",
            str(workers),  # the CLI's default is auto: one process per level is the per-core figure
        ]
        how = "python -m cockpit.faces.cli bench --jsonl"
    else:
        probe = subprocess.run(
            [py, "-c", "import cockpit.bench.concurrency_sweep"], capture_output=True, text=True, cwd=ROOT
        )
        if probe.returncode != 0:
            return [level(name, c, status=f"not installed ({last_line(probe.stderr)})") for c in levels]
        cmd = [
            py,
            str(PERF / "bench_client.py"),
            "--cockpit-driver",
            json.dumps(
                {"url": server.url, "levels": levels, "output_len": spec["output_len"], "window": args.window}
            ),
        ]
        how = "cockpit.bench.concurrency_sweep.run_sweep"
    errlog = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        pin_client() + cmd,
        stdout=subprocess.PIPE,
        stderr=errlog,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    SAMPLER.watch(proc.pid)
    killer = threading.Timer(
        len(levels) * (args.window + 40) + 30, lambda: os.killpg(proc.pid, signal.SIGKILL)
    )
    killer.start()
    starts: dict[int, float] = {}
    results: dict[int, dict] = {}
    try:
        for line in proc.stdout:
            now = time.time()
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") == "tick" and ev["concurrency"] not in starts:
                starts[ev["concurrency"]] = now - ev["elapsed_s"]  # the window's start, on the wall clock
            elif ev.get("type") == "level_done":
                r = ev["result"]
                c = r["concurrency"]
                t0 = starts.get(c, now - r["duration_s"])
                results[c] = level(
                    name,
                    c,
                    t0=t0,
                    t1=t0 + r["duration_s"],
                    reported={
                        "tok_s": r["output_tok_s"],
                        "itl_mean": _ms(r.get("itl_ms"), "mean"),
                        "itl_p50": _ms(r.get("itl_ms"), "p50"),
                        "itl_p99": _ms(r.get("itl_ms"), "p99"),
                        "ttft_mean": _ms(r.get("ttft_ms"), "mean"),
                        "ttft_p50": _ms(r.get("ttft_ms"), "p50"),
                        "ttft_p99": _ms(r.get("ttft_ms"), "p99"),
                        "client_cpu": r.get("client_cpu_cores"),
                    },
                    extra={
                        k: r.get(k)
                        for k in (
                            "requests",
                            "errors",
                            "error_reasons",
                            "achieved_concurrency",
                            "peak_concurrency",
                            "loop_lag_p99_ms",
                            "events_per_read",
                            "tokens_per_chunk",
                            "token_mismatches",
                            "client_limited",
                            "client_note",
                            "warmup",
                            "tpot_ms",
                            "workers",
                            "worker_cpu_cores",
                            "worker_loop_lag_p99_ms",
                        )
                    }
                    | {"how": how},
                )
        proc.wait()
    finally:
        killer.cancel()
    errlog.seek(0)
    err = errlog.read()
    out = []
    for c in levels:
        out.append(
            results.get(c)
            or level(name, c, status=f"failed (rc {proc.returncode}): {last_line(err, 'no result')}")
        )
    return out


def run_minimal(test: str, server: MockServer, levels: list[int], args) -> list[dict]:
    spec = TESTS[test]
    out = []
    for c in levels:
        cmd = pin_client() + [
            sys.executable,
            str(PERF / "minimal_client.py"),
            "--url",
            server.url,
            "--conc",
            str(c),
            "--warmup",
            str(args.warmup),
            "--duration",
            str(args.window),
            "--max-tokens",
            str(spec["output_len"]),
            "--json",
        ]
        rc, text = run_capture(cmd, timeout=args.warmup + args.window + 60)
        try:
            r = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
        except (IndexError, ValueError):
            out.append(level("minimal", c, status=f"failed (rc {rc}): {last_line(text)}"))
            continue
        out.append(
            level(
                "minimal",
                c,
                t0=r["t0_epoch"],
                t1=r["t1_epoch"],
                reported={
                    "tok_s": r["output_tok_s"],
                    "itl_mean": r["itl_ms"]["mean"],
                    "itl_p50": r["itl_ms"]["p50"],
                    "itl_p99": r["itl_ms"]["p99"],
                    "ttft_mean": r["ttft_ms"]["mean"],
                    "ttft_p50": r["ttft_ms"]["p50"],
                    "ttft_p99": r["ttft_ms"]["p99"],
                    "client_cpu": r["client_cpu"],
                },
                extra={k: r[k] for k in ("requests_done", "errors", "usage_mismatch")},
            )
        )
    return out


def pub_env() -> dict:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONWARNINGS="ignore",
    )
    return env


def ensure_tokenizer(venv: Path, where: Path) -> str | None:
    if (where / "tokenizer.json").exists():
        return None
    rc, text = run_capture([str(venv / "bin" / "python"), "-c", TOKENIZER_SCRIPT, str(where)], timeout=120)
    return (
        None
        if rc == 0 and (where / "tokenizer.json").exists()
        else f"tokenizer build failed: {last_line(text)}"
    )


VLLM_LEVELS = r"""
import json, sys, time
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
for c, argv in json.loads(sys.argv[1]):
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    try:
        res = main(parser.parse_args(argv))
    except BaseException as err:
        print("@@RESULT " + json.dumps({"c": c, "error": f"{type(err).__name__}: {err}"[:200]}), flush=True)
        continue
    keep = {k: v for k, v in res.items() if isinstance(v, (int, float, str, type(None)))}
    print("@@RESULT " + json.dumps({"c": c, "t1": time.time(), **keep}), flush=True)
"""


def run_vllm(test: str, server: MockServer, levels: list[int], args) -> list[dict]:
    """`vllm bench serve` (its own main(), the CLI's code path), every level in one process to pay
    its ~10 s of imports once; N prompts sized for ~window s at each level."""
    spec = TESTS[test]
    py = args.pubclients_venv / "bin" / "python" if args.pubclients_venv else None
    if py is None or not (args.pubclients_venv / "bin" / "vllm").exists():
        return [level("vllm bench serve", c, status="not installed") for c in levels]
    if args.tokenizer_error:
        return [level("vllm bench serve", c, status=args.tokenizer_error) for c in levels]
    plan = []
    for c in levels:
        if spec["delay_ms"] > 0:  # each request lasts output_len steps: ~window/1 s rounds of C
            rounds = max(2, round(args.window * 1000 / (spec["delay_ms"] * spec["output_len"])))
            n = c * (min(rounds, 5) if c >= 1024 else rounds)
        else:  # ~window s at ~100 k tok/s
            n = max(2 * c, round(args.window * 100_000 / spec["output_len"] / c) * c)
        plan.append(
            (
                c,
                [
                    "--backend",
                    "openai",
                    "--base-url",
                    server.url,
                    "--endpoint",
                    "/v1/completions",
                    "--model",
                    "mock",
                    "--tokenizer",
                    str(args.tokenizer_dir),
                    "--dataset-name",
                    "random",
                    "--random-input-len",
                    "16",
                    "--random-output-len",
                    str(spec["output_len"]),
                    "--num-prompts",
                    str(n),
                    "--max-concurrency",
                    str(c),
                    "--num-warmups",
                    str(c),
                    "--temperature",
                    "0",
                    "--percentile-metrics",
                    "ttft,tpot,itl,e2el",
                    "--metric-percentiles",
                    "50,99",
                    "--disable-tqdm",
                ],
            )
        )
    cmd = pin_client() + [str(py), "-c", VLLM_LEVELS, json.dumps(plan)]
    rc, text = run_capture(
        cmd, timeout=30 + len(levels) * (args.window * 3 + 20), env=pub_env(), cwd=args.workdir
    )
    results = {}
    for line in text.splitlines():
        if line.startswith("@@RESULT "):
            r = json.loads(line[9:])
            results[r["c"]] = r
    out = []
    for c, argv in plan:
        r = results.get(c)
        if r is None or "error" in r:
            why = r["error"] if r else last_line(text, "no result")
            out.append(level("vllm bench serve", c, status=f"failed (rc {rc}): {why}"))
            continue
        out.append(
            level(
                "vllm bench serve",
                c,
                t0=r["t1"] - r["duration"],
                t1=r["t1"],
                reported={
                    "tok_s": r["output_throughput"],
                    "itl_mean": r.get("mean_itl_ms"),
                    "itl_p50": r.get("p50_itl_ms"),
                    "itl_p99": r.get("p99_itl_ms"),
                    "ttft_mean": r.get("mean_ttft_ms"),
                    "ttft_p50": r.get("p50_ttft_ms"),
                    "ttft_p99": r.get("p99_ttft_ms"),
                    "client_cpu": None,
                },
                extra={
                    "num_prompts": argv[argv.index("--num-prompts") + 1],
                    "completed": r.get("completed"),
                    "failed": r.get("failed"),
                    "duration_s": r["duration"],
                    "peak_concurrent_reported": r.get("max_concurrent_requests"),
                },
            )
        )
    return out


def run_guidellm(test: str, server: MockServer, levels: list[int], args) -> list[dict]:
    spec = TESTS[test]
    exe = args.pubclients_venv / "bin" / "guidellm" if args.pubclients_venv else None
    if exe is None or not exe.exists():
        return [level("guidellm", c, status="not installed") for c in levels]
    if args.tokenizer_error:
        return [level("guidellm", c, status=args.tokenizer_error) for c in levels]
    result = Path(args.workdir) / f"guidellm_{test}.json"
    result.unlink(missing_ok=True)
    profile = {"kind": "concurrent", "streams": levels, "warmup": args.warmup}
    cmd = pin_client() + [
        str(exe),
        "run",
        "--backend",
        f"kind=openai_http,target={server.url},model=mock,request_format=/v1/completions",
        "--tokenizer",
        f"kind=huggingface_auto,model={args.tokenizer_dir}",
        "--data",
        f"kind=synthetic_text,prompt_tokens=16,output_tokens={spec['output_len']}",
        "--profile",
        json.dumps(profile),
        "--constraint",
        f"kind=max_duration,seconds={args.warmup + args.window:g}",  # includes the warm-up
        "--output",
        f"kind=json,path={result}",
        "--disable-console-interactive",
    ]
    rc, text = run_capture(
        cmd, timeout=60 + len(levels) * (args.warmup + args.window + 30), env=pub_env(), cwd=args.workdir
    )
    if rc != 0 or not result.exists():
        return [level("guidellm", c, status=f"failed (rc {rc}): {last_line(text)}") for c in levels]
    data = json.loads(result.read_text())
    by_c = {}
    for b in data.get("benchmarks", []):
        m = b["metrics"]
        c = b["config"]["strategy"].get("streams")
        ok = lambda name, m=m: (m.get(name) or {}).get("successful") or {}  # noqa: E731
        itl, ttft = ok("inter_token_latency_ms"), ok("time_to_first_token_ms")
        by_c[c] = level(
            "guidellm",
            c,
            t0=b["start_time"],
            t1=b["end_time"],
            reported={
                "tok_s": ok("output_tokens_per_second").get("mean"),
                "itl_mean": itl.get("mean"),
                "itl_p50": itl.get("median"),
                "itl_p99": (itl.get("percentiles") or {}).get("p99"),
                "ttft_mean": ttft.get("mean"),
                "ttft_p50": ttft.get("median"),
                "ttft_p99": (ttft.get("percentiles") or {}).get("p99"),
                "client_cpu": None,
            },
            extra={
                "achieved_concurrency": ok("request_concurrency").get("mean"),
                "itl_formula": "per-request (last-first)/(n-1)",
                "warnings": [w.get("code") for w in b.get("warnings") or []],
            },
        )
    return [
        by_c.get(c) or level("guidellm", c, status="failed: no benchmark for this level in its output")
        for c in levels
    ]


def run_aiperf(test: str, server: MockServer, levels: list[int], args) -> list[dict]:
    """NVIDIA AIPerf (``aiperf profile``) from ``--pubclients-venv``, every level in one run (a
    concurrency sweep pays its ~15 s of start-up once). Against the mock it counts tokens from
    the server's usage (``--use-server-token-count``): its own tokenizer would count each mock
    token (" tok") as several. Its window is the profiling phase of ``phase_manifest.json``."""
    spec = TESTS[test]
    exe = args.pubclients_venv / "bin" / "aiperf" if args.pubclients_venv else None
    if exe is None or not exe.exists():
        return [level("aiperf", c, status="not installed") for c in levels]
    if args.tokenizer_error:
        return [level("aiperf", c, status=args.tokenizer_error) for c in levels]
    out = Path(args.workdir) / f"aiperf_{test}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = pin_client() + [
        str(exe),
        "profile",
        "--model",
        "mock",
        "--url",
        server.url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        ",".join(map(str, levels)),
        "--warmup-duration",
        f"{args.warmup:g}",
        "--benchmark-duration",
        f"{args.window:g}",
        "--benchmark-grace-period",
        "0",
        "--prompt-input-tokens-mean",
        "16",
        "--prompt-output-tokens-mean",
        str(spec["output_len"]),
        "--tokenizer",
        str(args.tokenizer_dir),
        "--use-server-token-count",
        "--output-artifact-dir",
        str(out),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]
    # Not pub_env(): AIPerf 0.13 in HF offline mode looks a local tokenizer folder up as a hub id.
    env = {k: v for k, v in pub_env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    rc, text = run_capture(
        cmd, timeout=90 + len(levels) * (args.warmup + args.window + 45), env=env, cwd=args.workdir
    )
    recs = []
    for c in levels:
        folder = out / f"concurrency_{c}" if len(levels) > 1 else out
        try:
            data = json.loads((folder / "profile_export_aiperf.json").read_text())
            phases = json.loads((folder / "phase_manifest.json").read_text())["phases"]
        except (OSError, ValueError, KeyError):
            recs.append(level("aiperf", c, status=f"failed (rc {rc}): {last_line(text)}"))
            continue
        window = next(p for p in phases if p.get("phase_kind") == "profiling")
        start = window["start_ns"] / 1e9  # wall clock; the phase's end includes its drain
        measured = (data.get("benchmark_duration") or {}).get("avg") or (window["end_ns"] / 1e9 - start)

        def stat(metric: str, key: str, data=data):
            return (data.get(metric) or {}).get(key)

        recs.append(
            level(
                "aiperf",
                c,
                t0=start,
                t1=start + measured,
                reported={
                    "tok_s": stat("output_token_throughput", "avg"),
                    "itl_mean": stat("inter_token_latency", "avg"),
                    "itl_p50": stat("inter_token_latency", "p50"),
                    "itl_p99": stat("inter_token_latency", "p99"),
                    "ttft_mean": stat("time_to_first_token", "avg"),
                    "ttft_p50": stat("time_to_first_token", "p50"),
                    "ttft_p99": stat("time_to_first_token", "p99"),
                    "client_cpu": None,
                },
                extra={
                    "achieved_concurrency": stat("effective_concurrency", "avg"),
                    "itl_formula": "per-request (latency-ttft)/(n-1)",
                    "completed": stat("completed_request_count", "avg"),
                    "errors": window.get("error_request_count"),
                },
            )
        )
    return recs


SAMPLER = CpuSampler()
RUNNERS = {
    "cockpit": run_cockpit,
    "cockpit-workers": run_cockpit_workers,
    "minimal": run_minimal,
    "vllm": run_vllm,
    "guidellm": run_guidellm,
    "aiperf": run_aiperf,
}


# -- the cockpit driver (child process), used only when the CLI has no `bench` ------------------


def cockpit_driver(spec: dict) -> int:
    import asyncio

    from cockpit.bench import concurrency_sweep as loadgen

    cfg = loadgen.BenchConfig(
        url=spec["url"],
        model="mock",
        concurrency=tuple(spec["levels"]),
        input_len=16,
        output_len=spec["output_len"],
        duration_s=spec["window"],
    )

    def on_event(ev) -> None:
        print(json.dumps(ev.to_json()), flush=True)

    runner = getattr(loadgen, "run", asyncio.run)
    runner(loadgen.run_sweep(cfg, on_event))
    return 0


# -- measuring and reporting ----------------------------------------------------------------------


def enrich(rec: dict, server: MockServer, sampler: CpuSampler, test: str) -> dict:
    rec["test"] = test
    if rec["status"] != "ok" or rec["t0"] is None:
        return rec
    t0, t1 = rec["t0"], rec["t1"]
    try:
        truth = server.truth(t0, t1)
    except OSError as err:
        rec["truth_error"] = str(err)
        truth = {}
    busy = sampler.busy(t0, t1) or []
    rec["truth"] = truth
    rec["cpu"] = {
        "client": sampler.client_cores(t0, t1),
        "client_core_busy": sum(busy[c] for c in CLIENT_CPUS) if len(busy) > max(CLIENT_CPUS) else None,
        "server_core_busy": busy[SERVER_CPU] if busy else None,
        "server_process": truth.get("server_cpu"),
    }
    cpu = rec["cpu"]
    if cpu["client"] is None:  # no psutil: the client core's busy time is the next best thing
        cpu["client"] = cpu["client_core_busy"]
    # Anything else running on the two cores in the window (other jobs on a shared machine).
    if cpu["client_core_busy"] is not None and cpu["client"] is not None:
        other = cpu["client_core_busy"] - cpu["client"]
        if cpu["server_core_busy"] is not None and truth.get("server_cpu") is not None:
            other += cpu["server_core_busy"] - truth["server_cpu"]
        cpu["foreign"] = max(0.0, other)
    tok_s = truth.get("tok_s") or 0
    rec["cpu_us_per_token"] = cpu["client"] / tok_s * 1e6 if cpu["client"] is not None and tok_s else None
    return rec


def fmt(v, spec="{:,.0f}", none="-"):
    return none if v is None else spec.format(v)


def table_zero(records: list[dict], levels: list[int]) -> str:
    head = (
        "| client (1 core) | "
        + " | ".join(f"C={c} tok/s" for c in levels)
        + " | client CPU µs/token | client CPU | server CPU | notes |"
    )
    lines = [head, "|" + "---|" * (len(levels) + 5)]
    for client in dict.fromkeys(r["client"] for r in records):
        rows = {r["concurrency"]: r for r in records if r["client"] == client}
        bad = [r for r in rows.values() if r["status"] != "ok"]
        if len(bad) == len(rows):
            lines.append(f"| {client} | " + " | ".join("" for _ in levels) + f" | | | | {bad[0]['status']} |")
            continue
        cells, us, cpu, srv, notes = [], [], [], [], []
        for c in levels:
            r = rows.get(c)
            if r is None:  # a row that runs only some levels (cockpit-workers)
                cells.append("·")
                us.append("·"), cpu.append("·"), srv.append("·")
                continue
            if r["status"] != "ok":
                cells.append("failed")
                us.append("-"), cpu.append("-"), srv.append("-")
                if r:
                    notes.append(f"C={c}: {r['status']}")
                continue
            cells.append(fmt(r["reported"].get("tok_s")))
            us.append(fmt(r.get("cpu_us_per_token"), "{:.1f}"))
            cpu.append(fmt((r.get("cpu") or {}).get("client"), "{:.0%}"))
            if ((r.get("cpu") or {}).get("foreign") or 0) > 0.15:
                notes.append(f"C={c} foreign load {r['cpu']['foreign']:.0%}")
            srv.append(fmt((r.get("cpu") or {}).get("server_process"), "{:.0%}"))
            ac = r["extra"].get("achieved_concurrency")
            if ac is not None and ac < 0.95 * c:
                notes.append(f"C={c} achieved {ac:.1f}")
            if r["extra"].get("client_limited"):
                notes.append(f"C={c} flags client-limited")
            if r["extra"].get("worker_cpu_cores"):
                per = "/".join(f"{x:.0%}" for x in r["extra"]["worker_cpu_cores"])
                notes.append(f"C={c} workers' CPU {per}")
            errs = r["extra"].get("errors") or r["extra"].get("failed")
            if errs:
                notes.append(f"C={c} {errs} errors")
        lines.append(
            f"| {client} | " + " | ".join(cells) + f" | {' / '.join(us)} | {' / '.join(cpu)} | "
            f"{' / '.join(srv)} | {'; '.join(notes)} |"
        )
    return "\n".join(lines)


def table_paced(records: list[dict], levels: list[int], delay_ms: float, output_len: int) -> str:
    lines = [
        "| client | C | tok/s (of ideal) | client CPU | ITL mean / p50 / p99 reported (ms) "
        "| true gap mean / p50 / p99 (ms) | p99 error (ms) | TTFT reported − server TTFT (ms, mean) | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for client in dict.fromkeys(r["client"] for r in records):
        rows = [r for r in records if r["client"] == client]
        if all(r["status"] != "ok" for r in rows) and len({r["status"] for r in rows}) == 1:
            lines.append(f"| {client} | all | | | | | | | {rows[0]['status']} |")
            continue
        for r in sorted(rows, key=lambda r: r["concurrency"]):
            c = r["concurrency"]
            if r["status"] != "ok":
                lines.append(f"| {client} | {c} | | | | | | | {r['status']} |")
                continue
            rep, truth = r["reported"], r.get("truth") or {}
            gap, sttft = truth.get("gap_ms") or {}, truth.get("ttft_ms") or {}
            ideal = c * 1000.0 / delay_ms
            tok = rep.get("tok_s")
            err = (
                None if rep.get("itl_p99") is None or gap.get("p99") is None else rep["itl_p99"] - gap["p99"]
            )
            ttft_rep = rep.get("ttft_mean") if rep.get("ttft_mean") is not None else rep.get("ttft_p50")
            over = None if ttft_rep is None or sttft.get("mean") is None else ttft_rep - sttft["mean"]
            notes = []
            ac = r["extra"].get("achieved_concurrency")
            if ac is not None and ac < 0.95 * c:
                notes.append(f"achieved C {ac:.0f}")
            if r["extra"].get("client_limited"):
                notes.append("flags client-limited")
            if r["extra"].get("worker_cpu_cores"):
                notes.append("workers' CPU " + "/".join(f"{x:.0%}" for x in r["extra"]["worker_cpu_cores"]))
            if r["extra"].get("itl_formula"):
                notes.append("ITL per-request mean")
            errs = r["extra"].get("errors") or r["extra"].get("failed")
            if errs:
                notes.append(f"{errs} errors")
            if truth.get("late_steps"):
                notes.append(f"server late steps {truth['late_steps']}")
            if ((r.get("cpu") or {}).get("foreign") or 0) > 0.15:
                notes.append(f"foreign load {r['cpu']['foreign']:.0%}")
            lines.append(
                f"| {client} | {c} | {fmt(tok)} ({fmt(tok / ideal if tok else None, '{:.0%}')}) | "
                f"{fmt((r.get('cpu') or {}).get('client'), '{:.0%}')} | "
                f"{fmt(rep.get('itl_mean'), '{:.2f}')} / {fmt(rep.get('itl_p50'), '{:.2f}')} / {fmt(rep.get('itl_p99'), '{:.2f}')} | "
                f"{fmt(gap.get('mean'), '{:.2f}')} / {fmt(gap.get('p50'), '{:.2f}')} / {fmt(gap.get('p99'), '{:.2f}')} | "
                f"{fmt(err, '{:+.1f}')} | {fmt(over, '{:+.1f}')} | {'; '.join(notes)} |"
            )
    return "\n".join(lines)


def cpu_list(text: str) -> list[int]:
    """ "1", "1,3" or "1-3" as CPU numbers."""
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        cpus += list(range(int(low), int(high or low) + 1))
    return sorted(set(cpus))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default=",".join(ALL_CLIENTS), help=f"subset of {','.join(ALL_CLIENTS)}")
    ap.add_argument("--levels", default="1,64,256,1024", help="concurrency levels (default 1,64,256,1024)")
    ap.add_argument("--tests", default="zero,paced", help="zero (0 ms server), paced (10 ms server)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up (clients that take one)")
    ap.add_argument("--window", type=float, default=7.0, help="seconds measured per level (default 7)")
    ap.add_argument(
        "--pubclients-venv", type=Path, help="a venv holding vllm and/or guidellm (outside the repo)"
    )
    ap.add_argument(
        "--tokenizer-dir",
        type=Path,
        default=Path("/tmp/mock-tokenizer"),
        help="local HF tokenizer for the published clients (built here if missing)",
    )
    ap.add_argument("--server-python", help="python for the mock servers (default: one with uvloop if any)")
    ap.add_argument(
        "--client-cpus",
        default="1",
        help="CPUs every client runs on, e.g. 1 or 1-3 (default 1; the mock servers have CPU 0)",
    )
    ap.add_argument(
        "--workers-count", type=int, default=2, help="processes of the cockpit-workers row (default 2)"
    )
    ap.add_argument(
        "--workers-levels", default="1024", help="levels of the cockpit-workers row (default 1024)"
    )
    ap.add_argument("--json-out", type=Path, help="where to write the JSON dump (default: a file under /tmp)")
    ap.add_argument(
        "--max-seconds", type=float, default=3600, help="mock servers exit after this long (default 3600)"
    )
    ap.add_argument("--cockpit-driver", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cockpit_driver:
        return cockpit_driver(json.loads(args.cockpit_driver))

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(ALL_CLIENTS)
    if unknown:
        ap.error(f"unknown clients: {', '.join(sorted(unknown))}")
    levels = [int(x) for x in args.levels.split(",")]
    args.workers_levels = [int(x) for x in args.workers_levels.split(",")]
    CLIENT_CPUS[:] = cpu_list(args.client_cpus)
    if SERVER_CPU in CLIENT_CPUS:
        ap.error(f"--client-cpus must leave CPU {SERVER_CPU} to the mock servers")
    tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    if not pin(0):
        log("no taskset or fewer than 2 CPUs: server and clients are NOT pinned; numbers mix both")
    try:
        os.sched_setaffinity(0, {SERVER_CPU})  # this script mostly sleeps; keep it off the client core
    except (AttributeError, OSError):
        pass
    args.workdir = tempfile.mkdtemp(prefix="bench_client_")
    args.tokenizer_error = None
    if args.pubclients_venv and {"vllm", "guidellm", "aiperf"} & set(clients):
        args.pubclients_venv = args.pubclients_venv.resolve()
        if (args.pubclients_venv / "bin" / "python").exists():
            args.tokenizer_error = ensure_tokenizer(args.pubclients_venv, args.tokenizer_dir)
    venv_py = str(args.pubclients_venv / "bin" / "python") if args.pubclients_venv else None
    server_py = args.server_python or python_with("uvloop", [sys.executable, venv_py]) or sys.executable

    sampler = SAMPLER
    sampler.start()
    servers = {t: MockServer(server_py, TESTS[t]["delay_ms"], args.max_seconds) for t in tests}
    log("servers: " + "; ".join(s.banner for s in servers.values()))
    records: list[dict] = []
    started = time.time()
    try:
        for test in tests:
            for client in clients:
                quiet = sampler.wait_quiet()
                shown = args.workers_levels if client == "cockpit-workers" else levels
                log(
                    f"{test}: {client} at C={','.join(map(str, shown))} (machine busy {quiet:.0%} of a core before)"
                )
                t = time.time()
                try:
                    recs = RUNNERS[client](test, servers[test], levels, args)
                except Exception as err:  # a broken client must not stop the others
                    recs = [level(client, c, status=f"failed: {type(err).__name__}: {err}") for c in levels]
                for rec in recs:
                    records.append(enrich(rec, servers[test], sampler, test))
                log(f"  done in {time.time() - t:.0f} s")
    finally:
        for s in servers.values():
            s.close()
        sampler.stop.set()

    print(
        f"\nbench_client: server {server_py} ({'uvloop' if 'uvloop' in ' '.join(s.banner for s in servers.values()) else 'asyncio'}), "
        f"server on CPU {SERVER_CPU}, clients on CPU {','.join(map(str, CLIENT_CPUS))}, warm-up {args.warmup:g} s, window {args.window:g} s, "
        f"total {time.time() - started:.0f} s\n"
    )
    for test in tests:
        spec = TESTS[test]
        recs = [r for r in records if r["test"] == test]
        print(f"### {spec['title']}\n")
        if test == "zero":
            print(table_zero(recs, levels))
        else:
            print(table_paced(recs, levels, spec["delay_ms"], spec["output_len"]))
        print()
    print(
        "client CPU: CPU time of the client's process tree (all workers) over its own measured window, in "
        "cores; µs/token: that per token the server wrote in the window. True gaps and server TTFT: the server's "
        "per-token records over the same window. Foreign load: other busy time on the two cores (shared machine)."
        "\n"
    )
    dump = {
        "levels": levels,
        "warmup_s": args.warmup,
        "window_s": args.window,
        "server_python": server_py,
        "records": records,
    }
    path = (
        args.json_out or Path(tempfile.gettempdir()) / f"bench_client_{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    path.write_text(json.dumps(dump, indent=1))
    print(f"JSON dump ({path}):")
    for r in records:
        slim = {k: v for k, v in r.items() if k != "truth"}
        if r.get("truth"):
            slim["truth"] = {
                k: r["truth"].get(k) for k in ("tok_s", "server_cpu", "gap_ms", "ttft_ms", "window_s")
            }
        print(json.dumps(slim, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
