"""The startup phases, read line by line from the simulator's logs, engine-style excerpts and a real
vLLM's own log (its CPU build: tests/fixtures/real_vllm_cpu/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.core.hardware import parse_box
from cockpit.core.planner import Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.runner.phases import PhaseTracker, log_message, strip_ansi
from cockpit.runner.supervisor import LogTail
from cockpit.sim.flags import parse_engine_args
from cockpit.sim.logs import for_engine
from cockpit.store.modelfiles import load_model

LOGS = Path(__file__).parent / "fixtures" / "logs"
REAL_CPU = Path(__file__).parent / "fixtures" / "real_vllm_cpu"


def feed_all(lines, engine=None):
    tracker = PhaseTracker(experiment=7, engine=engine)
    return tracker, [phase for line in lines if (phase := tracker.feed(line)) is not None]


def test_sim_vllm_startup():
    tracker, phases = feed_all((LOGS / "sim_vllm_startup.log").read_text().splitlines())
    assert [p.name for p in phases] == [
        "starting", "loading", "loading", "loading", "loading", "loaded", "kv_cache", "kv_cache", "cuda_graphs", "serving",
    ]  # fmt: skip
    assert [p.progress for p in phases if p.name == "loading"] == [None, 0.0, 0.51, 1.0]
    assert all(p.experiment == 7 for p in phases)
    assert tracker.phase == "serving" and tracker.ready_line_seen
    assert tracker.weights_gib == 53.6252 and tracker.kv_tokens == 492_117
    assert phases[-3].detail == "492,117 tokens of KV cache"


def test_sim_sglang_startup():
    tracker, phases = feed_all((LOGS / "sim_sglang_startup.log").read_text().splitlines())
    assert [p.name for p in phases] == [
        "starting", "loading", "loading", "loading", "loading", "loading", "loaded", "kv_cache", "cuda_graphs", "serving",
    ]  # fmt: skip
    assert tracker.engine == "sglang" and tracker.ready_line_seen
    assert tracker.weights_gib == 70.95 and tracker.kv_tokens == 192_877


def test_sglang_0_5_23_startup_passes_every_phase():
    """SGLang 0.5.23's own words: "Init parallel begin.", "KV Cache is allocated. dtype: ...",
    "Capture target decode CUDA graph begin.", server_args as a dict."""
    tracker, phases = feed_all((LOGS / "sglang_0_5_23_startup.log").read_text().splitlines())
    assert [p.name for p in phases] == [
        "starting", "loading", "loading", "loading", "loading", "loading", "loaded", "kv_cache", "cuda_graphs", "serving",
    ]  # fmt: skip
    assert [p.progress for p in phases if p.name == "loading"] == [None, 0.0, 0.25, 0.5, 1.0]
    assert tracker.engine == "sglang" and tracker.ready_line_seen
    assert tracker.weights_gib == 53.75 and tracker.kv_tokens == 431_204
    assert phases[-3].detail == "431,204 tokens of KV cache"


def test_vllm_0_33_startup_passes_every_phase():
    """vLLM 0.33 puts the KV size and the maximum concurrency on one line."""
    tracker, phases = feed_all((LOGS / "vllm_0_33_startup.log").read_text().splitlines())
    assert [p.name for p in phases] == [
        "starting", "loading", "loading", "loading", "loading", "loaded", "kv_cache", "kv_cache", "cuda_graphs", "serving",
    ]  # fmt: skip
    assert tracker.engine is None and tracker.ready_line_seen
    assert tracker.weights_gib == 53.63 and tracker.kv_tokens == 492_117
    assert phases[-3].detail == "492,117 tokens of KV cache"


def real_cpu_log(name: str) -> list[str]:
    """A real vLLM's log as the supervisor reads it: lines split at carriage returns too."""
    return LogTail(REAL_CPU / name).flush()


