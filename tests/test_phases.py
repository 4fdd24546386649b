"""The startup phases, read line by line from the simulator's logs and engine-style excerpts."""

from __future__ import annotations

from pathlib import Path

from cockpit.runner.phases import PhaseTracker, log_message, strip_ansi

LOGS = Path(__file__).parent / "fixtures" / "logs"


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
