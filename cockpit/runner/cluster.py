"""Before a launch across nodes: reach every node, check it, choose the meeting point.

Each check runs the node's ``cockpit agent`` over SSH (cockpit.system.ssh) and ends in a
``Diagnosis`` in the words of what failed: SSH's own error for a node that cannot be reached, the
versions of an engine that differ between nodes, a port taken on the head. What passes becomes
the node keeper's spec (cockpit.runner.nodekeeper), which starts the nodes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cockpit.core.cluster import Cluster, NodeLaunch, Rendezvous, cluster_to_json, node_launch_to_json
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware
from cockpit.runner.events import Diagnosis

NODE_UNREACHABLE = "node-unreachable"
VERSIONS_DIFFER = "engine-versions-differ"
NODE_PORT_IN_USE = "node-port-in-use"
NODE_AGENT = "node-agent"
JOIN_NOTICE_ENV = "COCKPIT_JOIN_NOTICE_S"
SPEC_ENV = "COCKPIT_CLUSTER_SPEC"
AGENT_TIMEOUT_S = 30.0
# Seconds a node may go without saying it joined before cockpit says so in the launch log (the
# engines themselves wait 10 to 30 minutes before they time out).
JOIN_NOTICE_S = 60.0
# What a simulated cluster's nodes need from this process's environment (the simulated box, the
# state folder, the simulator's pacing): set on each node's agent, never on a real cluster's.
_SIM_PASSED = ("COCKPIT_STATE_DIR", "COCKPIT_SIM_", "XDG_RUNTIME_DIR")


@dataclass(frozen=True)
class ClusterPlan:
    """What passed the checks: the meeting point and the versions each node runs."""

    rendezvous: Rendezvous
    versions: tuple[str | None, ...]


def agent_env(simulated: bool) -> dict[str, str]:
    """The agent's own environment on every node: on a simulated cluster, what the simulated
    nodes share with this process (they are this machine); nothing on a real one."""
    if not simulated:
        return {}
    return {k: v for k, v in os.environ.items() if k.startswith(_SIM_PASSED)}


def simulated_node_env(host: str, hardware: Hardware) -> dict[str, str]:
    """What makes a simulated node's engine and agent read that node's own simulated box
    (cockpit.sim.box: COCKPIT_SIM_NODE names it, COCKPIT_SIM_GPUS sizes it)."""
    return {"COCKPIT_SIM_NODE": host, "COCKPIT_SIM_GPUS": f"{hardware.gpus_per_node}x{hardware.gpu.key}"}


def _each(cluster: Cluster, ask) -> list:
    """``ask(node)`` for every node at once (SSH round trips add up on a big cluster)."""
    with ThreadPoolExecutor(max_workers=min(16, len(cluster.nodes))) as pool:
        return list(pool.map(ask, cluster.nodes))


def preflight(
    cluster: Cluster,
    engine: str,
    command: Sequence[str],
    port: int,
    *,
    simulated: bool,
) -> ClusterPlan | Diagnosis:
    """Reach every node, compare their engine versions, choose the head's ports and check the
    HTTP port free there. The first problem comes back as a Diagnosis; nothing is started."""
    from cockpit import __version__
    from cockpit.system.ssh import Unreachable, run_agent

    env = agent_env(simulated)

    def version(node) -> dict | CockpitError:
        try:
            # a simulated node's own settings reach its agent too (the version it simulates)
            own = {k: v for k, v in node.env.items() if k.startswith("COCKPIT_SIM_")} if simulated else {}
            answer = run_agent(
                cluster,
                node,
                ["version", "--engine", engine, "--command", *command],
                env={**env, **own},
                timeout=AGENT_TIMEOUT_S,
            )
            return answer if isinstance(answer, dict) else {}
        except CockpitError as exc:
            return exc

    answers = _each(cluster, version)
    for node, answer in zip(cluster.nodes, answers, strict=True):
        if isinstance(answer, Unreachable):
            return Diagnosis(
                NODE_UNREACHABLE,
                f"{answer}; nothing launched",
                f"check that `ssh {node.label}` works without a password, then the node's host and ssh_port "
                "in the cluster profile",
            )
        if isinstance(answer, CockpitError):
            return Diagnosis(
                NODE_AGENT,
                f"{answer}; nothing launched",
                "install the same cockpit on every node, or set cluster.agent to its command there",
            )
    cockpits = {a.get("cockpit") for a in answers}
    if cockpits != {__version__}:
        said = ", ".join(
            f"{n.host}: {a.get('cockpit') or 'unknown'}" for n, a in zip(cluster.nodes, answers, strict=True)
        )
        return Diagnosis(
            NODE_AGENT,
            f"the nodes run another cockpit than this one ({__version__}; {said}); nothing launched",
            "install the same cockpit on every node (its agent starts and stops the engines there)",
        )
    versions = tuple(a.get("version") for a in answers)
    if len(set(versions)) > 1:
        said = ", ".join(
            f"{n.host}: {v or 'not installed'}" for n, v in zip(cluster.nodes, versions, strict=True)
        )
        return Diagnosis(
            VERSIONS_DIFFER,
            f"the nodes run different {engine} versions ({said}); nothing launched",
            f"install the same {engine} version on every node (the nodes must agree on every argument and kernel)",
        )
    head = cluster.head
    try:
        busy = run_agent(
            cluster, head, ["ports", "--host", "127.0.0.1", str(port)], env=env, timeout=AGENT_TIMEOUT_S
        )
        held = (busy or {}).get("busy", {}) if isinstance(busy, dict) else {}
        if held:
            who = next(iter(held.values()))
            return Diagnosis(
                NODE_PORT_IN_USE,
                f"port {port} is already in use on the head node {head.host} by {who}; nothing launched",
                "stop that server or set server.port in the profile",
            )
        answer = run_agent(
            cluster,
            head,
            ["free-port", "--host", head.reach, "--count", "2"],
            env=env,
            timeout=AGENT_TIMEOUT_S,
        )
        ports = [int(p) for p in answer["ports"]]
    except (CockpitError, KeyError, TypeError, ValueError) as exc:
        return Diagnosis(
            NODE_UNREACHABLE,
            f"the head node {head.host} did not answer: {exc}; nothing launched",
            f"check `ssh {head.label}` and that cockpit runs there",
        )
    return ClusterPlan(Rendezvous(head.reach, ports[0], ports[1]), versions)


def join_notice(default: float) -> float:
    """Seconds before a node that has not joined is said: COCKPIT_JOIN_NOTICE_S, else ``default``."""
    raw = os.environ.get(JOIN_NOTICE_ENV, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86400:
        raise CockpitError(
            f"{JOIN_NOTICE_ENV}={raw[:20]!r} is not a number of seconds: unset it or give one, like 60"
        )
    return seconds


def keeper_argv() -> list[str]:
    """The local process that starts, follows and stops the nodes (cockpit.runner.nodekeeper)."""
    return [sys.executable, "-m", "cockpit.runner.nodekeeper"]


def keeper_spec(
    *,
    cluster: Cluster,
    launches: Sequence[NodeLaunch],
    engine: str,
    experiment: int,
    local_port: int,
    port: int,
    simulated: bool,
    join_notice_s: float = JOIN_NOTICE_S,
) -> str:
    """The keeper's orders, as JSON in its environment (never on its command line, where `ps`
    shows it: the argv may carry an API key)."""
    return json.dumps(
        {
            "cluster": cluster_to_json(cluster),
            "launches": [node_launch_to_json(x) for x in launches],
            "engine": engine,
            "experiment": experiment,
            "local_port": local_port,
            "port": port,
            "agent_env": agent_env(simulated),
            "join_notice_s": join_notice(join_notice_s),
        }
    )


def node_prefix(rank: int, host: str) -> str:
    """How a node's lines begin in the one launch log."""
    return f"[node {rank + 1} {host}] "


def describe_nodes(launches: Sequence[NodeLaunch]) -> Mapping[str, str]:
    """What each node runs, for the Launching event's environment view."""
    return {f"node {x.rank + 1}": x.host for x in launches}