@pytest.mark.parametrize("name, seconds", [("ready.log", "0.03"), ("ready2.log", "0.02")])
def test_a_real_vllm_on_cpu_passes_every_phase_but_the_graphs(name, seconds):
    """vLLM 0.32's CPU build, eager: no "Model loading took ... GiB" and no CUDA graphs. The loader's
    "Loading weights took" says the weights are in, the CPU worker's "Explicitly set (1.0/7.46) GiB
    for KV cache" and "CPU KV cache size" the pool, uvicorn's line that it serves."""
    lines = real_cpu_log(name)
    tracker = PhaseTracker(experiment=7)
    seen = [(index, phase) for index, line in enumerate(lines) if (phase := tracker.feed(line)) is not None]
    phases = [phase for _, phase in seen]
    assert [p.name for p in phases] == [
        "starting", "loading", "loading", "loading", "loaded", "kv_cache", "kv_cache", "serving",
    ]  # fmt: skip
    assert [p.progress for p in phases if p.name == "loading"] == [None, 0.0, 1.0]
    assert [p.detail for p in phases if p.name in ("loaded", "kv_cache")] == [
        f"weights loaded in {seconds} s",
        "1.0 GiB for the KV cache",
        "1,048,576 tokens of KV cache",
    ]
    ready_at = seen[-1][0]
    assert lines[ready_at] == "INFO:     Application startup complete."
    assert tracker.phase == "serving" and tracker.ready_line_seen and tracker.engine is None
    assert tracker.weights_gib is None and tracker.kv_tokens == 1_048_576


def test_the_cpu_loaders_and_workers_words_in_every_form():
    """vllm/model_executor/model_loader/default_loader.py before the GPU runner's own line, and the
    CPU worker's automatic KV size (vllm/v1/worker/cpu_worker.py: determine_available_memory)."""
    tracker = PhaseTracker(experiment=1)
    loader = (
        "(Worker_TP0 pid=3) INFO 05-06 20:59:57 [default_loader.py:384] Loading weights took 24.84 seconds"
    )
    runner = "(Worker_TP0 pid=3) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB memory and 31.657031 seconds"
    assert tracker.feed(loader).detail == "weights loaded in 24.84 s"
    assert tracker.feed(runner).detail == "12.66 GiB of weights per GPU"
    assert tracker.feed(loader.replace("24.84", "25.10")) is None  # a later rank's loader: the GiB stand
    tracker = PhaseTracker(experiment=1)
    auto = (
        "(Worker pid=9) INFO 12-02 07:53:37 [cpu_worker.py:260] Auto set (5.12/7.46) GiB for KV cache on node 0, "
        "with 6.4 GiB requested memory for the worker. 1.28 GiB memory was consumed by non-kv usages."
    )
    phase = tracker.feed(auto)
    assert (phase.name, phase.detail) == ("kv_cache", "5.12 GiB for the KV cache")


def simulated_startup(engine: str, argv: list[str]) -> tuple[list[str], int]:
    """The simulated engine's lines from start to ready, hook by hook without its waits, and the
    KV tokens of one attention replica as the planner counts them."""
    args = parse_engine_args(engine, argv)
    setup = Setup(
        load_model(args.model),
        parse_box("8xrtx-pro-6000"),
        get_engine(engine),
        server_args=args.argv,
        model_path=args.model,
    )
    verdict = plan_layout(setup, args.layout)
    assert verdict.placement is not None and verdict.memory is not None
    lines: list[str] = []
    log = for_engine(engine, lines.append)
    log.starting(args, setup, verdict)
    for done in (0, 5, 10):
        log.shard_progress(done, 10, 1.0 + done)
    log.loaded(setup, verdict.memory)
    log.kv_ready(setup, verdict.placement, verdict.memory)
    log.ready(args)
    return lines, verdict.memory.kv_tokens // verdict.placement.attn_replicas


def test_the_simulated_sglang_speaks_0_5_23_and_every_phase_is_seen():
    lines, tokens = simulated_startup(
        "sglang",
        ["--model-path", "moonshotai/Kimi-K2.6", "--tp-size", "8", "--ep-size", "8", "--port", "30000"],
    )
    text = "\n".join(lines)
    assert lines[0].split("] ", 1)[1].startswith("server_args={'model_path': 'moonshotai/Kimi-K2.6'")
    for words in ("Init parallel begin.", "Capture target decode CUDA graph begin. backend=full", "#tokens:"):
        assert words in text
    assert f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, KV size: " in text  # MLA
    for old in ("Init torch distributed", "ServerArgs(", "Capture cuda graph"):
        assert old not in text
    tracker, phases = feed_all(lines)
    assert [p.name for p in phases if p.name != "loading"] == [
        "starting",
        "loaded",
        "kv_cache",
        "cuda_graphs",
        "serving",
    ]
    assert tracker.engine == "sglang" and tracker.kv_tokens == tokens and tracker.ready_line_seen


