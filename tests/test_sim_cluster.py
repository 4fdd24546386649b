"""A simulated engine across two nodes on one machine: real processes meeting over TCP.

The head (node 0, 127.0.0.2) and a worker (node 1, 127.0.0.3) each run ``python -m cockpit.sim``
with the engine's own multi-node flags and their own simulated box (COCKPIT_SIM_NODE). The head
serves only once the worker joined; a worker that never comes, or dies while loading, ends the
head with the engine's words, which the diagnosis reads as "rank-timeout" and "peer-lost".
"""

from __future__ import annotations

import os
import signal
import socket
import time

import httpx
import pytest
from helpers import free_port, wait_for
from simproc import SimProcess

from cockpit.core.hardware import parse_box
from cockpit.runner.diagnose import diagnose
from cockpit.runner.phases import PhaseTracker
from cockpit.sim.box import SimBox
from cockpit.telemetry.simbox import SimBoxSource

HEAD, WORKER = "127.0.0.2", "127.0.0.3"
MODEL = "deepseek-v3.2"  # 671B: two nodes of 8 x H200, 41 GiB of weights on every GPU
JOIN_TIMEOUT_S = 3  # the head's wait for the worker in the tests that want it to give up
FAST = 50  # COCKPIT_SIM_TIME_SCALE: loading takes a fraction of a second
SLOW = 0.5  # loading takes about a minute: time to kill a node while it loads


