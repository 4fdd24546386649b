"""GPU samples from a cluster's nodes, each read by cockpit's agent on the node over SSH.

One long-lived ``ssh NODE -- cockpit agent gpus --every 1`` per node streams a JSON line of
samples a second (``cockpit.faces.agent``); a reader thread keeps the latest, so ``sample()``
never waits on the network. A stream that ends (the node rebooted, the network dropped) is
started again, waiting longer after each failure in a row. A node that has not answered lately
keeps its slots with every reading n/a, and says why in ``last_error``.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cockpit.core.cluster import Cluster, Node
from cockpit.system.ssh import agent_argv, last_line
from cockpit.telemetry.base import GpuProcess, GpuSample, GpuSource, unknown_sample

EVERY_S = 1.0
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
STALE_AFTER_ROUNDS = 5  # samples older than this many rounds show as n/a: the node went quiet


class AgentSource(GpuSource):
    """The GPUs of one node, as its agent reads them (NVML there, or its simulated box)."""

    def __init__(
        self,
        cluster: Cluster,
        node: Node,
        *,
        env: Mapping[str, str] | None = None,
        every: float = EVERY_S,
        control: Path | str | None = None,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.name = f"agent on {node.host}"
        self.every = every
        self._argv = agent_argv(cluster, node, ["gpus", "--every", f"{every:g}"], env, control=control)
        self._lock = threading.Lock()
        self._latest: list[GpuSample] = []
        self._latest_at = 0.0  # time.monotonic() of the latest round
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[str] | None = None

    def sample(self) -> list[GpuSample]:
        """The latest round, or n/a in every slot when the node has not answered lately."""
        self._start()
        with self._lock:
            fresh = time.monotonic() - self._latest_at <= max(STALE_AFTER_ROUNDS * self.every, 5.0)
            if self._latest and fresh:
                return list(self._latest)
            if self._latest and self.last_error is None:
                self.last_error = f"node {self.node.host}: no GPU reading for a while"
        now = time.time()
        return [_unknown(index, now, self.node.host) for index in range(self.node.gpus)]

    def _start(self) -> None:
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._follow, name=self.name, daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        """Run the stream, again and again until stopped, waiting longer after each failure."""
        backoff = FIRST_BACKOFF_S
        while not self._stopping.is_set():
            if self._stream():
                backoff = FIRST_BACKOFF_S
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _stream(self) -> bool:
        """One ``agent gpus`` run, read to its end; whether it gave any samples."""
        try:
            process = subprocess.Popen(
                self._argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        except OSError as error:
            self.last_error = f"node {self.node.host}: cannot run ssh: {error.strerror}"
            return False
        self._process = process
        if self._stopping.is_set():  # close() ran while it started
            process.kill()
        said: list[str] = []
        drain = threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True)
        drain.start()
        got = False
        assert process.stdout is not None
        for line in process.stdout:
            samples = self._parse(line)
            if samples is None:
                continue
            got = True
            with self._lock:
                self._latest, self._latest_at = samples, time.monotonic()
                self.last_error = None
        code = process.wait()
        drain.join(timeout=5)
        if not self._stopping.is_set():
            why = last_line("".join(said)) or f"the agent's GPU stream ended (status {code})"
            self.last_error = f"node {self.node.host}: {why}"
        return got

    def _parse(self, line: str) -> list[GpuSample] | None:
        """A round of samples from one line; None for a line that is not one (an error is kept)."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if isinstance(data, dict) and "error" in data:
            self.last_error = f"node {self.node.host}: {data['error']}"
            return None
        if not isinstance(data, list):
            return None
        samples = []
        for item in data:
            sample = sample_from_json(item, self.node.host)
            if sample is not None:
                samples.append(sample)
        return samples

    def close(self) -> None:
        """End the stream and its thread."""
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        if self._thread is not None:
            self._thread.join(timeout=10)

    stop = close


def sample_from_json(item: Any, node: str) -> GpuSample | None:
    """One GpuSample from the agent's JSON (``cockpit.faces.agent.sample_json``); None when the
    item is not one. A reading of the wrong type reads n/a, as a field NVML cannot give."""
    if not isinstance(item, dict) or not isinstance(item.get("index"), int):
        return None
    processes = []
    for entry in item.get("processes") or ():
        if isinstance(entry, list) and len(entry) == 3:
            pid, name, used = entry
            if isinstance(pid, int) and isinstance(used, int):
                processes.append(GpuProcess(pid, str(name), used))
    return GpuSample(
        index=item["index"],
        name=str(item.get("name") or "n/a"),
        memory_used=_int(item.get("memory_used")),
        memory_total=_int(item.get("memory_total")),
        power_w=_float(item.get("power_w")),
        power_limit_w=_float(item.get("power_limit_w")),
        utilization=_float(item.get("utilization")),
        temperature_c=_float(item.get("temperature_c")),
        processes=tuple(processes),
        time=_float(item.get("time")) or 0.0,
        node=node,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class ClusterSource(GpuSource):
    """Every node's GPUs as one list: global index = node rank x GPUs per node + local index,
    each sample naming its node; a node whose agent is down keeps its slots, n/a."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        env: Callable[[Node], Mapping[str, str]] | None = None,
        every: float = EVERY_S,
        control: Path | str | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = f"{len(cluster.nodes)} nodes over SSH"
        self.nodes = [
            AgentSource(cluster, node, env=env(node) if env else None, every=every, control=control)
            for node in cluster.nodes
        ]

    def sample(self) -> list[GpuSample]:
        per_node = self.cluster.gpus_per_node
        samples = []
        errors = []
        for rank, source in enumerate(self.nodes):
            got = {s.index: s for s in source.sample() if 0 <= s.index < per_node}
            if source.last_error:
                errors.append(source.last_error)
            now = time.time()
            for local in range(per_node):
                one = got.get(local) or _unknown(local, now, source.node.host)
                samples.append(_renumbered(one, rank * per_node + local))
        self.last_error = "; ".join(errors) or None
        return samples

    def close(self) -> None:
        for source in self.nodes:
            source._stopping.set()  # all at once, then wait for each
        for source in self.nodes:
            source.close()


def _renumbered(sample: GpuSample, index: int) -> GpuSample:
    return replace(sample, index=index)


def _unknown(index: int, now: float, node: str) -> GpuSample:
    return replace(unknown_sample(index, time=now), node=node)
