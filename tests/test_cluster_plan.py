"""Layouts across a cluster's nodes: each node's argv in the engines' own flags, the planner's
rules in the engines' words, the node split in `plan`, and what the network costs the speed model."""

from __future__ import annotations

import pytest
from conftest import MODELS

from cockpit.core.cluster import Cluster, InterLink, Node, Rendezvous
from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.perfmodel import for_verdict, with_prediction
from cockpit.core.planner import FAILS, FITS, Setup, plan_all, plan_layout
from cockpit.engines import get_engine
from cockpit.engines.arguments import check_args
from cockpit.reports.plan import plan_table
from cockpit.store.modelfiles import read_config

RENDEZVOUS = Rendezvous("10.0.0.1", 29501, 29550)
# What differs from node to node; everything else is said alike on every node.
OWN = {"--node-rank", "--data-parallel-size-local", "--data-parallel-start-rank"}


@pytest.fixture(scope="module")
def deepseek():
    return read_config(MODELS / "deepseek-v3.json")


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster(
        nodes=(
            Node("gpu-a", address="10.0.0.1", ifname="ib0"),
            Node("gpu-b", address="10.0.0.2", env={"NCCL_IB_HCA": "mlx5"}),
        ),
        gpu="h200",
    )


def setup(model, cluster: Cluster, engine: str) -> Setup:
    return Setup(model, cluster.hardware, get_engine(engine), model_path="/models/dsv3", port=8000)


def launches(model, cluster: Cluster, engine: str, layout: str, extra=()):
    s = setup(model, cluster, engine)
    verdict = plan_layout(s, layout)
    assert verdict.verdict == FITS and verdict.placement is not None, verdict
    return s.engine.node_launches(
        verdict.placement, s.hardware, cluster.nodes, RENDEZVOUS, "/models/dsv3", 8000, extra
    )


