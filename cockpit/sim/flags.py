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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cockpit.engines import Option, OptionTable, check_args, option_table
from cockpit.engines.options import SET_BY_COCKPIT, expand_vllm_args, size_value
from cockpit.engines.options import _choices as engine_choices
from cockpit.layout import Layout

# Leading words of the launcher, as the adapters write them, that the simulator skips.
_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_LAUNCHERS = {
    "vllm": (
        ("vllm", "serve"),
        ("serve",),
        ("python", "-m", _API_SERVER_MODULE),
        ("python3", "-m", _API_SERVER_MODULE),
        ("-m", _API_SERVER_MODULE),
        (_API_SERVER_MODULE,),
    ),
    "sglang": (
        ("python", "-m", "sglang.launch_server"),
        ("-m", "sglang.launch_server"),
        ("sglang.launch_server",),
    ),
}
# What the engine's parser calls itself in its errors: vLLM's serve subparser (its root parser
# reports unrecognized arguments, with its own usage), or under `python -m
# vllm.entrypoints.openai.api_server` that module's parser, named after its file, whose usage
# argparse writes out option by option (vllm/entrypoints/launchers/api_server/entry.py: main);
# SGLang's says "sglang serve" even under `python -m sglang.launch_server` (prepare_server_args).
_PROG = {"vllm": "vllm serve", "sglang": "sglang serve"}
_USAGE = {"vllm": "vllm serve [model_tag] [options]", "sglang": None}
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
_VLLM_ROOT_USAGE = (
    "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
    "            ...\n"
)


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
    """What each engine's human_readable_int says about a size it cannot read. vLLM
    (vllm/utils/argparse_utils.py) only words decimals with a binary suffix; a plain bad number is
    argparse's "invalid ... value". SGLang (sglang/srt/utils/common.py) words every failure."""
    if engine == "sglang":
        return (
            f"Invalid integer value: '{text}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive."
        )
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
    api_server = table.engine == "vllm" and entrypoint == API_SERVER_PROG
    parser = argparse.ArgumentParser(
        prog=API_SERVER_PROG if api_server else _PROG[table.engine],
        usage=None if api_server else _USAGE[table.engine],
        add_help=False,
    )
    if table.engine == "vllm" and not api_server:
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
    for prefix in _LAUNCHERS[engine]:
        if tuple(args[: len(prefix)]) == prefix:
            return (API_SERVER_PROG if _API_SERVER_MODULE in prefix else None), args[len(prefix) :]
    return None, args


def _vllm_rewrites(flags: list[str], positional: bool = True) -> list[str]:
    """What vLLM's parser does before argparse: `--model M` to the front (``positional``: `vllm
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
    entrypoint, flags = _launched(engine, argv)
    if entrypoint == API_SERVER_PROG:
        from cockpit.sim.logs.base import SITE

        for line in API_SERVER_WARNINGS:
            sys.stderr.write(line.format(site=SITE) + "\n")
    if engine == "vllm":
        flags = _vllm_rewrites(flags, positional=entrypoint != API_SERVER_PROG)
    parser = build_parser(table, entrypoint)
    ns, extras = parser.parse_known_args(flags)
    if extras:  # vLLM's root parser says it (the api_server module's parser its own); SGLang's own
        if engine == "vllm" and entrypoint != API_SERVER_PROG:
            sys.stderr.write(_VLLM_ROOT_USAGE + f"vllm: error: unrecognized arguments: {' '.join(extras)}\n")
            raise SystemExit(2)
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    non_default = tuple(
        (k, v) for k, v in vars(ns).items() if v != parser.get_default(k) and k not in ("model_tag", "model")
    )
    # vLLM's `serve` puts the positional model in args.model (vllm/entrypoints/cli/serve.py), so
    # its "non-default args" name the model where --model sits among the options; model_tag is
    # not one of them (vllm/entrypoints/serve/utils/api_utils.py: get_non_default_args).
    if engine == "vllm" and getattr(ns, "model_tag", None) is not None:
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
    if engine == "vllm":
        layout = Layout(
            tp=ns.tensor_parallel_size,
            pp=ns.pipeline_parallel_size,
            dp=ns.data_parallel_size,
            expert_parallel=bool(ns.enable_expert_parallel),
        )
        model = ns.model
    else:
        layout = _sglang_layout(ns)
        model = ns.model_path
        if not model:
            parser.error("the following arguments are required: --model-path/--model")
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
        entrypoint or _PROG[engine],
        logged,
    )


def _sglang_layout(ns: argparse.Namespace) -> Layout:
    """SGLang's parallel flags as a Layout: `--attn-dp-size D` (0.5.23) or the deprecated
    `--dp-size D --enable-dp-attention` (moved to attn_dp_size by the engine) splits attention
    inside the TP group; a plain --dp-size starts replicas."""
    attn_dp = getattr(ns, "attn_dp_size", 1) or 1
    dp = ns.dp_size
    if attn_dp > 1 and dp > 1:  # sglang/srt/arg_groups/parallel_hook.py
        raise SystemExit(
            f"ValueError: --dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined "
            "with attention data parallelism are not supported."
        )
    dpa = bool(ns.enable_dp_attention) or attn_dp > 1
    return Layout(
        tp=ns.tp_size,
        pp=ns.pp_size,
        dp=attn_dp if attn_dp > 1 else dp,
        ep=ns.ep_size if ns.ep_size > 1 else None,
        dpa=dpa and max(attn_dp, dp) > 1,
    )
