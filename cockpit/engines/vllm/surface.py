"""vLLM's words: its launcher, startup log, failures and metric names (docs/simulator.md#log-texts,
docs/metrics.md), and how its parser and HTTP server behave. Each wording cockpit has met: vLLM
0.33 and older, and 0.32's CPU build."""

from __future__ import annotations

import re

from cockpit.engines.surface import PEER_LOST, RANK_TIMEOUT, EngineSurface

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# -- the startup log -------------------------------------------------------------------------------

# vLLM's weight loader on every device: "Loading weights took 0.03 seconds"
# (vllm/model_executor/model_loader/default_loader.py: load_weights; sharded_state_loader.py says
# the same). On a GPU "Model loading took" follows it; on CPU it is the only line that says the
# weights are in: vllm/v1/worker/cpu_model_runner.py measures no memory.
LOADING_WEIGHTS_TOOK = re.compile(r"^Loading weights took (?P<seconds>[\d.]+) seconds?")
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>-?[\d.]+) GiB")
# vLLM on CPU: "Explicitly set (1.0/7.46) GiB for KV cache on node 0." (--kv-cache-memory-bytes or
# VLLM_CPU_KVCACHE_SPACE) or "Auto set (X/Y) GiB for KV cache on node 0, with Z GiB requested memory
# for the worker. ..." (vllm/v1/worker/cpu_worker.py: determine_available_memory), every worker:
# the KV cache's GiB, then the NUMA node's total.
CPU_KV_MEMORY = re.compile(
    r"^(?:Explicitly|Auto) set \((?P<gib>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node (?P<node>\d+)"
)
# "GPU KV cache size: N tokens" (0.33 goes on ", Maximum concurrency for ..." on the same line, and
# says "GPU + host" with a host pool: vllm/v1/core/kv_cache_utils.py).
KV_TOKENS = re.compile(r"\bKV cache size: (?P<tokens>[\d,]+) tokens")
READY_LINE = "Application startup complete."  # uvicorn's, once the API server serves

# -- failures --------------------------------------------------------------------------------------

# The wrappers: the engine core and its workers say that something failed elsewhere.
ENGINE_CORE_FAILED = "EngineCore failed to start."
WRAPPERS = (
    r"EngineCore failed to start",
    r"Engine core initialization failed",
    r"WorkerProc failed to start",
    r"WorkerProc initialization failed",
    r"initialization failed due to an exception in a background process",
)

FAILURES = {
    # vllm/model_executor/layers/quantization/utils/fp8_utils.py: validate_fp8_block_shape(_moe).
    "fp8-gate-up": r"The output_size of gate's and up's weight = (?P<size>\d+) is not divisible by weight "
    r"quantization block_n = (?P<block>\d+)",
    "fp8-down": r"The input_size of down's weight = (?P<size>\d+) is not divisible by weight quantization "
    r"block_k = (?P<block>\d+)",
    "fp8-linear-out": r"Weight output_partition_size = (?P<size>\d+) is not divisible by weight quantization "
    r"block_n = (?P<block>\d+)",
    "fp8-linear-in": r"Weight input_size_per_partition = (?P<size>\d+) is not divisible by weight quantization "
    r"block_k = (?P<block>\d+)",
    # vllm/config/model.py: verify_with_parallel_config.
    "attention-heads": r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by tensor "
    r"parallel size \((?P<tp>\d+)\)",
    # vllm/distributed/utils.py: ensure_divisibility.
    "not-divisible": r"AssertionError: (?P<numerator>\d+) is not divisible by (?P<denominator>\d+)",
    # vllm/v1/core/kv_cache_utils.py: check_enough_kv_cache_memory.
    "kv-max-len": r"To serve at least one request with the models?(?:'s|'s's|s's) max seq len \((?P<max_len>\d+)\), "
    r"\((?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
    r"\((?P<available>[\d.]+) GiB\)\.(?: Based on the available memory, the estimated maximum model length "
    r"is (?P<estimate>\d+))?",
    # vllm/config/model.py: _get_and_verify_max_len.
    "context-too-long": r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived "
    r"max_model_len \(\w+=(?P<derived>\d+)",
    "no-cache-blocks": r"No available memory for the cache blocks",
    # vllm/v1/worker/utils.py: request_memory. vLLM 0.33 also checks against the engine's budget once
    # weights held outside the process are set aside ("the engine's budget after excluding ...").
    "free-memory-at-start": r"Free memory on device(?: (?P<device>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) "
    r"GiB\) on startup is less than (?:desired GPU memory utilization|(?P<budget>the engine's budget) after "
    r"excluding external process's weights) \((?P<utilization>[\d.]+), (?P<requested>[\d.]+) GiB\)",
    "external-weights": r"Externally held weights on device(?: (?P<device>\S+))? \((?P<held>[\d.]+)/"
    r"(?P<total>[\d.]+) GiB\) exceed the desired GPU memory utilization \((?P<utilization>[\d.]+), "
    r"(?P<requested>[\d.]+) GiB\)",
    # vllm/config/parallel.py: ParallelConfig.__post_init__.
    "world-size": r"World size \((?P<world>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)",
    "pp-unsupported": r"Pipeline parallelism is not supported for this model"  # vllm/config/model.py
    r"|Pipeline parallelism is only supported for the following architectures",  # older vLLM
    # vllm/model_executor/layers/fused_moe/layer.py
    "eplb-uneven": r"EPLB currently only supports even distribution of experts across ranks\.(?: Got "
    r"(?P<experts>\d+) experts and (?P<ranks>\d+) EP ranks)?",
    "eplb-needs-ep": r"enable_expert_parallel must be True to use EPLB",  # vllm/config/parallel.py
    # vllm/config/parallel.py: _validate_parallel_config, vLLM 0.33.
    "eplb-needs-parallelism": r"EPLB requires tensor, prefill-context, or data parallelism, but got "
    r"TP=(?P<tp>\d+), PCP=(?P<pcp>\d+), DP=(?P<dp>\d+)",
    # vllm/config/model.py: _verify_with_expert_parallelism.
    "ep-needs-experts": r"Number of experts in the model must be greater than 0 when expert parallelism is enabled",
    # The arguments that differ from the defaults, logged before the server binds (0.32:
    # vllm/entrypoints/serve/utils/api_utils.py): "non-default args: {'host': '127.0.0.1', 'port': 18002}".
    "non-default-port": r"non-default args: \{.*?'port': (?P<port>\d+)",
    "non-default-host": r"non-default args: \{.*?'host': '(?P<host>[^']*)'",
    "rank-timeout": RANK_TIMEOUT,
    "peer-lost": PEER_LOST,
}

