"""The simulated engine reads its argv with the real engine's option table.

Its parser is built from every option of the engine version (cockpit/engines/tables/): a flag
the real engine has is accepted, one it lacks fails with argparse's own exit 2 and text, a bad
choice or a non-number likewise. vLLM's rewrites (underscores, ``-O3``, ``--model``, dotted
JSON keys) are done first, as its FlexibleArgumentParser does (vllm/utils/argparse_utils.py);
SGLang's parser is plain argparse, abbreviations and all (sglang/srt/server_args.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cockpit.core.layout import Layout
from cockpit.engines import Option, OptionTable, check_args, option_table, surface
from cockpit.engines.options import SET_BY_COCKPIT, expand_vllm_args, size_value
from cockpit.engines.options import _choices as engine_choices
from cockpit.engines.vllm.surface import API_SERVER_MODULE
from cockpit.sim.sitepackages import SITE

# The parser of `python -m vllm.entrypoints.openai.api_server` is that module's, named after its
# file, whose usage argparse writes out option by option (vllm/entrypoints/launchers/api_server/
# entry.py: main); the launcher words the simulator skips, and what each engine's parser calls
# itself otherwise, are the engine's surface's (cockpit/engines/<engine>/surface.py).
API_SERVER_PROG = "api_server.py"
# What importing the old entrypoint warns, before its parser runs (vllm/entrypoints/openai/api_server.py).
API_SERVER_WARNINGS = (
    "{site}/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: `vllm.entrypoints.openai.api_server` "
    "is deprecated and will likely beunsupported in a future version. Use the corresponding function from "
    "`vllm.entrypoints.launchers` instead.",
    "  warnings.warn(",
    "{site}/vllm/entrypoints/openai/api_server.py:51: DeprecationWarning: The `python -m "
    "vllm.entrypoints.openai.api_server` command is deprecated and may be removed in a future release. "
    "Please use `vllm server` instead.",
    "  warnings.warn(",
)


@dataclass(frozen=True)
class MultiNode:
    """This node's part in an engine that spans nodes, read from the engine's own flags.

    vLLM 0.33 (vllm/engine/arg_utils.py, vllm/entrypoints/cli/serve.py): TP/PP across nodes with
    ``--nnodes N --node-rank R --master-addr HEAD --master-port P`` (``--headless`` on the others),
    the torch process group meeting at HEAD:P; DP across nodes with ``--data-parallel-size-local d
    --data-parallel-start-rank s --data-parallel-address HEAD --data-parallel-rpc-port RPC``, the
    engines meeting at HEAD:RPC. SGLang 0.5.23 (sglang/srt/arg_groups/fields/parallel.py):
    ``--nnodes N --node-rank R --dist-init-addr HEAD:PORT``; only node 0 serves HTTP."""

    nnodes: int
    node_rank: int
    host: str  # the head's address, as the flags name it
    port: int  # where the ranks meet on the head
    serves: bool  # this node runs the API server (vLLM: not --headless; SGLang: node 0)
    data_parallel: bool = False  # vLLM: DP engines across nodes (the RPC port), not one torch world
    timeout_s: float | None = None  # SGLang's --dist-timeout, where given

    @property
    def head(self) -> bool:
        return self.node_rank == 0

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class EngineArgs:
    engine: str
    model: str
    served_name: str
    layout: Layout
    host: str
    port: int
    argv: tuple[str, ...]  # the server arguments besides layout, host, port and model
    non_default: tuple[tuple[str, object], ...] = ()  # the options given that differ from their defaults
    deprecated: tuple[str, ...] = ()  # spellings given that the engine warns about
    version: str = ""
    entrypoint: str = "vllm serve"  # vLLM: "vllm serve", or "api_server.py" (python -m ...api_server)
    logged_args: tuple[tuple[str, object], ...] = ()  # what vLLM logs as "non-default args"
    multinode: MultiNode | None = None  # this node's part when the engine spans nodes


class _Switch(argparse.Action):
    """--x / --no-x (and vLLM's --enable-x / --disable-x pairs) as one option."""

    def __init__(self, option_strings: Sequence[str], dest: str, option: Option, **kwargs: Any) -> None:
        self.option = option
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not self.option.negative(option_string or ""))


