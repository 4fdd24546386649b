"""Server arguments said for the other engine: the common knobs translated, the rest dropped with a
note, and whatever comes out taken by the target engine's own option table."""

from __future__ import annotations

import pytest

from cockpit.core.errors import CockpitError
from cockpit.engines.arguments import check_args
from cockpit.engines.options import Option, option_table
from cockpit.engines.translate import translate_args

OTHER = {"vllm": "sglang", "sglang": "vllm"}


def translated(args: list[str], source: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Translate and prove the result parses with the target's table."""
    words, notes = translate_args(args, source, OTHER[source])
    check_args(option_table(OTHER[source]), words)
    assert all("\n" not in note for note in notes)
    return words, notes


@pytest.mark.parametrize(
    "source, args, expected",
    [
        ("vllm", ["--max-model-len", "32768"], ["--context-length", "32768"]),
        ("vllm", ["--max-model-len", "32K"], ["--context-length", "32768"]),  # vLLM's K is 1024
        ("vllm", ["--max_model_len=32k"], ["--context-length=32000"]),  # underscores, = kept
        ("vllm", ["--max-num-seqs", "512"], ["--max-running-requests", "512"]),
        ("vllm", ["--max-num-batched-tokens", "8k"], ["--chunked-prefill-size", "8000"]),
        ("vllm", ["--disable-chunked-prefill"], ["--chunked-prefill-size", "-1"]),
        (
            "vllm",
            ["--max-num-batched-tokens", "16384", "--disable-chunked-prefill"],
            ["--max-prefill-tokens", "16384", "--chunked-prefill-size", "-1"],
        ),
        (
            "vllm",
            ["--enforce-eager"],
            ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"],
        ),
        ("vllm", ["--kv-cache-dtype", "fp8"], ["--kv-cache-dtype", "fp8_e4m3"]),
        ("vllm", ["--kv-cache-dtype=fp8_e5m2"], ["--kv-cache-dtype=fp8_e5m2"]),
        ("vllm", ["--served-model-name", "mm"], ["--served-model-name", "mm"]),
        ("vllm", ["--trust-remote-code"], ["--trust-remote-code"]),
        ("vllm", ["--enable-eplb"], ["--enable-eplb"]),
        ("vllm", ["--eplb-config.num_redundant_experts", "32"], ["--ep-num-redundant-experts", "32"]),
        ("vllm", ["--eplb-config", '{"num_redundant_experts": 16}'], ["--ep-num-redundant-experts", "16"]),
        ("vllm", ["--tokenizer", "org/tok"], ["--tokenizer-path", "org/tok"]),
        ("vllm", ["--dtype", "bfloat16"], ["--dtype", "bfloat16"]),
        ("vllm", ["--quantization", "fp8"], ["--quantization", "fp8"]),
        ("vllm", ["--revision", "main"], ["--revision", "main"]),
        ("vllm", ["--seed", "7"], ["--random-seed", "7"]),
        ("vllm", ["--block-size", "64"], ["--page-size", "64"]),
        ("vllm", ["--disable-prefix-caching"], ["--disable-radix-cache"]),
        ("vllm", ["--max-cudagraph-capture-size", "256"], ["--cuda-graph-max-bs-decode", "256"]),
        ("vllm", ["--tool-call-parser", "minimax_m2"], ["--tool-call-parser", "minimax-m2"]),
        ("vllm", ["--reasoning-parser", "openai_gptoss"], ["--reasoning-parser", "gpt-oss"]),
        ("sglang", ["--context-length", "32768"], ["--max-model-len", "32768"]),
        ("sglang", ["--context-length", "32Ki"], ["--max-model-len", "32768"]),
        ("sglang", ["--context-len", "4096"], ["--max-model-len", "4096"]),  # argparse's unique prefix
        ("sglang", ["--max-running-requests", "256"], ["--max-num-seqs", "256"]),
        ("sglang", ["--chunked-prefill-size", "8192"], ["--max-num-batched-tokens", "8192"]),
        ("sglang", ["--chunked-prefill-size", "-1"], ["--disable-chunked-prefill"]),
        ("sglang", ["--disable-cuda-graph"], ["--enforce-eager"]),
        ("sglang", ["--cuda-graph-backend-decode=disabled"], ["--enforce-eager"]),
        ("sglang", ["--kv-cache-dtype", "fp8_e4m3"], ["--kv-cache-dtype", "fp8_e4m3"]),
        ("sglang", ["--kv-cache-dtype", "bf16"], ["--kv-cache-dtype", "bfloat16"]),
        ("sglang", ["--random-seed", "3"], ["--seed", "3"]),
        ("sglang", ["--tokenizer-path", "org/tok"], ["--tokenizer", "org/tok"]),
        (
            "sglang",
            ["--enable-eplb", "--ep-num-redundant-experts", "32"],
            ["--enable-eplb", "--eplb-config.num_redundant_experts", "32"],
        ),
        ("sglang", ["--disable-radix-cache"], ["--disable-prefix-caching"]),
        ("sglang", ["--log-requests"], ["--enable-log-requests"]),
        ("sglang", ["--cuda-graph-max-bs-decode", "128"], ["--max-cudagraph-capture-size", "128"]),
        (
            "sglang",
            ["--tool-call-parser", "minimax-m2"],
            ["--tool-call-parser", "minimax_m2", "--enable-auto-tool-choice"],
        ),
        ("sglang", ["--trust-remote-code", "--enable-eplb"], ["--trust-remote-code", "--enable-eplb"]),
        ("sglang", ["--api-key=-starts-with-a-dash"], ["--api-key=-starts-with-a-dash"]),
    ],
)
def test_common_knobs_are_translated(source, args, expected):
    words, _ = translated(args, source)
    assert list(words) == expected


def test_renames_are_said_and_drops_name_the_flag():
    words, notes = translated(["--max-model-len", "32768", "-O3", "--disable-log-stats"], "vllm")
    assert words == ("--context-length", "32768")
    assert "--max-model-len 32768 is --context-length 32768 on SGLang 0.5.23" in notes
    assert any(n.startswith("--optimization-level 3 dropped") for n in notes)
    assert any(n.startswith("--disable-log-stats dropped: SGLang 0.5.23 has no such flag") for n in notes)


@pytest.mark.parametrize(
    "source, flag", [("vllm", "--gpu-memory-utilization"), ("sglang", "--mem-fraction-static")]
)
def test_the_memory_share_does_not_carry_over(source, flag):
    """vLLM's share holds weights, activations, graphs and KV; SGLang's static share weights and KV."""
    words, notes = translated([flag, "0.9"], source)
    assert words == ()
    (note,) = notes
    assert note.startswith(f"{flag} 0.9 dropped") and "weights and the KV pool" in note


@pytest.mark.parametrize(
    "source, args, dropped",
    [
        ("vllm", ["--kv-cache-dtype", "float16"], "--kv-cache-dtype float16 dropped"),  # SGLang has none
        ("sglang", ["--kv-cache-dtype", "mxfp8"], "--kv-cache-dtype mxfp8 dropped"),
        ("vllm", ["--max-model-len", "auto"], "--max-model-len auto dropped"),
        ("vllm", ["--tensor-parallel-size", "8"], "dropped: the layout's tpN says it"),
        ("sglang", ["--tp-size", "8"], "dropped: the layout's tpN says it"),
        ("sglang", ["--max-total-tokens", "100000"], "--max-total-tokens 100000 dropped"),
        ("sglang", ["--enable-dp-lm-head"], "--enable-dp-lm-head dropped"),
        (
            "sglang",
            ["--ep-num-redundant-experts", "32"],
            "vLLM takes redundant experts only with --enable-eplb",
        ),
        ("vllm", ["--attention-backend", "FLASHINFER"], "name their attention kernels differently"),
        ("vllm", ["--tool-call-parser", "hermes_v9"], "--tool-call-parser hermes_v9 dropped"),
        (
            "sglang",
            ["--cuda-graph-backend-prefill", "disabled"],
            "--cuda-graph-backend-prefill disabled dropped",
        ),
        ("vllm", ["--no-enforce-eager"], "--no-enforce-eager dropped: it is SGLang 0.5.23's default"),
        ("vllm", ["--no-trust-remote-code"], "--no-trust-remote-code dropped: it is SGLang 0.5.23's default"),
    ],
)
def test_what_the_other_engine_lacks_is_dropped_with_a_note(source, args, dropped):
    words, notes = translated(args, source)
    assert words == ()
    assert any(dropped in note for note in notes), notes


def test_several_values_where_sglang_takes_one_keep_the_first_and_keys_stay_secret():
    words, notes = translated(["--served-model-name", "a", "b", "--api-key", "k1", "k2"], "vllm")
    assert words == ("--served-model-name", "a", "--api-key", "k1")
    assert not any("k1" in note or "k2" in note for note in notes)


def test_vllm_enable_disable_pairs_read_both_ways():
    """`--enable-custom-all-reduce` turns vLLM's --disable-custom-all-reduce off
    (vllm/utils/argparse_utils.py EnableDisableAction): SGLang's default, nothing to pass."""
    words, _ = translated(["--enable-custom-all-reduce"], "vllm")
    assert words == ()
    words, _ = translated(["--disable-custom-all-reduce"], "vllm")
    assert words == ("--disable-custom-all-reduce",)


def test_the_same_engine_is_left_alone():
    args = ["--max-model-len", "32k", "--gpu-memory-utilization", "0.9"]
    assert translate_args(args, "vllm", "vllm") == (tuple(args), ())


def test_a_bad_source_argument_is_one_line():
    with pytest.raises(CockpitError, match="did you mean --max-num-seqs") as err:
        translate_args(["--max-num-sqs", "512"], "vllm", "sglang")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "source, args",
    [
        (
            "vllm",
            [
                "--max-model-len",
                "32768",
                "--gpu-memory-utilization",
                "0.90",
                "--max-num-seqs",
                "256",
                "--trust-remote-code",
            ],
        ),
        ("vllm", ["--max-model-len", "32768"]),
        ("sglang", ["--trust-remote-code", "--context-length", "32768"]),
    ],
)
def test_the_bundled_profiles_args_translate_whole(source, args):
    words, notes = translated(args, source)
    assert words and notes


