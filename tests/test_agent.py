"""cockpit's agent on a node, reached through a real sshd: starting, following and stopping an
engine by its token, ports, and the GPUs of a simulated box, one node and a cluster of two."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace

import psutil
import pytest
from helpers import wait_for
from sshd import sshd  # noqa: F401  (the fixture)

from cockpit.core.errors import CockpitError
from cockpit.sim.box import GpuLoad, SimBox, box_from_env
from cockpit.system.ssh import agent_argv, run_agent
from cockpit.telemetry.agent import AgentSource, ClusterSource

TIMEOUT = 60.0
CHATTY = (
    "import sys, time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.1)\nsys.exit(3)"
)
SLEEPY = "import time; print('up', flush=True); time.sleep(120)"


@pytest.fixture
def node(sshd):  # noqa: F811
    cluster = sshd.cluster()
    return cluster, cluster.nodes[0]


def spawn(cluster, node, log, token, code):
    return run_agent(
        cluster,
        node,
        ["spawn", "--log", str(log), "--token", token, "--", sys.executable, "-c", code],
        timeout=TIMEOUT,
    )


def test_a_spawned_engine_is_followed_to_its_keepers_last_line(node, tmp_path):
    cluster, head = node
    log = tmp_path / "logs" / "engine.log"
    started = spawn(cluster, head, log, "tok-tail", CHATTY)
    assert started["log"] == str(log) and started["pid"] > 1
    argv = agent_argv(
        cluster, head, ["tail", "--log", str(log), "--prefix", "[127.0.0.2] ", "--pid", str(started["pid"])]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[127.0.0.2] line 0",
        "[127.0.0.2] line 1",
        "[127.0.0.2] line 2",
        "[127.0.0.2] cockpit agent: the engine exited with code 3",
    ]
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert oct(log.parent.stat().st_mode & 0o777) == "0o700"
    # from an offset: only what came after it
    offset = len(b"line 0\n")
    argv = agent_argv(
        cluster, head, ["tail", "--log", str(log), "--offset", str(offset), "--pid", "999999999"]
    )
    again = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert again.stdout.splitlines()[0] == "line 1"


def test_an_environment_sent_on_stdin_reaches_the_engine_and_no_command_line(node, tmp_path):
    cluster, head = node
    log = tmp_path / "env.log"
    secret = "hf_stdin_secret_4711"
    code = "import os; print(os.environ['HF_TOKEN'], os.environ['COCKPIT_ENV_PROBE'], flush=True)"
    started = run_agent(
        cluster,
        head,
        ["spawn", "--log", str(log), "--token", "tok-env", "--env-stdin", "--", sys.executable, "-c", code],
        timeout=TIMEOUT,
        stdin=json.dumps({"HF_TOKEN": secret, "COCKPIT_ENV_PROBE": "probe"}),
    )
    assert started["pid"] > 1
    wait_for(lambda: "exited with code 0" in log.read_text(), timeout=TIMEOUT)
    assert f"{secret} probe" in log.read_text()
    with pytest.raises(CockpitError, match="--env-stdin wants a JSON object"):
        run_agent(
            cluster,
            head,
            [
                "spawn",
                "--log",
                str(log),
                "--token",
                "tok-env",
                "--env-stdin",
                "--",
                sys.executable,
                "-c",
                "pass",
            ],
            timeout=TIMEOUT,
            stdin="[1, 2]",
        )


def test_stop_needs_the_token_and_ends_the_group(node, tmp_path):
    cluster, head = node
    log = tmp_path / "engine.log"
    pid = spawn(cluster, head, log, "tok-right", SLEEPY)["pid"]
    try:
        stop_by_token(cluster, head, log, pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def stop_by_token(cluster, head, log, pid):
    wait_for(lambda: "up" in log.read_text(), TIMEOUT)
    assert run_agent(
        cluster, head, ["status", "--pid", str(pid), "--token", "tok-right"], timeout=TIMEOUT
    ) == {"alive": True}
    found = run_agent(cluster, head, ["find", "--token", "tok-right"], timeout=TIMEOUT)["pids"]
    assert pid in found and len(found) == 2  # the keeper and the engine under it

    refused = run_agent(cluster, head, ["stop", "--pid", str(pid), "--token", "tok-wrong"], timeout=TIMEOUT)
    assert refused["stopped"] is False and "token" in refused["why"]
    assert psutil.pid_exists(pid)

    stopped = run_agent(cluster, head, ["stop", "--pid", str(pid), "--token", "tok-right"], timeout=TIMEOUT)
    assert stopped == {"stopped": True, "why": "ended on SIGTERM"}
    assert run_agent(
        cluster, head, ["status", "--pid", str(pid), "--token", "tok-right"], timeout=TIMEOUT
    ) == {"alive": False}
    assert log.read_text().splitlines()[-1] == "cockpit agent: the engine was killed by signal SIGTERM"


def test_spawn_of_a_missing_launcher_is_one_line(node, tmp_path):
    cluster, head = node
    argv = ["spawn", "--log", str(tmp_path / "l.log"), "--token", "t", "--", "no-such-engine", "serve"]
    with pytest.raises(CockpitError, match=r"^node 127.0.0.2: cannot start `no-such-engine`: No such file"):
        run_agent(cluster, head, argv, timeout=TIMEOUT)


def test_a_follower_ends_when_its_reader_leaves(node, tmp_path):
    cluster, head = node
    log = tmp_path / "quiet.log"
    log.write_text("first\n")
    argv = agent_argv(cluster, head, ["tail", "--log", str(log)])
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert follower.stdout is not None and follower.stdout.readline() == "first\n"

        def remote_followers():
            return [p for p in psutil.process_iter(["cmdline"]) if str(log) in (p.info["cmdline"] or [])[-1:]]

        assert wait_for(remote_followers, TIMEOUT)
    finally:
        follower.kill()
        follower.wait()
    wait_for(lambda: not remote_followers(), TIMEOUT)


def test_ports_says_who_holds_a_bound_port(node):
    cluster, head = node
    with socket.socket() as held:
        held.bind(("127.0.0.2", 0))
        held.listen()
        port = held.getsockname()[1]
        busy = run_agent(cluster, head, ["ports", "--host", "127.0.0.2", str(port)], timeout=TIMEOUT)["busy"]
    assert list(busy) == [str(port)]
    assert busy[str(port)].startswith(f"pid {os.getpid()} ")
    free = run_agent(cluster, head, ["free-port", "--host", "127.0.0.2"], timeout=TIMEOUT)["port"]
    assert 1024 <= free <= 65535
    two = run_agent(cluster, head, ["free-port", "--host", "127.0.0.2", "--count", "2"], timeout=TIMEOUT)[
        "ports"
    ]
    assert len(set(two)) == 2  # the rendezvous and the RPC port are never the same one


def sim_env(state, host=""):
    env = {"COCKPIT_SIM_GPUS": "8xh200", "COCKPIT_SIM_STATE": str(state)}
    return {**env, "COCKPIT_SIM_NODE": host} if host else env


def test_gpus_reads_the_simulated_box_of_the_node(node, tmp_path):
    cluster, head = node
    env = sim_env(tmp_path / "simbox")
    box = SimBox(box_from_env(env), tmp_path / "simbox")
    with box.publisher(os.getpid(), "engine") as publisher:
        publisher.publish({1: GpuLoad(used_bytes=5 * 2**30, utilization=50.0, power_w=300.0)})
        rounds = run_agent(
            cluster, head, ["gpus", "--count", "2", "--every", "0.1"], env=env, timeout=TIMEOUT
        )
    assert len(rounds) == 2 and all(len(one) == 8 for one in rounds)
    gpu1 = rounds[0][1]
    assert gpu1["index"] == 1 and gpu1["name"] == "NVIDIA H200"
    assert gpu1["memory_used"] == 5 * 2**30 and gpu1["processes"] == [[os.getpid(), "engine", 5 * 2**30]]
    assert rounds[0][0]["memory_used"] == 0


def test_an_agent_source_streams_one_nodes_gpus(node, tmp_path):
    cluster, head = node
    source = AgentSource(cluster, head, env=sim_env(tmp_path / "simbox"), every=0.2)
    try:
        samples = wait_for(lambda: [s for s in source.sample() if s.memory_total], TIMEOUT)
    finally:
        source.close()
    assert [s.index for s in samples] == list(range(8)) and {s.node for s in samples} == {"127.0.0.2"}
    assert source._thread is not None and not source._thread.is_alive()


def every_gpu_read(source):
    samples = source.sample()
    return samples if all(s.memory_total for s in samples) else None


def test_a_cluster_source_numbers_every_nodes_gpus_and_keeps_a_down_nodes_slots(sshd, tmp_path):  # noqa: F811
    cluster = sshd.cluster()
    state = tmp_path / "simbox"
    source = ClusterSource(cluster, env=lambda n: sim_env(state, n.host), every=0.2)
    try:
        samples = wait_for(lambda: every_gpu_read(source), TIMEOUT)
    finally:
        source.close()
    assert [s.index for s in samples] == list(range(16))
    assert [s.node for s in samples] == ["127.0.0.2"] * 8 + ["127.0.0.3"] * 8
    assert source.last_error is None

    # a third node nobody listens for: its eight slots stay, n/a, and the source says why
    down = replace(cluster.nodes[0], host="127.0.0.9")
    three = replace(cluster, nodes=(*cluster.nodes, down))
    source = ClusterSource(three, env=lambda n: sim_env(state, n.host), every=0.2)
    try:
        wait_for(lambda: source.sample() and source.last_error and "127.0.0.9" in source.last_error, TIMEOUT)
        samples = source.sample()
    finally:
        source.close()
    assert len(samples) == 24 and [s.index for s in samples[16:]] == list(range(16, 24))
    assert {s.node for s in samples[16:]} == {"127.0.0.9"} and all(
        s.memory_total is None for s in samples[16:]
    )
    assert "Connection refused" in (source.last_error or "")


@pytest.mark.parametrize(
    "words",
    [
        ["stop", "--pid", "x", "--token", "t"],
        ["tail"],
        ["--env", "not a pair", "find", "--token", "t"],
        ["version", "--engine", "nope"],
        ["gpus", "--every", "-1"],
        ["ports", "70000"],
        ["spawn", "--log", "/tmp/x.log", "--token", "t"],
    ],
)
def test_bad_input_is_one_json_error_line(words):
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "agent", *words], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2, done
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and set(json.loads(lines[0])) == {"error"} and done.stderr == ""
