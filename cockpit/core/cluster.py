"""A cluster: several boxes of GPUs joined by a network, as a profile describes it.

Pure data. The planner sees a cluster as one ``Hardware`` of every node's GPUs with ``nodes``
and ``inter_link`` set (``Cluster.hardware``); what runs where is said by ``NodeLaunch``es that
the engine adapters build (``Engine.node_launches``) and the runner starts over SSH.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import Hardware, InterLink, check_gpu_count, hardware

DEFAULT_SSH_PORT = 22
MAX_NODES = 64
__all__ = ["InterLink", "Node", "Cluster", "Rendezvous", "NodeLaunch"]


@dataclass(frozen=True)
class Node:
    """One box of the cluster, reached over SSH at ``host`` (also the address the other nodes
    reach it at, unless ``address`` says another: the InfiniBand/RoCE interface's)."""

    host: str
    user: str = ""
    gpus: int = 8
    gpu: str = ""  # a GPU type key (cockpit.core.hardware.CATALOG); "" the cluster's
    memory_gib: float | None = None
    ssh_port: int = DEFAULT_SSH_PORT
    address: str = ""  # where the other nodes reach this one; "" the host
    ifname: str = ""  # the interface NCCL and Gloo use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)
    env: Mapping[str, str] = field(default_factory=dict)  # set for this node's engine only

    @property
    def reach(self) -> str:
        return self.address or self.host

    @property
    def label(self) -> str:
        return self.host if not self.user else f"{self.user}@{self.host}"


@dataclass(frozen=True)
class Cluster:
    """Nodes of one GPU type and count (the engines place ranks evenly: each node runs the same
    share), the network between them, and the cockpit command each node runs its agent with."""

    nodes: tuple[Node, ...]
    gpu: str
    link: InterLink = field(default_factory=InterLink)
    agent: tuple[str, ...] = ()  # the remote `cockpit` command; () the same Python as here
    identity: str = ""  # an SSH private key file; "" ssh's own choice
    ssh_options: tuple[str, ...] = ()  # extra `-o Key=Value` options, as written

    def __post_init__(self) -> None:
        if not self.nodes:
            raise CockpitError("a cluster needs at least one node: list them under cluster.nodes")
        if len(self.nodes) > MAX_NODES:
            raise CockpitError(f"a cluster of {len(self.nodes)} nodes is more than {MAX_NODES}")
        counts = {node.gpus for node in self.nodes}
        if len(counts) > 1:
            raise CockpitError(
                "every node needs the same GPU count (the engines place the same ranks on each): "
                f"the cluster has {', '.join(f'{n.host}: {n.gpus}' for n in self.nodes)}"
            )
        kinds = {node.gpu or self.gpu for node in self.nodes}
        if len(kinds) > 1:
            raise CockpitError(
                f"every node needs the same GPU type: the cluster has {', '.join(sorted(kinds))}"
            )
        hosts = [node.host for node in self.nodes]
        if len(set(hosts)) != len(hosts):
            raise CockpitError(f"a node is listed twice in the cluster: {', '.join(hosts)}")
        for node in self.nodes:
            check_gpu_count(node.gpus, f"the GPU count of node {node.host}")

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def gpus_per_node(self) -> int:
        return self.nodes[0].gpus

    @property
    def hardware(self) -> Hardware:
        """Every node's GPUs as one box for the planner, with the nodes and the link between them."""
        one = hardware(self.gpu, self.gpus_per_node, self.nodes[0].memory_gib)
        return Hardware(
            one.gpu, one.count * len(self.nodes), one.memory_gib, nodes=len(self.nodes), inter_link=self.link
        )

    def node_of(self, global_gpu: int) -> int:
        return global_gpu // self.gpus_per_node


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes meet: the head's address as the others reach it, and the ports chosen
    (and checked free on the head) for the engines' process group and data-parallel RPC."""

    head: str
    port: int  # vLLM --master-port / SGLang --dist-init-addr HEAD:PORT
    rpc_port: int  # vLLM --data-parallel-rpc-port


@dataclass(frozen=True)
class NodeLaunch:
    """What one node runs: its rank, the argv (global arguments identical on every node), the
    environment the network needs, the local GPUs it uses, and whether it serves HTTP."""

    rank: int
    host: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    gpus: tuple[int, ...]
    serves_http: bool


def cluster_to_json(cluster: Cluster) -> dict:
    """What a process started apart from the profile (the node keeper) needs to reach the nodes."""
    return {
        "gpu": cluster.gpu,
        "link": {
            "name": cluster.link.name,
            "bandwidth_gbs": cluster.link.bandwidth_gbs,
            "latency_us": cluster.link.latency_us,
        },
        "agent": list(cluster.agent),
        "identity": cluster.identity,
        "ssh_options": list(cluster.ssh_options),
        "nodes": [
            {
                "host": n.host,
                "user": n.user,
                "gpus": n.gpus,
                "gpu": n.gpu,
                "memory_gib": n.memory_gib,
                "ssh_port": n.ssh_port,
                "address": n.address,
                "ifname": n.ifname,
                "env": dict(n.env),
            }
            for n in cluster.nodes
        ],
    }


def cluster_from_json(data: Mapping) -> Cluster:
    try:
        return Cluster(
            nodes=tuple(
                Node(
                    host=str(n["host"]),
                    user=str(n.get("user", "")),
                    gpus=int(n.get("gpus", 8)),
                    gpu=str(n.get("gpu", "")),
                    memory_gib=n.get("memory_gib"),
                    ssh_port=int(n.get("ssh_port", DEFAULT_SSH_PORT)),
                    address=str(n.get("address", "")),
                    ifname=str(n.get("ifname", "")),
                    env={str(k): str(v) for k, v in dict(n.get("env", {})).items()},
                )
                for n in data["nodes"]
            ),
            gpu=str(data["gpu"]),
            link=InterLink(**data.get("link", {})),
            agent=tuple(str(w) for w in data.get("agent", ())),
            identity=str(data.get("identity", "")),
            ssh_options=tuple(str(o) for o in data.get("ssh_options", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CockpitError(f"cannot read the cluster's description ({exc}); launch it again") from None


def node_launch_to_json(launch: NodeLaunch) -> dict:
    return {
        "rank": launch.rank,
        "host": launch.host,
        "argv": list(launch.argv),
        "env": dict(launch.env),
        "gpus": list(launch.gpus),
        "serves_http": launch.serves_http,
    }


def node_launch_from_json(data: Mapping) -> NodeLaunch:
    return NodeLaunch(
        rank=int(data["rank"]),
        host=str(data["host"]),
        argv=tuple(str(a) for a in data["argv"]),
        env={str(k): str(v) for k, v in dict(data["env"]).items()},
        gpus=tuple(int(g) for g in data["gpus"]),
        serves_http=bool(data["serves_http"]),
    )
