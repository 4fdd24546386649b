"""The log of vLLM, as the simulated engine prints it (docs/simulator.md#log-texts).

The version it claims is its option table's (cockpit/engines/tables/); the texts, their order and
the ``[file.py:line]`` each line carries are those a real vLLM 0.32.0 printed when it was checked
(docs/simulator.md#checked-against-a-real-vllm): the API server's logo, its arguments and config,
the engine core and its workers, the routes, uvicorn's lines, the periodic stats, the shutdown.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence

from cockpit.core.layout import Layout
from cockpit.core.planner import MemoryEstimate, Reason, Setup, Verdict
from cockpit.engines import Placement
from cockpit.engines.vllm.surface import ENGINE_CORE_FAILED, HEADLESS_DP_TEXT, HEADLESS_TEXT, SURFACE
from cockpit.sim.flags import EngineArgs, MultiNode
from cockpit.sim.logs.base import (
    EngineLog,
    Frame,
    Out,
    Raise,
    Span,
    bare,
    client_timeout_text,
    exception_line,
    gb,
    graph_gib,
    peer_closed_text,
    raises,
    store_lost_text,
    store_timeout_text,
)
from cockpit.sim.sitepackages import SITE

# Where vLLM raises each startup error. Errors found while it builds its config are raised in
# the API server, and pydantic wraps a ValueError there in a ValidationError naming the config
# class (vllm/config/utils.py makes every config a pydantic dataclass); the others are raised
# in a worker while it builds the model.
_VLLM_CONFIG_CALLS = {  # vllm/engine/arg_utils.py: create_engine_config
    "VllmConfig": Frame("vllm/engine/arg_utils.py", 2838, "create_engine_config", "config = VllmConfig("),
    "ParallelConfig": Frame(
        "vllm/engine/arg_utils.py", 2528, "create_engine_config", "parallel_config = ParallelConfig("
    ),
    "ModelConfig": Frame("vllm/engine/arg_utils.py", 1955, "create_model_config", "return ModelConfig("),
}
_VLLM_MODEL_CONFIG_CALL = Frame(  # create_engine_config builds the ModelConfig first
    "vllm/engine/arg_utils.py", 2240, "create_engine_config", "model_config = self.create_model_config()"
)
_VLLM_POST_INIT = Frame(  # vllm/config/vllm.py: VllmConfig.__post_init__ checks the model against the layout
    "vllm/config/vllm.py",
    1549,
    "__post_init__",
    "self.model_config.verify_with_parallel_config(self.parallel_config)",
)
# What pydantic shows of the arguments, cut in the middle as it cuts them (a real 0.32.0 showed
# ModelConfig's; the others as public logs show them).
_PYDANTIC_INPUTS = {
    "VllmConfig": "{'model_config': ...figs': None, 'instance_id': ''}",
    "ParallelConfig": "{'pipeline_paral...ne, 'nnodes': 1, 'node_rank': 0}",
    "ModelConfig": "{'model': ...nderer_num_workers': 1}",
}
PYDANTIC_VERSION = "2.14"  # the errors.pydantic.dev link names pydantic's minor version
_PYDANTIC_INIT = Frame(
    "pydantic/_internal/_dataclasses.py",
    121,
    "__init__",
    "s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
)
_STDLIB = "/usr/lib/python3.12"


def _entry_frames(entrypoint: str) -> list[str]:
    """The traceback from the command down to the API server's ``run_server`` (vllm/entrypoints/
    cli/main.py, serve.py; or ``python -m vllm.entrypoints.openai.api_server``), through uvloop."""
    if entrypoint == "api_server.py":
        head = [
            '  File "<frozen runpy>", line 198, in _run_module_as_main',
            '  File "<frozen runpy>", line 88, in _run_code',
            f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 59, in <module>',
            "    main()",
            f'  File "{SITE}/vllm/entrypoints/launchers/api_server/entry.py", line 232, in main',
            "    uvloop.run(run_server(args))",
        ]
    else:
        head = [
            '  File "/usr/local/bin/vllm", line 10, in <module>',
            "    sys.exit(main())",
            f'  File "{SITE}/vllm/entrypoints/cli/main.py", line 120, in main',
            "    args.dispatch_function(args)",
            f'  File "{SITE}/vllm/entrypoints/cli/serve.py", line 156, in cmd',
            "    uvloop.run(run_server(args))",
        ]
    return [
        *head,
        f'  File "{SITE}/uvloop/__init__.py", line 96, in run',
        "    return __asyncio.run(",
        f'  File "{_STDLIB}/asyncio/runners.py", line 194, in run',
        "    return runner.run(main)",
        f'  File "{_STDLIB}/asyncio/runners.py", line 118, in run',
        "    return self._loop.run_until_complete(task)",
        '  File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete',
        f'  File "{SITE}/uvloop/__init__.py", line 48, in wrapper',
        "    return await main",
    ]


_ENGINE_CLIENT_FRAMES = (  # vllm/entrypoints/launchers/api_server/entry.py, down to the config
    Frame(
        "vllm/entrypoints/launchers/api_server/entry.py",
        177,
        "run_server",
        "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
    ),
    Frame(
        "vllm/entrypoints/launchers/api_server/entry.py",
        195,
        "run_server_worker",
        "async with build_async_engine_client(",
    ),
    None,  # contextlib's __aenter__
    Frame(
        "vllm/entrypoints/launchers/api_server/entry.py",
        61,
        "build_async_engine_client",
        "async with build_async_engine_client_from_engine_args(",
    ),
    None,
    Frame(
        "vllm/entrypoints/launchers/api_server/entry.py",
        83,
        "build_async_engine_client_from_engine_args",
        "vllm_config = engine_args.create_engine_config(usage_context=usage_context)",
    ),
)
_BIND_FRAMES = (  # vllm/entrypoints/launchers/launcher.py binds the port before the engine is built
    Frame(
        "vllm/entrypoints/launchers/api_server/entry.py",
        176,
        "run_server",
        "listen_address, sock = setup_server(args, reuse_port=False)",
    ),
    Frame("vllm/tracing/otel.py", 175, "sync_wrapper", "return func(*args, **kwargs)"),
    Frame(
        "vllm/entrypoints/launchers/launcher.py",
        398,
        "setup_server",
        "sock = create_server_socket(sock_addr, reuse_port=reuse_port)",
    ),
    Frame("vllm/entrypoints/launchers/launcher.py", 348, "create_server_socket", "sock.bind(addr)"),
)


def _frame_lines(frames: Sequence[Frame | None]) -> list[str]:
    lines: list[str] = []
    for frame in frames:
        if frame is None:
            lines += [
                f'  File "{_STDLIB}/contextlib.py", line 210, in __aenter__',
                "    return await anext(self.gen)",
            ]
        else:
            lines += frame.lines()
    return lines


_FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
# Each error by the words cockpit's diagnosis reads it by (cockpit/engines/vllm/surface.py), so what
# the simulated engine raises is what the diagnosis explains.
_FAILURE = SURFACE.failures
_VLLM_BY_TEXT: tuple[tuple[re.Pattern[str], Raise], ...] = (
    # vllm/config/model.py: verify_with_parallel_config and _verify_with_expert_parallelism
    (
        _FAILURE["attention-heads"],
        raises("vllm/config/model.py", 1560, "verify_with_parallel_config", "VllmConfig"),
    ),
    (
        _FAILURE["ep-needs-experts"],
        raises("vllm/config/model.py", 1500, "_verify_with_expert_parallelism", "VllmConfig"),
    ),
    (  # a NotImplementedError: pydantic lets it through unwrapped
        _FAILURE["pp-unsupported"],
        raises(
            "vllm/config/model.py", 1573, "verify_with_parallel_config", "VllmConfig", "NotImplementedError"
        ),
    ),
    (  # vllm/config/model.py: ModelConfig.__post_init__ -> _get_and_verify_max_len
        _FAILURE["context-too-long"],
        raises("vllm/config/model.py", 2680, "_get_and_verify_max_len", "ModelConfig"),
    ),
    # vllm/config/parallel.py: ParallelConfig.__post_init__ and _validate_parallel_config
    (_FAILURE["world-size"], raises("vllm/config/parallel.py", 1071, "__post_init__", "ParallelConfig")),
    (
        _FAILURE["eplb-needs-ep"],
        raises("vllm/config/parallel.py", 570, "_validate_parallel_config", "ParallelConfig"),
    ),
    (
        _FAILURE["eplb-needs-parallelism"],
        raises("vllm/config/parallel.py", 579, "_validate_parallel_config", "ParallelConfig"),
    ),
    (  # no diagnosis of its own: the engine's sentence is shown as it is
        re.compile("num_redundant_experts is set to"),
        raises("vllm/config/parallel.py", 587, "_validate_parallel_config", "ParallelConfig"),
    ),
    # In a worker, while it builds the model.
    (
        _FAILURE["eplb-uneven"],
        raises("vllm/model_executor/layers/fused_moe/layer.py", 275, "FusedMoEFactory"),
    ),
    (_FAILURE["fp8-gate-up"], raises(_FP8_UTILS, 1362, "validate_fp8_block_shape_moe")),
    (_FAILURE["fp8-down"], raises(_FP8_UTILS, 1369, "validate_fp8_block_shape_moe")),
    (_FAILURE["fp8-linear-out"], raises(_FP8_UTILS, 1324, "validate_fp8_block_shape")),
    (_FAILURE["fp8-linear-in"], raises(_FP8_UTILS, 1324, "validate_fp8_block_shape")),
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


# The logo vLLM prints when its logger has a formatter (vllm/entrypoints/serve/utils/api_utils.py:
# log_version_and_model), monochrome: one message, its lines each under the logger's prefix.
_LOGO = (
    "",
    "       █     █     █▄   ▄█",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
)
# Never logged verbatim (vllm/entrypoints/serve/utils/api_utils.py: redact_sensitive_args).
_SENSITIVE_ARGS = frozenset({"api_key", "hf_token", "watermark_config"})
# VllmConfig.__str__'s fields that do not depend on the model or the layout, as vLLM prints them.
_AUX_OUTPUT = "AuxOutputConfig(enable_return_routed_experts=False, max_bytes=None)"
_STRUCTURED_OUTPUTS = (
    "StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, disable_additional_properties=False, "
    "reasoning_parser='', reasoning_parser_plugin='', enable_in_reasoning=False)"
)
_OBSERVABILITY = (
    "ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, "
    "collect_detailed_traces=None, per_request_spec_decode_metrics='none', kv_cache_metrics=False, "
    "kv_cache_metrics_sample=0.01, custom_histogram_buckets=None, cudagraph_metrics=False, "
    "enable_layerwise_nvtx_tracing=False, enable_mfu_metrics=False, enable_mm_processor_stats=False, "
    "enable_logging_iteration_details=False, jit_monitor_mode='warn', jit_monitor_verbose=False)"
)
STATS_INTERVAL_S = 10.0  # vllm/envs.py: VLLM_LOG_STATS_INTERVAL

# Across nodes (docs/simulator.md#nodes). A headless node's main process has no name of its own
# (vllm/logger.py: multiprocessing's); its workers open the group in torch's init_process_group
# (torch/distributed/distributed_c10d.py), and meet a lost peer in a collective on Gloo's CPU group.
_HEADLESS_MAIN = "MainProcess"
_ONE_BOX = MultiNode(1, 0, "127.0.0.1", 0, serves=True)
_INIT_PROCESS_GROUP = Frame(
    "torch/distributed/distributed_c10d.py",
    1831,
    "init_process_group",
    "store, rank, world_size = next(rendezvous_iterator)",
)
_ALL_REDUCE = Frame("torch/distributed/distributed_c10d.py", 2815, "all_reduce", "work.wait()")


def _split(span: Span) -> tuple[str, int]:
    return span.nodes.host, span.nodes.port


def logo_wanted(env: Mapping[str, str]) -> bool:
    """The logo, or its plain one-line form when vLLM's logger has no formatter
    (VLLM_CONFIGURE_LOGGING=0) or VLLM_DISABLE_LOG_LOGO is set (vllm/envs.py)."""
    return env.get("VLLM_DISABLE_LOG_LOGO", "0").strip().lower() in ("", "0", "false") and env.get(
        "VLLM_CONFIGURE_LOGGING", "1"
    ).strip() not in ("0", "false", "False")


class VLLMLog(EngineLog):
    """The vLLM logger: "(Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] text" (vllm/logger.py),
    a multi-line message with the prefix on each line; tracebacks from the API server and tqdm bars
    go to stderr bare. Its processes are the API server, the engine core(s) and one worker per GPU:
    the simulator is one process, so it names each its own pid (the API server's is its own)."""

    name = SURFACE.name
    access_lines = True  # unless --disable-uvicorn-access-log (cockpit.sim.engine.access_logged)
    periodic_stats = True  # vllm/v1/metrics/loggers.py, unless --disable-log-stats

    def __init__(self, out: Out, env: Mapping[str, str] | None = None):
        super().__init__(out)
        self.env = os.environ if env is None else env
        self.engine_core = "EngineCore"
        self.engine_cores = ["EngineCore"]
        self.worker = "Worker"
        self.workers: list[str] = []  # each rank's name once it is known
        self.entrypoint = "vllm serve"
        self.shutdown_timeout = 0
        self.memory: MemoryEstimate | None = None  # what was loaded: a KV failure says what was left
        self.serving = False  # the API server serves: a failure now is the busy loop's
        self._pids: dict[str, int] = {"APIServer": os.getpid()}

    def pid(self, process: str) -> int:
        """The pid a process of the engine shows: the API server's own, the others the next ones."""
        if process not in self._pids:
            self._pids[process] = os.getpid() + len(self._pids)
        return self._pids[process]

    def line(self, text: str, source: str, process: str = "APIServer", level: str = "INFO") -> None:
        self.tagged(text, source, process, process, level)

    def tagged(self, text: str, source: str, process: str, name: str, level: str = "INFO") -> None:
        """A line of ``process`` (whose pid it shows) while it is called ``name``: a worker is
        plain "Worker" until its parallel groups exist (vllm/v1/executor/multiproc_executor.py)."""
        stamp = time.strftime("%m-%d %H:%M:%S")
        prefix = f"({name} pid={self.pid(process)}) {level} {stamp} [{source}] "
        for part in text.split("\n"):
            self.out(prefix + part)

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

    # -- start -------------------------------------------------------------------------------

    def starting(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span | None = None) -> None:
        self.announce(args)
        self.configured(args, setup, verdict, span)

    def announce(self, args: EngineArgs) -> None:
        """The API server's first lines, before it binds its port (vllm/entrypoints/launchers/
        launcher.py: setup_server): the logo with the version and model, the non-default args."""
        self.entrypoint = args.entrypoint
        timeout = dict(args.non_default).get("shutdown_timeout")
        self.shutdown_timeout = timeout if isinstance(timeout, int) else 0
        if logo_wanted(self.env):
            logo = "\n".join(_LOGO).format(version=args.version, model=args.model)
        else:
            logo = f"vLLM server version {args.version}, serving model {args.model}"
        self.line(logo, "api_utils.py:347")
        shown = {k: ("***" if k in _SENSITIVE_ARGS else v) for k, v in args.logged_args or args.non_default}
        self.line(f"non-default args: {shown}", "api_utils.py:286")

    def bind_failure(self, host: str, port: int, exc: OSError) -> None:
        """The socket is bound before the engine is built: its OSError ends the API server's
        traceback, raised from ``sock.bind`` (vllm/entrypoints/launchers/launcher.py)."""
        self.out("Traceback (most recent call last):")
        for text in [*_entry_frames(self.entrypoint), *_frame_lines(_BIND_FRAMES)]:
            self.out(text)
        self.out(f"OSError: [Errno {exc.errno or 98}] {exc.strerror or 'Address already in use'}")

    def configured(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span | None = None) -> None:
        """The config (vllm/config/model.py), then the engine core and its workers up to the load;
        across nodes (``span``), up to the rendezvous: ``joined`` goes on once every rank is in."""
        layout = args.layout
        if layout.dp > 1:
            self.engine_core = "EngineCore_DP0"
            self.engine_cores = [f"EngineCore_DP{i}" for i in range(layout.dp)]
        if not self._model_config(setup, verdict):
            return
        if not setup.server.cuda_graphs:
            self._eager_warnings("APIServer")
        self._engine_config(args, setup)
        placement = verdict.placement
        if placement is None:
            return
        world = layout.tp * layout.pp
        if span is None:
            self.line(
                "DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=127.0.0.1, "
                f"mq_connect_ip=127.0.0.1 (local), world_size={world}, local_world_size={world}",
                "multiproc_executor.py:153",
                self.engine_core,
            )
            self._ranks_enter(
                layout, setup, range(placement.gpus_used), world, f"file:///tmp/vllm_dist_{uuid.uuid4().hex}"
            )
            self.joined(args, setup, Span(_ONE_BOX, placement.gpus_used, range(placement.gpus_used)))
            return
        # The head of a world across nodes leads it: its own ranks, then the others' over the network.
        nodes = span.nodes
        self.line(
            f"DP group leader: node_rank={nodes.node_rank}, node_rank_within_dp={nodes.node_rank}, "
            f"master_addr={nodes.host}, mq_connect_ip={self._host_ip(nodes)} (local), "
            f"world_size={span.world}, local_world_size={len(span.ranks)}",
            "multiproc_executor.py:153",
            self.engine_core,
        )
        self._ranks_enter(layout, setup, span.ranks, span.world, span.init_method)

    def _model_config(self, setup: Setup, verdict: Verdict, process: str = "APIServer") -> bool:
        """The model's config lines; False when building it fails (the failure says the rest)."""
        config = _config_failure(verdict.reasons)
        length = setup.server.max_model_len or setup.model.max_context
        self.line(f"Resolved architecture: {setup.model.architecture}", "model.py:733", process)
        if config is not None and _vllm_raise(config.message).config == "ModelConfig":
            return False  # ModelConfig's own check (the context length) fails before it names the length
        self.line(f"Using max model len {length}", "model.py:2152", process)
        return config is None

    def _host_ip(self, nodes: MultiNode) -> str:
        """The address vLLM takes for this node (vllm/utils/network_utils.py: get_ip): VLLM_HOST_IP
        when set, as cockpit sets it on every node."""
        return self.env.get("VLLM_HOST_IP", "").strip() or nodes.host

    def _ranks_enter(self, layout: Layout, setup: Setup, ranks: range, world: int, init_method: str) -> None:
        """Each worker opens the process group (vllm/distributed/parallel_state.py:
        init_distributed_environment): a file:// store on one box, tcp://HEAD:PORT across nodes."""
        self.workers = [self._worker_name(layout, rank, setup) for rank in ranks]
        across = world > len(ranks)  # the world spans nodes: global ranks, local ones from 0
        for local, rank in enumerate(ranks):
            shown, local_rank = (rank, local) if across else (rank % world, rank % world)
            self.tagged(
                f"world_size={world} rank={shown} local_rank={local_rank} "
                f"distributed_init_method={init_method} backend=nccl",
                "parallel_state.py:1906",
                self.workers[local],
                "Worker",
            )
        self.worker = self.workers[0] if self.workers else self.worker

    # -- across nodes ----------------------------------------------------------------------------

    def headless(self, args: EngineArgs, setup: Setup, verdict: Verdict, span: Span) -> None:
        """A node with --headless (vllm/entrypoints/cli/serve.py: run_headless): it builds the
        config in its main process, says where the head is, and its workers open the group."""
        self.entrypoint = args.entrypoint
        self._pids[_HEADLESS_MAIN] = os.getpid()  # this process, as the API server's is elsewhere
        if not self._model_config(setup, verdict, _HEADLESS_MAIN):
            return
        nodes = span.nodes
        if nodes.data_parallel:
            text = HEADLESS_DP_TEXT.format(
                engines=max(1, args.layout.dp // nodes.nnodes), address=nodes.address
            )
            self.line(text, "serve.py:239", _HEADLESS_MAIN)
        else:
            text = HEADLESS_TEXT.format(version=args.version, address=nodes.address)
            self.line(text, "serve.py:224", _HEADLESS_MAIN)
        if verdict.placement is not None:
            self._ranks_enter(args.layout, setup, span.ranks, span.world, span.init_method)

    def joined(self, args: EngineArgs, setup: Setup, span: Span) -> None:
        """Every rank is in: each of this node's ranks gets its groups, the first starts to load."""
        for rank in span.ranks:
            self._rank_assigned(args.layout, rank, span.world, setup, self.workers[rank - span.ranks.start])
        self.line(f"Starting to load model {args.model}...", "gpu_model_runner.py:5039", self.worker)

    def rank_timeout(self, span: Span, seconds: float, joined: int) -> None:
        """Rank 0's store gives up (torch/distributed/distributed_c10d.py: init_process_group):
        its worker fails to start, and the engine with it."""
        self._worker_failure(_INIT_PROCESS_GROUP, store_timeout_text(seconds, joined, span.world))

    def unreachable(self, span: Span, seconds: float) -> None:
        """A headless node's first rank never reaches the head's store."""
        nodes = span.nodes
        lines = [
            "Traceback (most recent call last):",
            *_INIT_PROCESS_GROUP.lines(),
            client_timeout_text(nodes.host, nodes.port, seconds),
        ]
        self._logged_exception(
            "WorkerProc failed to start.", lines, self.worker, "multiproc_executor.py:1057"
        )

    def peer_lost(self, span: Span, host: str, port: int) -> None:
        """The head's first rank meets the lost node in its next collective (Gloo's CPU group):
        while starting, the worker fails to start; while serving, its busy loop fails and the
        engine core with it (vllm/v1/executor/multiproc_executor.py, vllm/v1/engine/core.py)."""
        if not self.serving:
            self._worker_failure(_ALL_REDUCE, peer_closed_text(host, port))
            return
        lines = ["Traceback (most recent call last):", *_ALL_REDUCE.lines(), peer_closed_text(host, port)]
        self._logged_exception(
            "WorkerProc hit an exception.", lines, self.worker, "multiproc_executor.py:1189"
        )
        self._logged_exception(
            "EngineCore encountered a fatal error.", lines, self.engine_core, "core.py:1586"
        )

    def head_lost(self, span: Span, local: tuple[str, int]) -> None:
        """The head's store is gone under this node's ranks (vllm-project/vllm#32136)."""
        for rank in span.ranks:
            self.out(store_lost_text(rank, local, span.nodes.address))
        lines = ["Traceback (most recent call last):", *_ALL_REDUCE.lines(), peer_closed_text(*_split(span))]
        self._logged_exception(
            "WorkerProc hit an exception.", lines, self.worker, "multiproc_executor.py:1189"
        )

    def head_stopped(self, span: Span) -> None:
        self.line("Shutting down.", "serve.py:266", _HEADLESS_MAIN)

    def _engine_config(self, args: EngineArgs, setup: Setup) -> None:
        """vllm/v1/engine/core.py: the engine core's config, VllmConfig.__str__ (vllm/config/vllm.py)
        up to pooler_config; the compilation and kernel configs that follow are left out."""
        layout = args.layout
        length = setup.server.max_model_len or setup.model.max_context
        quant = setup.model.quant
        quantization = {"fp8-block": "fp8", "fp8": "fp8", "mxfp4": "mxfp4"}.get(quant.method)
        quant_config = None
        if quantization is not None:
            quant_config = {"quant_method": quantization}
            if quant.block is not None:
                quant_config["weight_block_size"] = list(quant.block)  # type: ignore[assignment]
        values = dict(args.non_default)
        self.line(
            f"Initializing a V1 LLM engine (v{args.version}) with config: model={args.model!r}, "
            f"speculative_config=None, tokenizer={values.get('tokenizer') or args.model!r}, "
            "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, "
            f"trust_remote_code={bool(values.get('trust_remote_code'))}, dtype=torch.bfloat16, "
            f"max_seq_len={length}, download_dir=None, load_format=auto, tensor_parallel_size={layout.tp}, "
            f"pipeline_parallel_size={layout.pp}, data_parallel_size={layout.dp}, "
            "decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
            f"disable_custom_all_reduce={bool(values.get('disable_custom_all_reduce'))}, "
            f"quantization={quantization}, quantization_config={quant_config}, "
            f"enforce_eager={not setup.server.cuda_graphs}, aux_output_config={_AUX_OUTPUT}, "
            f"kv_cache_dtype={setup.server.kv_cache_dtype}, device_config=cuda, "
            f"structured_outputs_config={_STRUCTURED_OUTPUTS}, observability_config={_OBSERVABILITY}, "
            f"seed=0, served_model_name={args.served_name}, "
            f"enable_prefix_caching={values.get('enable_prefix_caching', True) is not False}, "
            f"enable_chunked_prefill={setup.server.chunked_prefill}, pooler_config=None",
            "core.py:133",
            self.engine_core,
        )

    def _worker_name(self, layout: Layout, rank: int, setup: Setup) -> str:
        """vllm/v1/executor/multiproc_executor.py: Worker[_DPd][_PPp][_TPt][_EPe], once the
        parallel groups exist."""
        dp, pp, tp = _rank_names(layout, rank)
        name = "Worker"
        name += f"_DP{dp}" if layout.dp > 1 else ""
        name += f"_PP{pp}" if layout.pp > 1 else ""
        name += f"_TP{tp}" if layout.tp > 1 else ""
        name += f"_EP{dp * layout.tp + tp}" if layout.expert_parallel and setup.model.is_moe else ""
        return name

    def _rank_assigned(self, layout: Layout, rank: int, world: int, setup: Setup, worker: str) -> None:
        """vllm/distributed/parallel_state.py: every MoE model has an EP group over DP x PCP x TP.
        Logged while the worker is still plain "Worker" (its name comes after its groups)."""
        dp, pp, tp = _rank_names(layout, rank)
        ep = str(dp * layout.tp + tp) if setup.model.is_moe else "N/A"
        eplb = ep if setup.server.enable_eplb and setup.model.is_moe else "N/A"
        self.tagged(
            f"rank {rank} in world size {world} is assigned as DP rank {dp}, PP rank {pp}, PCP rank 0, "
            f"TP rank {tp}, ETP rank {tp}, EP rank {ep}, EPLB rank {eplb}",
            "parallel_state.py:2350",
            worker,
            "Worker",
        )

    # -- failures ------------------------------------------------------------------------------

    def startup_failure(self, reasons: Sequence[Reason]) -> None:
        config = _config_failure(reasons)
        if config is not None:
            self._config_traceback(config.message)
        else:
            first = reasons[0]
            self._worker_failure(_vllm_raise(first.message, first.rule).frame, exception_line(first.message))

    def _config_traceback(self, message: str) -> None:
        """The API server's own traceback (bare: Python's excepthook) for a config it cannot build.
        pydantic wraps a ValueError or an assert raised inside a config in a ValidationError raised
        from its validator, so the traceback ends at pydantic's frame; other exceptions pass through."""
        raised = _vllm_raise(message)
        assert raised.config is not None
        self.out("Traceback (most recent call last):")
        lines = [*_entry_frames(self.entrypoint), *_frame_lines(_ENGINE_CLIENT_FRAMES)]
        if raised.config == "ModelConfig":
            lines += _VLLM_MODEL_CONFIG_CALL.lines()
        lines += [*_VLLM_CONFIG_CALLS[raised.config].lines(), *_PYDANTIC_INIT.lines()]
        error = exception_line(message, raised.exception)
        wrapped = error.startswith(("ValueError", "AssertionError"))
        if not wrapped:  # it went through pydantic: the frames below it show
            if raised.config == "VllmConfig":
                lines += _VLLM_POST_INIT.lines()
            lines += raised.frame.lines()
        for text in lines:
            self.out(text)
        if not wrapped:
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
        self.out(f"    For further information visit https://errors.pydantic.dev/{PYDANTIC_VERSION}/v/{code}")

    def _print_lines(self, text: str) -> None:
        for line in text.splitlines():
            self.out(line)

    def _worker_failure(self, frame: Frame, error: str, worker: str | None = None) -> None:
        """A worker (the first by default) logs its exception (logger.exception: every line
        prefixed), then the engine core and the API server say so
        (vllm/v1/executor/multiproc_executor.py, vllm/v1/engine/core.py)."""
        lines = ["Traceback (most recent call last):", *frame.lines(), *error.splitlines()]
        self._logged_exception(
            "WorkerProc failed to start.", lines, worker or self.worker, "multiproc_executor.py:1057"
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
        self._logged_exception(ENGINE_CORE_FAILED, lines, self.engine_core, "core.py:1584")
        self.out("Traceback (most recent call last):")
        for text in Frame(
            "vllm/v1/engine/utils.py", 1473, "wait_for_engine_startup", "raise RuntimeError("
        ).lines():
            self.out(text)
        self.out(
            "RuntimeError: Engine core initialization failed. See root cause above. "
            f"Failed core proc(s): {{'{self.engine_core}': 1}}"
        )

    def oom(self, text: str, rank: int = 0) -> None:
        """The worker of ``rank`` runs out of memory loading its shard: torch names its GPU."""
        frame = Frame(
            "vllm/model_executor/model_loader/default_loader.py",
            503,
            "load_weights",
            "loaded_weights = model.load_weights(self.get_all_weights(model_config, model))",
        )
        self._worker_failure(frame, text, self.workers[rank] if rank < len(self.workers) else None)

    # -- loaded, KV cache, ready ------------------------------------------------------------------

    def loaded(self, setup: Setup, memory: MemoryEstimate, load_s: float | None = None) -> None:
        """The loader's time (vllm/model_executor/model_loader/default_loader.py), then the model
        runner's memory and time (vllm/v1/worker/gpu_model_runner.py)."""
        self.memory = memory
        took = self.elapsed()
        self.line(
            f"Loading weights took {took if load_s is None else load_s:.2f} seconds",
            "default_loader.py:501",
            self.worker,
        )
        self.line(
            f"Model loading took {gb(memory.weights_gib)} GiB memory and {took:.6f} seconds",
            "gpu_model_runner.py:5149",
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
                "gpu_model_runner.py:6474",
                self.worker,
            )
        self._available_kv(memory)
        self.line(  # vllm/v1/core/kv_cache_utils.py: one line, "GPU" or "CPU" by the device
            f"GPU KV cache size: {per_replica:,} tokens, "
            f"Maximum concurrency for {length:,} tokens per request: {per_replica / length:.2f}x",
            "kv_cache_utils.py:2327",
            self.engine_core,
        )
        if setup.server.cuda_graphs:  # vllm/v1/worker/gpu_model_runner.py: tqdm bar, then the summary
            self.out(
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:01<00:00, 67.00it/s]"
            )
            self.line(  # vllm/v1/worker/gpu_model_runner.py: capture_model
                f"Graph capturing finished in 1 secs, took {graphs:.2f} GiB",
                "gpu_model_runner.py:6581",
                self.worker,
            )
        self.line(  # vllm/v1/engine/core.py
            f"init engine (profile, create kv cache, warmup model) took {self.elapsed():.2f} s",
            "core.py:402",
            self.engine_core,
        )
        if not setup.server.cuda_graphs:  # the engine core's own config says it again
            self._eager_warnings(self.engine_core)

    def _eager_warnings(self, process: str) -> None:
        """--enforce-eager: VllmConfig.__post_init__ warns, once per process (vllm/config/vllm.py)."""
        self.line(
            "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is "
            "equivalent to setting -cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False",
            "vllm.py:1703",
            process,
            "WARNING",
        )
        self.line(
            "Inductor compilation was disabled by user settings, optimizations settings that are only active "
            "during inductor compilation will be ignored.",
            "vllm.py:1727",
            process,
            "WARNING",
        )

    def _available_kv(self, memory: MemoryEstimate) -> None:
        self.line(  # vllm/v1/worker/gpu_worker.py: determine_available_memory
            f"Available KV cache memory: {gb(memory.kv_budget_gib)} GiB", "gpu_worker.py:759", self.worker
        )

    def ready(self, args: EngineArgs) -> None:
        """The API server once the engine is up (vllm/entrypoints/launchers/api_server/entry.py:
        build_and_serve; vllm/entrypoints/scale_out/factories.py), its routes (launcher.py), then
        uvicorn's lines. The address is the one vLLM reads from --host: "0.0.0.0" without it."""
        values = dict(args.non_default)
        self.line("Supported tasks: ['generate']", "entry.py:136")
        if not values.get("enable_scale_out"):
            self.line(
                "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.",
                "factories.py:89",
            )
        host = values.get("host") or "0.0.0.0"
        address = f"[{host}]" if ":" in str(host) else host
        self.line(f"Starting vLLM server on http://{address}:{args.port}", "entry.py:140")
        self.line("Available routes are:", "launcher.py:186")
        for path, methods in SURFACE.routes:
            self.line(f"Route: {path}, Methods: {methods}", "launcher.py:195")
        self.out(f"INFO:     Started server process [{os.getpid()}]")
        self.out("INFO:     Waiting for application startup.")
        self.out(f"INFO:     {SURFACE.ready_line}")
        self.serving = True

    # -- serving ---------------------------------------------------------------------------------

    def stats(
        self,
        prompt_tps: float,
        generation_tps: float,
        running: int,
        waiting: int,
        kv_usage: float,
        prefix_hit_rate: float | None,
    ) -> None:
        """The engine's periodic line (vllm/v1/metrics/loggers.py: LoggingStatLogger.log), every
        VLLM_LOG_STATS_INTERVAL seconds while the engine is not idle."""
        parts = [
            f"Avg prompt throughput: {prompt_tps:.1f} tokens/s",
            f"Avg generation throughput: {generation_tps:.1f} tokens/s",
            f"Running: {running} reqs",
            f"Waiting: {waiting} reqs",
            f"GPU KV cache usage: {kv_usage * 100:.1f}%",
        ]
        if prefix_hit_rate is not None:
            parts.append(f"Prefix cache hit rate: {prefix_hit_rate * 100:.1f}%")
        self.line("Engine 000: " + ", ".join(parts), "loggers.py:335")

    def shutdown(self, in_flight: int = 0) -> None:
        """SIGTERM (vllm/entrypoints/launchers/launcher.py: serve_http's handler): the API server
        stops the engine client (vllm/v1/engine/core_client.py, vllm/v1/utils.py: shutdown), the
        engine core its busy loop (vllm/v1/engine/core.py) and its workers
        (vllm/v1/executor/multiproc_executor.py); with --shutdown-timeout 0 (the default: abort)
        whatever is left is killed at once (vllm/utils/system_utils.py), then uvicorn stops."""
        timeout = self.shutdown_timeout
        mode = "abort" if timeout == 0 else "drain"
        workers = self.workers or ["Worker"]
        self.line("[shutdown] API server: shutdown triggered", "launcher.py:254")
        self.line(
            f"[shutdown] API server: stopping engine client mode={mode} timeout={timeout}s", "launcher.py:270"
        )
        self.line(f"[shutdown] MPClient: start timeout={timeout}s", "core_client.py:770")
        self.line("[shutdown] MPClient: stopping engine manager", "core_client.py:772")
        for core in self.engine_cores:
            self.line(f"[shutdown] Process manager: send sigterm to process {core}", "utils.py:628")
        if timeout == 0:
            self.line(
                f"[shutdown] Process manager: force killing remaining processes count={len(self.engine_cores)}",
                "utils.py:648",
                level="WARNING",
            )
            for core in self.engine_cores:
                self.line(
                    f"[shutdown] Process manager: force killing remaining process {core} pid {self.pid(core)}",
                    "utils.py:653",
                    level="WARNING",
                )
        for core in self.engine_cores:
            self.line("[shutdown] EngineCore: trigger received signal=SIGTERM", "core.py:1454", core)
            self.line(f"[shutdown] EngineCore: start mode={mode} timeout={timeout}s", "core.py:1635", core)
            if in_flight and mode == "abort":
                self.line(
                    f"[shutdown] EngineCore: aborting in-flight requests count={in_flight}",
                    "core.py:1644",
                    core,
                )
            self.line(
                "[shutdown] EngineCore: request processing complete; starting resource teardown",
                "core.py:1666",
                core,
            )
            self.line("[shutdown] EngineCore: exiting busy loop", "core.py:1499", core)
            self.line(
                f"[shutdown] Executor: waiting for worker exit count={len(workers)}",
                "multiproc_executor.py:479",
                core,
            )
        for worker in workers:
            self.line("Parent process exited, terminating worker queues", "multiproc_executor.py:843", worker)
        if timeout == 0:
            for worker in workers:
                self.line(
                    f"[shutdown] force killing sub process VLLM::{worker} pid {self.pid(worker)}",
                    "system_utils.py:225",
                    level="WARNING",
                )
        self.line("[shutdown] MPClient: engine manager stopped", "core_client.py:774")
        self.line("[shutdown] MPClient: cleaning up background resources", "core_client.py:775")
        self.line("[shutdown] MPClient: complete", "core_client.py:777")
        self.line("[shutdown] API server: engine client stopped", "launcher.py:279")
        self.line("[shutdown] API server: signalling HTTP server shutdown", "launcher.py:282")
        self.line("[shutdown] API server: shutting down FastAPI HTTP server", "launcher.py:304")
        self.out("INFO:     Shutting down")
        self.out("INFO:     Waiting for application shutdown.")
        self.out("INFO:     Application shutdown complete.")


def uvicorn_access_line(client: str, method: str, path: str, version: str, status: int, reason: str) -> str:
    """uvicorn's access log line (uvicorn/logging.py: AccessFormatter, monochrome)."""
    return f'INFO:     {client} - "{method} {path} HTTP/{version}" {status} {reason}'