def argvs(engine: str, master_port: int, http_port: int) -> tuple[list[str], list[str]]:
    """The head's and the worker's argv, global arguments alike, as a cluster launch builds them:
    vLLM TP8 x PP2 (--nnodes/--node-rank/--master-addr/--master-port, --headless on the worker),
    SGLang TP16 (--nnodes/--node-rank/--dist-init-addr)."""
    if engine == "vllm":
        common = ["vllm", "serve", MODEL, "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
        common += ["--max-model-len", "8192", "--nnodes", "2", "--master-addr", HEAD]
        common += ["--master-port", str(master_port)]
        head = [*common, "--node-rank", "0", "--host", "127.0.0.1", "--port", str(http_port)]
        return head, [*common, "--node-rank", "1", "--headless"]
    common = ["python", "-m", "sglang.launch_server", "--model-path", MODEL, "--tp-size", "16"]
    common += ["--context-length", "8192", "--nnodes", "2", "--dist-init-addr", f"{HEAD}:{master_port}"]
    head = [*common, "--node-rank", "0", "--host", "127.0.0.1", "--port", str(http_port)]
    return head, [*common, "--node-rank", "1"]


def node(engine: str, argv: list[str], state, host: str, *, scale: float = FAST, timeout: float = 60):
    """One node's engine: its own box (COCKPIT_SIM_NODE), its address for the engine."""
    env = {
        "COCKPIT_SIM_NODE": host,
        "COCKPIT_SIM_GPUS": "8xh200",
        "VLLM_HOST_IP": host,
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "COCKPIT_SIM_JOIN_TIMEOUT_S": str(timeout),
    }
    return SimProcess(engine, argv, state, scale=scale, env=env)


def held(state, host: str) -> dict[int, int]:
    box = SimBox(parse_box("8xh200"), root=state, node=host)
    return {s.index: s.memory_used or 0 for s in SimBoxSource(box).sample()}


def is_up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def stop(*nodes: SimProcess) -> None:
    for sim in nodes:
        if sim.proc.poll() is None:
            sim.proc.kill()
        sim.stop()


@pytest.fixture
def state(tmp_path):
    return tmp_path / "simbox"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_head_serves_only_once_the_worker_joined(engine, state):
    master, port = free_port(), free_port()
    head_argv, worker_argv = argvs(engine, master, port)
    url = f"http://127.0.0.1:{port}"
    head = node(engine, head_argv, state, HEAD)
    worker = None
    try:
        # Alone, the head waits at its rendezvous: it never serves, it holds only CUDA contexts.
        wait_for(lambda: all(0 < used < 2**30 for used in held(state, HEAD).values()), 30)
        time.sleep(1.0)
        assert not is_up(url) and head.proc.poll() is None, head.output()
        worker = node(engine, worker_argv, state, WORKER)
        head.wait_ready(url, timeout=60)
        assert worker.proc.poll() is None, worker.output()
        # Both nodes' boxes hold the weights and the KV cache on all 8 GPUs, each its own.
        head_held = held(state, HEAD)
        wait_for(lambda: all(b > 100 * 2**30 for b in held(state, WORKER).values()), 30)
        assert all(b > 100 * 2**30 for b in head_held.values()), head_held
        assert set(held(state, WORKER)) == set(range(8))
        # What the readers make of both logs, as a cluster launch merges them.
        tracker = PhaseTracker(1, engine=engine, nodes=2)
        for prefix, sim in (("[node 1 127.0.0.2] ", head), ("[node 2 127.0.0.3] ", worker)):
            for line in sim.output().splitlines():
                tracker.feed(prefix + line)
        assert tracker.all_joined and len(tracker.ranks_joined) == 16, tracker.ranks_joined
        assert tracker.phase == "serving" and tracker.weights_gib and tracker.weights_gib > 40
        assert tracker.rendezvous == f"{HEAD}:{master}"
        if engine == "vllm":
            assert tracker.world == 16
            assert (
                f"with head node address {HEAD}:{master} for torch.distributed process group"
                in worker.output()
            )
        assert "Application startup complete." not in worker.output()
    finally:
        assert head.stop() == 0, head.output()
        if worker is not None:
            # The head stopped cleanly: the worker stops with it, and frees its GPUs.
            assert worker.wait_exit(30) == 0, worker.output()
            worker.stop()
    assert all(b == 0 for b in held(state, WORKER).values())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_worker_times_out_in_the_engines_words(engine, state):
    head_argv, _ = argvs(engine, free_port(), free_port())
    head = node(engine, head_argv, state, HEAD, timeout=JOIN_TIMEOUT_S)
    try:
        assert head.wait_exit(60) == 1
        out = head.output()
        seconds = JOIN_TIMEOUT_S + 1
        assert (
            f"DistStoreError: Timed out after {seconds} seconds waiting for clients. 8/16 clients joined."
            in out
        )
        found = diagnose(out.splitlines())
        assert found is not None and found.kind == "rank-timeout", found
        assert found.cause.startswith(f"8 of 16 ranks never joined the rendezvous at {HEAD}:")
        assert "set ifname in the cluster profile" in found.next_step
    finally:
        stop(head)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_worker_killed_while_loading_ends_the_head_with_peer_lost(engine, state):
    master, port = free_port(), free_port()
    head_argv, worker_argv = argvs(engine, master, port)
    head = node(engine, head_argv, state, HEAD, scale=SLOW)
    worker = node(engine, worker_argv, state, WORKER, scale=SLOW)
    try:
        wait_for(lambda: "Loading safetensors checkpoint shards" in worker.output(), 60)
        wait_for(lambda: any(b > 2**30 for b in held(state, WORKER).values()), 30)  # mid-load
        os.kill(worker.proc.pid, signal.SIGKILL)
        assert head.wait_exit(30) == 1, head.output()
        out = head.output()
        assert f"Connection closed by peer [{WORKER}]:" in out
        found = diagnose(out.splitlines())
        assert found is not None and found.kind == "peer-lost", found
        assert (
            found.cause == f"the node at {WORKER} went away (Connection closed by peer) during weight loading"
        )
        assert not is_up(f"http://127.0.0.1:{port}")
    finally:
        stop(head, worker)


def test_a_worker_whose_head_dies_leaves_with_the_stores_words(state):
    master, port = free_port(), free_port()
    head_argv, worker_argv = argvs("vllm", master, port)
    head = node("vllm", head_argv, state, HEAD)
    worker = node("vllm", worker_argv, state, WORKER)
    try:
        head.wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        wait_for(lambda: all(b > 100 * 2**30 for b in held(state, WORKER).values()), 30)
        os.kill(head.proc.pid, signal.SIGKILL)
        assert worker.wait_exit(30) == 1, worker.output()
        found = diagnose(worker.output().splitlines())
        assert found is not None and found.kind == "peer-lost", found
        assert found.cause.startswith("the head went away")
    finally:
        stop(head, worker)


def test_a_worker_that_never_reaches_its_head_says_so(state):
    _, worker_argv = argvs("sglang", free_port(), free_port())
    worker = node("sglang", worker_argv, state, WORKER, timeout=JOIN_TIMEOUT_S)
    try:
        assert worker.wait_exit(60) == 1
        out = worker.output()
        assert (
            f"The client socket has timed out after {JOIN_TIMEOUT_S * 1000}ms while trying to connect to ({HEAD}, "
            in out
        )
        found = diagnose(out.splitlines())
        assert found is not None and found.kind == "rank-timeout", found
        assert found.cause.startswith(f"this node never reached the head at {HEAD}:")
        assert not any(held(state, WORKER).values())
    finally:
        stop(worker)


def test_each_node_has_its_own_box(state):
    """COCKPIT_SIM_NODE names the box after the node: two nodes of one machine share no GPU."""
    env = {"COCKPIT_SIM_STATE": str(state), "COCKPIT_SIM_GPUS": "8xh200"}
    alone = SimBox.from_env(env)
    head = SimBox.from_env({**env, "COCKPIT_SIM_NODE": HEAD})
    worker = SimBox.from_env({**env, "COCKPIT_SIM_NODE": WORKER})
    assert alone.name == "8xh200"
    assert (head.name, worker.name) == ("127.0.0.2-8xh200", "127.0.0.3-8xh200")
    assert len({alone.folder, head.folder, worker.folder}) == 3


def test_vllm_data_parallel_across_nodes_meets_at_the_rpc_port(state):
    """DP2 x TP8: one engine per node, the worker --headless, both with the head's RPC address."""
    rpc, port = free_port(), free_port()
    common = ["vllm", "serve", MODEL, "--tensor-parallel-size", "8", "--data-parallel-size", "2"]
    common += ["--data-parallel-size-local", "1", "--data-parallel-address", HEAD]
    common += ["--data-parallel-rpc-port", str(rpc), "--max-model-len", "8192"]
    head_argv = [*common, "--data-parallel-start-rank", "0", "--host", "127.0.0.1", "--port", str(port)]
    worker_argv = [*common, "--data-parallel-start-rank", "1", "--headless"]
    head = node("vllm", head_argv, state, HEAD)
    worker = node("vllm", worker_argv, state, WORKER)
    try:
        head.wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        wait_for(lambda: all(b > 100 * 2**30 for b in held(state, WORKER).values()), 30)
        assert (
            f"Launching 1 data parallel engine(s) in headless mode, with head node address tcp://{HEAD}:{rpc}."
            in worker.output()
        )
        assert "rank 8 in world size 16 is assigned as DP rank 1" in worker.output()
    finally:
        assert head.stop() == 0, head.output()
        assert worker.wait_exit(30) == 0, worker.output()
        worker.stop()


def test_a_taken_rendezvous_port_fails_in_torchs_words(state):
    master, port = free_port(), free_port()
    head_argv, _ = argvs("sglang", master, port)
    with socket.socket() as taken:
        taken.bind((HEAD, master))
        taken.listen()
        head = node("sglang", head_argv, state, HEAD)
        try:
            assert head.wait_exit(60) == 1
            assert f"The server socket has failed to listen on any local network address. port: {master}" in (
                head.output()
            )
        finally:
            stop(head)


def test_one_box_reads_no_join_lines():
    """SGLang's "Init parallel begin." starts any server; only a tracker across nodes reads it as a join."""
    line = "[2026-11-29 20:38:47 TP0] Init parallel begin."
    alone, cluster = PhaseTracker(1, engine="sglang"), PhaseTracker(1, engine="sglang", nodes=2)
    assert alone.feed(line).detail == "" and not alone.ranks_joined
    assert cluster.feed("[node 1 10.0.0.1] " + line).detail == "1 ranks joined"
    assert cluster.feed("[2026-11-29 20:38:49 TP0] Init parallel ends. elapsed=2.00 s").detail == (
        "every rank joined"
    )
    assert cluster.all_joined and cluster.ranks_joined == {"TP0"}


def test_a_worker_lost_while_serving_ends_the_head(state):
    master, port = free_port(), free_port()
    head_argv, worker_argv = argvs("vllm", master, port)
    head = node("vllm", head_argv, state, HEAD)
    worker = node("vllm", worker_argv, state, WORKER)
    try:
        head.wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        os.kill(worker.proc.pid, signal.SIGKILL)
        assert head.wait_exit(30) == 1, head.output()
        found = diagnose(head.output().splitlines())
        assert found is not None and found.kind == "peer-lost", found
        assert found.cause == f"the node at {WORKER} went away (Connection closed by peer) while serving"
    finally:
        stop(head, worker)