def _converter(table: OptionTable, option: Option) -> Callable[[str], object] | None:
    kind = option.type
    if kind == "int":
        return int
    if kind == "float":
        return float
    if kind in ("human_readable_int", "human_readable_int_or_auto"):
        allow_auto = kind.endswith("auto")

        def size(text: str) -> int:
            try:
                return size_value(text, table.engine, allow_auto)
            except ValueError:
                raise argparse.ArgumentTypeError(_size_error(table.engine, kind, text)) from None

        size.__name__ = kind  # argparse names the type in its error: "invalid human_readable_int value"
        return size
    return None


def _size_error(engine: str, kind: str, text: str) -> str:
    """What the engine's human_readable_int says about a size it cannot read: its own words where
    its surface has them (SGLang's, sglang/srt/utils/common.py). Else only decimals with a binary
    suffix are worded (vLLM's, vllm/utils/argparse_utils.py); a plain bad number is argparse's
    "invalid ... value"."""
    words = surface(engine).size_error
    if words is not None:
        return words.format(text=text)
    number, suffix = text.strip()[:-1], text.strip()[-1:]
    if suffix and suffix in "KMGT" and "." in number:
        return (
            f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
            f"{number}{suffix.lower()} instead?"
        )
    return f"invalid {kind} value: '{text}'"


