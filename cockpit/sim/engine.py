"""The simulated engine's life: start, load weights into simulated GPUs, fail or serve.

It uses the planner for what the engine would do (the same rules, the same memory), so it fails
exactly where the planner says, with the engine's own text; how fast it serves is a truth of its
own (``cockpit.sim.witness``: measured kernels, the simulator's own step model, or on request the
planner's), so that comparing the planner with the simulator tests something. Loading takes real time (weights read at ``LOAD_GBPS`` per GPU) divided by
``COCKPIT_SIM_TIME_SCALE``; the serving clock is never scaled.

A box can be given its own truth (``COCKPIT_SIM_TRUTH``, docs/simulator.md#a-box-with-its-own-truth):
which truth paces it and how that is bent, and memory facts that differ from the planner's, which
the engine then loads, allocates and logs by, while cockpit's own planner keeps its defaults and
must learn them from launches.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cockpit.core.cluster import InterLink
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.core.planner import GiB, MemoryEstimate, Setup, Verdict, oom_text, plan_layout
from cockpit.engines import api_keys, get_engine, surface
from cockpit.sim import logs
from cockpit.sim.batcher import Batcher
from cockpit.sim.box import GpuLoad, Publisher, SimBox
from cockpit.sim.flags import EngineArgs
from cockpit.sim.logs import vllm as logs_vllm
from cockpit.sim.nodes import Lost, NodeLink, span_of
from cockpit.sim.witness import Truth, pace_for
from cockpit.store.modelfiles import load_model
from cockpit.store.textfile import read_text
from cockpit.system import eventloop

T = TypeVar("T")

LOAD_GBPS = 3.0  # weights read per GPU per second (NVMe and page cache, a few GB/s)
PUBLISH_INTERVAL_S = 0.2
STARTUP_DELAY_S = 2.0  # imports, distributed init: before the first weight arrives


def time_scale(env: Mapping[str, str]) -> float:
    raw = env.get("COCKPIT_SIM_TIME_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        raise CockpitError(f"COCKPIT_SIM_TIME_SCALE must be a number like 20, got '{raw}'") from None
    if scale <= 0:
        raise CockpitError(f"COCKPIT_SIM_TIME_SCALE must be above 0, got '{raw}'")
    return scale


def calibration_from_env(env: Mapping[str, str]) -> dict:
    """The profile's performance-model overrides, handed over by cockpit as JSON."""
    raw = env.get("COCKPIT_SIM_CALIBRATION", "")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise CockpitError('COCKPIT_SIM_CALIBRATION must be a JSON object like {"eta_bw": 0.7}') from None
    if not isinstance(value, dict):
        raise CockpitError('COCKPIT_SIM_CALIBRATION must be a JSON object like {"eta_bw": 0.7}')
    return value


TRUTH_MAX_BYTES = 2**20  # a few lines of YAML


def read_truth(env: Mapping[str, str]) -> Truth:
    """The box's own truth from ``COCKPIT_SIM_TRUTH`` (a YAML file, docs/simulator.md#a-box-with-its-own-truth):
    which truth paces the engine and how it is bent, and the memory facts it plans by. Unset: the
    default pace and the planner's memory."""
    raw = env.get("COCKPIT_SIM_TRUTH", "")
    if not raw:
        return Truth()
    path = Path(raw).expanduser()
    fix = f"fix {path} or unset COCKPIT_SIM_TRUTH"
    text = read_text(path, limit=TRUTH_MAX_BYTES, what=f"the COCKPIT_SIM_TRUTH file {path}", fix=fix)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise CockpitError(f"COCKPIT_SIM_TRUTH: {path} is not valid YAML{line}: {fix}") from None
    return Truth.parse(data, str(path))