def test_the_simulated_vllm_speaks_0_33_and_every_phase_is_seen():
    lines, tokens = simulated_startup(
        "vllm", ["serve", "MiniMaxAI/MiniMax-M2.5", "--tensor-parallel-size", "4", "--max-model-len", "32768"]
    )
    text = "\n".join(lines)
    assert (
        "█  version 0.33.0" in text and "█  model   MiniMaxAI/MiniMax-M2.5" in text
    )  # the logo, as 0.32+ prints it
    assert "Initializing a V1 LLM engine (v0.33.0)" in text and "0.11" not in text
    assert (
        f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for 32,768 tokens per request: " in text
    )
    tracker, phases = feed_all(lines)
    # loaded twice: the loader's time, then the runner's memory, as a real GPU log says them.
    assert [p.name for p in phases if p.name != "loading"] == [
        "starting", "loaded", "loaded", "kv_cache", "kv_cache", "cuda_graphs", "serving",
    ]  # fmt: skip
    assert tracker.kv_tokens == tokens and tracker.ready_line_seen


def test_vllm_excerpt_stops_in_the_kv_phase():
    tracker, phases = feed_all((LOGS / "vllm_kv_max_len.log").read_text().splitlines())
    assert tracker.phase == "kv_cache" and not tracker.ready_line_seen
    assert tracker.weights_gib == 56.9318
    assert [p.progress for p in phases if p.name == "loading"] == [None, 0.0, 0.5, 1.0]


