"""The simulated engine reads the same argv the real engine would, with each engine's flags.

A flag the real engine does not have fails here as it would there (argparse's own exit 2), so an
adapter that writes a wrong argv is caught on a laptop, not on the GPU box.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.layout import Layout

# Leading words of the launcher, as the adapters write them, that the simulator skips.
_LAUNCHERS = {
    "vllm": (("vllm", "serve"), ("serve",)),
    "sglang": (
        ("python", "-m", "sglang.launch_server"),
        ("-m", "sglang.launch_server"),
        ("sglang.launch_server",),
    ),
}


@dataclass(frozen=True)
class EngineArgs:
    engine: str
    model: str
    served_name: str
    layout: Layout
    host: str
    port: int
    argv: tuple[str, ...]  # the flags after the launcher, for the planner's memory arguments
    non_default: tuple[tuple[str, object], ...] = ()  # what vLLM logs as "non-default args"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--enable-eplb", action="store_true")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization")
    parser.add_argument("--revision")


def vllm_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm serve", add_help=False)
    parser.add_argument("model")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--enable-expert-parallel", "-ep", action="store_true")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--disable-log-requests", action="store_true")
    parser.add_argument("--disable-log-stats", action="store_true")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--all2all-backend")
    parser.add_argument("--distributed-executor-backend")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--tokenizer")
    parser.add_argument("--api-key", nargs="+")  # vLLM takes several keys
    parser.add_argument("--hf-token", nargs="?", const=True)  # alone: the token `hf auth login` saved
    _common(parser)
    return parser


def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang.launch_server", add_help=False)
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--tp-size", "--tp", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--dp-size", "--dp", "--data-parallel-size", type=int, default=1)
    parser.add_argument("--ep-size", "--ep", "--expert-parallel-size", type=int, default=1)
    parser.add_argument("--enable-dp-attention", action="store_true")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--chunked-prefill-size", type=int)
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--cuda-graph-max-bs", type=int)
    parser.add_argument("--moe-a2a-backend")
    parser.add_argument("--moe-runner-backend")
    parser.add_argument("--random-seed", type=int)
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--api-key")
    parser.add_argument("--admin-api-key")
    _common(parser)
    return parser


def strip_launcher(engine: str, argv: Sequence[str]) -> list[str]:
    args = list(argv)
    for prefix in _LAUNCHERS[engine]:
        if tuple(args[: len(prefix)]) == prefix:
            return args[len(prefix) :]
    return args


def parse_engine_args(engine: str, argv: Sequence[str]) -> EngineArgs:
    """Parse like the real engine; argparse exits 2 with its usage line on a bad flag."""
    flags = strip_launcher(engine, argv)
    parser = vllm_parser() if engine == "vllm" else sglang_parser()
    ns = parser.parse_args(flags)
    non_default = tuple((k, v) for k, v in vars(ns).items() if v != parser.get_default(k))
    if engine == "vllm":
        layout = Layout(
            tp=ns.tensor_parallel_size,
            pp=ns.pipeline_parallel_size,
            dp=ns.data_parallel_size,
            expert_parallel=ns.enable_expert_parallel,
        )
        model = ns.model
    else:
        layout = Layout(
            tp=ns.tp_size,
            pp=ns.pp_size,
            dp=ns.dp_size,
            ep=ns.ep_size if ns.ep_size > 1 else None,
            dpa=ns.enable_dp_attention,
        )
        model = ns.model_path
    served = ns.served_model_name[0] if ns.served_model_name else model
    return EngineArgs(engine, model, served, layout, ns.host, ns.port, tuple(flags), non_default)