def visible_gpus(env: Mapping[str, str], count: int) -> list[int]:
    """Physical GPU indices the process may use: CUDA_VISIBLE_DEVICES, as a real engine sees it."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return list(range(count))
    try:
        ids = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise CockpitError(f"CUDA_VISIBLE_DEVICES must list GPU indices like 0,1,2,3, got '{raw}'") from None
    return [i for i in ids if 0 <= i < count]


@dataclass
class SimEngine:
    args: EngineArgs
    box: SimBox
    env: Mapping[str, str]
    out: Callable[[str], None] = print
    on_ready: Callable[[], None] | None = None
    """Called once the engine serves: the process entry tunes its collector there
    (``quiet_collector``); an engine embedded in another process leaves that process's alone."""

    def __post_init__(self) -> None:
        self.scale = time_scale(self.env)
        self.gpu_ids = visible_gpus(self.env, self.box.hardware.count)
        self.truth = read_truth(self.env)
        self.log = logs.for_engine(self.args.engine, self.out, self.env)
        self.sock: socket.socket | None = None  # vLLM binds its port before it builds the engine
        self.publisher: Publisher = self.box.publisher(os.getpid(), self.args.engine)
        self.link: NodeLink | None = None  # the other nodes, when the engine spans nodes
        self.held: dict[int, int] = {}
        self._published: dict[int, int] = {}

    # -- planning, exactly as cockpit plans --------------------------------------------------

    def plan(self) -> tuple[Setup, Verdict]:
        """The planner's verdict with the box's truth as what was learned: memory, logs and pace
        follow it. Its speed constants also win over the profile's: they are the box itself."""
        model = load_model(self.args.model)
        visible = self._visible()
        setup = Setup(
            model,
            visible,
            get_engine(self.args.engine, self.args.version or None),
            server_args=self.args.argv,
            model_path=self.args.model,
            calibration={**calibration_from_env(self.env), **self.truth.calibration},
            learned=self.truth.learned,
        )
        return setup, plan_layout(setup, self.args.layout)

    def _visible(self) -> Hardware:
        """The GPUs the engine sees: this box's visible ones; across nodes, as many on every node
        (the engines place ranks evenly), joined by the cluster's network."""
        gpu, per_node, memory = self.box.hardware.gpu, max(1, len(self.gpu_ids)), self.box.hardware.memory_gib
        nodes = self.args.multinode
        if nodes is None or nodes.nnodes <= 1:
            return Hardware(gpu, per_node, memory)
        return Hardware(gpu, per_node * nodes.nnodes, memory, nodes=nodes.nnodes, inter_link=InterLink())

    # -- memory on the simulated GPUs ---------------------------------------------------------

    def publish(self, utilization: float = 0.0, busy: float = 0.0) -> None:
        self._check_room()
        limit = self.box.hardware.gpu.power_w
        loads = {}
        for gpu, used in self.held.items():
            power = limit * (0.12 + 0.75 * busy) if used else 0.0
            loads[gpu] = GpuLoad(used_bytes=used, utilization=utilization, power_w=power)
        self.publisher.publish(loads)

    def _check_room(self) -> None:
        """A GPU is shared: what other processes hold there is not ours to take. Growing past
        the capacity fails as torch does, with its message (other processes named)."""
        grown = {gpu: used for gpu, used in self.held.items() if used > self._published.get(gpu, 0)}
        if grown:  # only an allocation can fail; what is held stays held
            capacity = self.box.memory_bytes
            state = self.box.read()
            for gpu, used in grown.items():
                before = self._published.get(gpu, 0)
                others = [
                    (p.pid, load.used_bytes)
                    for p, load in state.loads(gpu)
                    if p.pid != os.getpid() and load.used_bytes
                ]
                taken = sum(b for _, b in others)
                if taken + used > capacity:
                    device = self.gpu_ids.index(gpu)  # torch counts the visible GPUs from 0
                    raise SimOutOfMemory(
                        cuda_oom_text(
                            device, used - before, capacity, capacity - taken - before, before, others
                        )
                    )
        self._published = dict(self.held)

    # -- the life -----------------------------------------------------------------------------

    async def run(self) -> int:
        try:
            return await self._live()
        except SimOutOfMemory as exc:
            self.log.oom(str(exc))
            return 1
        except Lost as lost:  # another node went away while this one loaded or served
            assert self.link is not None
            return self.link.ended(lost.word)
        finally:
            if self.sock is not None:
                self.sock.close()
            if self.link is not None:
                await self.link.close(bye=False)

    async def _live(self) -> int:
        if self.args.deprecated:  # both engines warn while parsing, before any other line
            self.log.argument_warnings(self.args.deprecated)
        setup, verdict = self.plan()
        nodes = self.args.multinode
        span = None
        if nodes is not None:  # across nodes: this node's ranks, and the link to the others
            used_gpus = verdict.placement.gpus_used if verdict.placement is not None else None
            span = span_of(nodes, self.args.layout, used_gpus)
            self.link = NodeLink(span, self.args.engine, self.env, self.log, self.box.node)
        if span is not None and not span.nodes.serves:
            self.log.headless(self.args, setup, verdict, span)  # no API server: no port, no logo
        elif isinstance(self.log, logs.VLLMLog):
            # vllm/entrypoints/launchers/launcher.py: setup_server logs the version and the
            # arguments, then binds the port, before the config and the engine are built.
            self.log.announce(self.args)
            try:
                self.sock = bind_socket(self.args.host, self.args.port)
            except OSError as exc:
                self.log.bind_failure(self.args.host, self.args.port, exc)
                return 1
            self.log.configured(self.args, setup, verdict, span)
        else:
            self.log.starting(self.args, setup, verdict, span)
        placement, memory = verdict.placement, verdict.memory
        startup_failures = [
            r
            for r in verdict.reasons
            if r.rule not in ("oom-at-load", "no-kv-memory", "kv-max-len", "kv-thin")
        ]
        if placement is None or memory is None or startup_failures:  # no placement, no memory
            reasons = startup_failures or list(verdict.reasons)
            self.log.startup_failure(reasons)
            return 1
        # Across nodes each node holds its own share of the ranks, every node alike.
        used = self.gpu_ids[: len(span.ranks) if span is not None else placement.gpus_used]
        await asyncio.sleep(STARTUP_DELAY_S / self.scale)
        self.held = {gpu: int(0.5 * GiB) for gpu in used}  # CUDA context
        self.publish()
        if span is not None and self.link is not None:
            code = await self.link.meet()
            if code is not None:
                return code
            self.log.joined(self.args, setup, span)
        oom = next((r for r in verdict.reasons if r.rule == "oom-at-load"), None)
        target = memory.weights_gib * GiB
        if oom is not None:
            target = (memory.capacity_gib - 0.5) * GiB - memory.expert_layer_bytes * 2 / 3
        loading = time.monotonic()
        await self._watched(self.load(used, max(0.0, target), int(memory.weights_gib * GiB)))
        if oom is not None:
            # Every rank of the busiest stage fills alike; its first rank reports, as the planner
            # says (MemoryEstimate.busiest_gpu), and torch names the GPU by its index in the
            # process (CUDA_VISIBLE_DEVICES counts from 0), not by the box's.
            self.log.oom(oom_text(memory), rank=memory.busiest_gpu)
            return 1
        failure = next((r for r in verdict.reasons if r.rule in ("no-kv-memory", "kv-max-len")), None)
        if isinstance(self.log, logs.VLLMLog):
            self.log.loaded(setup, memory, load_s=time.monotonic() - loading)
        else:
            self.log.loaded(setup, memory)
        if self.link is not None and self.link.worker is not None:
            # A node other than the head: its KV cache sized with the head's, then it stays up.
            self._hold_all(used, memory)
            self.link.loaded()
            return await self.link.follow()
        if self.link is not None:
            await self._watched(self.link.all_loaded())
        if failure is not None:
            self.log.kv_failure(failure)
            return 1
        self._hold_all(used, memory)
        self.log.kv_ready(setup, placement, memory)
        await asyncio.sleep(1.0 / self.scale)  # CUDA graphs
        return await self.serve(setup, verdict)

    def _hold_all(self, used: list[int], memory: MemoryEstimate) -> None:
        """Weights, KV cache and the reserve on every GPU used, as the KV cache is allocated."""
        kv_bytes = int(max(0.0, memory.kv_budget_gib) * GiB)
        reserve = int(self._reserve_gib(memory) * GiB)
        for gpu in used:
            self.held[gpu] = int(memory.weights_gib * GiB + 0.5 * GiB + kv_bytes + reserve)
        self.held = {g: min(b, int(memory.capacity_gib * GiB)) for g, b in self.held.items()}
        self.publish()

    async def _watched(self, work: Awaitable[T]) -> T:
        """``work``, watching the other nodes when there are some (NodeLost when one goes first)."""
        if self.link is None:
            return await work
        return await self.link.guard(work)

    def _reserve_gib(self, memory: MemoryEstimate) -> float:
        """What the engine holds beside weights and KV cache: its whole reserve (vLLM), or what
        it keeps for activations and graphs outside its static pool (SGLang), plus whatever more
        the truth says it keeps."""
        activations = surface(self.args.engine).activations_gib
        if activations is None:
            return memory.reserve_gib
        return activations + max(0.0, self.truth.reserve_offset_gib)

    async def load(self, gpus: list[int], target: float, total: int) -> None:
        """Fill each GPU's memory at LOAD_GBPS until ``target`` bytes of weights are in."""
        target = min(target, float(total))  # an OOM stops short of the total; nothing goes past it
        seconds = total / (LOAD_GBPS * 1e9) / self.scale
        shards = max(1, math.ceil(total * len(gpus) / 5e9))
        start = time.monotonic()
        base = {g: self.held[g] for g in gpus}
        shown = -1
        while True:
            elapsed = time.monotonic() - start
            fraction = min(1.0, elapsed / seconds) if seconds > 0 else 1.0
            loaded = min(target, fraction * total)
            for g in gpus:
                self.held[g] = int(base[g] + loaded)
            self.publish(utilization=5.0, busy=0.05)
            done = int(shards * loaded / total) if total else shards
            if done != shown:
                shown = done
                self.log.shard_progress(done, shards, elapsed)
            if loaded >= target:
                return
            await asyncio.sleep(PUBLISH_INTERVAL_S)

    async def serve(self, setup: Setup, verdict: Verdict) -> int:
        from cockpit.sim.server import make_app, serve, system_fingerprint

        # Which truth paces, decided once: measured kernels, the witness or the planner's own model.
        pacer = pace_for(setup, verdict, self.truth, self.args.version or setup.engine.version)
        self.out(f"INFO:     cockpit sim: {pacer.pace.line}")
        last = [0.0]

        def on_step(batch: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PUBLISH_INTERVAL_S:
                last[0] = now
                busy = min(1.0, 0.4 + 0.6 * batch / 32)
                self.publish(utilization=min(100.0, 60 + 40 * busy), busy=busy)

        batcher = Batcher(
            pacer, on_step=on_step, token_budget=pacer.token_budget, warn=self._behind_its_clock
        )
        values = dict(self.args.non_default)
        api = surface(self.args.engine)
        layout = self.args.layout
        app = make_app(
            model_id=self.args.served_name,
            engine=self.args.engine,
            batcher=batcher,
            max_model_len=setup.server.max_model_len or setup.model.max_context,
            model_path=self.args.model,
            api_key=api_keys(self.args.engine, self.args.argv, self.env),
            metrics=api.metrics_by_default or bool(values.get("enable_metrics")),
            version=self.args.version,
            fingerprint=(
                system_fingerprint(
                    self.args.version,
                    layout.tp,
                    layout.pp,
                    layout.dp,
                    layout.expert_parallel,
                    config=f"{self.args.model}|{' '.join(self.args.argv)}",
                )
                if api.system_fingerprint
                else None
            ),
            access_log=self.out if self.log.access_lines and access_logged(values) else None,
            pace=pacer.pace.to_json(),
        )
        try:
            runner = await serve(app, host=self.args.host, port=self.args.port, sock=self.sock)
        except OSError as exc:
            self.log.bind_failure(self.args.host, self.args.port, exc)
            return 1
        self.sock = None  # the server holds it now
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.log.ready(self.args)
        tasks = [asyncio.create_task(self._idle_publisher(batcher, stop))]
        lost: list[Lost] = []
        if self.link is not None:
            tasks.append(asyncio.create_task(self._peers_lost(stop, lost)))
        if self.log.periodic_stats and not values.get("disable_log_stats"):
            tasks.append(asyncio.create_task(self._log_stats(app, batcher, values)))
        if self.on_ready is not None:
            self.on_ready()
        await stop.wait()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if not lost:
            self.log.shutdown(in_flight=batcher.running + batcher.waiting)
            if self.link is not None:
                await self.link.close(bye=True)  # the other nodes stop with the head
        for task in tasks:
            task.cancel()
        await batcher.close()
        await runner.cleanup()
        if lost:
            raise lost[0]
        return 0

    async def _peers_lost(self, stop: asyncio.Event, lost: list[Lost]) -> None:
        """While serving, a node that goes away ends the head: its next collective would fail."""
        assert self.link is not None
        try:
            await self.link.guard(stop.wait())
        except Lost as exc:
            lost.append(exc)
            stop.set()

    async def _log_stats(self, app: Any, batcher: Batcher, values: Mapping[str, object]) -> None:
        """The periodic stats line of vLLM (vllm/v1/metrics/loggers.py): throughputs over the interval,
        logged unless they and the interval's before are all 0 (an idle engine logs at debug)."""
        from cockpit.sim.server import counters, kv_usage

        interval = stats_interval(self.env)
        prefix_caching = values.get("enable_prefix_caching", True) is not False
        last_time, (last_prompt, last_generated) = time.monotonic(), counters(app)
        last_rates = (0.0, 0.0)
        while True:
            await asyncio.sleep(interval)
            now, (prompt, generated) = time.monotonic(), counters(app)
            elapsed = max(now - last_time, 1e-9)
            rates = ((prompt - last_prompt) / elapsed, (generated - last_generated) / elapsed)
            if any((*rates, *last_rates)):
                self.log.stats(
                    rates[0],
                    rates[1],
                    batcher.running,
                    batcher.waiting,
                    kv_usage(batcher),
                    0.0 if prefix_caching and prompt else None,
                )
            last_time, last_prompt, last_generated, last_rates = now, prompt, generated, rates

    def _behind_its_clock(self, text: str) -> None:
        """The simulator's own warning (cockpit/sim/pacing.py), in uvicorn's plain form."""
        self.out(f"WARNING:  cockpit sim: {text}")

    async def _idle_publisher(self, batcher: Batcher, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(1.0)
            if batcher.running == 0:
                self.publish()


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket as vLLM makes it before it builds the engine
    (vllm/entrypoints/launchers/launcher.py: create_server_socket): SO_REUSEADDR, then bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def access_logged(values: Mapping[str, object]) -> bool:
    """Whether vLLM's uvicorn writes access lines: not with --disable-uvicorn-access-log, nor
    with --uvicorn-log-level above info."""
    level = str(values.get("uvicorn_log_level") or "info")
    return not values.get("disable_uvicorn_access_log") and level in ("info", "debug", "trace")


def stats_interval(env: Mapping[str, str]) -> float:
    """VLLM_LOG_STATS_INTERVAL (vllm/envs.py): seconds between the stats lines, 10 by default."""
    try:
        value = float(env.get("VLLM_LOG_STATS_INTERVAL", "") or logs_vllm.STATS_INTERVAL_S)
    except ValueError:
        return logs_vllm.STATS_INTERVAL_S
    return value if value > 0 else logs_vllm.STATS_INTERVAL_S


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between young collections while serving (CPython's default is 700). Serving makes
little cyclic garbage per request, so most passes find nothing; with 30 times fewer young passes
the full collections, which walk every open stream's objects, come rarely too."""


def quiet_collector() -> None:
    """Keep the garbage collector out of the step loop's way once start-up is over: what start-up
    built (modules, the model, the plan) is frozen out of every later collection (``gc.freeze``,
    docs.python.org/3/library/gc.html#gc.freeze) and young collections run less often. A process
    setting (it changes the whole process's collector), so the process entry, ``run_engine``,
    applies it, not ``SimEngine``. Its effect is in the capacity table of
    docs/simulator.md#keeping-the-clock (perf/sim_capacity.py): wakes at most 10 ms late at C=2048,
    where untuned full collections had paused the loop for tens of milliseconds."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


class SimOutOfMemory(Exception):
    """An allocation past what the GPU has left; its text is torch's."""


def cuda_oom_text(
    gpu: int, tried: int, capacity: int, free: int, in_use: int, others: list[tuple[int, int]]
) -> str:
    """torch's CUDA OOM message (c10/cuda/CUDACachingAllocator.cpp, torch >= 2.2), other processes
    named, as public logs show it (vllm-project/vllm#12529, studio-dots-ai/dots.ocr#196)."""
    held = "".join(f"Process {pid} has {torch_size(used)} memory in use. " for pid, used in others)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {torch_size(tried)}. "
        f"GPU {gpu} has a total capacity of {torch_size(capacity)} of which {torch_size(free)} is free. "
        f"{held}Including non-PyTorch memory, this process has {torch_size(in_use)} memory in use. "
        f"Of the allocated memory {torch_size(in_use)} is allocated by PyTorch, and 0 bytes is reserved by "
        "PyTorch but unallocated."
    )


def torch_size(n_bytes: int) -> str:
    """c10's format_size: bytes, KiB, MiB or GiB, two decimals."""
    n = max(0, int(n_bytes))
    if n <= 1024:
        return f"{n} bytes"
    for unit, scale in (("KiB", 2**10), ("MiB", 2**20)):
        if n <= scale * 1024:
            return f"{n / scale:.2f} {unit}"
    return f"{n / 2**30:.2f} GiB"


def run_engine(args: EngineArgs, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    box = SimBox.from_env(env).create()
    engine = SimEngine(args, box, env, out=lambda line: print(line, flush=True), on_ready=quiet_collector)
    try:
        return eventloop.run(engine.run())
    except KeyboardInterrupt:
        return 130
    finally:
        engine.publisher.clear()
        sys.stdout.flush()
