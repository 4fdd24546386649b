"""Feed every argv `cockpit plan` prints to the real engines' own parsers and compare the placement.

Run by hand (not CI) on a box where both engines are installed, each in its own venv; a CPU-only
install is enough, nothing is loaded onto a GPU (tools/README.md says how to install them):

    python3 tools/engine_parity.py                      # all bundled profiles and models, 8 and 4 GPUs
    python3 tools/engine_parity.py --gpus 8 --out rows.json

For every bundled profile (layouts/*.yaml) and every bundled model (layouts/models/*.json), on both
engines (`--engine vllm|sglang`) and each GPU count, it runs `cockpit plan --json`. Every verdict with an
argv has its launcher (`vllm serve`, `python -m sglang.launch_server`) cut off and the rest goes to the
engine of `--engine`: one subprocess per engine, in that engine's venv, reads JSON lines on stdin
(this same file, `--worker ENGINE`). It parses the argv exactly as the engine's CLI does, derives the
placement the engine would run with the engine's own code, and answers with a JSON line. The driver
compares that with cockpit's `placement` and prints the counts per engine.

How each engine's placement is derived (see docs/placement.md for cockpit's side):
- vLLM 0.33: the `vllm serve` parser as vllm/entrypoints/cli/main.py builds it, then
  `ServeSubcommand.validate`; world = PP x TP x PCP per DP rank, x DP in all
  (`ParallelConfig.world_size`, `world_size_across_dp`, vllm/config/parallel.py, built from the parsed
  arguments as `EngineArgs.create_engine_config` builds it); attention TP = TP, one attention replica
  per DP rank; MoE: `FusedMoEParallelConfig.make` (vllm/model_executor/layers/fused_moe/config.py) with
  the inputs vllm/model_executor/layers/fused_moe/layer.py gives it: EP = TP x DP (x PCP) with
  `--enable-expert-parallel`, else MoE TP = TP x DP; lm_head over the TP group; stages: `get_pp_indices`
  (vllm/distributed/utils.py, extra layers on the stages before the last).
- SGLang 0.5.23: `prepare_server_args` (sglang/srt/server_args.py), the parser of
  `python -m sglang.launch_server`; then the engine's own resolution (`ServerArgs.resolve_once`) up to
  where it needs the model, which turns the deprecated `--enable-dp-attention --dp-size N` into
  `--attn-dp-size N` (`handle_deprecated_dp_attention`, sglang/srt/arg_groups/parallel_hook.py);
  `--dp-size` with `--attn-dp-size` is refused as `handle_data_parallelism` refuses it; world = DP x TP x PP (`compute_world_size`), attention TP =
  TP / attention-DP size, MoE TP = TP / EP / MoE-DP (`derive_parallel_widths`,
  sglang/srt/runtime_context.py), attention replicas = DP replicas x attention-DP groups
  (`num_dp_ranks_of`); lm_head over the whole TP group unless `--enable-dp-lm-head`
  (`ParallelLMHead`); stages: `get_pp_indices` (sglang/srt/distributed/utils.py, extra layers on the
  last stages).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("vllm", "sglang")
DEFAULT_PYTHONS = {"vllm": "/tmp/venv-vllm/bin/python", "sglang": "/tmp/venv-sglang/bin/python"}
COMPARED = ("gpus_used", "attn_tp", "attn_replicas", "moe_ep", "moe_tp", "lm_head_tp", "pp", "stage_layers")
MOE_FIELDS = ("moe_ep", "moe_tp")
EXAMPLES = 4

Json = dict[str, Any]
Handler = Callable[[Json], Json]


# --------------------------------------------------------------------------------------------------
# The worker: runs inside an engine's venv, one JSON line in, one JSON line out.
# --------------------------------------------------------------------------------------------------


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, list[str]]]:
    """Everything a parse prints: argparse's usage and error (stderr), Python warnings, and the
    engine's log records of level WARNING and up (its loggers live under "vllm" / "sglang")."""
    text = io.StringIO()
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(ANSI.sub("", f"{record.levelname} {record.name}: {record.getMessage()}"))

    keep = _Keep()
    loggers = [logging.getLogger(name) for name in ENGINES]
    for logger in loggers:
        logger.addHandler(keep)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(text):
            warnings.simplefilter("always")
            yield text, records
        records.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        for logger in loggers:
            logger.removeHandler(keep)


def _argparse_error(stderr: str) -> str:
    """argparse's `PROG: error: ...` text, verbatim (the usage lines before it say nothing new)."""
    lines = stderr.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if ": error: " in line), None)
    return "\n".join(lines[first:]) if first is not None else (stderr.strip() or "exit without a message")


