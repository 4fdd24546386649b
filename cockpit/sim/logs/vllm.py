"""vLLM 0.33.0's startup log, as the simulated engine prints it (docs/simulator.md#log-texts)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

from cockpit.engines import Placement
from cockpit.layout import Layout
from cockpit.planner import MemoryEstimate, Reason, Setup, Verdict
from cockpit.sim.flags import EngineArgs
from cockpit.sim.logs.base import (
    SITE,
    EngineLog,
    Frame,
    Out,
    Raise,
    bare,
    exception_line,
    gb,
    graph_gib,
    raises,
)

# Where vLLM raises each startup error. Errors found while it builds its config are raised in
# the API server, and pydantic wraps a ValueError there in a ValidationError naming the config
# class (vllm/config/utils.py makes every config a pydantic dataclass); the others are raised
# in a worker while it builds the model.
_VLLM_CONFIG_CALLS = {  # vllm/engine/arg_utils.py: create_engine_config
    "VllmConfig": Frame("vllm/engine/arg_utils.py", 2883, "create_engine_config", "config = VllmConfig("),
    "ParallelConfig": Frame(
        "vllm/engine/arg_utils.py", 2569, "create_engine_config", "parallel_config = ParallelConfig("
    ),
    "ModelConfig": Frame("vllm/engine/arg_utils.py", 1994, "create_model_config", "return ModelConfig("),
}
_VLLM_POST_INIT = Frame(  # vllm/config/vllm.py: VllmConfig.__post_init__ checks the model against the layout
    "vllm/config/vllm.py",
    1549,
    "__post_init__",
    "self.model_config.verify_with_parallel_config(self.parallel_config)",
)
# What pydantic shows of the arguments, cut in the middle as it cuts them.
_PYDANTIC_INPUTS = {
    "VllmConfig": "{'model_config': ...figs': None, 'instance_id': ''}",
    "ParallelConfig": "{'pipeline_paral...ne, 'nnodes': 1, 'node_rank': 0}",
    "ModelConfig": "{'model': '...', 'runner': 'auto', ...}",
}
_PYDANTIC_INIT = Frame(
    "pydantic/_internal/_dataclasses.py",
    121,
    "__init__",
    "s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
)
_FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
_VLLM_BY_TEXT: tuple[tuple[re.Pattern[str], Raise], ...] = tuple(
    (re.compile(pattern), raised)
    for pattern, raised in (
        # vllm/config/model.py: verify_with_parallel_config and _verify_with_expert_parallelism
        (
            "Total number of attention heads",
            raises("vllm/config/model.py", 1560, "verify_with_parallel_config", "VllmConfig"),
        ),
        (
            "Number of experts in the model must be greater than 0",
            raises("vllm/config/model.py", 1500, "_verify_with_expert_parallelism", "VllmConfig"),
        ),
        (  # a NotImplementedError: pydantic lets it through unwrapped
            "Pipeline parallelism is not supported",
            raises(
                "vllm/config/model.py",
                1573,
                "verify_with_parallel_config",
                "VllmConfig",
                "NotImplementedError",
            ),
        ),
        (  # vllm/config/model.py: ModelConfig.__post_init__ -> _get_and_verify_max_len
            "User-specified max_model_len",
            raises("vllm/config/model.py", 2680, "_get_and_verify_max_len", "ModelConfig"),
        ),
        # vllm/config/parallel.py: ParallelConfig.__post_init__ and _validate_parallel_config
        (
            r"World size \(\d+\) is larger than",
            raises("vllm/config/parallel.py", 1071, "__post_init__", "ParallelConfig"),
        ),
        (
            "enable_expert_parallel must be True to use EPLB",
            raises("vllm/config/parallel.py", 570, "_validate_parallel_config", "ParallelConfig"),
        ),
        (
            "EPLB requires tensor, prefill-context, or data parallelism",
            raises("vllm/config/parallel.py", 579, "_validate_parallel_config", "ParallelConfig"),
        ),
        (
            "num_redundant_experts is set to",
            raises("vllm/config/parallel.py", 587, "_validate_parallel_config", "ParallelConfig"),
        ),
        # In a worker, while it builds the model.
        (
            "EPLB currently only supports even distribution",
            raises("vllm/model_executor/layers/fused_moe/layer.py", 275, "FusedMoEFactory"),
        ),
        ("output_size of gate's and up's weight", raises(_FP8_UTILS, 1362, "validate_fp8_block_shape_moe")),
        ("input_size of down's weight", raises(_FP8_UTILS, 1369, "validate_fp8_block_shape_moe")),
        (
            "Weight (?:output_partition_size|input_size_per_partition) = ",
            raises(_FP8_UTILS, 1324, "validate_fp8_block_shape"),
        ),
    )
)
# Bare asserts say nothing: the rule says which one failed.
_VLLM_BY_RULE = {
    "kv-heads": Raise(  # vllm/model_executor/models/minimax_m2.py: MiniMaxM2Attention
        Frame(
            "vllm/model_executor/models/minimax_m2.py",
            164,
            "__init__",
            "assert self.total_num_kv_heads % tp_size == 0",
        )
    ),
    "moe-width": Raise(  # vllm/model_executor/layers/fused_moe/config.py
        Frame(
            "vllm/model_executor/layers/fused_moe/config.py",
            1352,
            "__post_init__",
            "assert self.intermediate_size % tp_size == 0",
        )
    ),
}
_VLLM_WORKER_MAIN = Raise(
    Frame(
        "vllm/v1/executor/multiproc_executor.py", 1023, "worker_main", "worker = WorkerProc(*args, **kwargs)"
    )
)


def _vllm_raise(message: str, rule: str = "") -> Raise:
    text = bare(message)
    for pattern, raised in _VLLM_BY_TEXT:
        if pattern.search(text):
            return raised
    return _VLLM_BY_RULE.get(rule, _VLLM_WORKER_MAIN)


def _config_failure(reasons: Sequence[Reason]) -> Reason | None:
    """The first error vLLM meets while building its config: it stops there, before any engine process."""
    return next((r for r in reasons if _vllm_raise(r.message).config is not None), None)


# Deprecated `vllm serve` arguments and what vLLM says when one is used (vllm/engine/arg_utils.py).
_CASCADE_ATTN = (
    "--disable-cascade-attn is deprecated and has no effect since cascade attention has been removed. "
    "It will be removed in v0.33.0."
)
_LOG_CONFIG_FILE = (
    "--log-config-file is deprecated and will be removed in v0.33.0. "
    "Use --logging-config.pylogging_config_file instead."
)
_MAMBA_CACHE_MODE = (
    "--mamba-cache-mode is deprecated and will be removed in v0.33.0. "
    "It has no effect: Mamba prefix caching follows --enable-prefix-caching."
)


def _vllm_option(spelling: str) -> str:
    """FlexibleArgumentParser's view of a spelling: no value, dashes for underscores."""
    return "--" + spelling.split("=", 1)[0].lstrip("-").replace("_", "-")


