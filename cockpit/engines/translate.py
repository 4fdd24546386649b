"""A profile's server arguments said again for the other engine.

``plan --engine sglang`` on a vLLM profile (and ``use`` on another engine) needs SGLang's flags,
not vLLM's: the common knobs are translated (``--max-model-len`` is ``--context-length``,
``--max-num-seqs`` is ``--max-running-requests``, ...), flags both engines spell alike pass
through, and everything else is dropped with a note that names it. Every word that comes out
is checked against the target engine's option table, so a translation can lose a knob but never
produce an argument the engine refuses. See docs/placement.md#per-engine-arguments.

The same rules say what a flag of the other engine is called here (``unknown_flag_hint``), for
the error an argument checked against the wrong engine's table gets
(``cockpit.engines.arguments.check_args``, which builds on this module).

Read from vLLM 0.33.0 (vllm/engine/arg_utils.py and vllm/config/) and SGLang 0.5.23
(sglang/srt/server_args.py and sglang/srt/arg_groups/).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cockpit.core.errors import CockpitError
from cockpit.engines.options import (
    SET_BY_COCKPIT,
    CheckedArgs,
    Given,
    Option,
    OptionTable,
    closest,
    engine_label,
    find_option,
    help_command,
    is_flag,
    option_table,
    read_args,
    size_value,
)


def _shown_flag(given: Given) -> str:
    """The flag as a note names it; secrets (--api-key) without their values."""
    if given.option.dest in _SECRETS or not given.values:
        return given.spelling
    return f"{given.spelling} {' '.join(given.values)}"


_SECRETS = {"api_key", "admin_api_key", "ssl_keyfile", "ssl_keyfile_password"}


@dataclass
class _Translation:
    """The target's words and the notes, built flag by flag."""

    source: OptionTable
    target: OptionTable
    settings: Mapping[str, object]  # what the whole source list sets, by the source's names
    words: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _groups: set[tuple[str, ...]] = field(default_factory=set)

    def emit(self, given: Given, words: Sequence[str], note: bool = True) -> None:
        """Add ``words`` for ``given`` if the target's parser takes them, else drop them with the reason."""
        group = tuple(words)
        try:
            _checked(self.target, group, "")
        except CockpitError as exc:
            self.notes.append(f"{_shown_flag(given)} dropped: {str(exc).strip()}")
            return
        if group in self._groups:
            return
        self._groups.add(group)
        self.words += group
        if note:
            self.notes.append(f"{_shown_flag(given)} is {_shown(given, group)} on {self.target.label}")

    @property
    def chunked_prefill_off(self) -> bool:
        return (
            self.settings.get("enable_chunked_prefill") is False
            or self.settings.get("chunked_prefill_size") == -1
        )

    def default(self, given: Given) -> None:
        self.notes.append(f"{_shown_flag(given)} dropped: it is {self.target.label}'s default")

    def drop(self, given: Given, why: str) -> None:
        self.notes.append(f"{_shown_flag(given)} dropped: {why}")


def _shown(given: Given, group: tuple[str, ...]) -> str:
    return group[0] if given.option.dest in _SECRETS else " ".join(group)


_Rule = Callable[[Given, _Translation], None]


