"""A profile's ``cluster:``: the example in docs/clusters.md parses, the link presets give their
figures, and every bad value is refused in one line that names the key and what to write."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.cluster import InterLink
from cockpit.core.errors import CockpitError
from cockpit.store.profile import LINK_PRESETS, load_profile, parse_profile

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "p.yaml"
BASE: dict[str, Any] = {
    "model": "qwen3-30b-a3b-fp8",
    "engine": "vllm",
    "cluster": {"gpu": "h200", "nodes": [{"host": "gpu-a"}, {"host": "gpu-b"}]},
}


def _docs_example() -> str:
    """The first YAML block of docs/clusters.md: the profile the page explains."""
    text = (ROOT / "docs" / "clusters.md").read_text()
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, "docs/clusters.md has no ```yaml block"
    return match.group(1)


def _profile(**cluster):
    data = copy.deepcopy(BASE)
    data["cluster"].update(cluster)
    return parse_profile(data, source=SOURCE)


def _refused(data) -> str:
    with pytest.raises(CockpitError) as info:
        parse_profile(data, source=SOURCE)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{SOURCE}: "), message
    assert message.count(SOURCE) == 1, message  # the file named once, not once per layer
    return message


def _refused_cluster(**cluster) -> str:
    data = copy.deepcopy(BASE)
    data["cluster"].update(cluster)
    return _refused(data)


def test_the_docs_example_loads_as_a_profile_file(tmp_path):
    path = tmp_path / "two-nodes.yaml"
    path.write_text(_docs_example())
    profile = load_profile(str(path))
    cluster = profile.cluster
    assert cluster is not None
    head, other = cluster.nodes
    assert (head.host, head.user, head.ssh_port, head.address, head.ifname) == (
        "gpu-a",
        "me",
        22,
        "10.0.0.1",
        "ib0",
    )
    assert head.reach == "10.0.0.1" and other.reach == "gpu-b"
    assert dict(head.env) == {"NCCL_IB_HCA": "mlx5"} and dict(other.env) == {}
    assert head.gpus == other.gpus == 8
    assert cluster.link == InterLink("InfiniBand NDR", 50.0, 10.0)  # 400 Gb/s is 50 GB/s
    assert cluster.agent == ("/opt/venv/bin/cockpit",)
    assert cluster.identity == str(Path("~/.ssh/id_ed25519").expanduser())
    assert cluster.ssh_options == ("StrictHostKeyChecking=accept-new",)
    box = profile.box
    assert (box.count, box.nodes, box.gpus_per_node, box.gpu.key) == (16, 2, 8, "h200")
    assert box.inter_link == cluster.link
    assert (profile.gpu, profile.gpus) == ("h200", 8)  # one node's


def test_a_profile_without_a_cluster_is_one_box():
    data = {k: v for k, v in BASE.items() if k != "cluster"}
    profile = parse_profile(data, source=SOURCE)
    assert profile.cluster is None and profile.box.nodes == 1 and profile.box.inter_link is None


def test_one_node_is_a_cluster_too():
    profile = _profile(nodes=[{"host": "gpu-a"}])
    assert profile.box.nodes == 1 and profile.box.count == 8


def test_defaults_and_shorthands():
    profile = _profile(nodes=["gpu-a", {"host": "10.0.0.2", "user": "ubuntu"}], gpus_per_node=4)
    a, b = profile.cluster.nodes
    assert (a.host, a.user, a.ssh_port, a.gpus, a.address, a.ifname) == ("gpu-a", "", 22, 4, "", "")
    assert (b.host, b.user) == ("10.0.0.2", "ubuntu")
    assert profile.cluster.link == InterLink()  # no link: NDR's figures
    assert profile.cluster.agent == () and profile.cluster.identity == ""
    assert profile.box.count == 8


def test_hardware_beside_the_cluster_says_one_node():
    data = copy.deepcopy(BASE)
    data["hardware"] = {"gpu": "H200", "count": 4, "memory_gib": 120}
    profile = parse_profile(data, source=SOURCE)  # the count is the nodes' default
    box = profile.box
    assert (box.count, box.gpus_per_node, box.memory_gib) == (8, 4, 120.0)
    assert profile.gpu_mem_gib == 120.0


@pytest.mark.parametrize("key", sorted(LINK_PRESETS))
def test_every_link_preset_gives_its_per_gpu_figures(key):
    name, gbps, latency, shared = LINK_PRESETS[key]
    link = _profile(link=key, gpus_per_node=8).cluster.link
    assert link.name == name and link.latency_us == latency
    assert link.bandwidth_gbs == pytest.approx(gbps / 8 / (8 if shared else 1))


def test_the_presets_figures():
    assert _profile(link="ndr").cluster.link == InterLink("InfiniBand NDR", 50.0, 10.0)
    assert _profile(link="HDR").cluster.link.bandwidth_gbs == 25.0
    assert _profile(link="roce-400").cluster.link.bandwidth_gbs == 50.0
    assert _profile(link="roce-200").cluster.link.bandwidth_gbs == 25.0
    tcp = _profile(link="tcp-100", gpus_per_node=4).cluster.link  # one NIC shared by the node's GPUs
    assert tcp.bandwidth_gbs == pytest.approx(100 / 8 / 4) and tcp.latency_us > 15


def test_a_link_given_by_its_figures():
    link = _profile(link={"bandwidth_gbps": 200}).cluster.link
    assert link == InterLink("network", 25.0, InterLink.latency_us)
    assert "200 Gb/s per GPU" in str(link)


def test_the_cluster_is_kept_through_the_planner_box():
    profile = _profile(nodes=[{"host": f"n{i}"} for i in range(4)], link="hdr")
    assert str(profile.box).startswith("4 nodes x 8 x ")
    assert profile.cluster.node_of(9) == 1


BAD_CLUSTERS = [
    # (what the cluster section is changed to, what the one line must say)
    ({"nodes": None}, "cluster.nodes must list the nodes"),
    ({"nodes": []}, "cluster.nodes must list the nodes"),
    ({"nodes": "gpu-a"}, "cluster.nodes must list the nodes"),
    ({"nodes": [7]}, "cluster.nodes[0] must be a mapping like {host: gpu-a"),
    ({"nodes": [{"user": "me"}]}, "cluster.nodes[0] needs 'host:'"),
    ({"nodes": [{"host": "a", "port": 22}]}, "unknown key 'port' in cluster.nodes[0]: allowed keys are"),
    ({"nodes": [{"host": "-oProxyCommand=sh"}]}, "cluster.nodes[0].host must be a host name or IP address"),
    ({"nodes": [{"host": "me@gpu-a"}]}, "(got 'me@gpu-a'): put the user in 'user:'"),
    ({"nodes": [{"host": "gpu a"}]}, "cluster.nodes[0].host must be a host name"),
    ({"nodes": [{"host": 10}]}, "(got 10): quote it in the YAML"),
    ({"nodes": [{"host": "a", "address": "-x"}]}, "cluster.nodes[0].address must be a host name"),
    ({"nodes": [{"host": "a", "user": "-l"}]}, "cluster.nodes[0].user must be a login name"),
    ({"nodes": [{"host": "a", "user": "me@x"}]}, "cluster.nodes[0].user must be a login name"),
    (
        {"nodes": [{"host": "a", "ssh_port": 0}]},
        "cluster.nodes[0].ssh_port must be 1-65535 (got 0): the port the node's sshd listens on",
    ),
    ({"nodes": [{"host": "a", "ssh_port": 70000}]}, "cluster.nodes[0].ssh_port must be 1-65535"),
    ({"nodes": [{"host": "a", "ssh_port": "ssh"}]}, "cluster.nodes[0].ssh_port must be 1-65535"),
    ({"nodes": [{"host": "a", "gpus": 0}]}, "cluster.nodes[0].gpus"),
    ({"nodes": [{"host": "a", "gpus": "8"}]}, "cluster.nodes[0].gpus has the wrong type"),
    (
        {"nodes": [{"host": "a", "ifname": "ib0 ib1"}]},
        "cluster.nodes[0].ifname must be one network interface",
    ),
    ({"nodes": [{"host": "a", "ifname": "a" * 16}]}, "at most 15 characters"),
    ({"nodes": [{"host": "a", "env": ["X=1"]}]}, "cluster.nodes[0].env must be a mapping like"),
    ({"nodes": [{"host": "a", "env": {"X": None}}]}, "cluster.nodes[0].env X must be a string"),
    ({"nodes": [{"host": "a", "env": {"A=B": "1"}}]}, "cluster.nodes[0].env name 'A=B' is not a variable"),
    ({"nodes": [{"host": "a", "gpu": "h100"}]}, "cluster.nodes[0].gpu 'h100' is not the cluster's 'h200'"),
    ({"nodes": [{"host": "a"}, {"host": "a"}]}, "cluster.nodes[1] repeats a, already cluster.nodes[0]"),
    (
        {"nodes": [{"host": "a", "address": "10.0.0.1"}, {"host": "b", "address": "10.0.0.1"}]},
        "cluster.nodes[1] repeats 10.0.0.1",
    ),
    ({"nodes": [{"host": "a", "gpus": 8}, {"host": "b", "gpus": 4}]}, "every node needs the same GPU count"),
    ({"nodes": [{"host": f"n{i}"} for i in range(65)]}, "lists 65 nodes, at most 64"),
    (
        {"nodes": [{"host": f"n{i}"} for i in range(33)], "gpus_per_node": 16},
        "the cluster has 528 GPUs (33 nodes x 16), at most 512: list fewer nodes",
    ),
    ({"gpu": None}, "the cluster needs 'gpu:'"),
    ({"gpu": "tpu-v9"}, "unknown GPU type 'tpu-v9'"),
    ({"gpus_per_node": 0}, "cluster.gpus_per_node"),
    ({"gpus_per_node": True}, "cluster.gpus_per_node has the wrong type"),
    ({"nodes_": []}, "unknown key 'nodes_' in cluster: allowed keys are agent, gpu, gpus_per_node"),
    ({"link": "ethernet"}, "cluster.link 'ethernet' is not a known network: give one of ndr, hdr"),
    ({"link": ["ndr"]}, "cluster.link must be one of ndr, hdr"),
    ({"link": {"name": "IB"}}, "cluster.link needs bandwidth_gbps"),
    ({"link": {"bandwidth_gbps": 0}}, "cluster.link.bandwidth_gbps must be a number above 0"),
    ({"link": {"bandwidth_gbps": True}}, "cluster.link.bandwidth_gbps must be a number above 0"),
    ({"link": {"bandwidth_gbps": 1e9}}, "at most 3,200 Gb/s"),
    ({"link": {"bandwidth_gbps": 400, "latency_us": -1}}, "cluster.link.latency_us must be a number above 0"),
    ({"link": {"bandwidth_gbps": 400, "gbs": 50}}, "unknown key 'gbs' in cluster.link"),
    ({"agent": "/opt/venv/bin/cockpit"}, "cluster.agent must be a list of words"),
    ({"agent": [None]}, "cluster.agent[0] must be a string"),
    ({"identity": 5}, "cluster.identity must be the path of an SSH private key"),
    ({"identity": "-i"}, "cluster.identity must be the path of an SSH private key"),
    ({"ssh_options": "StrictHostKeyChecking=no"}, "cluster.ssh_options must be a list of words"),
    ({"ssh_options": ["StrictHostKeyChecking no"]}, "cluster.ssh_options[0] must be an ssh -o option"),
    ({"ssh_options": ["-oProxyCommand=sh"]}, "cluster.ssh_options[0] must be an ssh -o option"),
]


@pytest.mark.parametrize(("change", "says"), BAD_CLUSTERS, ids=[says for _, says in BAD_CLUSTERS])
def test_every_bad_cluster_value_is_one_line_that_says_what_to_write(change, says):
    message = _refused_cluster(**change)
    assert says in message, message


def test_the_cluster_section_must_be_a_mapping():
    message = _refused({**BASE, "cluster": ["gpu-a", "gpu-b"]})
    assert "cluster must be a mapping like cluster: {gpu: h200" in message


@pytest.mark.parametrize(
    ("hardware", "says"),
    [
        ({"gpu": "h100"}, "hardware.gpu 'h100' contradicts cluster.gpu 'h200': remove hardware.gpu"),
        ({"gpu": "h200", "count": 4}, "hardware.count 4 contradicts the cluster's 8 GPUs per node"),
        ({"count": "8"}, "hardware.count has the wrong type"),
    ],
)
def test_hardware_that_contradicts_the_cluster_is_refused(hardware, says):
    data = copy.deepcopy(BASE)
    data["cluster"]["gpus_per_node"] = 8
    data["hardware"] = hardware
    assert says in _refused(data)


def test_per_node_gpu_selection_is_refused():
    data = {**copy.deepcopy(BASE), "server": {"gpus": [0, 1, 2, 3]}}
    message = _refused(data)
    assert "server.gpus" in message and "per-node selection is not supported with cluster" in message


def test_a_node_may_repeat_the_clusters_gpu_type():
    profile = _profile(nodes=[{"host": "a", "gpu": "H200"}, {"host": "b", "gpu": "h200"}])
    assert profile.box.gpu.key == "h200"