def _rank_names(layout: Layout, rank: int) -> tuple[int, int, int]:
    """(DP, PP, TP) rank of a global rank: TP varies fastest, then PP, then DP (vllm/distributed/parallel_state.py)."""
    tp_rank, rest = rank % layout.tp, rank // layout.tp
    return rest // layout.pp, rest % layout.pp, tp_rank


class VLLMLog(EngineLog):
    """vLLM's logger: "(Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] text" (vllm/logger.py);
    tracebacks from the API server and tqdm bars go to stderr bare."""

    name = "vllm"

    def __init__(self, out: Out):
        super().__init__(out)
        self.engine_core = "EngineCore"
        self.worker = "Worker"
        self.memory: MemoryEstimate | None = None  # what was loaded: a KV failure says what was left

    def line(self, text: str, source: str, process: str = "APIServer", level: str = "INFO") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.out(f"({process} pid={os.getpid()}) {level} {stamp} [{source}] {text}")

    def argument_warnings(self, deprecated: Sequence[str]) -> None:
        for spelling in deprecated:
            option = _vllm_option(spelling)
            if "cascade-attn" in option:  # a Python warning from EngineArgs.create_model_config
                self._python_warning("vllm/engine/arg_utils.py", 1992, _CASCADE_ATTN, "_DISABLE_CASCADE_ATTN")
            elif option == "--log-config-file":  # DeprecatedLogConfigFileAction
                self._python_warning("vllm/engine/arg_utils.py", 484, _LOG_CONFIG_FILE, "_LOG_CONFIG_FILE")
            elif option == "--mamba-cache-mode":
                self.line(_MAMBA_CACHE_MODE, "arg_utils.py:2305", level="WARNING")
            else:  # vllm/utils/argparse_utils.py: FlexibleArgumentParser.parse_known_args, before logs are named
                dest = option.lstrip("-").replace("-", "_")
                self.line(
                    f"argument '{dest}' is deprecated", "argparse_utils.py:207", "MainProcess", "WARNING"
                )

    def _python_warning(self, file: str, line: int, text: str, constant: str) -> None:
        self.out(f"{SITE}/{file}:{line}: UserWarning: {text}")
        self.out(f"  warnings.warn({constant}_DEPRECATION_MESSAGE, stacklevel=1)")

    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict) -> None:
        layout = args.layout
        if layout.dp > 1:
            self.engine_core = "EngineCore_DP0"
        # vllm/entrypoints/common/startup.py (the logo's plain form)
        self.line(f"vLLM server version {args.version}, serving model {args.model}", "startup.py:38")
        self.line(f"non-default args: {dict(args.non_default)}", "startup.py:96")
        if _config_failure(verdict.reasons) is not None:
            return
        length = setup.server.max_model_len or setup.model.max_context
        quantization = {"fp8-block": "fp8", "fp8": "fp8", "mxfp4": "mxfp4"}.get(setup.model.quant.method)
        self.line(  # vllm/v1/engine/core.py, VllmConfig.__str__ (abridged)
            f"Initializing a V1 LLM engine (v{args.version}) with config: model='{args.model}', "
            f"speculative_config=None, tokenizer='{args.model}', dtype=torch.bfloat16, max_seq_len={length}, "
            f"tensor_parallel_size={layout.tp}, pipeline_parallel_size={layout.pp}, "
            f"data_parallel_size={layout.dp}, quantization={quantization}, "
            f"enforce_eager={not setup.server.cuda_graphs}, kv_cache_dtype={setup.server.kv_cache_dtype}, "
            f"served_model_name={args.served_name}",
            "core.py:139",
            self.engine_core,
        )
        placement = verdict.placement
        if placement is None:
            return
        self.worker = self._worker_name(layout, 0, setup)
        for rank in range(placement.gpus_used):
            self._rank_assigned(layout, rank, placement.gpus_used, setup)
        self.line(f"Starting to load model {args.model}...", "gpu_model_runner.py:4978", self.worker)

    def _worker_name(self, layout: Layout, rank: int, setup: Setup) -> str:
        """vllm/v1/executor/multiproc_executor.py: Worker[_DPd][_PPp][_TPt][_EPe]."""
        dp, pp, tp = _rank_names(layout, rank)
        name = "Worker"
        name += f"_DP{dp}" if layout.dp > 1 else ""
        name += f"_PP{pp}" if layout.pp > 1 else ""
        name += f"_TP{tp}" if layout.tp > 1 else ""
        name += f"_EP{dp * layout.tp + tp}" if layout.expert_parallel and setup.model.is_moe else ""
        return name

    def _rank_assigned(self, layout: Layout, rank: int, world: int, setup: Setup) -> None:
        """vllm/distributed/parallel_state.py: every MoE model has an EP group over DP x PCP x TP."""
        dp, pp, tp = _rank_names(layout, rank)
        ep = str(dp * layout.tp + tp) if setup.model.is_moe else "N/A"
        eplb = ep if setup.server.enable_eplb and setup.model.is_moe else "N/A"
        self.line(
            f"rank {rank} in world size {world} is assigned as DP rank {dp}, PP rank {pp}, PCP rank 0, "
            f"TP rank {tp}, ETP rank {tp}, EP rank {ep}, EPLB rank {eplb}",
            "parallel_state.py:2385",
            self._worker_name(layout, rank, setup),
        )

    def startup_failure(self, reasons: Sequence[Reason]) -> None:
        config = _config_failure(reasons)
        if config is not None:
            self._config_traceback(config.message)
        else:
            first = reasons[0]
            self._worker_failure(_vllm_raise(first.message, first.rule).frame, exception_line(first.message))

    def _config_traceback(self, message: str) -> None:
        """The API server's own traceback (bare: Python's excepthook) for a config it cannot build."""
        raised = _vllm_raise(message)
        assert raised.config is not None
        self.out("Traceback (most recent call last):")
        self.out('  File "/usr/local/bin/vllm", line 10, in <module>')
        self.out("    sys.exit(main())")
        frames = [_VLLM_CONFIG_CALLS[raised.config], _PYDANTIC_INIT]
        if raised.config == "VllmConfig":
            frames.append(_VLLM_POST_INIT)
        for frame in [*frames, raised.frame]:
            for text in frame.lines():
                self.out(text)
        error = exception_line(message, raised.exception)
        if not error.startswith(("ValueError", "AssertionError")):  # pydantic wraps only these
            self._print_lines(error)
            return
        # pydantic_core's ValidationError: one line per error, "[type=...]" after the whole message.
        kind, code = (
            ("Value error", "value_error")
            if error.startswith("ValueError")
            else ("Assertion failed", "assertion_error")
        )
        self.out(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {raised.config}")
        self._print_lines(
            f"  {kind}, {bare(message)} [type={code}, "
            f"input_value=ArgsKwargs((), {_PYDANTIC_INPUTS[raised.config]}), input_type=ArgsKwargs]"
        )
        self.out(f"    For further information visit https://errors.pydantic.dev/2.12/v/{code}")

    def _print_lines(self, text: str) -> None:
        for line in text.splitlines():
            self.out(line)

    def _worker_failure(self, frame: Frame, error: str) -> None:
        """A worker logs its exception (logger.exception: every line prefixed), then the engine core
        and the API server say so (vllm/v1/executor/multiproc_executor.py, vllm/v1/engine/core.py)."""
        lines = ["Traceback (most recent call last):", *frame.lines(), *error.splitlines()]
        self._logged_exception(
            "WorkerProc failed to start.", lines, self.worker, "multiproc_executor.py:1057"
        )
        waited = Frame("vllm/v1/executor/multiproc_executor.py", 916, "wait_for_ready", "raise e from None")
        self._engine_died(
            [waited],
            "Exception: WorkerProc initialization failed due to an exception in a background process. "
            "See stack trace for root cause.",
        )

    def _logged_exception(self, headline: str, lines: Sequence[str], process: str, source: str) -> None:
        for text in [headline, *lines]:
            self.line(text, source, process, "ERROR")

    def _engine_died(self, frames: Sequence[Frame], error: str) -> None:
        """The engine core's exception, then the API server's (vllm/v1/engine/utils.py)."""
        lines = [
            "Traceback (most recent call last):",
            *(t for f in frames for t in f.lines()),
            *error.splitlines(),
        ]
        self._logged_exception("EngineCore failed to start.", lines, self.engine_core, "core.py:1584")
        self.out("Traceback (most recent call last):")
        for text in Frame(
            "vllm/v1/engine/utils.py", 1473, "wait_for_engine_startup", "raise RuntimeError("
        ).lines():
            self.out(text)
        self.out(
            "RuntimeError: Engine core initialization failed. See root cause above. "
            f"Failed core proc(s): {{'{self.engine_core}': 1}}"
        )

    def oom(self, text: str) -> None:
        frame = Frame(
            "vllm/model_executor/model_loader/default_loader.py",
            503,
            "load_weights",
            "loaded_weights = model.load_weights(self.get_all_weights(model_config, model))",
        )
        self._worker_failure(frame, text)

    def loaded(self, setup: Setup, memory: MemoryEstimate) -> None:
        self.memory = memory
        self.line(  # vllm/v1/worker/gpu_model_runner.py
            f"Model loading took {gb(memory.weights_gib)} GiB memory and {self.elapsed():.6f} seconds",
            "gpu_model_runner.py:5088",
            self.worker,
        )

    def kv_failure(self, reason: Reason) -> None:
        """The engine core sizes the KV cache from what the workers report (vllm/v1/core/kv_cache_planning.py):
        each worker has said what it has left (vllm/v1/worker/gpu_worker.py) before the check fails."""
        if self.memory is not None:
            self._available_kv(self.memory)
        check = 57 if "No available memory" in reason.message else 77
        frames = [
            Frame(
                "vllm/v1/engine/core.py",
                321,
                "_initialize_kv_caches",
                "kv_cache_configs = get_kv_cache_configs(",
            ),
            Frame(
                "vllm/v1/core/kv_cache_planning.py",
                1554,
                "get_kv_cache_configs",
                "_check_enough_kv_cache_memory(",
            ),
            Frame(
                "vllm/v1/core/kv_cache_planning.py",
                check,
                "_check_enough_kv_cache_memory",
                "raise ValueError(",
            ),
        ]
        self._engine_died(frames, exception_line(reason.message))

    def kv_ready(self, setup: Setup, placement: Placement, memory: MemoryEstimate) -> None:
        per_replica = memory.kv_tokens // max(1, placement.attn_replicas)
        length = setup.server.max_model_len or setup.model.max_context
        graphs = graph_gib(memory)
        if setup.server.cuda_graphs:  # vllm/v1/worker/gpu_model_runner.py: profile_cudagraph_memory
            self.line(
                f"Estimated CUDA graph memory: {graphs:.2f} GiB total",
                "gpu_model_runner.py:6409",
                self.worker,
            )
        self._available_kv(memory)
        self.line(  # vllm/v1/core/kv_cache_utils.py: update_kv_cache_capacity, one line since 0.33
            f"GPU KV cache size: {per_replica:,} tokens, "
            f"Maximum concurrency for {length:,} tokens per request: {per_replica / length:.2f}x",
            "kv_cache_utils.py:1147",
            self.engine_core,
        )
        if setup.server.cuda_graphs:  # vllm/v1/worker/gpu_model_runner.py: tqdm bar, then the summary
            self.out(
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:01<00:00, 67.00it/s]"
            )
            self.line(  # vllm/v1/worker/gpu_model_runner.py: capture_model
                f"Graph capturing finished in 1 secs, took {graphs:.2f} GiB",
                "gpu_model_runner.py:6516",
                self.worker,
            )
        self.line(  # vllm/v1/engine/core.py
            f"init engine (profile, create kv cache, warmup model) took {self.elapsed():.2f} s",
            "core.py:412",
            self.engine_core,
        )

    def _available_kv(self, memory: MemoryEstimate) -> None:
        self.line(  # vllm/v1/worker/gpu_worker.py: determine_available_memory
            f"Available KV cache memory: {gb(memory.kv_budget_gib)} GiB", "gpu_worker.py:772", self.worker
        )

    def ready(self, args: EngineArgs) -> None:
        # vllm/entrypoints/launchers/api_server/entry.py, then launcher.py lists the routes.
        self.line(f"Starting vLLM server on http://{args.host}:{args.port}", "entry.py:139")
        self.line("Available routes are:", "launcher.py:188")
        for path, methods in (("/health", "GET"), ("/v1/models", "GET"), ("/v1/completions", "POST")):
            self.line(f"Route: {path}, Methods: {methods}", "launcher.py:197")
        self.line("Route: /v1/chat/completions, Methods: POST", "launcher.py:197")
        self.out(f"INFO:     Started server process [{os.getpid()}]")
        self.out("INFO:     Waiting for application startup.")
        self.out("INFO:     Application startup complete.")
