"""Reaching a cluster's nodes: the OpenSSH command line that runs cockpit's agent on one of them.

Every node is reached with the system's own ``ssh`` (its config, agent and known hosts apply), in
batch mode (no prompt can hang a screen), through one shared connection per node (ControlMaster:
the agent's many short calls pay the handshake once). OpenSSH hands the remote side ONE string
that the login shell parses again, so the remote argv is quoted with ``shlex.join`` here and
nowhere else. The agent answers in JSON lines on stdout (``cockpit.faces.agent``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cockpit.core.cluster import Cluster, Node
from cockpit.core.errors import CockpitError, cut
from cockpit.store.paths import private_dir, state_dir

SSH_FAILED = 255  # ssh's own exit status when it could not connect or run the command (ssh(1))
CONNECT_TIMEOUT_S = 10
ALIVE_INTERVAL_S = 15
CONTROL_PERSIST_S = 120
DEFAULT_TIMEOUT_S = 60.0
# A UNIX socket path holds 108 bytes on Linux, 104 on macOS. ssh names the socket "%C" (40 hex
# digits) and first binds it with a ".XXXXXXXXXXXXXXXX" suffix (mux.c, muxserver_listen), so the
# folder may take what is left: a state folder deeper than that uses a short one under /tmp.
_SOCKET_PATH_MAX = 104
_SOCKET_NAME_LEN = 1 + 40 + 17


@dataclass(frozen=True)
class SshTarget:
    """Where one ssh command goes, and how: what ``ssh_argv`` needs of a node and its cluster."""

    host: str
    user: str = ""
    port: int = 22
    identity: str = ""
    options: tuple[str, ...] = ()  # `-o` options as a profile writes them: "Key=Value"
    control_dir: str = ""

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host


def control_dir(folder: Path | None = None) -> Path:
    """The owner-only folder of the shared connections' sockets: ``ssh`` under the state folder,
    or, where that path is too long for a socket, ``cockpit-ssh-UID`` in the temporary folder."""
    folder = folder if folder is not None else state_dir() / "ssh"
    if len(os.fsencode(str(folder))) + _SOCKET_NAME_LEN >= _SOCKET_PATH_MAX:
        folder = Path(tempfile.gettempdir()) / f"cockpit-ssh-{os.getuid()}"
    private_dir(folder)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise CockpitError(
            f"{folder} holds SSH connection sockets but is not private to you (owner uid {info.st_uid}, "
            f"mode {info.st_mode & 0o777:o}): remove it, or set COCKPIT_STATE_DIR to a short private folder"
        )
    return folder


def target_for(node: Node, cluster: Cluster, control: Path | str | None = None) -> SshTarget:
    """The ssh target of ``node``: its host, user and port, the cluster's key and options."""
    return SshTarget(
        host=node.host,
        user=node.user,
        port=node.ssh_port,
        identity=cluster.identity,
        options=tuple(cluster.ssh_options),
        control_dir=str(control if control is not None else control_dir()),
    )


def ssh_argv(
    target: SshTarget,
    remote_argv: Sequence[str],
    *,
    tty: bool = False,
    forward: tuple[int, str, int] | None = None,
) -> list[str]:
    """The ``ssh`` argv that runs ``remote_argv`` on the target (quoted for the remote shell);
    ``forward`` = (local port, host as the node sees it, port) adds a local forward, and with no
    remote argv the connection only forwards (``-N``).

    The profile's own options come first: ssh keeps the first value it is given for an option
    (ssh_config(5)), so a profile can override a default below (a longer ConnectTimeout)."""
    argv = ["ssh"]
    for option in target.options:
        argv += ["-o", option]
    argv += [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
    ]  # fmt: skip
    if target.control_dir:
        argv += [
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={target.control_dir}/%C",
            "-o", f"ControlPersist={CONTROL_PERSIST_S}",
        ]  # fmt: skip
    argv += ["-p", str(target.port)]
    if target.identity:
        argv += ["-i", target.identity]
    if tty:
        argv.append("-tt")
    if forward is not None:
        local, host, port = forward
        argv += ["-o", "ExitOnForwardFailure=yes", "-L", f"127.0.0.1:{local}:{host}:{port}"]
        if not remote_argv:
            argv.append("-N")
    argv.append(target.destination)
    if remote_argv:
        argv += ["--", shlex.join(remote_argv)]
    return argv


