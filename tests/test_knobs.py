"""Knobs: server arguments typed after a layout, checked, planned, launched, journaled, compared."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import replace

import pytest
from test_run import cockpit, fast_sim, journal_rows  # noqa: F401  (the fixture sets up sim, journal, state)
from tuipilot import make_app, small_profile, status_text, submit, until

from cockpit.core.commands import Sweep, Try
from cockpit.core.errors import CockpitError
from cockpit.core.layout import parse_layout
from cockpit.core.perfmodel import for_verdict
from cockpit.core.planner import FAILS, plan_layout
from cockpit.engines.arguments import knob_next_step
from cockpit.engines.options import option_table
from cockpit.faces.prompt import parse_command
from cockpit.store.profile_setup import SetupOverrides, build_setup


@pytest.fixture(scope="module")
def demo():
    return build_setup(SetupOverrides(profile="demo"))[0]


def test_knobs_follow_the_layout_in_the_prompt_and_in_sweeps():
    command = parse_command("try tp8 ep --max-num-seqs 512 --kv-cache-dtype fp8_e4m3")
    assert isinstance(command, Try)
    assert command.layout.parallel == parse_layout("tp8 ep")
    assert command.layout.knobs == ("--max-num-seqs", "512", "--kv-cache-dtype", "fp8_e4m3")
    assert str(command.layout) == "tp8 ep --max-num-seqs 512 --kv-cache-dtype fp8_e4m3"
    sweep = parse_command("sweep tp8 ep, tp8 ep --max-num-seqs 512 c=1,32")
    assert isinstance(sweep, Sweep)
    assert [str(x) for x in sweep.layouts] == ["tp8 ep", "tp8 ep --max-num-seqs 512"]
    assert sweep.bench.concurrency == (1, 32)
    quoted = parse_command("""sweep tp8 --compilation-config '{"mode": 3, "cudagraph_mode": "FULL"}', tp4""")
    assert [x.knobs for x in quoted.layouts] == [
        ("--compilation-config", '{"mode": 3, "cudagraph_mode": "FULL"}'),
        (),
    ]
    assert parse_layout(str(quoted.layouts[0])) == quoted.layouts[0]  # the name reads back as typed


def test_a_knob_lands_in_argv_after_the_profiles_arguments(demo):
    verdict = plan_layout(demo, "tp8 ep --max-num-seqs 512")
    assert verdict.verdict != FAILS
    assert verdict.argv[-4:] == ("--max-model-len", "32768", "--max-num-seqs", "512")


def test_a_typo_in_a_knob_fails_the_verdict_with_the_real_spelling(demo):
    verdict = plan_layout(demo, "tp8 ep --max-num-sqs 512")
    assert verdict.verdict == FAILS and not verdict.argv
    assert "did you mean --max-num-seqs?" in str(verdict.reasons[0])


def test_parallel_sizes_are_said_in_the_layout_not_as_knobs(demo):
    verdict = plan_layout(demo, "tp8 --tensor-parallel-size 4")
    assert verdict.verdict == FAILS
    assert "knob --tensor-parallel-size is the layout's tpN's to say" in str(verdict.reasons[0])


def test_fp8_kv_cache_holds_twice_the_tokens_as_the_engine_counts_them(demo):
    """vLLM sizes a KV page by the cache dtype (vllm/v1/kv_cache_interface.py: page_size_bytes
    = 2 x block x kv_heads x head_dim x dtype size), so the same budget holds twice the tokens."""
    bf16 = plan_layout(demo, "tp8 ep").memory
    fp8 = plan_layout(demo, "tp8 ep --kv-cache-dtype fp8").memory
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    assert fp8.kv_budget_gib == bf16.kv_budget_gib
    assert fp8.kv_tokens == math.floor(fp8.kv_budget_gib * 2**30 // fp8.kv_bytes_per_token)
    assert abs(fp8.kv_tokens - 2 * bf16.kv_tokens) <= 2


def test_memory_and_speed_knobs_move_the_plan(demo):
    base = plan_layout(demo, "tp8 ep")
    eager = plan_layout(demo, "tp8 ep --enforce-eager")
    assert eager.memory.reserve_gib < base.memory.reserve_gib  # no captured graphs
    assert eager.memory.kv_tokens > base.memory.kv_tokens
    slow = for_verdict(demo, eager).decode_tok_s(1, 512, 256)
    assert slow < for_verdict(demo, base).decode_tok_s(1, 512, 256)  # every kernel launched from the CPU
    chunk = plan_layout(demo, "tp8 ep --max-num-batched-tokens 32768")
    assert chunk.memory.reserve_gib > base.memory.reserve_gib  # a larger activation peak
    share = plan_layout(demo, "tp8 ep --gpu-memory-utilization 0.8")
    assert share.memory.kv_budget_gib < base.memory.kv_budget_gib
    capped = for_verdict(demo, plan_layout(demo, "tp8 ep --max-num-seqs 16"))
    assert capped.effective_concurrency(64, 768) == 16
    too_long = plan_layout(demo, "tp8 ep --max-model-len 10000000")
    assert too_long.verdict == FAILS
    assert (
        "Value error, User-specified max_model_len (10000000) is greater than the derived max_model_len"
        in str(too_long.reasons[0])
    )


def test_eplb_redundant_experts_add_weights_on_every_gpu():
    kimi = build_setup(SetupOverrides(profile="kimi-k2.6", engine="vllm"))[0]
    kimi = replace(kimi, server_args=())
    base = plan_layout(kimi, "tp8 ep")
    eplb = plan_layout(kimi, "tp8 ep --enable-eplb --eplb-config.num_redundant_experts 32")
    experts = kimi.model.moe.experts
    assert eplb.memory.weights_by_group["experts"] == pytest.approx(
        base.memory.weights_by_group["experts"] * math.ceil((experts + 32) / 8) / math.ceil(experts / 8)
    )


def test_a_knob_run_is_launched_journaled_and_its_own_row(profile_file):
    profile, _ = profile_file("demo")
    for text in ("try tp8 ep", "try tp8 ep --max-num-seqs 512"):
        result = cockpit(
            "run",
            text,
            "--profile",
            profile,
            "--sim",
            "--quiet",
            "--bench",
            "c=1,32 in=32 out=8 t=1",
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
    rows = {row.layout: row for row in journal_rows()}
    assert set(rows) == {"tp8 ep", "tp8 ep --max-num-seqs 512"}
    assert list(rows["tp8 ep --max-num-seqs 512"].argv[-2:]) == ["--max-num-seqs", "512"]
    assert "--max-num-seqs" not in rows["tp8 ep"].argv
    data = json.loads(cockpit("results", "--profile", "demo", "--format", "json").stdout)
    assert {p["layout"] for p in data if p.get("concurrency")} == {"tp8 ep", "tp8 ep --max-num-seqs 512"}
    table = cockpit("results", "--profile", "demo", "--format", "markdown").stdout
    assert "| tp8 ep --max-num-seqs 512 |" in table


def test_a_deprecated_spelling_runs_with_a_warning_that_names_its_replacement():
    kimi = build_setup(SetupOverrides(profile="kimi-k2.6"))[0]
    verdict = plan_layout(kimi, "tp8 --disable-cuda-graph")
    assert verdict.verdict != FAILS
    assert verdict.warnings == (
        "--disable-cuda-graph is deprecated in SGLang 0.5.23: Use --cuda-graph-backend-{decode,prefill}=disabled instead.",
    )
    assert plan_layout(kimi, "tp8").warnings == ()


def test_sweep_knobs_keep_their_quotes_and_equals_signs():
    sweep = parse_command(
        """sweep tp8 --served-model-name a=b, tp4 --chat-template-kwargs '{"a": "x = y"}' c = 1,32"""
    )
    assert [x.knobs for x in sweep.layouts] == [
        ("--served-model-name", "a=b"),
        ("--chat-template-kwargs", '{"a": "x = y"}'),
    ]
    assert sweep.bench.concurrency == (1, 32)
    with pytest.raises(CockpitError, match="neither a layout nor a bench setting"):
        parse_command("sweep tp8, tp4 foo=3")


@pytest.mark.parametrize(
    "engine,args,graphs",
    [
        ("vllm", [], True),
        ("vllm", ["--enforce-eager"], False),
        ("vllm", ["-O0"], False),  # vllm/config/vllm.py OptimizationLevel.O0: no cudagraphs
        ("vllm", ["-cc.cudagraph_mode", "NONE"], False),
        ("vllm", ["-O3"], True),
        ("sglang", ["--disable-cuda-graph"], False),
        ("sglang", ["--disable-decode-cuda-graph"], False),
        ("sglang", ["--cuda-graph-backend-decode", "disabled"], False),
    ],
)
def test_every_way_to_turn_cuda_graphs_off_is_read(engine, args, graphs):
    from cockpit.engines import get_engine

    assert get_engine(engine).check(args).cuda_graphs is graphs


def test_a_profiles_layout_knobs_are_said_again_on_the_other_engine():
    from cockpit.store.profile import load_profile
    from cockpit.store.profile_setup import profile_for_engine

    profile = replace(load_profile("demo"), layouts=("tp8 ep --max-num-seqs 512", "tp4"))
    switched, notes = profile_for_engine(profile, "sglang")
    assert switched.layouts == ("tp8 ep --max-running-requests 512", "tp4")
    assert any(note.startswith("layout `tp8 ep --max-num-seqs 512`:") for note in notes)


@pytest.mark.parametrize(
    "engine,argv,fix",
    [
        (
            "vllm",
            ["serve", "qwen3-30b-a3b-fp8", "--max-model-len", "10M"],
            "set --max-model-len 40960 or less",
        ),
        (
            "sglang",
            ["--model-path", "qwen3-30b-a3b-fp8", "--context-length", "10M"],
            "set --context-length 40960",
        ),
    ],
)
def test_a_context_length_above_the_models_stops_the_engine_and_is_diagnosed(tmp_path, engine, argv, fix):
    """Both engines refuse it at startup in their own words (vLLM wrapped by pydantic's ModelConfig)."""
    from helpers import free_port
    from simproc import SimProcess

    from cockpit.runner.diagnose import diagnose

    sim = SimProcess(engine, [*argv, "--port", str(free_port())], tmp_path / "simbox")
    try:
        assert sim.wait_exit() == 1
        out = sim.output()
    finally:
        sim.stop()
    assert "is greater than the derived" in out
    found = diagnose(out.splitlines())
    assert found is not None and found.kind == "max-model-len" and fix in found.next_step


def test_use_names_a_profile_and_maybe_an_engine():
    from cockpit.core.commands import Use

    assert parse_command("use kimi-k2.6 on vllm") == Use("kimi-k2.6", "vllm")
    assert parse_command("use /tmp/my profiles/p.yaml --engine=sglang") == Use(
        "/tmp/my profiles/p.yaml", "sglang"
    )
    assert parse_command("use /tmp/my profiles/p.yaml") == Use("/tmp/my profiles/p.yaml")


def test_tab_offers_server_flags_after_a_layout_only():
    from cockpit.faces.prompt import completions

    flags = ("--max-num-seqs", "--max-num-batched-tokens", "--engram-config")
    assert completions("try tp8 --max-num-s", flags=flags) == ["try tp8 --max-num-seqs"]
    assert completions("sweep tp4, tp8 --max-num-b", flags=flags) == [
        "sweep tp4, tp8 --max-num-batched-tokens"
    ]
    assert completions("use kimi-k2.6 --eng", flags=flags) == []


@pytest.mark.parametrize(
    ("engine", "typed", "next_step"),
    [
        ("vllm", "tp8 ep --max-num-seqz 512", "type `try tp8 ep --max-num-seqs 512`"),
        ("vllm", "tp8 --kv-cache-dtyp fp8", "type `try tp8 --kv-cache-dtype fp8`"),  # an ambiguous prefix
        ("vllm", "tp8 --max_num_seqz 4 --enforce-eagr", "type `try tp8 --max-num-seqs 4 --enforce-eager`"),
        ("vllm", "tp8 --kv-cache-dtype fp9", "type `try tp8 --kv-cache-dtype fp8`"),  # a choice
        ("sglang", "tp8 --max-num-seqs 256", "type `try tp8 --max-running-requests 256`"),  # vLLM's word
        ("vllm", "tp8 --tensor-parallel-size 4", "drop --tensor-parallel-size: the layout's tpN says it"),
        # a token among the knobs is not repeated in the hint (shown, and journaled as the next step)
        (
            "vllm",
            "tp4 --hf-token hf_abcdefgh --max-num-seqz 8",
            "type `try tp4 --hf-token *** --max-num-seqs 8`",
        ),
        # gone from vLLM, or nothing close: no line to offer (the error names the help command)
        (
            "vllm",
            "tp8 --swap-space 4",
            "check the flag's spelling in vLLM 0.33.0's options (on the screen, Tab after `try tp8 --` completes them)",
        ),
        (
            "sglang",
            "tp8 dp2 dpa --zzz 1",
            "check the flag's spelling in SGLang 0.5.23's options (on the screen, Tab after `try tp8 dp2 dpa --` completes them)",
        ),
    ],
)
def test_a_refused_knob_is_answered_with_the_flag_it_means_not_other_layouts(engine, typed, next_step):
    """Another layout carries the same mistyped flag: the hint is the line with the flag it means."""
    assert knob_next_step(option_table(engine), parse_layout(typed)) == next_step


def test_cockpit_run_answers_a_mistyped_knob_with_the_flag(profile_file):
    profile, _ = profile_file("demo")
    result = cockpit("run", "tp8 ep --max-num-seqz 512", "--profile", profile, "--sim")
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "did you mean --max-num-seqs?" in out, out
    assert "next      type `try tp8 ep --max-num-seqs 512`" in out, out
    assert "`tp4 dp2 ep`" not in out and not journal_rows()[0].argv  # nothing launched


def test_the_screen_answers_a_mistyped_knob_with_the_flag(profile_file):
    async def scenario():
        app = make_app(small_profile(profile_file))
        async with app.run_test(size=(120, 40)) as pilot:
            await submit(pilot, "tp8 ep --kv-cache-dtyp fp8")
            await until(pilot, lambda: "✗" in status_text(app), what="the refusal")
            return status_text(app)

    said = asyncio.run(scenario())
    assert "--kv-cache-dtyp is ambiguous" in said and "type `try tp8 ep --kv-cache-dtype fp8`" in said, said
    assert "`tp4 dp2 ep`" not in said