def shared(argv) -> list[str]:
    """The argv less what is a node's own (its rank, local DP size, start rank, --headless)."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in OWN:
            skip = True
        elif word != "--headless":
            out.append(word)
    return out


def value(argv, flag: str) -> str | None:
    argv = list(argv)
    return argv[argv.index(flag) + 1] if flag in argv else None


def engine_args(engine, argv) -> list[str]:
    """The argv after the launcher words and the model, as the option tables read it."""
    words = list(argv)
    start = len(engine.default_command) + len(engine.model_args("/models/dsv3", engine.default_command))
    return words[start:]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_tp8_pp2_gives_each_node_the_same_global_args(deepseek, cluster, engine):
    nodes = launches(deepseek, cluster, engine, "tp8 pp2")
    head, other = nodes
    assert shared(head.argv) == shared(other.argv)
    assert [value(n.argv, "--node-rank") for n in nodes] == ["0", "1"]
    assert value(head.argv, "--nnodes") == "2"
    assert (head.serves_http, other.serves_http) == (True, False)
    assert head.gpus == other.gpus == tuple(range(8))
    assert value(head.argv, "--host") == "127.0.0.1" and value(head.argv, "--port") == "8000"
    table = get_engine(engine).options
    for node in nodes:  # the engines' own option tables, read from their parsers
        check_args(table, engine_args(get_engine(engine), node.argv), strict=True)
    if engine == "vllm":
        assert value(head.argv, "--master-addr") == "10.0.0.1"
        assert value(head.argv, "--master-port") == "29501"
        assert "--headless" not in head.argv and "--headless" in other.argv
        assert head.env["VLLM_HOST_IP"] == "10.0.0.1" and other.env["VLLM_HOST_IP"] == "10.0.0.2"
    else:
        assert value(head.argv, "--dist-init-addr") == "10.0.0.1:29501"
        assert "VLLM_HOST_IP" not in head.env
    assert head.env["NCCL_SOCKET_IFNAME"] == head.env["GLOO_SOCKET_IFNAME"] == "ib0"
    assert "NCCL_SOCKET_IFNAME" not in other.env and other.env["NCCL_IB_HCA"] == "mlx5"


def test_vllm_dp_across_nodes_start_ranks_add_up(deepseek):
    four = Cluster(nodes=tuple(Node(f"n{i}", address=f"10.0.0.{i + 1}") for i in range(4)), gpu="h200")
    nodes = launches(deepseek, four, "vllm", "tp4 dp8 ep")
    assert len(nodes) == 4
    locals_ = [int(value(n.argv, "--data-parallel-size-local")) for n in nodes]
    assert locals_ == [2, 2, 2, 2]
    # The head says no start rank (one would turn on the hybrid load balancer); the others the
    # sum of the earlier nodes' local sizes.
    assert value(nodes[0].argv, "--data-parallel-start-rank") is None
    starts = [int(value(n.argv, "--data-parallel-start-rank")) for n in nodes[1:]]
    assert starts == [sum(locals_[:i]) for i in range(1, 4)]
    assert sum(locals_) == int(value(nodes[0].argv, "--data-parallel-size"))
    assert len({tuple(shared(n.argv)) for n in nodes}) == 1
    assert all(value(n.argv, "--data-parallel-address") == "10.0.0.1" for n in nodes)
    assert all(value(n.argv, "--data-parallel-rpc-port") == "29550" for n in nodes)
    assert [("--headless" in n.argv) for n in nodes] == [False, True, True, True]
    assert all("--nnodes" not in n.argv for n in nodes)
    for n in nodes:
        check_args(get_engine("vllm").options, engine_args(get_engine("vllm"), n.argv), strict=True)
        assert n.gpus == tuple(range(8))


def test_vllm_dp_ranks_wider_than_a_node_use_nnodes(deepseek):
    four = Cluster(nodes=tuple(Node(f"n{i}") for i in range(4)), gpu="h200")
    nodes = launches(deepseek, four, "vllm", "tp16 dp2 ep")
    assert [value(n.argv, "--node-rank") for n in nodes] == ["0", "1", "2", "3"]
    assert all(
        value(n.argv, "--nnodes") == "4" and value(n.argv, "--data-parallel-size") == "2" for n in nodes
    )
    assert len({tuple(shared(n.argv)) for n in nodes}) == 1


def test_a_layout_in_one_node_runs_on_the_head_with_todays_argv(deepseek, cluster):
    s = setup(deepseek, cluster, "vllm")
    verdict = plan_layout(s, "tp8")
    (only,) = s.engine.node_launches(
        verdict.placement, s.hardware, cluster.nodes, RENDEZVOUS, "/models/dsv3", 8000
    )
    assert only.argv == verdict.argv and only.serves_http and only.host == "gpu-a"
    assert verdict.nodes == () and "nodes" not in verdict.to_json()


def test_tp16_across_nodes_is_warned(deepseek, cluster):
    for engine in ("vllm", "sglang"):
        v = plan_layout(setup(deepseek, cluster, engine), "tp16")
        assert v.verdict == FITS
        assert "TP16 spans 2 nodes: every layer's all-reduce crosses InfiniBand NDR" in v.warnings


def test_a_world_that_does_not_spread_over_the_nodes_is_refused_in_engine_words(deepseek):
    three = Cluster(nodes=tuple(Node(f"n{i}") for i in range(3)), gpu="h200")
    vllm = plan_layout(setup(deepseek, three, "vllm"), "tp4 pp5")  # 20 ranks need 3 nodes
    assert vllm.verdict == FAILS
    assert vllm.reasons[0].rule == "nnodes"
    assert "`--nnodes 3` must evenly divide the total world size (20)" in vllm.reasons[0].message
    sglang = plan_layout(setup(deepseek, three, "sglang"), "tp4 pp5")
    assert sglang.verdict == FAILS
    assert any(
        r.message == "AssertionError: tp_size must be divisible by number of nodes" for r in sglang.reasons
    )


def test_more_gpus_than_the_cluster_fail(deepseek, cluster):
    v = plan_layout(setup(deepseek, cluster, "vllm"), "tp8 pp3")
    assert v.verdict == FAILS and v.reasons[0].rule == "gpus-available"
    assert "the cluster has 16 (2 nodes of 8)" in v.reasons[0].detail


def test_sglang_refuses_replicas_across_nodes_and_takes_dp_attention(deepseek, cluster):
    s = setup(deepseek, cluster, "sglang")
    replicas = plan_layout(s, "tp8 dp2 ep")
    assert replicas.verdict == FAILS
    assert replicas.reasons[0].message.startswith(
        "AssertionError: multi-node data-parallel replicas are not supported"
    )
    dpa = plan_layout(s, "tp16 dp16 dpa ep16")
    assert dpa.verdict == FITS and dpa.placement.nodes == 2
    assert "attention DP ranks 8-15" in dpa.nodes[1].holds


def test_vllm_dp_that_does_not_share_evenly_is_inexpressible_with_alternatives(deepseek, cluster):
    v = plan_layout(setup(deepseek, cluster, "vllm"), "tp4 dp3 ep")
    assert v.verdict == FAILS and v.reasons[0].rule == "inexpressible"
    assert "--data-parallel-size-local" in v.reasons[0].message
    assert [str(a) for a in v.alternatives] == ["tp4 dp4 ep", "tp4 dp2 ep"]


def test_candidates_fill_whole_nodes_or_fit_in_one(deepseek, cluster):
    s = setup(deepseek, cluster, "vllm")
    verdicts = plan_all(s)
    assert {v.gpus_used for v in verdicts if v.placement} <= {1, 2, 3, 4, 5, 6, 7, 8, 16}
    assert any(str(v.layout) == "tp8 pp2" for v in verdicts)


def test_plan_text_and_json_say_the_node_split(deepseek, cluster):
    v = plan_layout(setup(deepseek, cluster, "vllm"), "tp8 pp2")
    assert [str(n) for n in v.nodes] == ["node 1: PP stage 0, GPUs 0-7", "node 2: PP stage 1, GPUs 0-7"]
    text = plan_table([v])
    assert "tp8 pp2: node 1: PP stage 0, GPUs 0-7; node 2: PP stage 1, GPUs 0-7" in text
    data = v.to_json()
    assert data["node_split"] == "node 1: PP stage 0, GPUs 0-7; node 2: PP stage 1, GPUs 0-7"
    assert data["nodes"][1] == {"node": 1, "gpus": list(range(8)), "holds": "PP stage 1"}
    assert data["placement"]["nodes"] == 2


def test_rendezvous_flags_among_server_args_are_refused(deepseek, cluster):
    with pytest.raises(CockpitError, match="--master-port is the cluster launch's to say"):
        launches(deepseek, cluster, "vllm", "tp8 pp2", extra=("--master-port", "1234"))


def test_too_few_nodes_listed_is_one_line(deepseek, cluster):
    s = setup(deepseek, cluster, "vllm")
    verdict = plan_layout(s, "tp8 pp2")
    with pytest.raises(CockpitError, match="cluster lists 1 nodes"):
        s.engine.node_launches(verdict.placement, s.hardware, cluster.nodes[:1], RENDEZVOUS, "/m", 8000)


def test_the_network_costs_tp_across_nodes(deepseek, cluster):
    """At C=1 decode is latency-bound: TP16's two all-reduces a layer over the network cost more
    than TP8 PP2's one hop between stages, and more than the same TP16 over NVLink would."""
    s = setup(deepseek, cluster, "vllm")
    tp16, tp8pp2 = (with_prediction(s, plan_layout(s, x), [1], 1024, 1024) for x in ("tp16", "tp8 pp2"))
    assert tp16.predicted_tok_s[1] < tp8pp2.predicted_tok_s[1]
    one_box = Setup(deepseek, hardware("h200", 16), get_engine("vllm"))
    nvlink = with_prediction(one_box, plan_layout(one_box, "tp16"), [1], 1024, 1024)
    assert tp16.predicted_tok_s[1] < nvlink.predicted_tok_s[1]
    # A slower network costs more.
    slow = Cluster(nodes=cluster.nodes, gpu="h200", link=InterLink("RoCE", 12.5, 30.0))
    s_slow = setup(deepseek, slow, "vllm")
    slower = with_prediction(s_slow, plan_layout(s_slow, "tp16"), [1], 1024, 1024)
    assert slower.predicted_tok_s[1] < tp16.predicted_tok_s[1]
    pp = for_verdict(s, plan_layout(s, "tp8 pp2"))
    assert pp is not None and pp._hops(8) > pp._hop(8)  # the one hop crosses the network


def test_one_box_predictions_are_untouched(deepseek):
    s = Setup(deepseek, hardware("h200", 8), get_engine("vllm"))
    v = plan_layout(s, "tp8")
    model = for_verdict(s, v)
    assert model is not None and not model._spans_nodes(8) and v.placement.nodes == 1
    assert "nodes" not in v.placement.to_json()