def build_parser(table: OptionTable, entrypoint: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with every option of the engine version's server command (vLLM's
    ``api_server.py`` entrypoint: that module's parser, with no positional model)."""
    api_server = entrypoint == API_SERVER_PROG  # only vLLM's launcher words name it
    engine = surface(table.engine)
    parser = argparse.ArgumentParser(
        prog=API_SERVER_PROG if api_server else engine.program,
        usage=None if api_server else engine.usage,
        add_help=False,
    )
    if engine.model_positional and not api_server:
        parser.add_argument("model_tag", nargs="?")
    for option in table.options:
        kwargs: dict[str, Any] = {"dest": option.dest, "default": option.default}
        if option.action in ("EnableDisableAction", "BooleanOptionalAction"):
            parser.add_argument(*option.spellings, *option.hidden, action=_Switch, option=option, **kwargs)
            continue
        if option.action in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            parser.add_argument(*option.spellings, action="store_true", **kwargs)
            continue
        if option.action == "_StoreFalseAction":
            parser.add_argument(*option.spellings, action="store_false", **kwargs)
            continue
        if option.action in ("_StoreConstAction", "_CountAction") or option.nargs == 0:
            parser.add_argument(*option.spellings, action="store_const", const=True, **kwargs)
            continue
        if option.action == "_AppendAction":
            kwargs["action"] = "append"
        if option.nargs is not None:
            kwargs["nargs"] = option.nargs
        convert = _converter(table, option)
        if convert is not None:
            kwargs["type"] = convert
        # The table keeps choices as typed; argparse compares converted values. A choice the
        # table leaves to the engine's config (vLLM's --kv-cache-dtype) is argparse's too: a real
        # vLLM 0.32.0 rejects "fp9" with "invalid choice" and exit 2.
        choices = option.choices or engine_choices(table, option)
        if choices:
            kwargs["choices"] = tuple(convert(c) for c in choices) if convert else choices
        parser.add_argument(*option.spellings, **kwargs)
    return parser


def strip_launcher(engine: str, argv: Sequence[str]) -> list[str]:
    return _launched(engine, argv)[1]


def _launched(engine: str, argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The entrypoint the launcher words name (vLLM's old module: "api_server.py"), and the rest."""
    args = list(argv)
    for prefix in surface(engine).launchers:
        if tuple(args[: len(prefix)]) == prefix:
            return (API_SERVER_PROG if API_SERVER_MODULE in prefix else None), args[len(prefix) :]
    return None, args


def _flexible_rewrites(flags: list[str], positional: bool = True) -> list[str]:
    """What vLLM's FlexibleArgumentParser does before argparse: `--model M` to the front (``positional``: `vllm
    serve`), dashes for underscores, -O3, and dotted JSON keys folded into their option's JSON."""
    flags = expand_vllm_args(flags)
    if positional and "--model" in flags:
        at = flags.index("--model")
        if at + 1 < len(flags):
            flags = [flags[at + 1], *flags[:at], *flags[at + 2 :]]
    folded: dict[str, dict] = {}
    out: list[str] = []
    i = 0
    while i < len(flags):
        word = flags[i]
        head, dot, key = word.partition("=")[0].partition(".")
        if word.startswith("--") and dot:
            value = word.partition("=")[2] if "=" in word else (flags[i + 1] if i + 1 < len(flags) else "")
            i += 1 if "=" in word else 2
            folded.setdefault(head, {})[key] = _json_value(value)
            continue
        out.append(word)
        i += 1
    for head, values in folded.items():
        out += [head, json.dumps(values)]
    return out


def _json_value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_engine_args(engine: str, argv: Sequence[str], version: str | None = None) -> EngineArgs:
    """Parse like the real engine; argparse exits 2 with its usage line on a bad flag."""
    table = option_table(engine, version)
    words_of = surface(engine)
    entrypoint, flags = _launched(engine, argv)
    if entrypoint == API_SERVER_PROG:
        for line in API_SERVER_WARNINGS:
            sys.stderr.write(line.format(site=SITE) + "\n")
    if words_of.flexible_args:
        flags = _flexible_rewrites(
            flags, positional=words_of.model_positional and entrypoint != API_SERVER_PROG
        )
    parser = build_parser(table, entrypoint)
    ns, extras = parser.parse_known_args(flags)
    if extras:  # vLLM's root parser says it (the api_server module's parser its own); SGLang's own
        if words_of.root_usage is not None and entrypoint != API_SERVER_PROG:
            root = words_of.console_script or words_of.program
            sys.stderr.write(
                words_of.root_usage + f"{root}: error: unrecognized arguments: {' '.join(extras)}\n"
            )
            raise SystemExit(2)
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    non_default = tuple(
        (k, v) for k, v in vars(ns).items() if v != parser.get_default(k) and k not in ("model_tag", "model")
    )
    # vLLM's `serve` puts the positional model in args.model (vllm/entrypoints/cli/serve.py), so
    # its "non-default args" name the model where --model sits among the options; model_tag is
    # not one of them (vllm/entrypoints/serve/utils/api_utils.py: get_non_default_args).
    if getattr(ns, "model_tag", None) is not None:
        ns.model = ns.model_tag
    logged = tuple((k, v) for k, v in vars(ns).items() if v != parser.get_default(k) and k != "model_tag")
    # The same words through cockpit's own reading: what the planner takes as server arguments
    # (not the model, layout, host or port), and the deprecated spellings the engine warns about.
    # vLLM's positional model comes first (a --model is moved there): only it is dropped, not a
    # --tokenizer or --served-model-name that names the same model.
    model_tag = getattr(ns, "model_tag", None)
    named = flags[1:] if model_tag is not None and flags[:1] == [model_tag] else flags
    checked = check_args(table, named, strict=False)
    words = tuple(w for g in checked.groups if g.option.dest not in SET_BY_COCKPIT for w in g.words)
    layout = _layout(ns, words_of.parallel_dests)
    model = getattr(ns, words_of.model_dest)
    model_option = table.by_dest(words_of.model_dest)
    if not model and model_option is not None and model_option.default is None:
        parser.error(f"the following arguments are required: {'/'.join(model_option.spellings)}")
    served = ns.served_model_name
    if isinstance(served, list):
        served = served[0] if served else None
    host = ns.host or "127.0.0.1"
    return EngineArgs(
        engine,
        model,
        served or model,
        layout,
        host,
        ns.port,
        words,
        non_default,
        checked.deprecated,
        table.version,
        entrypoint or surface(engine).program,
        logged,
        _multinode(ns, layout),
    )


# vLLM's defaults for the ports the nodes meet at (vllm/config/parallel.py: master_port 29501,
# data_parallel_rpc_port 29550).
VLLM_MASTER_PORT = 29501
VLLM_DP_RPC_PORT = 29550


def _multinode(ns: argparse.Namespace, layout: Layout) -> MultiNode | None:
    """This node's part, when the flags spread the engine over nodes; None on one box. The
    parser's options say how the nodes meet: one HOST:PORT (SGLang's --dist-init-addr), or a
    master address and port, or data-parallel engines at an RPC port (vLLM's)."""
    nnodes = getattr(ns, "nnodes", 1) or 1
    rank = getattr(ns, "node_rank", 0) or 0
    if hasattr(ns, "dist_init_addr"):
        if nnodes <= 1:
            return None
        host, port = _host_port(getattr(ns, "dist_init_addr", None) or "", "--dist-init-addr")
        timeout = getattr(ns, "dist_timeout", None)
        return MultiNode(nnodes, rank, host, port, serves=rank == 0, timeout_s=timeout)
    headless = bool(getattr(ns, "headless", False))
    if nnodes > 1:
        host = getattr(ns, "master_addr", None) or "127.0.0.1"
        port = getattr(ns, "master_port", None) or VLLM_MASTER_PORT
        return MultiNode(nnodes, rank, host, port, serves=not headless)
    local = getattr(ns, "data_parallel_size_local", None)
    if local is not None and 0 < local < layout.dp:
        start = getattr(ns, "data_parallel_start_rank", None) or 0
        host = getattr(ns, "data_parallel_address", None) or "127.0.0.1"
        port = getattr(ns, "data_parallel_rpc_port", None) or VLLM_DP_RPC_PORT
        nodes = -(-layout.dp // local)
        return MultiNode(nodes, start // local, host, port, serves=not headless, data_parallel=True)
    return None


def _host_port(text: str, flag: str) -> tuple[str, int]:
    """HOST:PORT or [IPv6]:PORT; a missing or bad one exits as argparse does, naming the flag."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        sys.stderr.write(f"error: {flag} must be HOST:PORT when --nnodes is above 1, got '{text}'\n")
        raise SystemExit(2)
    return host, int(port)


def _layout(ns: argparse.Namespace, dests: Mapping[str, str]) -> Layout:
    """The parsed parallel flags as a Layout (``dests``: the surface's parallel_dests). SGLang's
    `--attn-dp-size D` (0.5.23) or deprecated `--dp-size D --enable-dp-attention` (moved to
    attn_dp_size by the engine) split attention inside the TP group; a plain DP size starts
    replicas. vLLM's expert parallelism is a switch, SGLang's a size."""

    def value(part: str, default: Any) -> Any:
        dest = dests.get(part)
        return getattr(ns, dest, default) if dest is not None else default

    attn_dp = value("attn_dp", 1) or 1
    dp = value("dp", 1)
    if attn_dp > 1 and dp > 1:  # sglang/srt/arg_groups/parallel_hook.py
        raise SystemExit(
            f"ValueError: --dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined "
            "with attention data parallelism are not supported."
        )
    dpa = bool(value("dpa", False)) or attn_dp > 1
    ep = value("ep", 1)
    return Layout(
        tp=value("tp", 1),
        pp=value("pp", 1),
        dp=attn_dp if attn_dp > 1 else dp,
        ep=ep if ep > 1 else None,
        expert_parallel=bool(value("expert_parallel", False)),
        dpa=dpa and max(attn_dp, dp) > 1,
    )
