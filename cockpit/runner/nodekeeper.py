"""``python -m cockpit.runner.nodekeeper``: one launch across nodes, kept as one local process.

The supervisor starts, registers, follows and stops this process as it would an engine on one
box (cockpit.runner.supervisor), and this process does the same for every node over SSH:

- starts each node's engine through the node's ``cockpit agent spawn`` (detached there, carrying
  this launch's token, so an SSH drop of the cockpit leaves it running and findable);
- writes every node's log lines to its own output, which is the launch log, prefixed by node;
- forwards a local port to the head's HTTP port (the head serves on its own 127.0.0.1);
- says in the log when a node has not joined after a minute (the engines wait 10-30 minutes);
- when one node's engine ends, says which and stops the others; on SIGTERM stops them all.

Its orders come as JSON in its environment (cockpit.runner.cluster.keeper_spec).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from cockpit.core.cluster import Cluster, NodeLaunch, cluster_from_json, node_launch_from_json
from cockpit.core.errors import CockpitError
from cockpit.runner.cluster import SPEC_ENV, node_prefix
from cockpit.runner.phases import PhaseTracker
from cockpit.runner.registry import TOKEN_ENV

POLL_S = 0.2
STOP_GRACE_S = 15.0  # each node's engine, between SIGTERM and SIGKILL
SPAWN_TIMEOUT_S = 60.0
FORWARD_REOPENS = 5  # an SSH forward that drops is opened again this many times before the launch ends
# The agent's last line for an engine that ended (cockpit.faces.agent): "exited with code N" or
# "was killed by signal SIGKILL".
_ENDED = re.compile(r"cockpit agent: the engine (exited with code -?\d+|was killed by signal \w+)")


class NodeKeeper:
    def __init__(self, spec: dict, token: str) -> None:
        self.cluster: Cluster = cluster_from_json(spec["cluster"])
        self.launches: list[NodeLaunch] = [node_launch_from_json(x) for x in spec["launches"]]
        self.engine = str(spec["engine"])
        self.experiment = int(spec["experiment"])
        self.local_port = int(spec["local_port"])
        self.port = int(spec["port"])
        self.env = {str(k): str(v) for k, v in dict(spec.get("agent_env", {})).items()}
        self.join_notice_s = float(spec.get("join_notice_s", 60.0))
        self.token = token
        self.pids: dict[int, int] = {}  # rank -> the keeper pid on that node (its process group)
        self.attempted: set[int] = set()  # ranks whose spawn was asked for (it may have run)
        self.logs: dict[int, str] = {}  # rank -> its log on the node
        self.read_bytes: dict[int, int] = {}  # rank -> bytes of its log written to ours
        self.dropped: set[int] = set()  # ranks whose log follower ended without the engine's end
        self.unreachable: set[int] = set()  # ranks whose node did not answer since their log dropped
        self.ended: dict[int, str] = {}  # rank -> how its engine ended
        # each node's lines read for the rendezvous, in the engine's words (cockpit.runner.phases)
        self.trackers = [
            PhaseTracker(self.experiment, self.engine, nodes=len(self.launches)) for _ in self.launches
        ]
        self.children: list[subprocess.Popen] = []
        self.out_lock = threading.Lock()
        self.stop_asked = threading.Event()
        self.stopped = False

    # -- output --------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        with self.out_lock:
            sys.stdout.write(f"cockpit: {text}\n")
            sys.stdout.flush()

    def all_joined(self) -> bool:
        """Whether a node said every rank is in (the head does, once the group holds the world)."""
        return any(tracker.all_joined for tracker in self.trackers)

    def node(self, rank: int):
        return self.cluster.nodes[rank]

    def label(self, rank: int) -> str:
        return f"node {rank + 1} ({self.launches[rank].host})"

    # -- start ---------------------------------------------------------------------------------

    def start_node(self, launch: NodeLaunch) -> None:
        from cockpit.system.ssh import run_agent

        # named by the launch's token: another cockpit's experiment of the same number never shares it
        log = f"nodes/exp{self.experiment}-{self.token[:8]}-node{launch.rank + 1}.log"
        self.attempted.add(launch.rank)  # from here an engine may run there: a stop looks for it
        answer = run_agent(
            self.cluster,
            self.node(launch.rank),
            ["spawn", "--log", log, "--token", self.token, "--env-stdin", "--", *launch.argv],
            env=self.env,
            timeout=SPAWN_TIMEOUT_S,
            stdin=json.dumps(dict(launch.env)),  # off the command lines: a profile's env may hold a token
            own_session=True,
        )
        if not isinstance(answer, dict) or "pid" not in answer:
            why = answer.get("error") if isinstance(answer, dict) else answer
            raise CockpitError(f"{self.label(launch.rank)}: the agent could not start the engine: {why}")
        self.pids[launch.rank] = int(answer["pid"])
        self.say(
            f"{self.label(launch.rank)} started the engine (pid {answer['pid']}, log {answer.get('log', log)})"
        )
        self.logs[launch.rank] = str(answer.get("log", log))
        self.follow_node(launch.rank)

    def follow_node(self, rank: int) -> None:
        """The node's log lines, prefixed, into ours (from where an earlier follower stopped);
        its engine's end, noted."""
        from cockpit.system.ssh import agent_argv

        argv = agent_argv(
            self.cluster,
            self.node(rank),
            [
                "tail",
                "--log",
                self.logs[rank],
                "--offset",
                str(self.read_bytes.get(rank, 0)),
                "--prefix",
                node_prefix(rank, self.launches[rank].host),
                "--pid",
                str(self.pids[rank]),
            ],
            env=self.env,
        )
        child = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.children.append(child)
        threading.Thread(target=self._read, args=(rank, child), daemon=True).start()

    def _read(self, rank: int, child: subprocess.Popen) -> None:
        assert child.stdout is not None
        prefix = len(node_prefix(rank, self.launches[rank].host).encode())
        for raw in child.stdout:
            self.read_bytes[rank] = self.read_bytes.get(rank, 0) + max(0, len(raw) - prefix)
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self.out_lock:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            ended = _ENDED.search(line)
            if ended:
                self.ended.setdefault(rank, ended.group(1))
            else:
                self.trackers[rank].feed(line)
        child.wait()
        if rank not in self.ended and not self.stop_asked.is_set():
            self.dropped.add(rank)  # SSH to the node dropped, or the follower died: asked about in run()

    def forward(self) -> subprocess.Popen:
        """The head's HTTP port, here: the head binds its own 127.0.0.1, as every server we start."""
        from cockpit.system.ssh import forward_argv

        argv = forward_argv(self.cluster, self.cluster.head, self.local_port, self.port)
        child = subprocess.Popen(argv, stdout=sys.stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.children.append(child)
        return child

    # -- run -----------------------------------------------------------------------------------

    def run(self) -> int:
        """Start every node, then watch them until one ends or a stop is asked for; every node
        that may run is stopped on the way out, whatever happened."""
        try:
            return self._run()
        except Exception as exc:  # never a traceback in the launch log, never a node left behind
            self.say(f"the launch failed: {type(exc).__name__}: {exc}")
            return 1
        finally:
            self.stop_nodes()

    def _run(self) -> int:
        try:
            for launch in self.launches:  # the head first: the others connect to it
                if self.stop_asked.is_set():
                    return 0
                self.start_node(launch)
            forward = self.forward()
        except CockpitError as exc:
            self.say(str(exc))
            return 1
        started = time.monotonic()
        noticed = False
        reopened = 0
        while not self.stop_asked.wait(POLL_S):
            if self.ended:
                rank = min(self.ended)
                others = "" if len(self.launches) == 1 else "; stopping the other nodes"
                self.say(f"{self.label(rank)}: the engine {self.ended[rank]}{others}")
                return 1
            for rank in sorted(self.dropped):
                self.dropped.discard(rank)
                self.reconnect(rank)
            if forward.poll() is not None:
                reopened += 1
                if reopened > FORWARD_REOPENS:
                    self.say(
                        f"the forward to the head's port {self.port} failed {reopened} times (ssh exited with code "
                        f"{forward.returncode}): check `ssh {self.cluster.head.label}`"
                    )
                    return 1
                self.say(f"the forward to the head's port {self.port} ended; opening it again")
                time.sleep(min(30.0, 2.0**reopened))
                forward = self.forward()
            if not noticed and not self.all_joined() and time.monotonic() - started > self.join_notice_s:
                noticed = True
                self.notice_not_joined()
        self.say("stopping every node")
        return 0

    def reconnect(self, rank: int) -> None:
        """A node's follower ended without its engine's last line: SSH dropped. The engine is
        asked about; one that still runs is followed again from where its log was left."""
        from cockpit.system.ssh import run_agent

        try:
            answer = run_agent(
                self.cluster,
                self.node(rank),
                ["status", "--pid", str(self.pids[rank]), "--token", self.token],
                env=self.env,
                timeout=30.0,
            )
        except CockpitError as exc:
            if rank not in self.unreachable:  # said once; the engine there may well still run
                self.unreachable.add(rank)
                self.say(
                    f"{self.label(rank)}: its log dropped and the node does not answer ({exc}); trying again"
                )
            time.sleep(2.0)
            self.dropped.add(rank)
            return
        self.unreachable.discard(rank)
        if isinstance(answer, dict) and answer.get("alive"):
            self.say(f"{self.label(rank)}: its log dropped; following it again")
            self.follow_node(rank)
        else:
            self.follow_node(rank)  # the engine ended: its follower reads the rest, its last line included

    def find(self, rank: int) -> list[int]:
        """The process groups on a node that carry this launch's token: an engine whose spawn
        was cut short before its pid came back."""
        from cockpit.system.ssh import run_agent

        answer = run_agent(
            self.cluster, self.node(rank), ["find", "--token", self.token], env=self.env, timeout=30.0
        )
        groups = answer.get("groups", []) if isinstance(answer, dict) else []
        return sorted({int(g) for g in groups})

    def notice_not_joined(self) -> None:
        """Said once, a minute in: which nodes have not entered the rendezvous, long before the
        engine's own timeout (10 to 30 minutes) says it in its words."""
        missing = [r for r, tracker in enumerate(self.trackers) if not tracker.ranks_joined]
        head = self.launches[0].host
        why = (
            f"{', '.join(self.label(r) for r in missing)} never said it entered"
            if missing and any(t.ranks_joined for t in self.trackers)
            else "the head has not heard from every rank"
        )
        self.say(
            f"ranks not joined after {self.join_notice_s:.0f} s at the head {head}: {why}; check that every "
            "node reaches the head (firewall, the interface in ifname) and runs the same arguments; the engine "
            "itself gives up only after its own timeout"
        )

    def stop_nodes(self) -> None:
        """Every node's engine, stopped by its agent (only a process group carrying our token)."""
        from cockpit.system.ssh import run_agent

        def stop(rank: int) -> None:
            try:
                pids = [self.pids[rank]] if rank in self.pids else self.find(rank)
                for pid in pids:
                    answer = run_agent(
                        self.cluster,
                        self.node(rank),
                        ["stop", "--pid", str(pid), "--token", self.token, "--grace", f"{STOP_GRACE_S:g}"],
                        env=self.env,
                        timeout=STOP_GRACE_S + 30.0,
                        own_session=True,
                    )
                    if isinstance(answer, dict) and not answer.get("stopped", True) and answer.get("why"):
                        self.say(f"{self.label(rank)}: {answer['why']}")
            except CockpitError as exc:
                self.say(f"{self.label(rank)}: could not be stopped: {exc}")

        if self.stopped:
            return
        self.stopped = True
        ranks = sorted(self.attempted)
        if ranks:
            with ThreadPoolExecutor(max_workers=min(16, len(ranks))) as pool:
                list(pool.map(stop, ranks))
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                child.kill()


def main(argv: Sequence[str] | None = None) -> int:
    raw = os.environ.pop(SPEC_ENV, None)  # the argv may carry a key: not passed on to ssh
    token = os.environ.get(TOKEN_ENV, "")
    if not raw or not token:
        print("cockpit: the node keeper is started by cockpit itself (no launch spec here)", file=sys.stderr)
        return 2
    try:
        keeper = NodeKeeper(json.loads(raw), token)
    except (CockpitError, ValueError, KeyError, TypeError) as exc:
        print(f"cockpit: cannot read the launch spec: {exc}", file=sys.stderr)
        return 2

    def asked(*_: object) -> None:
        keeper.stop_asked.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, asked)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main())