# -- across nodes ----------------------------------------------------------------------------------

# A node without the API server goes to the head (vllm/entrypoints/cli/serve.py: run_headless):
# TP/PP across nodes, or its data-parallel engines; the head's executor says how many ranks the
# world holds and how many are its own (vllm/v1/executor/multiproc_executor.py, world_size above
# local_world_size: the others are on other nodes); its front end waits for the remote engines
# (vllm/v1/engine/utils.py: wait_for_engine_startup, at debug level).
HEADLESS_TEXT = (
    "Launching vLLM (v{version}) headless multiproc executor, with head node address {address} for "
    "torch.distributed process group."
)
HEADLESS_DP_TEXT = (
    "Launching {engines} data parallel engine(s) in headless mode, with head node address tcp://{address}."
)
JOIN_WAITING = (
    re.compile(
        r"Launching vLLM \(v[^)]*\) headless multiproc executor, with head node address (?P<address>\S+) "
        r"for torch\.distributed process group"
    ),
    re.compile(
        r"Launching (?P<engines>\d+) data parallel engine\(s\) in headless mode, with head node address "
        r"(?:tcp://)?(?P<address>\S+?)\.?$"
    ),
    re.compile(
        r"DP group leader: node_rank=\d+, node_rank_within_dp=\d+, master_addr=(?P<host>\S+), .*"
        r"world_size=(?P<world>\d+), local_world_size=(?P<local>\d+)"
    ),
    re.compile(r"Waiting for (?P<local>\d+) local, (?P<remote>\d+) remote core engine proc\(s\) to connect"),
)
# Every rank as it opens the process group (vllm/distributed/parallel_state.py:
# init_distributed_environment): across nodes the group meets at tcp://HEAD:PORT (on one box
# vLLM uses a file:// store, so the line matches only across nodes).
RANK_JOINED = (
    re.compile(
        r"world_size=(?P<world>\d+) rank=(?P<rank>\d+) local_rank=\d+ "
        r"distributed_init_method=tcp://(?P<address>\S+) backend="
    ),
)
# Logged once the parallel groups are built (parallel_state.py: initialize_model_parallel), which
# takes every rank of the world.
ALL_JOINED = (re.compile(r"rank (?P<rank>\d+) in world size (?P<world>\d+) is assigned as"),)

# The functions a traceback passes through in each phase: its model runner's and worker's (V1 and V0).
TRACEBACK_PHASES = {
    "cuda_graphs": (r"capture_model", r"_capture_cudagraphs"),
    "profiling": (r"profile_run", r"determine_available_memory", r"determine_num_available_blocks"),
    "kv_cache": (r"initialize_kv_cache", r"allocate_kv_cache"),
    "loading": (r"load_weights", r"weight_loader", r"model_loader", r"load_model"),
}

# -- the parser ------------------------------------------------------------------------------------

# The `vllm` command's root parser, which reports the arguments `serve` does not know.
ROOT_USAGE = (
    "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
    "            ...\n"
)
PARALLEL_DESTS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "expert_parallel": "enable_expert_parallel",
}

# -- the HTTP server -------------------------------------------------------------------------------

# The routes the simulator serves, in the order and words vLLM's launcher logs them
# (vllm/entrypoints/launchers/launcher.py: serve_http, "Route: %s, Methods: %s"): the real list's
# entries the simulator answers; the real server has more (docs, tokenize, responses, ...).
ROUTES: tuple[tuple[str, str], ...] = (
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
)

