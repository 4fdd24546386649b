"""A real OpenSSH server for the tests, as the current user, listening on 127.0.0.2 and 127.0.0.3
(and .4 when asked): two or three "nodes" on one machine, reached with the real `ssh` client.

Everything it needs lives in a temporary folder: its host key, a client key the server accepts,
the known_hosts the client checks it with, its config and its log. Tests import the ``sshd``
fixture from here (`from sshd import sshd`); they skip where /usr/sbin/sshd is missing, unless
COCKPIT_SSHD_REQUIRED=1 (set by CI after installing openssh-server) makes that a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from cockpit.core.cluster import Cluster, Node

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without its privilege separation folder
READY_TIMEOUT_S = 30.0
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


class Sshd:
    """One sshd in the foreground (``-D -e``), its keys and config in a temporary folder."""

    def __init__(self, nodes: int = 2) -> None:
        self.hosts = HOSTS[:nodes]
        self.folder = Path(tempfile.mkdtemp(prefix="cockpit-sshd-"))
        self.identity = str(self.folder / "client_key")
        self.known_hosts = self.folder / "known_hosts"
        self.log = self.folder / "sshd.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return SSHD.is_file() and all(shutil.which(tool) for tool in ("ssh", "ssh-keygen"))

    @property
    def ssh_options(self) -> tuple[str, ...]:
        """The client's `-o` options for this server (Cluster.ssh_options)."""
        return (
            "StrictHostKeyChecking=accept-new",
            f"UserKnownHostsFile={self.known_hosts}",
            "GlobalKnownHostsFile=/dev/null",
            "IdentitiesOnly=yes",
            "LogLevel=ERROR",
        )

    @property
    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def node(self, host: str, gpus: int = 8) -> Node:
        return Node(host=host, user=self.user, gpus=gpus, ssh_port=self.port)

    def cluster(self, hosts: tuple[str, ...] | None = None, gpus: int = 8, gpu: str = "h200") -> Cluster:
        """A cluster of this server's addresses, reached with its key and known hosts."""
        return Cluster(
            nodes=tuple(self.node(host, gpus) for host in hosts or self.hosts),
            gpu=gpu,
            identity=self.identity,
            ssh_options=self.ssh_options,
        )

    def start(self) -> Sshd:
        if not PRIVSEP_DIR.is_dir():
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        self._keys()
        for _ in range(5):  # another process may take the port between the pick and sshd's bind
            self.port = _free_port(self.hosts)
            self._write_config()
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [str(SSHD), "-D", "-e", "-f", str(self.folder / "sshd_config")],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            if self._wait_ready():
                return self
            self.stop(keep_folder=True)
        raise RuntimeError(f"sshd did not become ready; its log says: {self.log.read_text()[-2000:]}")

    def _keys(self) -> None:
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"cockpit-test-{name}", "-f", name],
                cwd=self.folder,
                check=True,
                stdin=subprocess.DEVNULL,
            )
        shutil.copy(self.folder / "client_key.pub", self.folder / "authorized_keys")
        os.chmod(self.folder / "authorized_keys", 0o600)

    def _write_config(self) -> None:
        host_key = (self.folder / "host_key.pub").read_text().split()
        self.known_hosts.write_text(
            "".join(f"[{host}]:{self.port} {host_key[0]} {host_key[1]}\n" for host in self.hosts)
        )
        lines = [
            f"Port {self.port}",
            *(f"ListenAddress {host}" for host in self.hosts),
            f"HostKey {self.folder / 'host_key'}",
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}",
            f"PidFile {self.folder / 'sshd.pid'}",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxSessions 200",  # every agent stream and log follower is a session on one connection
            "MaxStartups 100:30:200",
            "LogLevel INFO",
        ]
        (self.folder / "sshd_config").write_text("\n".join(lines) + "\n")

    def _client(self, host: str) -> list[str]:
        argv = ["ssh", "-p", str(self.port), "-i", self.identity, "-o", "BatchMode=yes"]
        for option in self.ssh_options:
            argv += ["-o", option]
        return [*argv, f"{self.user}@{host}", "true"]

    def _wait_ready(self) -> bool:
        """Whether a real `ssh ... true` gets through to every address before the deadline."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = list(self.hosts)
        while pending and time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            with contextlib.suppress(subprocess.TimeoutExpired):
                done = subprocess.run(
                    self._client(pending[0]), capture_output=True, timeout=15, stdin=subprocess.DEVNULL
                )
                if done.returncode == 0:
                    pending.pop(0)
                    continue
            time.sleep(0.1)
        return not pending

    def stop(self, keep_folder: bool = False) -> None:
        """End the server and the connections it forked (they outlive the listener otherwise,
        and so would the clients' shared connections to them)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(self.process.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.terminate()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if not keep_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def _free_port(hosts: tuple[str, ...]) -> int:
    """A port free on every one of ``hosts`` now."""
    while True:
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = s.getsockname()[1]
        if all(_bindable(host, port) for host in hosts[1:]):
            return port


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _needed() -> None:
    """Skip (or fail, where CI installed sshd and says so) when there is no sshd to run."""
    if not Sshd.available():
        why = "no OpenSSH server here (/usr/sbin/sshd): apt-get install openssh-server"
        if os.environ.get("COCKPIT_SSHD_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="session")
def sshd():
    """A real sshd on 127.0.0.2 and 127.0.0.3, for the whole session (one per xdist worker)."""
    _needed()
    server = Sshd(nodes=2).start()
    yield server
    server.stop()
