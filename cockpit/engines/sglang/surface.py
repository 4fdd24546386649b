"""SGLang's words: its launcher, startup log, failures and metric names (docs/simulator.md#log-texts,
docs/metrics.md), and how its parser and HTTP server behave. Each wording cockpit has met: SGLang
0.5.23 and older."""

from __future__ import annotations

import re

from cockpit.engines.surface import PEER_LOST, RANK_TIMEOUT, EngineSurface

LAUNCH_MODULE = "sglang.launch_server"

# -- the startup log -------------------------------------------------------------------------------

# sglang/srt/distributed/bootstrap.py (0.5.23); older releases said "Init torch distributed begin".
INIT_PARALLEL_BEGIN = "Init parallel begin."
LOAD_WEIGHT_BEGIN = "Load weight begin."  # sglang/srt/model_executor/model_runner.py: load_model
# The main process once its warm-up request is answered (sglang/srt/entrypoints/http_server.py).
READY_LINE = "The server is fired up and ready to roll!"
UVICORN_STARTUP_COMPLETE = "Application startup complete."  # printed before the warm-up

# -- failures --------------------------------------------------------------------------------------

# The scheduler logs its traceback after this, the main process its child's death.
SCHEDULER_EXCEPTION = "Scheduler hit an exception: Traceback (most recent call last):"
CHILD_DIED = "Received sigquit from a child process. It usually means the child failed."
WRAPPERS = (
    r"Received sigquit from a child process",
    r"Scheduler hit an exception",
    r"scheduler is dead",
    r"Initialization failed\. Please see the error messages above",
)

FAILURES = {
    # sglang/srt/configs/model_config.py: _derive_context_length.
    "context-too-long": r"User-specified context_length \((?P<asked>\d+)\) is greater than the derived "
    r"context_length \((?P<derived>\d+)",
    # Before 0.5.23 when the pool had no room, and 0.5.23 when it rounds down to no token
    # (MemoryPoolConfig.__post_init__, sglang/srt/model_executor/pool_configurator.py).
    "not-enough-memory": r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
    r"(?: Current value: mem_fraction_static=(?P<share>[\d.]+))?",
    # 0.5.23 when the loaded weights leave the static share no room for the pool
    # (KVCacheConfigurator._profile_available_bytes, sglang/srt/mem_cache/kv_cache_configurator.py).
    "no-kv-for-weights": r"Loaded weights leave no GPU memory for the KV cache under "
    r"--mem-fraction-static=(?P<share>\S+?)\. Raise --mem-fraction-static above (?P<suggested>[\d.]+)"
    r"(?: \(minimum viable = 1 - available/pre = (?P<minimum>[\d.]+)\))?",
    "unbalanced-memory": r"The memory capacity is unbalanced\. Some GPUs may be occupied by other processes",
    # sglang/srt/model_executor/model_runner.py (an assert).
    "pp-unsupported": r"Pipeline Parallel is not compatible with this model",
    # 0.5.23 checks a block-quantized MoE model after loading it
    # (sglang/srt/model_executor/model_runner_components/moe_ep_setup.py: check_quantized_moe_compatibility).
    "ep-divides-tp": r"tp_size (?P<tp>\d+) must be divisible by ep_size (?P<ep>\d+)",
    "moe-tp": r"moe_intermediate_size (?P<width>\d+) must be divisible by moe_tp_size \((?P<moe_tp>\d+)\) "
    r"which is tp_size \((?P<tp>\d+)\) divided by moe_ep_size \((?P<ep>\d+)\)",
    "moe-block": r"For quantized MoE models, please make sure \(moe_intermediate_size=(?P<width>\d+) / "
    r"moe_tp_size=(?P<moe_tp>\d+)\) % weight_block_size_n=(?P<block>\d+) == 0"
    r"(?: where moe_tp_size is equal to tp_size \((?P<tp>\d+)\) divided by ep_size \((?P<ep>\d+)\))?",
    # torch.distributed's, across nodes (cockpit/engines/surface.py).
    "rank-timeout": RANK_TIMEOUT,
    "peer-lost": PEER_LOST,
}

