"""Server arguments checked against the engines' own option tables, before anything launches,
and the simulated engine parsing with the same tables.

The tables are the engines' argparse actions (tools/engine_options.py); the option lists in
tests/fixtures/engines/ were read from the same releases independently, so the first tests hold
the generated tables to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import free_port
from simproc import SimProcess

from cockpit.core.errors import CockpitError
from cockpit.engines import check_args, get_engine, option_table, server_args
from cockpit.engines.options import size_value, table_version
from cockpit.sim.flags import parse_engine_args

FIXTURES = Path(__file__).parent / "fixtures" / "engines"

# Flags people pass to the real engines today (as in the engines' own recipes and bug reports), each with a value
# where it takes one. All of them must pass the check and start the simulated engine.
VLLM_REAL = [
    ["-O3"],
    ["--enable-prefix-caching"],
    ["--no-enable-prefix-caching"],
    ["--async-scheduling"],
    ["--tool-call-parser", "hermes"],
    ["--enable-auto-tool-choice"],
    ["--max-model-len", "32k"],
    ["--max_num_seqs", "256"],
    ["--data-parallel-size-local", "1"],
    ["--kv-cache-dtype", "fp8"],
    ["--gpu-memory-utilization=0.9"],
    ["--max-num-batched-tokens", "16384"],
    ["--enforce-eager"],
    ["--trust-remote-code"],
    ["--served-model-name", "m1", "m2"],
    ["--enable-eplb"],
    ["--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}'],
    ["--compilation-config.mode", "3"],
    ["--reasoning-parser", "deepseek_r1"],
    ["--disable-log-stats"],
    ["--no-enable-log-requests"],
    ["--seed", "1"],
    ["--block-size", "32"],
    ["--uvicorn-log-level", "warning"],
    ["--max-cudagraph-capture-size", "256"],
    ["--all2all-backend", "deepep_low_latency"],
]
SGLANG_REAL = [
    ["--attn-dp-size", "2"],
    ["--moe-dense-tp-size", "1"],
    ["--max-total-tokens", "200000"],
    ["--disable-radix-cache"],
    ["--nnodes", "1"],
    ["--context-length", "32k"],
    ["--mem-fraction-static", "0.85"],
    ["--max-running-requests", "256"],
    ["--chunked-prefill-size", "-1"],
    ["--kv-cache-dtype", "fp8_e4m3"],
    ["--cuda-graph-max-bs-decode", "160"],
    ["--random-seed", "1"],
    ["--trust-remote-code"],
    ["--enable-dp-lm-head"],
    ["--ep-num-redundant-experts", "32"],
    ["--enable-eplb"],
    ["--moe-a2a-backend", "deepep"],
    ["--served-model-name", "m1"],
    ["--tool-call-parser", "kimi_k2"],
    ["--enable-metrics"],
]


def fixture_spellings(engine: str, version: str) -> set[str]:
    data = json.loads((FIXTURES / f"{engine}-{version}-options.json").read_text())
    return {s for o in data["options"] for s in o["options"]}


@pytest.mark.parametrize("engine,version", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_the_tables_hold_every_spelling_of_the_engines_parsers(engine, version):
    table = option_table(engine, version)
    spellings = {s for o in table.options for s in o.spellings}
    assert spellings == fixture_spellings(engine, version)


@pytest.mark.parametrize(
    "engine,flags", [("vllm", f) for f in VLLM_REAL] + [("sglang", f) for f in SGLANG_REAL]
)
def test_real_flags_pass_the_check(engine, flags):
    check_args(option_table(engine), flags)


@pytest.mark.parametrize(
    "engine,args,words",
    [
        ("vllm", ["--max-num-sqs", "512"], ["--max-num-sqs", "did you mean --max-num-seqs?"]),
        ("vllm", ["--max-num", "8"], ["--max-num is ambiguous in vLLM 0.33.0", "--max-num-seqs"]),
        ("sglang", ["--kv-cache-dtype", "fp8"], ["'fp8'", "did you mean fp8_e4m3?", "fp8_e5m2"]),
        ("vllm", ["--kv-cache-dtype", "fp9"], ["did you mean fp8?"]),
        ("vllm", ["--swap-space", "4"], ["--swap-space", "gone from vLLM 0.33.0"]),
        ("sglang", ["--seed", "1"], ["--random-seed"]),
        ("sglang", ["--cuda-graph-max-bs", "8"], ["ambiguous", "--cuda-graph-max-bs-decode"]),
        ("vllm", ["--max-num-seqs", "lots"], ["--max-num-seqs", "whole number", "'lots'"]),
        ("vllm", ["--max-num-seqs"], ["--max-num-seqs needs a value"]),
        ("vllm", ["--max-model-len", "1.5K"], ["--max-model-len", "size like 32k"]),
        ("vllm", ["--enforce-eager=yes"], ["takes no value"]),
        ("vllm", ["512"], ["'512' belongs to no flag"]),
        ("sglang", ["--tp-size", "x"], ["whole number"]),
    ],
)
def test_bad_arguments_are_one_line_with_the_fix(engine, args, words):
    with pytest.raises(CockpitError) as err:
        check_args(option_table(engine), args)
    text = str(err.value)
    assert "\n" not in text and len(text) < 400
    for word in words:
        assert word in text


def test_sizes_read_as_each_engine_reads_them():
    assert size_value("32k", "vllm") == 32_000
    assert size_value("32K", "vllm") == 32_768
    assert size_value("1M", "vllm") == 2**20
    assert size_value("25.6k", "vllm") == 25_600
    assert size_value("auto", "vllm", allow_auto=True) == -1
    assert size_value("1M", "sglang") == 10**6
    assert size_value("32Ki", "sglang") == 32_768
    with pytest.raises(ValueError):
        size_value("32K", "sglang")  # SGLang's suffixes are case-sensitive: K is not one


def test_the_values_that_move_memory_are_read_by_meaning():
    vllm = server_args(
        check_args(
            option_table("vllm"),
            ["--max-model-len", "32k", "--kv-cache-dtype=fp8", "--max_num_seqs", "512", "--enforce-eager"],
        )
    )
    assert (vllm.max_model_len, vllm.kv_cache_dtype, vllm.max_num_seqs, vllm.cuda_graphs) == (
        32_000,
        "fp8",
        512,
        False,
    )
    assert vllm.gpu_memory_utilization == 0.92  # vLLM 0.33.0's own default, from the table
    sglang = get_engine("sglang").check(
        ["--context-length", "8k", "--max-running-requests", "64", "--chunked-prefill-size", "-1"]
    )
    assert (sglang.max_model_len, sglang.max_num_seqs, sglang.chunked_prefill) == (8000, 64, False)
    eplb = get_engine("vllm").check(["--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}'])
    assert eplb.enable_eplb and eplb.redundant_experts == 32


def test_a_unique_prefix_is_the_flag_as_the_engines_read_it_with_a_note():
    """Both parsers keep argparse's allow_abbrev: real vLLM 0.33.0 runs `--max-num-seq 512` as
    --max-num-seqs 512, so refusing it would refuse an argv the engine accepts."""
    checked = check_args(option_table("vllm"), ["--max-num-seq", "512"])
    assert checked.values == {"max_num_seqs": 512}
    assert checked.notes == (
        "--max-num-seq is read by vLLM 0.33.0 as --max-num-seqs (a unique prefix): write it out",
    )
    assert check_args(option_table("sglang"), ["--max-running-request", "5"]).values == {
        "max_running_requests": 5
    }
    assert parse_engine_args("vllm", ["m", "--max-num-seq", "512"]).non_default == (("max_num_seqs", 512),)


def test_the_simulator_keeps_a_flag_that_names_the_model_too():
    """Only vLLM's positional model is the model: a --tokenizer or --served-model-name spelled the
    same is a server argument with its value, as the real parser reads it."""
    args = parse_engine_args("vllm", ["vllm", "serve", "m", "--tokenizer", "m", "--served-model-name", "m"])
    assert args.model == "m" and args.argv == ("--tokenizer", "m", "--served-model-name", "m")


def test_deprecated_spellings_are_noted_with_their_replacement():
    checked = check_args(option_table("sglang"), ["--enable-dp-attention"])
    assert checked.deprecated == ("--enable-dp-attention",)
    assert "--attn-dp-size" in checked.notes[0]


def test_a_flag_after_a_deprecated_one_is_still_named_as_the_other_engines():
    with pytest.raises(CockpitError, match="that is SGLang's; vLLM 0.33.0 says --max-model-len"):
        check_args(option_table("vllm", "0.33.0"), ["--log-config-file", "x", "--context-length", "8"])


def test_an_unknown_version_uses_the_nearest_table_and_says_so():
    chosen, note = table_version("vllm", "0.40.1")
    assert chosen == "0.33.0" and "no option table for vLLM 0.40.1" in note
    assert table_version("sglang", "0.5.23") == ("0.5.23", "")
    engine = get_engine("vllm", "0.40.1")
    assert engine.version == "0.40.1" and engine.options.version == "0.33.0" and engine.version_note


# ---------------------------------------------------------------------------------------------
# The simulated engine parses with the same tables


def test_the_simulator_accepts_every_real_flag_and_reads_the_layout():
    flags = [word for f in VLLM_REAL for word in f if f[0] != "--compilation-config.mode"]
    args = parse_engine_args("vllm", ["vllm", "serve", "m", "-tp", "8", "--enable-expert-parallel", *flags])
    assert args.layout.tp == 8 and args.layout.expert_parallel and args.version == "0.33.0"
    assert "--max-num-seqs" in args.argv and "-tp" not in args.argv
    sglang = [word for f in SGLANG_REAL for word in f]
    args = parse_engine_args("sglang", ["--model-path", "m", "--tp-size", "8", "--ep", "8", *sglang])
    assert args.layout.dpa and args.layout.dp == 2 and args.layout.ep == 8


@pytest.mark.parametrize(
    "engine,argv,text",
    [
        ("vllm", ["m", "--swap-space", "4"], "vllm: error: unrecognized arguments: --swap-space 4"),
        ("vllm", ["m", "--max-num", "4"], "vllm serve: error: ambiguous option: --max-num could match"),
        ("sglang", ["--model-path", "m", "--max_running_requests", "4"], "sglang serve: error: unrecognized"),
        (
            "sglang",
            ["--model-path", "m", "--kv-cache-dtype", "fp8"],
            "argument --kv-cache-dtype: invalid choice: 'fp8'",
        ),
        (
            "sglang",
            ["--model-path", "m", "--cuda-graph-max-bs", "8"],
            "ambiguous option: --cuda-graph-max-bs could match",
        ),
        (
            "sglang",
            ["--model-path", "m", "--seed", "1"],
            "sglang serve: error: unrecognized arguments: --seed 1",
        ),
        ("vllm", ["m", "--max-num-seqs", "x"], "argument --max-num-seqs: invalid int value: 'x'"),
    ],
)
def test_the_simulator_rejects_what_the_engine_rejects_with_its_text(engine, argv, text, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_engine_args(engine, argv)
    assert exit_.value.code == 2
    assert text in capsys.readouterr().err


def test_real_flags_start_the_simulated_engines(tmp_path):
    """One process per engine, every flag of the lists above at once: both reach ready."""
    # (--enable-eplb without expert parallelism fails as vLLM does: it has its own test)
    vllm_flags = [word for f in VLLM_REAL if f[0] not in ("--enforce-eager", "--enable-eplb") for word in f]
    sglang_flags = [
        word for f in SGLANG_REAL if f[0] not in ("--attn-dp-size", "--enable-eplb") for word in f
    ]
    runs = [
        ("vllm", ["serve", "qwen3-30b-a3b-fp8", "-tp", "2", "--max-model-len", "8192", *vllm_flags]),
        (
            "sglang",
            [
                "--model-path",
                "qwen3-30b-a3b-fp8",
                "--tp-size",
                "2",
                *sglang_flags,
                "--context-length",
                "8192",
            ],
        ),
    ]
    for engine, argv in runs:
        port = free_port()
        sim = SimProcess(engine, [*argv, "--port", str(port)], tmp_path / "simbox")
        try:
            sim.wait_ready(f"http://127.0.0.1:{port}")
        finally:
            sim.stop()


@pytest.mark.parametrize(
    "engine,argv,text",
    [
        (
            "sglang",
            ["--model-path", "m", "--context-length", "32K"],
            "Invalid integer value: '32K'. Use a plain integer",
        ),
        ("vllm", ["m", "--max-model-len", "1.5M"], "Decimals are not allowed with binary suffixes like M."),
        ("vllm", ["m", "--max-model-len", "lots"], "invalid human_readable_int_or_auto value: 'lots'"),
    ],
)
def test_the_simulator_words_a_bad_size_as_the_engine_does(engine, argv, text, capsys):
    with pytest.raises(SystemExit):
        parse_engine_args(engine, argv)
    assert text in capsys.readouterr().err


def test_numeric_choices_are_compared_as_the_engine_converts_them():
    """The table keeps choices as typed ('2'); argparse compares the converted value (2)."""
    assert ("log_requests_level", 3) in parse_engine_args(
        "sglang", ["--model-path", "m", "--log-requests-level", "3"]
    ).non_default
    parse_engine_args("vllm", ["m", "--max-lora-rank", "32"])  # no SystemExit


def test_the_tables_load_on_first_use_not_at_import():
    """~30 ms of data that `cockpit --help`, the bench child and the simulator's box never need."""
    import subprocess
    import sys

    code = (
        "import sys, cockpit.engines as e; "
        "print(any('engines.tables.' in m for m in sys.modules)); "
        "e.get_engine('vllm').options; "
        "print('cockpit.engines.tables.vllm_0_33_0' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
