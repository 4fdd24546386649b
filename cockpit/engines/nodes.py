"""A layout across a cluster's nodes: which ranks each node holds, and what it is told.

Both engines place a multi-node world the same way: the global ranks in order, each node a run of
``world / nodes`` consecutive ones (vLLM: ``local_world_size = world_size // nnodes`` in
vllm/engine/arg_utils.py, ranks ordered DP, PP, PCP, TP in vllm/distributed/parallel_state.py
initialize_model_parallel; SGLang: ``tp_size_per_node`` and ``pp_size_per_node`` in
sglang/srt/entrypoints/engine.py). So where a rank sits follows from the layout's sizes and the
node count alone; the adapters say the flags (engines/vllm/adapter.py, engines/sglang/adapter.py).
Pure: plain sizes in, words and argument lists out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.core.cluster import InterLink, Node
from cockpit.core.errors import CockpitError


def nodes_spanned(world: int, per_node: int) -> int:
    """The nodes a world of ``world`` ranks needs at ``per_node`` GPUs each (1: it fits in one)."""
    return max(1, math.ceil(world / max(1, per_node)))


def whole_nodes(gpus: int, per_node: int, nodes: int) -> bool:
    """Whether a layout of ``gpus`` is one a cluster lists: it fits in one node, or it fills whole
    nodes of the cluster (the engines spread ranks evenly, so a part-used node wastes the rest)."""
    return gpus <= per_node or (gpus % per_node == 0 and gpus // per_node <= nodes)


def span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


@dataclass(frozen=True)
class NodeShare:
    """What one node of a multi-node layout holds: its rank (0: the head), the local GPUs used,
    and the layout's ranks on them in words ("PP stage 0", "TP ranks 8-15 of 16")."""

    rank: int
    gpus: int
    holds: str

    def __str__(self) -> str:
        return f"node {self.rank + 1}: {self.holds}, GPUs {span(0, self.gpus - 1)}"

    def to_json(self) -> dict:
        return {"node": self.rank, "gpus": list(range(self.gpus)), "holds": self.holds}


def node_shares(tp: int, pp: int, dp: int, nodes: int, *, attn_dp: int = 1) -> list[NodeShare]:
    """Each node's run of ranks, said as the parallel groups it holds. ``dp``: DP ranks that are
    separate worlds of tp x pp (vLLM DP); ``attn_dp``: attention DP groups carved inside the TP
    group (SGLang's DP attention)."""
    world = tp * pp * dp
    local = world // nodes
    shares = []
    for node in range(nodes):
        ranks = range(node * local, (node + 1) * local)
        dps = sorted({r // (pp * tp) for r in ranks})
        pps = sorted({(r // tp) % pp for r in ranks})
        tps = sorted({r % tp for r in ranks})
        parts = []
        if dp > 1:
            parts.append(f"DP rank{'s' if len(dps) > 1 else ''} {span(dps[0], dps[-1])}")
        if pp > 1:
            parts.append(f"PP stage{'s' if len(pps) > 1 else ''} {span(pps[0], pps[-1])}")
        if len(tps) < tp:
            parts.append(f"TP ranks {span(tps[0], tps[-1])} of {tp}")
            if attn_dp > 1:
                groups = sorted({t // (tp // attn_dp) for t in tps})
                parts.append(
                    f"attention DP rank{'s' if len(groups) > 1 else ''} {span(groups[0], groups[-1])}"
                )
        if not parts:
            parts.append(f"TP{tp}")
        shares.append(NodeShare(node, local, ", ".join(parts)))
    return shares


def split_text(shares: Sequence[NodeShare]) -> str:
    """`node 1: PP stage 0, GPUs 0-7; node 2: PP stage 1, GPUs 0-7`."""
    return "; ".join(str(s) for s in shares)


def span_warnings(tp: int, per_node: int, nodes: int, link: InterLink | None) -> tuple[str, ...]:
    """What a layout across nodes pays that the engine will not say: a TP group wider than a node
    all-reduces over the network twice a layer (docs/performance.md#collectives)."""
    if nodes <= 1 or tp <= per_node:
        return ()
    over = link.name if link else "the network between nodes"
    spanned = nodes_spanned(tp, per_node)
    return (f"TP{tp} spans {spanned} nodes: every layer's all-reduce crosses {over}",)


def node_env(node: Node, host_ip_var: str = "") -> dict[str, str]:
    """The environment one node's engine needs on a network: the address the others reach it at
    (vLLM's VLLM_HOST_IP, vllm/envs.py), the interface NCCL and Gloo bind (NCCL_SOCKET_IFNAME,
    GLOO_SOCKET_IFNAME: https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html), then the
    node's own settings, which win."""
    env: dict[str, str] = {}
    if host_ip_var:
        env[host_ip_var] = node.reach
    if node.ifname:
        env["NCCL_SOCKET_IFNAME"] = node.ifname
        env["GLOO_SOCKET_IFNAME"] = node.ifname
    env.update(node.env)
    return env


def host_port(host: str, port: int) -> str:
    """`HOST:PORT`, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def check_cluster(nodes: Sequence[Node], used: int, per_node: int) -> None:
    """Enough nodes, each with the GPUs the layout's share needs."""
    if len(nodes) < used:
        raise CockpitError(
            f"the layout runs on {used} nodes and the cluster lists {len(nodes)}: add nodes or pick a smaller layout"
        )
    short = [n.host for n in nodes[:used] if n.gpus < per_node]
    if short:
        raise CockpitError(
            f"the layout needs {per_node} GPUs on each node and {', '.join(short)} has fewer: "
            "fix the node's gpus in the profile"
        )