# -- metrics ---------------------------------------------------------------------------------------

# vLLM 0.33: vllm/v1/metrics/loggers.py (PrometheusStatLogger). prometheus_client adds `_total` to a
# counter's name on the wire. The old spellings are vLLM v0's (vllm/engine/metrics.py) and early
# v1's: `gpu_cache_usage_perc` was deprecated for `kv_cache_usage_perc` and `gpu_prefix_cache_*`
# for `prefix_cache_*` (vllm-project/vllm#18354), then hidden. v0 kept a prefix hit-rate gauge.
METRICS = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
}

SURFACE = EngineSurface(
    name="vllm",
    label="vLLM",
    default_port=8000,
    launchers=(
        ("vllm", "serve"),
        ("serve",),
        ("python", "-m", API_SERVER_MODULE),
        ("python3", "-m", API_SERVER_MODULE),
        ("-m", API_SERVER_MODULE),
        (API_SERVER_MODULE,),
    ),
    # vLLM's serve subparser (its root parser reports unrecognized arguments, with its own usage).
    program="vllm serve",
    usage="vllm serve [model_tag] [options]",
    # vLLM's CPU build is published as `vllm-cpu` and installs the same `vllm` package.
    distributions=("vllm", "vllm-cpu"),
    console_script="vllm",
    # "VLLM::EngineCore", "VLLM::Worker": the setproctitle names of vllm/utils/system_utils.py.
    process_title=r"VLLM::",
    launcher_module=r"vllm\.entrypoints\.",
    context_flag="--max-model-len",
    signature=None,
    starting=(r"Initializing an? (?:V1 )?LLM engine",),  # vllm/v1/engine/core.py
    load_begin=(r"Starting to load model",),
    weights_loaded=(
        # vLLM V1, with or without "memory and" (vllm/v1/worker/gpu_model_runner.py).
        re.compile(r"Model loading took (?P<gib>[\d.]+) GiB"),
        re.compile(r"Loading model weights took (?P<gib>[\d.]+) GB"),  # vLLM V0
        LOADING_WEIGHTS_TOOK,  # on CPU (and on GPU, before the line with the memory)
    ),
    kv_memory=(KV_MEMORY, CPU_KV_MEMORY),
    kv_tokens=(KV_TOKENS,),
    cuda_graphs=(r"Capturing CUDA graph",),  # the progress bar: vllm/v1/worker/gpu_model_runner.py
    ready_line=READY_LINE,
    wrappers=WRAPPERS,
    failures={failure: re.compile(pattern) for failure, pattern in FAILURES.items()},
    traceback_phases=TRACEBACK_PHASES,
    join_waiting=JOIN_WAITING,
    rank_joined=RANK_JOINED,
    all_joined=ALL_JOINED,
    # Its ranks open the group with torch's default NCCL timeout, 10 minutes
    # (torch/distributed/constants.py; "Timed out after 601 seconds" in public logs).
    join_timeout_s=600.0,
    model_positional=True,  # vllm/entrypoints/cli/serve.py: `vllm serve [model_tag]`
    model_dest="model",
    flexible_args=True,  # vllm/utils/argparse_utils.py: FlexibleArgumentParser
    root_usage=ROOT_USAGE,
    size_error=None,  # vllm/utils/argparse_utils.py: human_readable_int words only decimals with K/M/G/T
    parallel_dests=PARALLEL_DESTS,
    routes=ROUTES,
    metrics_by_default=True,
    # Only these prefixes: /health, /metrics, /ping and the rest stay open.
    key_protected_paths=("/v1", "/v2", "/inference", "/cohere"),
    key_open_paths=(),
    error_body="nested",  # vllm/entrypoints/serve/engine/protocol.py: ErrorResponse; exception_handling/utils.py
    unrouted_detail=True,  # its handler covers fastapi's HTTPException, not the router's starlette one
    body_errors="fastapi",  # fastapi/routing.py; vllm/entrypoints/serve/exception_handling/handlers/validation.py
    model_aliases=True,  # vllm/entrypoints/serve/engine/serving.py: _check_model
    context_check="clamp",  # vllm/renderers/params.py; vllm/entrypoints/serve/utils/api_utils.py: get_max_tokens
    # vllm/entrypoints/openai/completion/serving.py and chat_completion/serving.py
    response_fields="extended",
    system_fingerprint=True,  # vllm/entrypoints/serve/utils/fingerprint.py
    request_id_digits=16,  # vllm/utils/__init__.py: random_uuid
    client_request_id=True,
    activations_gib=None,
    # logger.info_once(..., scope="local") in vllm/v1/worker/gpu_model_runner.py and gpu_worker.py
    # logs from local rank 0 (vllm/logger.py _should_log_with_scope), which is the first pipeline
    # stage: vllm/distributed/parallel_state.py lays ranks out as [dp, pp, pcp, tp].
    memory_logged_by_first_stage=True,
    metric_prefix="vllm:",
    metrics=METRICS,
)
