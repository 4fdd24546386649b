"""A launch across nodes end to end: a simulated 2 x 8 H200 cluster whose nodes are 127.0.0.2 and
127.0.0.3, reached over a real OpenSSH server, each node's simulated engine started by its
`cockpit agent`, the head's port forwarded back. Real cockpit, agent, ssh and engine processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml
from helpers import free_port, wait_for
from sshd import sshd  # noqa: F401  (the fixture)

from cockpit.runner.registry import TOKEN_ENV, Registry
from cockpit.store.journal import Journal

GIB = 2**30
SECRET = "hf_cluster_secret_8128"


@pytest.fixture(autouse=True)
def fast_sim(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))


def cluster_profile(tmp_path, server, engine: str = "vllm", **extra) -> tuple[str, int]:
    port = free_port()
    args = ["--max-model-len", "8192"] if engine == "vllm" else ["--context-length", "8192"]
    data = {
        "model": "deepseek-v3.2",
        "engine": engine,
        "cluster": {
            "gpu": "h200",
            "gpus_per_node": 8,
            "link": "ndr",
            "identity": server.identity,
            "ssh_options": list(server.ssh_options),
            "nodes": [{"host": host, "user": server.user, "ssh_port": server.port} for host in server.hosts],
        },
        "server": {"port": port, "args": args},
        **extra,
    }
    path = tmp_path / f"cluster-{engine}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path), port


def cockpit(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", "--sim", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def carrying(token: str) -> list[psutil.Process]:
    """Processes on this machine (every simulated node) that carry a launch's token."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def node_boxes(tmp_path) -> dict[str, int]:
    """Bytes each simulated node's GPUs hold now, by node."""
    held: dict[str, int] = {}
    for path in (tmp_path / "simbox").rglob("proc-*.json"):
        data = json.loads(path.read_text())
        node = next((part for part in path.parts if part.startswith("127.0.0.")), path.parent.name)
        held[node] = held.get(node, 0) + sum(g["used_bytes"] for g in data["gpus"].values())
    return held


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_try_tp8_pp2_on_two_nodes_reaches_ready_benches_and_stops_both(tmp_path, sshd, engine):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd, engine)
    result = cockpit("run", "try tp8 pp2", "--profile", profile, "--bench", "c=1,4 in=64 out=16 n=8")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "[node 1 127.0.0.2]" in out and "[node 2 127.0.0.3]" in out
    assert "ready     http://127.0.0.1:" in out
    assert "node 2 (127.0.0.3) started the engine" in out
    [row] = Journal().experiments()
    assert row.layout == "tp8 pp2" and row.outcome in ("ready", "stopped")
    argv = " ".join(row.argv)
    assert (
        ("--nnodes 2" in argv) if engine == "vllm" else ("--nnodes 2" in argv and "--dist-init-addr" in argv)
    )
    assert set(row.peak_memory) == set(range(16))  # both nodes' GPUs, seen through their agents
    assert all(v > 10 * GIB for v in row.peak_memory.values())
    assert not Registry().live()
    assert not node_boxes(tmp_path).get("127.0.0.2") and not node_boxes(tmp_path).get("127.0.0.3")


def test_a_worker_killed_during_load_is_that_nodes_failure(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cockpit.faces.cli", "--sim", "run", "try tp8 pp2", "--profile", profile],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COCKPIT_SIM_TIME_SCALE": "2"},
    )
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "[node 2 127.0.0.3]" in line and "oading" in line:  # the worker is loading its weights
            break
    else:
        raise AssertionError("".join(seen))
    [entry] = wait_for(lambda: Registry().live() or None)
    workers = [
        p
        for p in carrying(entry.token)
        if "cockpit.sim" in " ".join(p.cmdline()) and p.environ().get("COCKPIT_SIM_NODE") == "127.0.0.3"
    ]
    assert workers, "".join(seen)
    for worker in workers:
        worker.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode != 0, out
    assert "node 2 (127.0.0.3)" in out and "failed" in out
    wait_for(lambda: not carrying(entry.token), timeout=60)
    assert not Registry().live()