def translate_args(
    args: Sequence[str], source_engine: str, target_engine: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``args`` written for ``source_engine``, said for ``target_engine``: (the arguments, the notes).

    The source list is checked first (a bad argument is a one-line CockpitError); what comes out
    passes the check with the target's table."""
    if source_engine == target_engine:
        return tuple(args), ()
    source, target = option_table(source_engine), option_table(target_engine)
    checked = _checked(source, args, f"{source.label} argument")
    translation = _Translation(source, target, checked.values)
    rules = _RULES[(source_engine, target_engine)]
    for given in checked.groups:
        rule = rules.get(given.option.dest) or _SET_BY_COCKPIT.get(given.option.dest) or _same_spelling
        rule(given, translation)
    return tuple(translation.words), tuple(translation.notes)


def _arity(nargs: int | str | None) -> int:
    return nargs if isinstance(nargs, int) else 1


# ---------------------------------------------------------------------------------------------
# Rules: what one source flag becomes


def _flag_words(flag: str, values: Sequence[str], inline: bool = False) -> list[str]:
    """``flag value``, or ``flag=value`` where the source wrote it so or the value looks like a flag."""
    if len(values) == 1 and (inline or is_flag(values[0])):
        return [f"{flag}={values[0]}"]
    return [flag, *values]


def _plain_size(given: Given, text: str, engines: tuple[str, str]) -> str:
    """A size as a plain number: ``32K`` is 32,768 on vLLM and an error on SGLang, ``32Ki`` the reverse
    (vllm/utils/argparse_utils.py and sglang/srt/utils/common.py, both ``human_readable_int``)."""
    kind = given.option.type or ""
    if not kind.startswith("human_readable_int"):
        return text
    return str(size_value(text, engines[0], allow_auto=kind.endswith("auto")))


def _renamed(flag: str, value: Callable[[str], str] | None = None) -> _Rule:
    """The same knob under another name; ``value`` says a value the target's way."""

    def rule(given: Given, t: _Translation) -> None:
        texts = [_plain_size(given, v, (t.source.engine, t.target.engine)) for v in given.values]
        if value is not None:
            texts = [value(text) for text in texts]
        t.emit(given, _flag_words(flag, texts, given.inline))

    return rule


def _switch(on: Sequence[str], off: Sequence[str] = ()) -> _Rule:
    """A flag that takes no value: ``on`` words when it is set, ``off`` words (or nothing) when unset."""

    def rule(given: Given, t: _Translation) -> None:
        words = on if given.on else off
        if words:
            t.emit(given, words)
        else:
            t.default(given)

    return rule


def _dropped(why: str) -> _Rule:
    def rule(given: Given, t: _Translation) -> None:
        t.drop(given, why)

    return rule


def _same_spelling(given: Given, t: _Translation) -> None:
    """A flag the target spells alike passes; anything else is dropped with a note."""
    found = [(s, o) for s in given.option.spellings if (o := t.target.find(s))]
    if not found:
        t.drop(given, f"{t.target.label} has no such flag")
        return
    spelling, option = next(((s, o) for s, o in found if s == given.spelling), found[0])
    if not given.option.takes_value:
        if option.takes_value:
            t.drop(given, f"{t.target.label}'s {option.name} takes a value")
        else:
            _same_switch(given, spelling, option, t)
        return
    if not option.takes_value:
        t.drop(given, f"{t.target.label}'s {option.name} takes no value")
        return
    texts = [_plain_size(given, v, (t.source.engine, t.target.engine)) for v in given.values]
    if option.nargs not in ("+", "*") and len(texts) > _arity(option.nargs):
        t.notes.append(f"{given.spelling}: {t.target.label} takes one value, the first kept")
        texts = texts[: _arity(option.nargs)]
    t.emit(given, _flag_words(option.name, texts, given.inline), note=False)


def _same_switch(given: Given, spelling: str, option: Option, t: _Translation) -> None:
    """A switch by what it means: a spelling means the same on both engines, so the target gets the
    spelling the user wrote, or its inverse there when the shared spelling is the source's inverse
    (vLLM's --enable-flashinfer-autotune is the inverse of SGLang's --disable-flashinfer-autotune)."""
    if given.option.negative(spelling) == given.option.negative(given.spelling):
        t.emit(given, [spelling], note=False)
        return
    wanted = option.negative(spelling)  # the target's value the user meant
    inverse = next((s for s in option.spellings if option.negative(s) != option.negative(spelling)), None)
    if inverse:
        t.emit(given, [inverse], note=False)
    elif bool(option.default) == wanted:
        t.default(given)
    else:
        t.drop(given, f"{t.target.label} has no way to say it")


# The layout says the parallelism (cockpit/engines/vllm/adapter.py, sglang/adapter.py); in a profile's args it
# would override the layout's flags, and the two engines mean different things by the same words
# (SGLang's --dp-size without DP attention starts whole replicas). The model, host and port are the
# profile's and cockpit's.
_SET_BY_COCKPIT: dict[str, _Rule] = {
    dest: _dropped(f"{owner} says it") for dest, owner in SET_BY_COCKPIT.items()
} | {"data_parallel_size_local": _dropped("the layout's dpN says it")}

# --gpu-memory-utilization and --mem-fraction-static are both "a share of the GPU" and do not mean
# the same thing. vLLM's share is everything it may use: weights, activation peak, CUDA graphs and
# the KV cache come out of it (vllm/v1/worker/gpu_worker.py, determine_available_memory: KV =
# requested memory - non-KV memory - CUDA graph estimate). SGLang's static share is weights plus the
# KV pool only; activations and CUDA graphs live in the rest (sglang/srt/arg_groups/memory_hook.py,
# handle_gpu_memory_settings: "(model weights + KV cache pool) / GPU memory capacity"). vLLM's 0.92
# as SGLang's static share would leave 8% for activations and graphs, which OOMs at the first large
# prefill; SGLang's 0.85 as vLLM's share would starve vLLM's KV cache. Neither number carries over:
# the share is dropped and each engine takes its own default (SGLang derives it from the chunk size
# and the CUDA graph batch size).
_MEMORY_SHARE = (
    "vLLM's --gpu-memory-utilization covers weights, activations, CUDA graphs and the KV cache, "
    "SGLang's --mem-fraction-static only weights and the KV pool, so the number does not carry over"
)

# vLLM's fp8 KV cache is fp8_e4m3 (vllm/config/cache.py, CacheConfig.cache_dtype: "fp8
# (=fp8_e4m3)"); SGLang has no bare fp8 (sglang/srt/server_args.py --kv-cache-dtype choices).
_KV_DTYPE_TO_SGLANG = {"fp8": "fp8_e4m3"}
_KV_DTYPE_TO_VLLM = {"bf16": "bfloat16"}

# --model-impl: each engine's own implementation by its own name (vllm/config/model.py ModelImpl:
# auto, vllm, transformers, terratorch; sglang/srt/configs/model_config.py ModelImpl: auto, sglang,
# transformers, mindspore). Neither table lists the choices, so the names are mapped here.
_MODEL_IMPL_TO_SGLANG = {"auto": "auto", "vllm": "sglang", "transformers": "transformers"}
_MODEL_IMPL_TO_VLLM = {"auto": "auto", "sglang": "vllm", "transformers": "transformers"}

# Parser names that differ: vLLM's registries (vllm/tool_parsers/__init__.py,
# vllm/reasoning/__init__.py) against SGLang's (sglang/srt/function_call/function_call_parser.py,
# sglang/srt/parser/reasoning_parser.py). Names both spell alike pass as they are.
_TOOL_PARSER_TO_SGLANG = {
    "deepseek_v3": "deepseekv3",
    "deepseek_v31": "deepseekv31",
    "deepseek_v32": "deepseekv32",
    "deepseek_v4": "deepseekv4",
    "deepseek_v41": "deepseekv41",
    "minimax_m2": "minimax-m2",
    "minimax_m3": "minimax-m3",
    "openai": "gpt-oss",
    "llama3_json": "llama3",
}
_TOOL_PARSER_TO_VLLM = {
    **{sglang: vllm for vllm, sglang in _TOOL_PARSER_TO_SGLANG.items()},
    "qwen25": "hermes",  # Qwen2.5's tool calls are Hermes-style <tool_call> JSON in both
    "qwen": "hermes",
}
_REASONING_PARSER_TO_SGLANG = {
    "deepseek_r1": "deepseek-r1",
    "deepseek_v3": "deepseek-v3",
    "deepseek_v4": "deepseek-v4",
    "deepseek_v41": "deepseek-v41",
    "minimax_m2": "minimax",
    "minimax_m2_append_think": "minimax-append-think",
    "minimax_m3": "minimax-m3",
    "openai_gptoss": "gpt-oss",
    "nemotron_v3": "nemotron_3",
}
_REASONING_PARSER_TO_VLLM = {sglang: vllm for vllm, sglang in _REASONING_PARSER_TO_SGLANG.items()}


def _mapped(names: dict[str, str]) -> Callable[[str], str]:
    return lambda value: names.get(value, value)


def _one_value(flag: str) -> _Rule:
    """vLLM takes several served names and API keys, SGLang one (its ``--served-model-name`` and
    ``--api-key`` are plain store actions): the first is kept."""

    def rule(given: Given, t: _Translation) -> None:
        if len(given.values) > 1:
            t.notes.append(f"{given.spelling}: {t.target.label} takes one value, the first kept")
        t.emit(given, _flag_words(flag, given.values[:1], given.inline), note=False)

    return rule


def _chunk_to_sglang(given: Given, t: _Translation) -> None:
    """vLLM's per-step token budget is what bounds a prefill chunk; with chunked prefill off, SGLang's
    bound on a whole prefill batch is --max-prefill-tokens."""
    flag = "--max-prefill-tokens" if t.chunked_prefill_off else "--chunked-prefill-size"
    _renamed(flag)(given, t)


def _chunk_to_vllm(given: Given, t: _Translation) -> None:
    """SGLang's --chunked-prefill-size -1 turns chunked prefill off (sglang/srt/server_args.py)."""
    if given.values and given.values[0] == "-1":
        t.emit(given, ["--disable-chunked-prefill"])
    else:
        _renamed("--max-num-batched-tokens")(given, t)


def _max_model_len_to_sglang(given: Given, t: _Translation) -> None:
    """vLLM's ``auto`` (-1) fits the longest context into memory (vllm/v1/core/kv_cache_planning.py);
    SGLang has no such value and takes the model's own length when the flag is absent."""
    if size_value(given.values[0], "vllm", allow_auto=True) == -1:
        t.drop(given, "SGLang has no 'longest that fits': it takes the model's own context length")
    else:
        _renamed("--context-length")(given, t)


def _eplb_to_sglang(given: Given, t: _Translation) -> None:
    """vLLM's EPLB settings are one JSON (--eplb-config '{"num_redundant_experts": 32}' or the dotted
    --eplb-config.num_redundant_experts 32); SGLang has the redundant experts as a flag of its own."""
    key = given.spelling.partition(".")[2]
    if key:
        settings: object = {key: given.values[0]}
    else:
        try:
            settings = json.loads(given.values[0])
        except ValueError:
            settings = None
    if not isinstance(settings, dict):
        t.drop(given, "SGLang's EPLB settings are flags of their own (--ep-num-redundant-experts, ...)")
        return
    redundant = settings.pop("num_redundant_experts", None)
    if redundant is not None:
        t.emit(given, ["--ep-num-redundant-experts", str(redundant)])
    if settings:
        t.drop(given, f"SGLang has no {', '.join(sorted(settings))} in its EPLB flags")


def _redundant_to_vllm(given: Given, t: _Translation) -> None:
    """vLLM refuses redundant experts without EPLB ("num_redundant_experts is set to N but EPLB is
    not enabled", vllm/config/parallel.py); SGLang places them statically without it."""
    if given.values and given.values[0] == "0":
        t.default(given)
    elif not t.settings.get("enable_eplb"):
        t.drop(given, "vLLM takes redundant experts only with --enable-eplb")
    else:
        t.emit(given, ["--eplb-config.num_redundant_experts", *given.values])


def _cuda_graph_backend_to_vllm(given: Given, t: _Translation) -> None:
    """Only "no decode graphs" has a vLLM spelling: --enforce-eager (no CUDA graphs at all)."""
    if given.values == ("disabled",):
        t.emit(given, ["--enforce-eager"])
    else:
        t.drop(given, "vLLM picks its CUDA graph mode itself (--compilation-config.cudagraph_mode sets it)")


def _model_impl(given: Given, t: _Translation, names: dict[str, str]) -> None:
    value = names.get(given.values[0])
    if value is None:
        t.drop(given, f"{t.target.label} has no {given.values[0]} implementation")
    else:
        t.emit(given, _flag_words("--model-impl", [value], given.inline), note=value != given.values[0])


def _parser_to_vllm(flag: str, names: dict[str, str]) -> _Rule:
    """SGLang's ``auto`` reads the parser off the chat template; vLLM's registries have no such
    name. SGLang parses tool calls whenever --tool-call-parser is set, vLLM only with
    --enable-auto-tool-choice as well (vllm/entrypoints/common/cli_args.py)."""

    def rule(given: Given, t: _Translation) -> None:
        if given.values == ("auto",):
            t.drop(given, f"vLLM has no automatic {flag}: name one")
            return
        before = len(t.words)
        _renamed(flag, _mapped(names))(given, t)
        if flag == "--tool-call-parser" and len(t.words) > before:
            t.emit(given, ["--enable-auto-tool-choice"], note=False)

    return rule


# SGLang's CUDA graphs are per phase now; --disable-cuda-graph is deprecated in favour of
# --cuda-graph-backend-{decode,prefill}=disabled (sglang/srt/arg_groups/cuda_graph_hook.py, which
# folds the old flag into both phases).
_NO_CUDA_GRAPHS = ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")

_VLLM_TO_SGLANG: dict[str, _Rule] = {
    "max_model_len": _max_model_len_to_sglang,
    "gpu_memory_utilization": _dropped(_MEMORY_SHARE + ": SGLang derives its own"),
    "max_num_seqs": _renamed("--max-running-requests"),
    "max_num_batched_tokens": _chunk_to_sglang,
    "enable_chunked_prefill": _switch((), ("--chunked-prefill-size", "-1")),
    "enforce_eager": _switch(_NO_CUDA_GRAPHS),
    "max_cudagraph_capture_size": _renamed("--cuda-graph-max-bs-decode"),
    "cudagraph_capture_sizes": _renamed("--cuda-graph-bs-decode"),
    "kv_cache_dtype": _renamed("--kv-cache-dtype", _mapped(_KV_DTYPE_TO_SGLANG)),
    "eplb_config": _eplb_to_sglang,
    "seed": _renamed("--random-seed"),
    "tokenizer": _renamed("--tokenizer-path"),
    "block_size": _renamed("--page-size"),
    "enable_prefix_caching": _switch((), ("--disable-radix-cache",)),
    "enable_log_requests": _switch(("--log-requests",)),
    "served_model_name": _one_value("--served-model-name"),
    "api_key": _one_value("--api-key"),
    "enable_auto_tool_choice": _dropped("SGLang parses tool calls whenever --tool-call-parser is set"),
    "tool_call_parser": _renamed("--tool-call-parser", _mapped(_TOOL_PARSER_TO_SGLANG)),
    "reasoning_parser": _renamed("--reasoning-parser", _mapped(_REASONING_PARSER_TO_SGLANG)),
    "model_impl": lambda given, t: _model_impl(given, t, _MODEL_IMPL_TO_SGLANG),
    "log_level": _renamed("--log-level", str.lower),
    "attention_backend": _dropped("the two engines name their attention kernels differently"),
    "config": _dropped("a vLLM config file holds vLLM's options"),
}

_SGLANG_TO_VLLM: dict[str, _Rule] = {
    "context_length": _renamed("--max-model-len"),
    "mem_fraction_static": _dropped(_MEMORY_SHARE + ": vLLM takes its own default (0.92)"),
    "max_running_requests": _renamed("--max-num-seqs"),
    "chunked_prefill_size": _chunk_to_vllm,
    "disable_cuda_graph": _switch(("--enforce-eager",)),
    "disable_decode_cuda_graph": _switch(("--enforce-eager",)),
    "cuda_graph_backend_decode": _cuda_graph_backend_to_vllm,
    "cuda_graph_max_bs_decode": _renamed("--max-cudagraph-capture-size"),
    "cuda_graph_bs_decode": _renamed("--cudagraph-capture-sizes"),
    "kv_cache_dtype": _renamed("--kv-cache-dtype", _mapped(_KV_DTYPE_TO_VLLM)),
    "ep_num_redundant_experts": _redundant_to_vllm,
    "random_seed": _renamed("--seed"),
    "tokenizer_path": _renamed("--tokenizer"),
    "page_size": _renamed("--block-size"),
    "disable_radix_cache": _switch(("--disable-prefix-caching",)),
    "log_requests": _switch(("--enable-log-requests",)),
    "max_total_tokens": _dropped("vLLM sizes its KV cache from memory (--kv-cache-memory-bytes), not tokens"),
    "tool_call_parser": _parser_to_vllm("--tool-call-parser", _TOOL_PARSER_TO_VLLM),
    "reasoning_parser": _parser_to_vllm("--reasoning-parser", _REASONING_PARSER_TO_VLLM),
    "model_impl": lambda given, t: _model_impl(given, t, _MODEL_IMPL_TO_VLLM),
    "log_level": _renamed("--log-level", str.upper),
    "attention_backend": _dropped("the two engines name their attention kernels differently"),
    "config": _dropped("an SGLang config file holds SGLang's options"),
}

_RULES: dict[tuple[str, str], dict[str, _Rule]] = {
    ("vllm", "sglang"): _VLLM_TO_SGLANG,
    ("sglang", "vllm"): _SGLANG_TO_VLLM,
}


def counterpart(spelling: str, source_engine: str, target_engine: str) -> str | None:
    """The target engine's flag for a flag of the source engine (``--max-num-seqs`` on SGLang is
    ``--max-running-requests``), for a hint when someone types the other engine's spelling."""
    option = find_option(option_table(source_engine), spelling)
    if option is None:
        return None
    probe = [spelling]
    if option.takes_value:
        value = option.choices[0] if option.choices else option.default
        probe.append(str(value) if isinstance(value, (int, float, str)) and value != "" else "1")
    try:
        words, _ = translate_args(probe, source_engine, target_engine)
    except CockpitError:
        return None
    return next((w.partition("=")[0] for w in words if is_flag(w)), None)


def other_engine(engine: str) -> str:
    """The engine a flag this one lacks most likely comes from."""
    return "sglang" if engine == "vllm" else "vllm"


def unknown_flag_hint(table: OptionTable, spelling: str) -> str:
    """What a flag ``table`` lacks most likely means: the other engine's flag said in this one's
    words, else the closest spelling, else where the list of flags is."""
    other = other_engine(table.engine)
    said = counterpart(spelling, other, table.engine)
    if said:
        return f"that is {engine_label(other)}'s; {table.label} says {said}"
    guess = closest(spelling, table.names)
    return f"did you mean {guess}?" if guess else f"see `{help_command(table)}` for the list"


def _checked(table: OptionTable, args: Sequence[str], where: str) -> CheckedArgs:
    """``args`` read through ``table`` strictly, an unknown flag named as ``check_args`` names it."""
    return read_args(table, args, where, strict=True, hint=unknown_flag_hint)
