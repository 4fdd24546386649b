"""Reaching a node over SSH: the argv cockpit builds, and what a real OpenSSH server does with it."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import free_port, wait_for
from sshd import sshd  # noqa: F401  (the fixture)

from cockpit.core.cluster import Cluster, Node
from cockpit.core.errors import CockpitError
from cockpit.system.ssh import (
    SshTarget,
    agent_argv,
    control_dir,
    forward_argv,
    run_agent,
    ssh_argv,
    target_for,
)

# A remote "agent" that only says back the words it was given, as JSON.
ECHO = (sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))")
ODD_WORDS = [
    "two words",
    "$HOME",
    "`id`",
    "'single'",
    '"double"',
    "semi;colon && true",
    "back\\slash",
    "*",
    "",
    "new\nline",
    "ünïcode",
    "--",
    "-o",
]


@pytest.fixture
def short_dir():
    """A control folder short enough for a socket path (pytest's tmp_path may be too deep)."""
    folder = Path(tempfile.mkdtemp(prefix="ck-"))
    yield folder
    for path in folder.iterdir():  # end the shared connections the test opened
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={path}", "x"], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def test_the_argv_has_batch_mode_a_shared_connection_and_one_quoted_remote_string():
    node = Node(host="gpu1", user="ops", ssh_port=2222)
    cluster = Cluster(nodes=(node,), gpu="h200", identity="/keys/id", ssh_options=("ProxyJump=bastion",))
    argv = ssh_argv(target_for(node, cluster, "/run/ck"), ["vllm", "serve", "my model", "--x=$Y"])
    assert argv[:3] == ["ssh", "-o", "ProxyJump=bastion"]  # the profile's first: ssh keeps the first value
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert options == [
        "ProxyJump=bastion",
        "BatchMode=yes",
        "ConnectTimeout=10",
        "ServerAliveInterval=15",
        "ControlMaster=auto",
        "ControlPath=/run/ck/%C",
        "ControlPersist=120",
    ]
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == "/keys/id"
    assert argv[-3:] == ["ops@gpu1", "--", "vllm serve 'my model' '--x=$Y'"]
    assert shlex.split(argv[-1]) == ["vllm", "serve", "my model", "--x=$Y"]


def test_a_forward_alone_only_forwards_and_a_tty_is_forced():
    target = SshTarget(host="gpu1")
    argv = ssh_argv(target, [], forward=(18000, "127.0.0.1", 8000))
    assert argv[argv.index("-L") + 1] == "127.0.0.1:18000:127.0.0.1:8000"
    assert "ExitOnForwardFailure=yes" in argv and argv[-2:] == ["-N", "gpu1"]
    assert "ControlMaster=auto" not in argv  # no control folder given
    assert "-tt" in ssh_argv(target, ["top"], tty=True)


def test_the_agent_argv_runs_the_same_python_by_default_with_its_environment():
    node = Node(host="gpu1")
    argv = agent_argv(Cluster(nodes=(node,), gpu="h200"), node, ["gpus"], {"A": "1 2"}, control="/c")
    assert shlex.split(argv[-1]) == [sys.executable, "-m", "cockpit", "agent", "--env", "A=1 2", "gpus"]
    argv = agent_argv(Cluster(nodes=(node,), gpu="h200", agent=("/opt/ck/bin/cockpit",)), node, ["gpus"])
    assert shlex.split(argv[-1]) == ["/opt/ck/bin/cockpit", "agent", "gpus"]


def test_the_control_folder_is_private_and_short_enough_for_a_socket(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_STATE_DIR", "/tmp/" + "d" * 80)
    folder = control_dir()
    assert len(str(folder)) + 58 < 104
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    short = control_dir(tmp_path / "s")
    assert short == tmp_path / "s" or len(str(tmp_path)) > 40
    loose = Path(tempfile.mkdtemp(prefix="ck-"))
    try:
        os.chmod(loose, 0o777)
        with pytest.raises(CockpitError, match="not private to you"):
            control_dir(loose)
    finally:
        shutil.rmtree(loose)


def test_odd_words_reach_the_remote_command_as_they_were(sshd):  # noqa: F811
    cluster = replace(sshd.cluster(), agent=ECHO)
    said = run_agent(cluster, cluster.nodes[1], ODD_WORDS, env={"K": "v $x 'y'"}, timeout=60)
    assert said == ["agent", "--env", "K=v $x 'y'", *ODD_WORDS]


def test_an_unreachable_node_is_sshs_own_line(sshd):  # noqa: F811
    cluster = sshd.cluster()
    nowhere = Node(host="127.0.0.9", user=sshd.user, ssh_port=sshd.port)
    with pytest.raises(CockpitError) as caught:
        run_agent(replace(cluster, nodes=(nowhere,)), nowhere, ["free-port"], timeout=60)
    assert str(caught.value) == (
        f"node 127.0.0.9: ssh: connect to host 127.0.0.9 port {sshd.port}: Connection refused "
        "(check the node's host and ssh_port in the cluster profile)"
    )


def test_a_key_the_node_refuses_says_to_check_the_user_and_key(sshd, short_dir):  # noqa: F811
    cluster = replace(sshd.cluster(), identity=str(short_dir / "nokey"))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cluster.identity], check=True)
    with pytest.raises(CockpitError, match=r"^node 127.0.0.2: .*Permission denied.*check the node's user"):
        run_agent(cluster, cluster.nodes[0], ["free-port"], timeout=60, control=short_dir)


def test_a_node_without_cockpit_says_so_in_one_line(sshd):  # noqa: F811
    cluster = replace(sshd.cluster(), agent=("/nonexistent/bin/python",))
    with pytest.raises(CockpitError) as caught:
        run_agent(cluster, cluster.nodes[0], ["free-port"], timeout=60)
    line = str(caught.value)
    assert line.startswith("the agent did not start on 127.0.0.2: ")
    assert "/nonexistent/bin/python" in line and line.endswith("; install cockpit there or set cluster.agent")
    assert "\n" not in line


def test_calls_share_one_connection_through_its_socket(sshd, short_dir):  # noqa: F811
    cluster = sshd.cluster()
    node = cluster.nodes[0]
    assert run_agent(cluster, node, ["free-port", "--host", "127.0.0.2"], timeout=60, control=short_dir)[
        "port"
    ]
    sockets = [p for p in short_dir.iterdir() if stat.S_ISSOCK(p.stat().st_mode)]
    assert len(sockets) == 1 and len(sockets[0].name) == 40
    check = ssh_argv(target_for(node, cluster, short_dir), [])
    done = subprocess.run([*check[:-1], "-O", "check", check[-1]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_forward_brings_the_heads_own_port_here_for_as_long_as_it_runs(sshd):  # noqa: F811
    cluster = sshd.cluster()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        local = free_port()
        argv = forward_argv(cluster, cluster.nodes[1], local, server.getsockname()[1])
        assert argv[1:5] == ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        forward = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:

            def reached():
                try:
                    with socket.create_connection(("127.0.0.1", local), timeout=5) as client:
                        server.settimeout(5)
                        accepted, _ = server.accept()
                        accepted.sendall(b"hello")
                        accepted.close()
                        return client.recv(5)
                except OSError:
                    return None

            assert wait_for(reached, 60, step=0.2) == b"hello"
            assert forward.poll() is None
        finally:
            forward.terminate()
            forward.wait(timeout=10)