# -- across nodes ----------------------------------------------------------------------------------

# Every scheduler opens the process group between "Init parallel begin." and "Init parallel ends."
# (sglang/srt/distributed/bootstrap.py: init_parallel_runtime; older releases "Init torch
# distributed begin." / "ends."): across nodes at --dist-init-addr, and torch returns only once
# every rank is in. The rank is in the logger's prefix only ("[2026-11-29 20:38:47 PP1 TP3]").
INIT_PARALLEL_ENDS = "Init parallel ends."
JOIN_WAITING = (re.compile(r"Init (?:parallel|torch distributed) begin\b"),)
RANK_JOINED = (
    re.compile(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<rank>(?: [A-Z]+\d+)+)\] "
        r"Init (?:parallel|torch distributed) begin\b"
    ),
)
ALL_JOINED = (re.compile(r"Init (?:parallel|torch distributed) ends\b"),)

# The functions a traceback passes through in each phase (its graph runner, memory pools and
# model runner), and the line that opens the load.
TRACEBACK_PHASES = {
    "cuda_graphs": (r"capture_one_batch_size", r"cuda_graph_runner"),
    "kv_cache": (r"init_memory_pool", r"alloc_memory_pool", r"kv_cache_configurator", r"_create_buffers"),
    "loading": (r"load_weights", r"weight_loader", r"model_loader", r"load_model", r"Load weight begin"),
}

# -- the parser ------------------------------------------------------------------------------------

# sglang/srt/utils/common.py: human_readable_int words every failure.
SIZE_ERROR = (
    "Invalid integer value: '{text}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
    "(1Ki, 1Mi). Suffixes are case-sensitive."
)
# --attn-dp-size (0.5.23) splits attention inside the TP group, as the deprecated --dp-size with
# --enable-dp-attention did; a plain --dp-size starts replicas.
PARALLEL_DESTS = {
    "tp": "tp_size",
    "pp": "pp_size",
    "dp": "dp_size",
    "ep": "ep_size",
    "dpa": "enable_dp_attention",
    "attn_dp": "attn_dp_size",
}

# -- the HTTP server -------------------------------------------------------------------------------