def test_an_unreachable_node_is_said_in_ssh_words_before_anything_starts(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    data = yaml.safe_load(open(profile))
    data["cluster"]["nodes"][1]["ssh_port"] = free_port()  # nothing listens there
    open(profile, "w").write(yaml.safe_dump(data))
    result = cockpit("run", "try tp8 pp2", "--profile", profile)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "node 127.0.0.3: ssh: connect to host 127.0.0.3 port" in out and "Connection refused" in out, out
    assert "nothing launched" in out and "[node " not in out
    assert not Registry().live()


def test_a_cockpit_that_dies_leaves_the_nodes_running_and_listed(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    data = yaml.safe_load(open(profile))
    data["server"]["env"] = {"HF_TOKEN": SECRET}
    open(profile, "w").write(yaml.safe_dump(data))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cockpit.faces.cli",
            "--sim",
            "run",
            "try tp8 pp2",
            "--profile",
            profile,
            "--keep",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "ready     " in line:
            break
    else:
        raise AssertionError("".join(seen))
    proc.send_signal(signal.SIGKILL)  # an SSH drop that takes the cockpit with it
    proc.wait(timeout=30)
    [entry] = Registry().live()
    running = carrying(entry.token)
    engines = [p for p in running if "cockpit.sim" in " ".join(p.cmdline())]
    assert {p.environ().get("COCKPIT_SIM_NODE") for p in engines} == {"127.0.0.2", "127.0.0.3"}
    assert all(p.environ().get("HF_TOKEN") == SECRET for p in engines)  # the profile's env reached every node
    for proc in psutil.process_iter():  # ... and no command line on the machine (ssh, agents) shows it
        with contextlib.suppress(psutil.Error):
            assert SECRET not in " ".join(proc.cmdline())
    listed = cockpit("servers")
    assert "tp8 pp2" in listed.stdout, listed.stdout + listed.stderr
    stopped = cockpit("stop", "all", timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    wait_for(lambda: not carrying(entry.token), timeout=60)
    assert not Registry().live()
    time.sleep(0.1)


def test_the_screen_launches_across_nodes_and_shows_every_nodes_gpus(tmp_path, sshd):  # noqa: F811
    import asyncio

    from tuipilot import SMALL_BENCH, launch_ready, make_app, stop_server, until

    profile, port = cluster_profile(tmp_path, sshd, bench=SMALL_BENCH)

    async def scenario():
        app = make_app(profile)
        async with app.run_test(size=(120, 50)) as pilot:
            await launch_ready(pilot, app, "tp8 pp2")
            grid = app.main.gpus

            def both_nodes_hold_memory() -> bool:
                samples = app.session.monitor.latest() if hasattr(app, "session") else []
                by_node: dict[str, int] = {}
                for s in samples:
                    by_node[s.node] = by_node.get(s.node, 0) + (s.memory_used or 0)
                return all(by_node.get(h, 0) > 10 * GIB for h in ("127.0.0.2", "127.0.0.3"))

            await until(pilot, both_nodes_hold_memory, timeout=30, what="both nodes' GPUs in the panes")
            text = " ".join(str(h.render()) for h in grid.headings) if getattr(grid, "headings", None) else ""
            assert "127.0.0.2" in text and "127.0.0.3" in text, text
            await stop_server(pilot, app)
        assert not Registry().live()

    asyncio.run(scenario())


def test_a_node_that_never_joins_is_said_within_the_notice_then_in_the_engines_words(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    data = yaml.safe_load(open(profile))
    data["cluster"]["nodes"][1]["env"] = {
        "COCKPIT_SIM_TIME_SCALE": "0.001"
    }  # node 2 crawls: never joins in time
    open(profile, "w").write(yaml.safe_dump(data))
    result = cockpit(
        "run",
        "try tp8 pp2",
        "--profile",
        profile,
        env={"COCKPIT_JOIN_NOTICE_S": "2", "COCKPIT_SIM_JOIN_TIMEOUT_S": "8"},
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "ranks not joined after 2 s at the head 127.0.0.2" in out, out
    assert "Timed out after" in out and "clients joined" in out, out  # the engine's own words
    assert "never joined" in out, out  # the diagnosis
    assert not Registry().live()


def test_nodes_with_different_engine_versions_are_refused_before_launch(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    data = yaml.safe_load(open(profile))
    data["cluster"]["nodes"][0]["env"] = {"COCKPIT_SIM_ENGINE_VERSION": "0.33.0"}
    data["cluster"]["nodes"][1]["env"] = {"COCKPIT_SIM_ENGINE_VERSION": "0.32.0"}
    open(profile, "w").write(yaml.safe_dump(data))
    result = cockpit("run", "try tp8 pp2", "--profile", profile)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "different vllm versions (127.0.0.2: 0.33.0, 127.0.0.3: 0.32.0); nothing launched" in out, out
    assert "[node " not in out  # nothing started on any node
    assert not Registry().live()


def test_a_port_taken_on_the_head_is_refused_before_launch(tmp_path, sshd):  # noqa: F811
    from helpers import listening_socket

    profile, port = cluster_profile(tmp_path, sshd)
    data = yaml.safe_load(open(profile))
    with listening_socket() as taken:
        data["server"]["port"] = taken.getsockname()[1]
        open(profile, "w").write(yaml.safe_dump(data))
        result = cockpit("run", "try tp8 pp2", "--profile", profile)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "is already in use on the head node 127.0.0.2" in out, out
    assert not Registry().live()


def test_a_layout_that_fits_in_one_node_runs_on_the_head_alone(tmp_path, sshd):  # noqa: F811
    profile, port = cluster_profile(tmp_path, sshd)
    result = cockpit("run", "try tp8", "--profile", profile)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "ready     http://127.0.0.1:" in out
    assert "[node 1 127.0.0.2]" in out and "[node 2 127.0.0.3]" not in out
    [row] = Journal().experiments()
    assert "--nnodes" not in row.argv and set(row.peak_memory) == set(range(8))
    assert not Registry().live()


def test_a_join_notice_that_is_not_seconds_is_one_line(monkeypatch):
    from cockpit.core.errors import CockpitError
    from cockpit.runner.cluster import join_notice

    monkeypatch.setenv("COCKPIT_JOIN_NOTICE_S", "soon")
    with pytest.raises(CockpitError, match="COCKPIT_JOIN_NOTICE_S='soon' is not a number of seconds"):
        join_notice(60.0)
    monkeypatch.setenv("COCKPIT_JOIN_NOTICE_S", "5")
    assert join_notice(60.0) == 5.0