def _stage_layers(
    split: Callable[[int, int, int], tuple[int, int]], layers: int | None, pp: int
) -> list[int] | None:
    """Layers per pipeline stage, as the engine's own `get_pp_indices(layers, rank, pp)` splits them."""
    if not layers:
        return None
    return [end - start for start, end in (split(layers, rank, pp) for rank in range(pp))]


def _vllm_handler() -> Handler:
    """Parse like `vllm serve` and derive the placement with vLLM's own config classes."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_options import use_vllm_cpu_platform_without_gpu

    use_vllm_cpu_platform_without_gpu()
    import vllm.logger
    import vllm.model_executor.layers.fused_moe.config as moe_config
    from vllm.config import ParallelConfig
    from vllm.distributed.utils import get_pp_indices
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # FusedMoEParallelConfig.make asks the live process groups for this process's ranks; only the
    # sizes matter here, so rank 0 of each group stands in for them.
    class _Rank0Group:
        rank_in_group = 0

    moe_config.get_tensor_model_parallel_rank = lambda: 0
    moe_config.get_dp_group = lambda: _Rank0Group()
    moe_config.get_pcp_group = lambda: _Rank0Group()

    # As vllm/entrypoints/cli/main.py builds it: `vllm serve ...` is parsed by the root parser, whose
    # parse_args rewrites -O3, underscores, --model and dotted JSON keys before argparse sees them.
    root = FlexibleArgumentParser(description="vLLM CLI", prog="vllm")
    subparsers = root.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)

    def handle(request: Json) -> Json:
        for once in (vllm.logger._print_warning_once, vllm.logger._print_info_once):
            once.cache_clear()
        with _captured() as (stderr, records):
            try:
                parsed = root.parse_args(["serve", *request["args"]])
                serve.validate(parsed)
            except SystemExit as exit_:
                return {
                    "accepted": False,
                    "exit_code": exit_.code,
                    "error": _argparse_error(stderr.getvalue()),
                }
            except Exception as exc:  # the engine's own validation (ValueError, TypeError, ...)
                return {"accepted": False, "exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
        answer: Json = {"accepted": True, "warnings": records}
        try:
            answer["placement"] = _vllm_placement(parsed, request)
        except Exception as exc:
            answer["placement_error"] = f"{type(exc).__name__}: {exc}"
        return answer

    def _vllm_placement(parsed: argparse.Namespace, request: Json) -> Json:
        args = AsyncEngineArgs.from_cli_args(parsed)
        dp = args.data_parallel_size
        config = ParallelConfig(
            pipeline_parallel_size=args.pipeline_parallel_size,
            tensor_parallel_size=args.tensor_parallel_size,
            prefill_context_parallel_size=args.prefill_context_parallel_size,
            decode_context_parallel_size=args.decode_context_parallel_size,
            data_parallel_size=dp,
            data_parallel_size_local=args.data_parallel_size_local or dp,
            is_moe_model=request["is_moe"],
            enable_expert_parallel=args.enable_expert_parallel,
            all2all_backend=args.all2all_backend,
            enable_eplb=args.enable_eplb,
            eplb_config=args.eplb_config,
        )
        tp, pp, pcp = (
            config.tensor_parallel_size,
            config.pipeline_parallel_size,
            config.prefill_context_parallel_size,
        )
        placement: Json = {
            "gpus_used": config.world_size_across_dp,
            "attn_tp": tp,
            "attn_replicas": config.data_parallel_size,
            # ParallelLMHead shards over the TP group (vllm/model_executor/layers/vocab_parallel_embedding.py).
            "lm_head_tp": tp,
            "pp": pp,
            "stage_layers": _stage_layers(get_pp_indices, request.get("layers"), pp),
        }
        if request["is_moe"]:
            sequence_parallel = config.use_sequence_parallel_moe
            moe = moe_config.FusedMoEParallelConfig.make(
                tp_size_=tp,
                pcp_size_=pcp,
                dp_size_=config.data_parallel_size,
                sp_size_=tp if sequence_parallel else 1,
                vllm_parallel_config=config,
            )
            placement.update(moe_ep=moe.ep_size, moe_tp=moe.tp_size)
        return placement

    return handle


def _sglang_handler() -> Handler:
    """Parse like `python -m sglang.launch_server` and derive the placement with SGLang's own helpers."""
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.runtime_context import derive_parallel_widths, num_dp_ranks_of
    from sglang.srt.server_args import compute_world_size, prepare_server_args

    def handle(request: Json) -> Json:
        with _captured() as (stderr, records):
            try:
                server_args = prepare_server_args(list(request["args"]))
            except SystemExit as exit_:
                return {
                    "accepted": False,
                    "exit_code": exit_.code,
                    "error": _argparse_error(stderr.getvalue()),
                }
            except Exception as exc:
                return {"accepted": False, "exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
            answer: Json = {"accepted": True, "warnings": records}
            try:
                answer["placement"] = _sglang_placement(server_args, request)
            except Exception as exc:
                answer["placement_error"] = f"{type(exc).__name__}: {exc}"
        return answer

    def _sglang_placement(server_args: Any, request: Json) -> Json:
        # The engine's own resolution (ServerArgs.resolve_once -> run_resolution_pipeline,
        # sglang/srt/arg_groups/pipeline.py) up to where it needs the model: with the model path
        # "dummy" it runs handle_deprecated_dp_attention and the model-independent checks, then stops.
        server_args.model_path = "dummy"
        server_args.resolve_once()
        cfg = resolving_view(server_args)
        # handle_data_parallelism's first checks (sglang/srt/arg_groups/parallel_hook.py); the rest of
        # that hook needs the model and the GPU memory settings.
        if cfg.attn_dp_size < 1:
            raise ValueError(f"--attn-dp-size must be positive (got {cfg.attn_dp_size}).")
        if cfg.attn_dp_size > 1 and cfg.dp_size > 1:
            raise ValueError(
                f"--dp-size {cfg.dp_size} with --attn-dp-size {cfg.attn_dp_size}: "
                "data-parallel replicas combined with attention data parallelism "
                "are not supported."
            )
        widths = derive_parallel_widths(
            tp_size=cfg.tp_size,
            attn_cp_size=cfg.attn_cp_size,
            attn_dp_size=cfg.attn_dp_size,
            moe_ep_size=cfg.ep_size,
            moe_dp_size=cfg.moe_dp_size,
            dcp_size=cfg.dcp_size,
            dcp_enabled=False,
        )
        placement: Json = {
            "gpus_used": compute_world_size(dp_size=cfg.dp_size, tp_size=cfg.tp_size, pp_size=cfg.pp_size),
            "attn_tp": widths["attn_tp_size"],
            "attn_replicas": num_dp_ranks_of(cfg),
            # ParallelLMHead uses the whole TP group unless a model passes use_attn_tp_group, which the
            # models tie to --enable-dp-lm-head, each in its own way (some ignore it):
            # sglang/srt/layers/vocab_parallel_embedding.py; not derived when the flag is on.
            "lm_head_tp": None if cfg.enable_dp_lm_head else cfg.tp_size,
            "pp": cfg.pp_size,
            "stage_layers": _stage_layers(get_pp_indices, request.get("layers"), cfg.pp_size),
            "attn_dp_size": cfg.attn_dp_size,
            "dp_size": cfg.dp_size,
        }
        if request["is_moe"]:
            placement.update(moe_ep=widths["moe_ep_size"], moe_tp=widths["moe_tp_size"])
        return placement

    return handle


def worker(engine: str) -> int:
    """Answer JSON lines on stdin with JSON lines on stdout; the engine's own prints go to stderr."""
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    handle = _vllm_handler() if engine == "vllm" else _sglang_handler()
    protocol.write(json.dumps({"ready": engine}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = handle(request)
        except BaseException as exc:  # one bad row must not end the batch
            answer = {"accepted": False, "exit_code": None, "error": f"worker: {type(exc).__name__}: {exc}"}
        answer["id"] = request["id"]
        protocol.write(json.dumps(answer, default=repr) + "\n")
    return 0


# --------------------------------------------------------------------------------------------------
# The driver: any Python 3.10+, standard library only.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A bundled profile or model, as `cockpit plan` takes it."""

    kind: str  # "profile" or "model"
    name: str
    layers: int | None
    is_moe: bool | None

    def flags(self) -> list[str]:
        return [f"--{self.kind}", self.name]


@dataclass
class Row:
    engine: str
    gpus: int
    source: str
    layout: str
    verdict: str
    argv: list[str]
    launcher: str | None
    args: list[str]
    cockpit: Json
    layers: int | None
    is_moe: bool
    engine_answer: Json = field(default_factory=dict)
    mismatches: dict[str, list[Any]] = field(default_factory=dict)


def _model_facts(config: Json) -> tuple[int | None, bool]:
    """Layer count and MoE-ness from a config.json (multimodal configs keep them in text_config)."""
    text = config.get("text_config") or {}
    layers = config.get("num_hidden_layers") or text.get("num_hidden_layers")
    experts = [
        c.get(k) for c in (config, text) for k in ("num_local_experts", "n_routed_experts", "num_experts")
    ]
    return layers, any(isinstance(e, int) and e > 0 for e in experts)


def sources(layouts: Path) -> list[Source]:
    models = {p.stem: json.loads(p.read_text()) for p in sorted((layouts / "models").glob("*.json"))}
    found: list[Source] = []
    for path in sorted(layouts.glob("*.yaml")):
        match = re.search(r"^model:\s*(\S+)", path.read_text(), re.MULTILINE)
        stem = match.group(1).strip("\"'").rsplit("/", 1)[-1].lower() if match else ""
        layers, moe = _model_facts(models[stem]) if stem in models else (None, None)
        found.append(Source("profile", path.stem, layers, moe))
    found += [Source("model", stem, *_model_facts(config)) for stem, config in models.items()]
    return found


def plan(cockpit: str, engine: str, gpus: int, source: Source) -> list[Json] | str:
    """cockpit's verdicts, or why there are none."""
    command = [cockpit, "plan", "--json", "--engine", engine, "--gpus", str(gpus), *source.flags()]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {done.returncode}: {last}"
    try:
        verdicts = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    return verdicts if isinstance(verdicts, list) else f"not a list: {type(verdicts).__name__}"


def split_launcher(argv: list[str]) -> tuple[str | None, list[str]]:
    """(engine whose launcher starts argv, the server arguments after it)."""
    if len(argv) >= 2 and Path(argv[0]).name == "vllm" and argv[1] == "serve":
        return "vllm", argv[2:]
    if len(argv) >= 2 and Path(argv[0]).name == "sglang" and argv[1] == "serve":
        return "sglang", argv[2:]
    if len(argv) >= 3 and Path(argv[0]).name.startswith("python") and argv[1] == "-m":
        module = argv[2]
        if module == "sglang.launch_server":
            return "sglang", argv[3:]
        if module == "vllm.entrypoints.openai.api_server":
            return "vllm", argv[3:]
    return None, argv


class Worker:
    """One engine's parser process; started early so its imports overlap the planning."""

    def __init__(self, engine: str, python: str) -> None:
        self.engine = engine
        self.process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", engine],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def ask(self, requests: list[Json]) -> dict[int, Json]:
        lines = "".join(json.dumps(r) + "\n" for r in requests)
        out, err = self.process.communicate(lines)
        answers = {}
        for line in out.splitlines():
            answer = json.loads(line)
            if "id" in answer:
                answers[answer["id"]] = answer
        if self.process.returncode != 0 or len(answers) != len(requests):
            tail = "\n".join(err.strip().splitlines()[-15:])
            raise SystemExit(f"{self.engine} worker failed (exit {self.process.returncode}):\n{tail}")
        return answers


def compare(row: Row) -> None:
    placement = row.engine_answer.get("placement")
    if not placement:
        return
    for name in COMPARED:
        if name in MOE_FIELDS and not row.is_moe:
            continue
        ours, theirs = row.cockpit.get(name), placement.get(name)
        if theirs is None:
            continue
        if ours != theirs:
            row.mismatches[name] = [ours, theirs]


def _label(row: Row) -> str:
    return f"{row.source} gpus={row.gpus} [{row.layout}]"


def report(rows: list[Row], failures: list[str], timings: dict[str, float]) -> str:
    lines: list[str] = []
    for engine in ENGINES:
        mine = [r for r in rows if r.engine == engine]
        accepted = [r for r in mine if r.engine_answer.get("accepted")]
        rejected = [r for r in mine if not r.engine_answer.get("accepted")]
        foreign = [r for r in mine if r.launcher != engine]
        no_placement = [r for r in accepted if "placement_error" in r.engine_answer]
        mismatched = [r for r in accepted if r.mismatches]
        lines.append(f"== {engine}: {len(mine)} argv, {len(accepted)} accepted, {len(rejected)} rejected")
        lines.append(f"   launcher not `{engine}`'s: {len(foreign)}")
        if foreign:
            launchers = Counter(" ".join(r.argv[: len(r.argv) - len(r.args)]) or "(none)" for r in foreign)
            lines += [f"     {n:5d}  {text}" for text, n in launchers.most_common()]
        if rejected:
            lines.append("   rejected, by the parser's error:")
            groups: dict[str, list[Row]] = defaultdict(list)
            for r in rejected:
                groups[str(r.engine_answer.get("error"))].append(r)
            for error, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"     {len(group):5d}  {error}")
                lines.append(f"            e.g. {_label(group[0])}")
        lines.append(f"   accepted but no placement (the engine's own checks): {len(no_placement)}")
        errors = Counter(r.engine_answer["placement_error"] for r in no_placement)
        lines += [f"     {n:5d}  {text}" for text, n in errors.most_common()]
        lines.append(f"   placement mismatches: {len(mismatched)} of {len(accepted) - len(no_placement)}")
        by_field: dict[str, list[Row]] = defaultdict(list)
        for r in mismatched:
            for name in r.mismatches:
                by_field[name].append(r)
        for name, group in sorted(by_field.items()):
            lines.append(f"     {name}: {len(group)}")
            for r in group[:EXAMPLES]:
                ours, theirs = r.mismatches[name]
                lines.append(f"       {_label(r)}: cockpit {ours}, {engine} {theirs}")
        warned = Counter(w for r in accepted for w in r.engine_answer.get("warnings", []))
        if warned:
            lines.append("   warnings the engine printed:")
            lines += [f"     {n:5d}  {text[:160]}" for text, n in warned.most_common(8)]
    if failures:
        lines.append(f"== cockpit plan failed {len(failures)} times:")
        lines += [f"   {text}" for text in failures]
    spent = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items())
    lines.append(f"== {len(rows)} argv; time: {spent}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--cockpit", default=str(ROOT / ".venv" / "bin" / "cockpit"), help="the cockpit command"
    )
    parser.add_argument("--gpus", default="8,4", help="GPU counts, comma-separated (default 8,4)")
    parser.add_argument("--out", metavar="FILE", help="write every row as JSON")
    parser.add_argument("--engine", action="append", choices=ENGINES, help="only this engine (repeatable)")
    for engine in ENGINES:
        parser.add_argument(
            f"--{engine}-python", default=DEFAULT_PYTHONS[engine], help=f"{engine}'s venv Python"
        )
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)

    started = time.monotonic()
    engines = tuple(args.engine or ENGINES)
    workers = {e: Worker(e, getattr(args, f"{e}_python")) for e in engines}
    gpu_counts = [int(n) for n in args.gpus.split(",") if n.strip()]
    jobs = [(e, n, s) for e in engines for n in gpu_counts for s in sources(ROOT / "layouts")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        plans = list(pool.map(lambda job: plan(args.cockpit, *job), jobs))
    timings = {f"cockpit plan x{len(jobs)}": time.monotonic() - started}

    rows: list[Row] = []
    failures: list[str] = []
    for (engine, gpus, source), verdicts in zip(jobs, plans):
        where = f"{source.kind} {source.name}"
        if isinstance(verdicts, str):
            failures.append(f"--engine {engine} --gpus {gpus} --{where}: {verdicts}")
            continue
        for verdict in verdicts:
            command = [str(word) for word in verdict.get("argv") or []]
            if not command:
                continue
            launcher, server_args = split_launcher(command)
            placement = verdict.get("placement") or {}
            stages = placement.get("stage_layers")
            is_moe = source.is_moe if source.is_moe is not None else bool(placement.get("moe_ep"))
            rows.append(
                Row(
                    engine=engine,
                    gpus=gpus,
                    source=where,
                    layout=str(verdict.get("layout")),
                    verdict=str(verdict.get("verdict")),
                    argv=command,
                    launcher=launcher,
                    args=server_args,
                    cockpit=placement,
                    layers=source.layers or (sum(stages) if stages else None),
                    is_moe=is_moe,
                )
            )

    planned = time.monotonic()

    def ask(engine: str) -> float:
        """Send this engine's rows to its worker; the seconds it took after planning."""
        batch = [(i, r) for i, r in enumerate(rows) if r.engine == engine]
        requests = [{"id": i, "args": r.args, "layers": r.layers, "is_moe": r.is_moe} for i, r in batch]
        answers = workers[engine].ask(requests)
        for i, row in batch:
            row.engine_answer = answers[i]
            compare(row)
        return time.monotonic() - planned

    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        for engine, seconds in zip(workers, pool.map(ask, workers)):
            timings[f"{engine} parser (after planning)"] = seconds
    timings["total"] = time.monotonic() - started
    print(report(rows, failures, timings))
    if args.out:
        Path(args.out).write_text(json.dumps([vars(r) for r in rows], indent=1, default=repr) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
