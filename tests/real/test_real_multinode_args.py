"""Every node's argv of a layout across nodes, read by vLLM's own parser (its CPU build, the
real-engine tier): the flags are the engine's, and the values it reads back are the ones cockpit
meant. No engine starts: parsing is all that is asked of vLLM here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cockpit.core.cluster import Cluster, Node, Rendezvous
from cockpit.core.model import ModelArch
from cockpit.core.planner import FITS, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import read_config

RENDEZVOUS = Rendezvous("10.0.0.1", 29501, 29550)
READ_BACK = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "headless",
    "data_parallel_size_local",
    "data_parallel_start_rank",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "host",
    "port",
)

# Run by the engine's interpreter: parse each argv as `vllm serve` does (vllm/entrypoints/cli/serve.py
# builds its parser with make_arg_parser: vllm/entrypoints/launchers/cli_args.py in the CPU build's
# 0.32, vllm/entrypoints/openai/cli_args.py before) and print the values.
PARSE = """
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
keys = json.loads(sys.argv[1])
out = []
for argv in json.loads(sys.stdin.read()):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    out.append({k: getattr(args, k, None) for k in keys})
print(json.dumps(out))
"""


def _model() -> ModelArch:
    return read_config(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "deepseek-v3.json")


def _node_argvs(layout: str, nodes: int) -> list[list[str]]:
    cluster = Cluster(nodes=tuple(Node(f"n{i}", address=f"10.0.0.{i + 1}") for i in range(nodes)), gpu="h200")
    engine = get_engine("vllm")
    setup = Setup(_model(), cluster.hardware, engine, model_path="/models/dsv3", port=8000)
    verdict = plan_layout(setup, layout)
    assert verdict.verdict == FITS and verdict.placement is not None, verdict
    launches = engine.node_launches(
        verdict.placement, cluster.hardware, cluster.nodes, RENDEZVOUS, "/models/dsv3", 8000
    )
    # less the launcher words and the positional model of `vllm serve MODEL`: --model instead
    return [["--model", "/models/dsv3", *launch.argv[3:]] for launch in launches]


def _parse(engine_python: str, argvs: list[list[str]]) -> list[dict]:
    done = subprocess.run(
        [engine_python, "-c", PARSE, json.dumps(READ_BACK)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("layout", "nodes", "expected"),
    [
        (
            "tp8 pp2",
            2,
            [
                {
                    "nnodes": 2,
                    "node_rank": 0,
                    "headless": False,
                    "master_addr": "10.0.0.1",
                    "master_port": 29501,
                },
                {
                    "nnodes": 2,
                    "node_rank": 1,
                    "headless": True,
                    "master_addr": "10.0.0.1",
                    "master_port": 29501,
                },
            ],
        ),
        (
            "tp4 dp4 ep",
            2,
            [
                {"data_parallel_size": 4, "data_parallel_size_local": 2, "data_parallel_start_rank": None},
                {"data_parallel_size": 4, "data_parallel_size_local": 2, "data_parallel_start_rank": 2},
            ],
        ),
    ],
)
def test_vllm_reads_every_nodes_argv(engine_python, layout, nodes, expected):
    parsed = _parse(engine_python, _node_argvs(layout, nodes))
    assert len(parsed) == nodes
    for rank, (values, want) in enumerate(zip(parsed, expected)):
        assert {k: values[k] for k in want} == want, (rank, values)
        assert values["host"] == "127.0.0.1" and values["port"] == 8000
        assert values["headless"] == (rank > 0)
    if "dp" in layout:
        assert all(v["data_parallel_address"] == "10.0.0.1" for v in parsed)
        assert all(v["data_parallel_rpc_port"] == 29550 for v in parsed)
    layout_sizes = {k: parsed[0][k] for k in ("tensor_parallel_size", "pipeline_parallel_size")}
    assert all({k: v[k] for k in layout_sizes} == layout_sizes for v in parsed)
