"""Score cockpit's speed backends against public runs (perf/public_runs.yaml, docs/measured.md).

For every run: the model's config from this repository, a box of ``gpus`` GPUs of type ``gpu``, the
engine at the run's version, the layout planned as cockpit plans it with the run's published memory
and batching flags; then each backend predicts the run's output tok/s and TPOT:

- analytic: cockpit's step-time model alone (``Setup.speed = None``);
- kernels: AIConfigurator's measured kernels (``cockpit.kernels.MeasuredKernels``) where they cover
  the box, GPU, engine version and layout; elsewhere it says why and the analytic model stands in.

A closed-loop run is predicted at its max concurrency. A burst (request rate inf, every prompt sent at
once) is predicted as a closed loop of ``num_prompts`` clients, which the engine's batch and KV cache
cap: its ramp-up and drain are not modelled, so bursts are scored apart too. TPOT is the decode step
time at the running batch. A run the planner says does not fit counts as a miss: |error| 100%.

No network: everything is local. Run: .venv/bin/python perf/public_check.py [--json] [--runs ID,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import hardware
from cockpit.core.perfmodel import PerfModel, for_verdict
from cockpit.core.planner import Setup, plan_layout
from cockpit.engines import get_engine
from cockpit.store.modelfiles import read_config

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "perf" / "public_runs.yaml"
ANALYTIC, KERNELS = "analytic", "kernels"
MISS_ERROR = 1.0  # a run cockpit says cannot start counts as 100% off


@dataclass(frozen=True)
class Workload:
    """What the benchmark client asked for, as cockpit's closed loop takes it."""

    concurrency: int
    input_len: int
    output_len: int


@dataclass(frozen=True)
class PublicRun:
    id: str
    model_config: str
    gpu: str
    gpus: int
    engine: str
    version: str  # the engine version planned with (published, else assumed)
    layout: str
    planner_args: tuple[str, ...]
    kind: str  # closed | burst
    workload: Workload
    output_tok_s: float
    tpot_ms: float | None
    source: str

    @classmethod
    def from_yaml(cls, row: dict[str, Any]) -> PublicRun:
        measured = row["measured"]
        tok_s = measured.get("output_tok_s")
        if tok_s is None:
            tok_s = measured["output_tok_s_per_gpu"] * row["gpus"]
        return cls(
            id=row["id"],
            model_config=row["model_config"],
            gpu=row["gpu"],
            gpus=int(row["gpus"]),
            engine=row["engine"],
            version=str(row.get("assumed_version", row["engine_version"])),
            layout=row["layout"],
            planner_args=tuple(str(a) for a in row.get("planner_args") or ()),
            kind=row["kind"],
            workload=_workload(row),
            output_tok_s=float(tok_s),
            tpot_ms=measured.get("tpot_ms"),
            source=row["source"],
        )


def _workload(row: dict[str, Any]) -> Workload:
    """Fixed lengths where the client asked for them; else the means of the printed totals."""
    if "input_len" in row:
        input_len, output_len = int(row["input_len"]), int(row["output_len"])
    else:
        prompts = int(row["num_prompts"])
        input_len = round(row["total_input_tokens"] / prompts)
        output_len = round(row["total_output_tokens"] / prompts)
    concurrency = int(row["concurrency"]) if row["kind"] == "closed" else int(row["num_prompts"])
    return Workload(concurrency, max(1, input_len), max(1, output_len))


@dataclass(frozen=True)
class Prediction:
    backend: str
    tok_s: float | None  # None: the planner says the layout cannot start
    tpot_ms: float | None
    running: int
    source: str  # the label of what predicted it
    covered: bool  # the backend's own data predicted it (always True for the analytic model)
    note: str = ""

    def error(self, measured: float) -> float | None:
        return None if self.tok_s is None else self.tok_s / measured - 1.0

    def abs_error(self, measured: float) -> float:
        err = self.error(measured)
        return MISS_ERROR if err is None else abs(err)


@dataclass
class Scored:
    run: PublicRun
    predictions: dict[str, Prediction] = field(default_factory=dict)
    problem: str = ""  # the setup could not be built (a config or flag cockpit refuses)


def build_setup(run: PublicRun) -> Setup:
    model = read_config(ROOT / run.model_config)
    work = run.workload
    return Setup(
        model=model,
        hardware=hardware(run.gpu, run.gpus),
        engine=get_engine(run.engine),
        server_args=run.planner_args,
        request_len=work.input_len + work.output_len,
    )


def predict(setup: Setup, run: PublicRun, backend: str) -> Prediction:
    verdict = plan_layout(setup, run.layout)
    perf = for_verdict(setup, verdict)
    if perf is None:
        reasons = "; ".join(r.message for r in verdict.reasons) if verdict.reasons else verdict.verdict
        return Prediction(backend, None, None, 0, "", False, f"does not fit: {reasons}")
    work = run.workload
    loop = perf.closed_loop(work.concurrency, work.input_len, work.output_len)
    step_s = perf.step_time_s(loop.running, work.input_len + work.output_len / 2)
    covered = backend == ANALYTIC or perf.kernels is not None
    return Prediction(
        backend, loop.tok_s, step_s * 1e3, loop.running, perf.source.label, covered, _gpus_note(perf, run)
    )


def _gpus_note(perf: PerfModel, run: PublicRun) -> str:
    used = perf.placement.gpus_used
    return "" if used == run.gpus else f"the layout uses {used} GPUs, the run {run.gpus}"


def kernels_backend() -> Callable[[str, str], Any] | None:
    """The measured-kernel backend's constructor, or None when cockpit.kernels or its extra is absent."""
    try:
        from cockpit.kernels import MeasuredKernels
    except ImportError:
        return None
    return MeasuredKernels