# The routes the simulator serves (sglang/srt/entrypoints/http_server.py has many more).
ROUTES: tuple[tuple[str, str], ...] = (
    ("/health", "GET"),
    ("/v1/models", "GET"),
    ("/v1/completions", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/metrics", "GET"),
    ("/get_model_info", "GET"),
)

# -- metrics ---------------------------------------------------------------------------------------

# SGLang 0.5.23: sglang/srt/observability/metrics_collector.py (sglang/srt/metrics/collector.py in
# earlier releases, same names). Scheduler gauges: SchedulerMetricsCollector; token counters (counted
# when a request finishes, labelled is_streaming): TokenizerMetricsCollector. Retractions are
# SGLang's preemptions: the counter `num_retracted_requests_total` (older releases only had the
# `num_retracted_reqs` gauge, a count per report, which sums to nothing meaningful and is not read).
# The prefix hit rate comes from cached over prompt tokens where both counters are served; the
# `cache_hit_rate` gauge (the last prefill batch's) is the fallback.
METRICS = {
    "running": ("sglang:num_running_reqs",),
    "waiting": ("sglang:num_queue_reqs",),
    "kv_usage": ("sglang:token_usage",),
    "preemptions_total": ("sglang:num_retracted_requests_total",),
    "prefix_hits_total": ("sglang:cached_tokens_total",),
    "prefix_queries_total": ("sglang:prompt_tokens_total",),
    "prefix_hit_rate": ("sglang:cache_hit_rate",),
    "generation_tokens_total": ("sglang:generation_tokens_total",),
    "gen_throughput": ("sglang:gen_throughput",),
}

SURFACE = EngineSurface(
    name="sglang",
    label="SGLang",
    default_port=30000,
    launchers=(("python", "-m", LAUNCH_MODULE), ("-m", LAUNCH_MODULE), (LAUNCH_MODULE,)),
    # Its parser says "sglang serve" even under `python -m sglang.launch_server` (prepare_server_args).
    program="sglang serve",
    usage=None,
    distributions=("sglang",),
    console_script=None,
    process_title=r"sglang::",  # "sglang::scheduler"
    launcher_module=re.escape(LAUNCH_MODULE),
    context_flag="--context-length",
    # Its logger's "[YYYY-MM-DD HH:MM:SS ...]" prefix, or a line only it prints.
    signature=re.compile(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]|Load weight begin"
        r"|Init parallel begin|server_args=\{"  # 0.5.23 (sglang/srt/entrypoints/engine.py logs server_args as a dict)
        r"|Init torch distributed begin|server_args=ServerArgs"  # older
    ),
    starting=(r"Init parallel begin", r"Init torch distributed begin"),
    load_begin=(r"Load weight begin",),
    weights_loaded=(
        # Any version: "Load weight end. [elapsed=X s, ]type=..., avail mem=X GB, mem usage=Y GB."
        # (sglang/srt/model_executor/model_runner.py).
        re.compile(r"Load weight end\.(?:.*?\bmem usage=(?P<gib>[\d.]+) GB)?"),
    ),
    kv_memory=(),
    kv_tokens=(
        # "KV Cache is allocated. #tokens: N" (older), "KV Cache is allocated. dtype: torch.bfloat16,
        # #tokens: N" (0.5.23, sglang/srt/mem_cache/memory_pool.py); a hybrid model's "Full KV Cache" is
        # the one the scheduler counts, its "SWA KV Cache" and index pools are not.
        re.compile(r"^(?:Full )?KV Cache is allocated\.(?: dtype: [^,]+,)? #tokens: (?P<tokens>[\d,]+)"),
        # 0.5.23 sizing the pool again after capturing graphs: model_runner_components/kv_pool_runtime.py.
        re.compile(
            r"^Post-capture KV sizing: KV cache allocated\. dtype: [^,]+, #tokens: (?P<tokens>[\d,]+)"
        ),
    ),
    # 0.5.23 "Capture target decode CUDA graph begin." (cuda_graph_setup.py); older "Capture cuda graph begin."
    cuda_graphs=(r"Capture [\w ]*?(?:cuda|CUDA) graph begin",),
    ready_line=READY_LINE,
    not_ready_lines=(UVICORN_STARTUP_COMPLETE,),
    wrappers=WRAPPERS,
    failures={failure: re.compile(pattern) for failure, pattern in FAILURES.items()},
    traceback_phases=TRACEBACK_PHASES,
    join_waiting=JOIN_WAITING,
    rank_joined=RANK_JOINED,
    all_joined=ALL_JOINED,
    # --dist-timeout when given; else 30 minutes ("timed out after 1800000ms", sgl-project/sglang#7478).
    join_timeout_s=1800.0,
    model_positional=False,
    model_dest="model_path",  # sglang/srt/server_args.py: --model-path / --model
    flexible_args=False,  # plain argparse, abbreviations and all
    root_usage=None,
    size_error=SIZE_ERROR,
    parallel_dests=PARALLEL_DESTS,
    routes=ROUTES,
    metrics_by_default=False,  # only with --enable-metrics (sglang/srt/entrypoints/http_server.py)
    # Every path but the health, readiness and metrics probes.
    key_protected_paths=("/",),
    key_open_paths=("/health", "/ready", "/metrics"),
    error_body="flat",
    unrouted_detail=False,
    body_errors="engine",
    model_aliases=False,
    context_check="refuse",  # it refuses a request that reaches the context exactly, too
    response_fields="plain",
    system_fingerprint=False,
    request_id_digits=32,  # uuid4().hex
    client_request_id=False,
    # Activations and CUDA graphs live outside the --mem-fraction-static pool: about 1.5 GiB.
    activations_gib=1.5,
    memory_logged_by_first_stage=False,
    metric_prefix="sglang:",
    metrics=METRICS,
)