def test_sglang_uvicorn_startup_is_not_ready_before_the_warm_up():
    lines = [
        "[2026-11-29 20:38:47 DP0 TP0 EP0] Init torch distributed begin.",
        "INFO:     Application startup complete.",
        "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    ]
    tracker, _ = feed_all(lines)
    assert tracker.phase == "starting" and not tracker.ready_line_seen
    assert (
        tracker.feed("[2026-11-29 20:39:02 DP0 TP0 EP0] The server is fired up and ready to roll!").name
        == "serving"
    )
    assert tracker.ready_line_seen


def test_progress_only_when_the_percent_rises_and_phases_never_rewind():
    tracker = PhaseTracker(experiment=1)
    bar = "(Worker_TP0 pid=41514) Loading safetensors checkpoint shards:  45% Completed | 28/62 [00:10<00:14,  2.63it/s]"
    first = tracker.feed(bar)
    assert (first.name, first.progress, first.detail) == ("loading", 0.45, "28/62 shards")
    assert tracker.feed(bar) is None
    assert tracker.feed(bar.replace("45%", "40%")) is None
    assert (
        tracker.feed(
            "INFO 11-29 20:39:29 [gpu_model_runner.py:2653] Model loading took 56.93 GiB and 46.2 seconds"
        ).name
        == "loaded"
    )
    assert tracker.feed(bar.replace("45%", "99%")) is None  # a late rank's bar
    assert tracker.phase == "loaded"


def test_tqdm_carriage_returns_count_the_last_bar():
    tracker = PhaseTracker(experiment=1)
    line = (
        "\r".join(f"Loading safetensors checkpoint shards: {p:3d}% Completed | {p}/100" for p in (0, 10, 20))
        + "\r"
    )
    assert tracker.feed(line).progress == 0.2


def test_older_loaded_lines_and_prefixes():
    for line, gib in [
        ("INFO 12-18 10:02:40 llm_engine.py:223] Loading model weights took 13.4966 GB", 13.4966),
        (
            "(VllmWorker rank=0 pid=3) INFO 05-20 10:00:00 [model_runner.py:1] Model loading took 9.25 GiB and 5.1 seconds",
            9.25,
        ),
        (
            "[2026-11-29 20:38:47 TP3] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=75.11 GB, mem usage=107.07 GB.",
            107.07,
        ),
    ]:
        tracker = PhaseTracker(experiment=1)
        assert tracker.feed(line).name == "loaded"
        assert tracker.weights_gib == gib


def test_cuda_graph_and_kv_lines_of_both_engines():
    tracker = PhaseTracker(experiment=1)
    assert (
        tracker.feed(
            "[2026-11-29 20:40:01 TP0] KV Cache is allocated. #tokens: 524288, K size: 20.00 GB, V size: 20.00 GB"
        ).name
        == "kv_cache"
    )
    assert tracker.kv_tokens == 524_288
    assert (
        tracker.feed(
            "[2026-11-29 20:40:02 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=10.90 GB"
        ).name
        == "cuda_graphs"
    )
    tracker = PhaseTracker(experiment=1)
    assert tracker.feed(
        "(EngineCore_DP0 pid=1) INFO 11-29 20:40:20 [gpu_worker.py:298] Available KV cache memory: 29.10 GiB"
    ).detail == ("29.10 GiB for the KV cache")
    assert (
        tracker.feed(
            "INFO 11-29 20:40:22 [gpu_model_runner.py:3480] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%"
        ).name
        == "cuda_graphs"
    )
    assert tracker.feed("(APIServer pid=1) INFO:     Application startup complete.").name == "serving"


def test_sglang_0_5_23_kv_and_graph_lines():
    tracker = PhaseTracker(experiment=1)
    line = "[2026-11-30 10:01:37 TP0 EP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 192877, KV size: 12.62 GB"
    assert tracker.feed(line).detail == "192,877 tokens of KV cache"
    assert tracker.engine == "sglang"
    graphs = "[2026-11-30 10:01:38 TP0] Capture target prefill CUDA graph begin. backend=full, num_tokens=[8192], avail mem=10.90 GB"
    assert tracker.feed(graphs).name == "cuda_graphs"
    # A hybrid model: the full-attention pool is the one the scheduler counts, not the SWA pool.
    tracker = PhaseTracker(experiment=1)
    tracker.feed(
        "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, K size: 3.05 GB, V size: 3.05 GB"
    )
    tracker.feed(
        "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 120000, K size: 9.16 GB, V size: 9.16 GB"
    )
    assert tracker.kv_tokens == 400_000
    # Sized again after the graphs (sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py).
    tracker = PhaseTracker(experiment=1)
    tracker.feed(
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=20.00 GB"
    )
    tracker.feed(
        "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 250000, KV size: 9.10 GB, avail mem=3.20 GB"
    )
    assert tracker.phase == "cuda_graphs" and tracker.kv_tokens == 250_000


def test_sglang_is_recognised_by_its_0_5_23_lines_alone():
    for first in ("server_args={'model_path': 'x', 'tp_size': 8}", "Init parallel begin."):
        tracker = PhaseTracker(experiment=1)
        tracker.feed(first)
        assert tracker.engine == "sglang"
        assert tracker.feed("INFO:     Application startup complete.") is None


def test_ansi_codes_are_stripped():
    colored = "\x1b[1;36m(EngineCore_DP0 pid=41388)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 20:38:32 [core.py:77] Initializing a V1 LLM engine (v0.11.0)"
    assert (
        strip_ansi(colored)
        == "(EngineCore_DP0 pid=41388) INFO 11-29 20:38:32 [core.py:77] Initializing a V1 LLM engine (v0.11.0)"
    )
    assert log_message(colored) == "Initializing a V1 LLM engine (v0.11.0)"
    assert PhaseTracker(experiment=1).feed(colored).name == "starting"
    for line in (LOGS / "ansi_colored.log").read_text().splitlines():
        assert "\x1b" not in log_message(line)


def test_log_message_strips_every_prefix():
    assert log_message(
        "(Worker_TP0 pid=8838) ERROR 11-29 20:46:34 [multiproc_executor.py:600] WorkerProc failed to start."
    ) == ("WorkerProc failed to start.")
    assert (
        log_message("[2026-11-29 20:38:47 DP0 TP0 EP0] Load weight begin. avail mem=93.79 GB")
        == "Load weight begin. avail mem=93.79 GB"
    )
    assert (
        log_message("[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.")
        == "ncclUnhandledCudaError: Call to CUDA function failed."
    )
    assert (
        log_message("ERROR:    [Errno 98] error while attempting to bind")
        == "[Errno 98] error while attempting to bind"
    )
    assert log_message("   \r") == ""