def score(run: PublicRun, measured_kernels: Callable[[str, str], Any] | None) -> Scored:
    scored = Scored(run)
    try:
        setup = build_setup(run)
        scored.predictions[ANALYTIC] = predict(setup, run, ANALYTIC)
        if measured_kernels is not None:
            # as the box does (cockpit.lab.box): the data for the run's version and KV cache dtype
            speed = measured_kernels(run.version, setup.server.kv_cache_dtype)
            kernel_setup = replace(setup, speed=speed)
            scored.predictions[KERNELS] = predict(kernel_setup, run, KERNELS)
    except CockpitError as err:
        scored.problem = str(err)
    return scored


# -- summary ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    backend: str
    subset: str
    count: int
    median_abs_error: float | None
    within_15: int
    within_25: int
    misses: int

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "subset": self.subset,
            "count": self.count,
            "median_abs_error": self.median_abs_error,
            "within_15pct": self.within_15,
            "within_25pct": self.within_25,
            "does_not_fit": self.misses,
        }


def summarise(
    results: Sequence[Scored], backend: str, subset: str, keep: Callable[[Scored], bool]
) -> Summary:
    errors, misses = [], 0
    for scored in results:
        prediction = scored.predictions.get(backend)
        if prediction is None or not keep(scored):
            continue
        errors.append(prediction.abs_error(scored.run.output_tok_s))
        misses += prediction.tok_s is None
    return Summary(
        backend,
        subset,
        len(errors),
        statistics.median(errors) if errors else None,
        sum(e <= 0.15 for e in errors),
        sum(e <= 0.25 for e in errors),
        misses,
    )


def covered(scored: Scored) -> bool:
    prediction = scored.predictions.get(KERNELS)
    return prediction is not None and prediction.covered


SUBSETS: tuple[tuple[str, Callable[[Scored], bool]], ...] = (
    ("all", lambda s: True),
    ("covered", covered),
    ("closed-loop", lambda s: s.run.kind == "closed"),
    ("covered closed", lambda s: covered(s) and s.run.kind == "closed"),
    ("burst", lambda s: s.run.kind == "burst"),
)


def summaries(results: Sequence[Scored]) -> list[Summary]:
    backends = [b for b in (ANALYTIC, KERNELS) if any(b in s.predictions for s in results)]
    return [summarise(results, b, name, keep) for b in backends for name, keep in SUBSETS]


# -- output -------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "   -  " if value is None else f"{value * 100:+5.0f}%"


def _num(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.1f}"


def print_table(results: Sequence[Scored]) -> None:
    print(
        f"{'run':42} {'kind':6} {'meas tok/s':>10} {'TPOT':>6}"
        f" | {'analytic':>8} {'err':>6} {'TPOT':>6} | {'kernels':>8} {'err':>6} {'TPOT':>6}  kernels source"
    )
    for scored in results:
        run = scored.run
        line = f"{run.id:42} {run.kind:6} {run.output_tok_s:10.1f} {_num(run.tpot_ms, 6)}"
        if scored.problem:
            print(f"{line} | not predicted: {scored.problem}")
            continue
        for backend in (ANALYTIC, KERNELS):
            p = scored.predictions.get(backend)
            if p is None:
                line += f" | {'-':>8} {'-':>6} {'-':>6}"
            else:
                line += f" | {_num(p.tok_s)} {_pct(p.error(run.output_tok_s))} {_num(p.tpot_ms, 6)}"
        kern = scored.predictions.get(KERNELS)
        ana = scored.predictions.get(ANALYTIC)
        if kern is not None:
            line += f"  {kern.source if kern.tok_s is not None else kern.note}"
        elif ana is not None and ana.tok_s is None:
            line += f"  {ana.note}"
        print(line)
    print()
    print(f"{'backend':9} {'runs':14} {'n':>3} {'median |err|':>12} {'<=15%':>6} {'<=25%':>6} {'no fit':>6}")
    for s in summaries(results):
        median = "-" if s.median_abs_error is None else f"{s.median_abs_error * 100:.1f}%"
        print(
            f"{s.backend:9} {s.subset:14} {s.count:3} {median:>12} {s.within_15:6} {s.within_25:6} {s.misses:6}"
        )


def to_json(results: Sequence[Scored]) -> dict[str, Any]:
    rows = []
    for scored in results:
        run = scored.run
        row: dict[str, Any] = {
            "id": run.id,
            "kind": run.kind,
            "measured_output_tok_s": run.output_tok_s,
            "measured_tpot_ms": run.tpot_ms,
            "workload": vars(run.workload),
            "problem": scored.problem,
        }
        for backend, p in scored.predictions.items():
            row[backend] = {
                "output_tok_s": p.tok_s,
                "tpot_ms": p.tpot_ms,
                "running": p.running,
                "error": p.error(run.output_tok_s),
                "covered": p.covered,
                "source": p.source,
                "note": p.note,
            }
        rows.append(row)
    return {"runs": rows, "summary": [s.to_json() for s in summaries(results)]}


def load_runs(path: Path = RUNS) -> list[PublicRun]:
    return [PublicRun.from_yaml(row) for row in yaml.safe_load(path.read_text())["runs"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument("--runs", default="", help="comma-separated run ids (default: all)")
    parser.add_argument("--no-kernels", action="store_true", help="score the analytic model only")
    args = parser.parse_args(argv)
    runs = load_runs()
    if args.runs:
        wanted = {r.strip() for r in args.runs.split(",")}
        runs = [r for r in runs if r.id in wanted]
    backend = None if args.no_kernels else kernels_backend()
    if backend is None and not args.no_kernels:
        print(
            "measured kernels: cockpit.kernels is not importable; scoring the analytic model only",
            file=sys.stderr,
        )
    results = [score(run, backend) for run in runs]
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