def agent_command(cluster: Cluster) -> list[str]:
    """The words that start cockpit on a node: the cluster's ``agent``, else this very Python."""
    return list(cluster.agent) if cluster.agent else [sys.executable, "-m", "cockpit"]


def agent_argv(
    cluster: Cluster,
    node: Node,
    sub_argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    control: Path | str | None = None,
) -> list[str]:
    """The ssh argv that runs ``<agent command> agent [--env K=V ...] <sub_argv>`` on ``node``."""
    words = [*agent_command(cluster), "agent"]
    for key, value in (env or {}).items():
        words += ["--env", f"{key}={value}"]
    return ssh_argv(target_for(node, cluster, control), [*words, *sub_argv])


def forward_argv(
    cluster: Cluster,
    node: Node,
    local_port: int,
    remote_port: int,
    *,
    remote_host: str = "127.0.0.1",
    control: Path | str | None = None,
) -> list[str]:
    """The ssh argv that forwards 127.0.0.1:``local_port`` here to ``remote_host``:``remote_port``
    as the node sees it (the head's server binds its own 127.0.0.1), for as long as it runs.

    It takes its own connection, not the shared one: through a shared connection ssh hands the
    forward to the master and exits at once, and this process's life is the forward's."""
    target = target_for(node, cluster, control)
    own = replace(target, control_dir="", options=("ControlMaster=no", "ControlPath=none", *target.options))
    return ssh_argv(own, [], forward=(local_port, remote_host, remote_port))


def run_agent(
    cluster: Cluster,
    node: Node,
    sub_argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    control: Path | str | None = None,
    stdin: str | None = None,
    own_session: bool = False,
) -> Any:
    """Run one agent sub-command on ``node`` and return its answer: the JSON line it printed
    (a list of them when it printed several). Any failure is one line naming the node.
    ``stdin``: what the agent reads (what must stay off the command lines `ps` shows).
    ``own_session``: ssh outside the caller's process group, so that a SIGTERM to the group does
    not cut a call (a spawn, a stop) half way, leaving an engine that nobody knows of."""
    argv = agent_argv(cluster, node, sub_argv, env, control=control)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            start_new_session=own_session,
        )
    except FileNotFoundError:
        raise CockpitError(
            "no `ssh` command here: install OpenSSH's client to reach the cluster's nodes"
        ) from None
    except subprocess.TimeoutExpired:
        raise Unreachable(
            f"node {node.host}: the agent did not answer `{cut(' '.join(sub_argv[:2]))}` within {timeout:g} s: "
            "check the node is up and not overloaded"
        ) from None
    return agent_answer(node, done.returncode, done.stdout, done.stderr)


class Unreachable(CockpitError):
    """SSH itself failed: the node, its port, the key or the host key; not the agent."""


def agent_answer(node: Node, returncode: int, stdout: str, stderr: str) -> Any:
    """What an agent call answered, or the one-line error its exit status and output mean."""
    if returncode == SSH_FAILED:
        raise Unreachable(f"node {node.host}: {ssh_error(stderr)}")
    answers = []
    for line in stdout.splitlines():
        try:
            answers.append(json.loads(line))
        except ValueError:
            continue  # a login banner or a profile script's chatter: not the agent's
    if not answers:
        said = last_line(stderr) or f"it exited with status {returncode} and printed nothing"
        raise CockpitError(
            f"the agent did not start on {node.host}: {said}; install cockpit there or set cluster.agent"
        )
    for answer in answers:
        if isinstance(answer, dict) and "error" in answer:
            raise CockpitError(f"node {node.host}: {answer['error']}")
    return answers[0] if len(answers) == 1 else answers


def ssh_error(stderr: str) -> str:
    """ssh's own error line, with what in the profile to check for it."""
    said = last_line(stderr) or "ssh failed and said nothing"
    lower = said.lower()
    if "permission denied" in lower or "too many authentication failures" in lower:
        hint = "check the node's user and cluster.identity, and that the key is in its authorized_keys"
    elif "host key" in lower:
        hint = "ssh to the node once by hand to check and accept its host key"
    else:
        hint = "check the node's host and ssh_port in the cluster profile"
    return f"{said} ({hint})"


def last_line(text: str) -> str:
    """The last line that says something, leaving out ssh's warnings (a known host added)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("Warning: Permanently added")]
    return cut((said or lines or [""])[-1], 300)