def _sample(option: Option) -> list[str] | None:
    """One plausible use of an option: the flag alone, with its first choice, or with its default."""
    if not option.takes_value:
        return [option.name]
    if option.choices:
        return [option.name, str(option.choices[0])]
    text = str(option.default)
    if isinstance(option.default, (int, float, str)) and text and not text.startswith(("-", "{", "[")):
        count = option.nargs if isinstance(option.nargs, int) else 1
        return [option.name, *[text] * count]
    return None


@pytest.mark.parametrize("source", ["vllm", "sglang"])
def test_every_flag_of_either_engine_translates_to_something_the_other_takes(source):
    """Each option of the source table, used alone: whatever comes out parses with the target's
    table, and a flag that yields nothing is named in a note."""
    table = option_table(source)
    tried = 0
    for option in table.options:
        args = _sample(option)
        if args is None:
            continue
        try:
            check_args(table, args)
        except CockpitError:
            continue  # a default the parser itself would not take back (a None-ish text)
        words, notes = translated(args, source)
        tried += 1
        if not words:
            assert any(args[0] in note for note in notes), (args, notes)
    assert tried > 150


@pytest.mark.parametrize(
    "source, args, expected",
    [
        ("vllm", ["--enable-flashinfer-autotune"], ()),  # SGLang's default; its flag is the inverse
        ("sglang", ["--disable-flashinfer-autotune"], ("--disable-flashinfer-autotune",)),
        ("vllm", ["--disable-flashinfer-autotune"], ("--disable-flashinfer-autotune",)),
        ("vllm", ["--model", "org/other"], ()),  # the profile's model: names the model
        ("vllm", ["--model-impl", "vllm"], ("--model-impl", "sglang")),
        ("sglang", ["--model-impl", "mindspore"], ()),
        ("sglang", ["--reasoning-parser", "auto"], ()),
    ],
)
def test_shared_spellings_keep_their_meaning(source, args, expected):
    words, notes = translated(args, source)
    assert words == expected
    assert words or any(args[0] in note for note in notes)
