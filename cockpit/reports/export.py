"""The results as a document to paste: a title, what was measured, tok/s and latency per layout.

Made for an issue or a chat, where the reader has no journal and no profile: the model, the
engine, the GPUs, the request lengths and the date come with the numbers, a simulated box says
so under the title, and each workload (request lengths, open-loop rate) keeps its own tables,
newest first, so nothing measured earlier is dropped and nothing unlike is compared. A level
that is not clean (some requests failed, another client's load) is marked as `cockpit results`
marks it, with the same legend under the tables.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from cockpit.core.planner import Setup
from cockpit.core.secrets import redact_text
from cockpit.core.tuning.events import TuneResult
from cockpit.reports.comparison import SIMULATED_SUFFIX, Comparison, level_mark
from cockpit.reports.numbers import format_ms, format_tok_s
from cockpit.reports.results import (
    PREDICTED_NOTE,
    failed_launches,
    has_prediction,
    labelled,
    mark_notes,
    markdown_table,
    prediction_sources,
)
from cockpit.reports.tune import tune_markdown
from cockpit.store.journal import BenchPoint, Experiment


@dataclass(frozen=True)
class ReportContext:
    """What a reader of a pasted table needs to know besides the numbers; "" or () is unknown
    and left out, never printed as "unknown"."""

    model: str  # the repo id or path, as the journal holds it
    engine: str  # the engine's label: vLLM, SGLang
    name: str = ""  # the model's short name for the title; the model's last path part if ""
    quant: str = ""  # the quantization label, e.g. "FP8 block 128x128"
    engine_version: str = ""  # what the measured launches ran (`engine_versions`)
    gpu_count: int | None = None
    gpu_label: str = ""  # "RTX PRO 6000 Blackwell"
    gpu_detail: str = ""  # memory and link: "94.97 GiB, PCIe 5"
    input_lens: tuple[int, ...] = ()
    output_lens: tuple[int, ...] = ()
    # with several tables, what each one's levels were sent with (`in=512 out=32`), newest first
    workloads: tuple[str, ...] = ()
    profile: str = ""
    profile_note: str = ""  # why this profile: "the newest experiment's"
    date: str = ""


def context_from_setup(
    setup: Setup, profile: str, comp: Comparison, now: float | None = None, note: str = ""
) -> ReportContext:
    """The context of a profile that still resolves: model, quantization, box and engine from its Setup."""
    hw = setup.hardware
    context = ReportContext(
        model=setup.model_path or setup.model.name,
        engine=setup.engine.label,
        name=_short_name(setup.model.name or setup.model_path),
        quant=setup.model.quant.label,
        gpu_count=hw.count,
        gpu_label=hw.gpu.label,
        gpu_detail=f"{hw.memory_gib:.2f} GiB, {hw.link.name}",
        profile=profile,
        profile_note=note,
        **_measured(comp, now),
    )
    return _with_engines_run(context, comp)


def context_from_journal(
    experiments: Sequence[Experiment], comp: Comparison, now: float | None = None, note: str = ""
) -> ReportContext:
    """The context of a profile that no longer loads (deleted, renamed): what the journal kept,
    the model, the engine and the most GPUs one of its layouts used."""
    from cockpit.engines import ENGINES

    newest = max(experiments, key=lambda e: (e.started, e.id)) if experiments else None
    engine = newest.engine if newest else ""
    count = max((len(e.gpus) for e in experiments), default=0)
    context = ReportContext(
        model=newest.model if newest else "",
        engine=ENGINES[engine].label if engine in ENGINES else engine,
        gpu_count=count or None,
        profile=comp.profile or "",
        profile_note=note,
        **_measured(comp, now),
    )
    return _with_engines_run(context, comp)


class _Measured(TypedDict):
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    workloads: tuple[str, ...]
    date: str
    engine_version: str


def _measured(comp: Comparison, now: float | None) -> _Measured:
    """Request lengths and date from the bench points themselves; the date of the newest point,
    else `now` (the export's time)."""
    points = _points(comp)
    stamps = [p.created for p in points if p.created is not None]
    when = max(stamps) if stamps else (now if now is not None else time.time())
    return {
        "input_lens": tuple(sorted({p.input_len for p in points if p.input_len is not None})),
        "output_lens": tuple(sorted({p.output_len for p in points if p.output_len is not None})),
        "workloads": _workloads(comp),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(when)),
        "engine_version": engine_versions(comp),
    }


def _with_engines_run(context: ReportContext, comp: Comparison) -> ReportContext:
    """The engine as the compared launches ran it: a profile now open `on sglang` reports its vLLM
    launches as vLLM's."""
    engine, versions = engines_run(comp)
    return replace(context, engine=engine, engine_version=versions) if engine else context


def _workloads(comp: Comparison) -> tuple[str, ...]:
    """With several tables, what each one's levels were sent with, newest first; the box too
    where some tables were simulated and others not (the banner says it when all were)."""
    tables = comp.tables
    if len(tables) < 2:
        return ()
    mixed = len({t.simulated for t in tables}) > 1
    return tuple(t.label if mixed else t.label.removesuffix(SIMULATED_SUFFIX) for t in tables)


def engine_versions(comp: Comparison) -> str:
    """The engine versions the compared launches ran: as the engine logged it, else as cockpit
    knew it at launch; several are listed, none is "" (older journals kept none)."""
    versions = {version for launches in _launches_by_engine(comp).values() for version in launches}
    return ", ".join(sorted(versions))


def engines_run(comp: Comparison) -> tuple[str, str]:
    """(engine, versions) of the compared launches, whatever engine the profile is open on now:
    vLLM and 0.33.0; launches on two engines (`use P on sglang`) name each with its versions,
    `vLLM 0.33.0, SGLang 0.5.23` and no version; two empty strings when nothing was launched."""
    from cockpit.engines import ENGINES

    by_engine = _launches_by_engine(comp)

    def label(name: str) -> str:
        return ENGINES[name].label if name in ENGINES else name

    if len(by_engine) == 1:
        [(name, versions)] = by_engine.items()
        return label(name), ", ".join(sorted(versions))
    named = [
        f"{label(name)} {', '.join(sorted(versions))}".strip() for name, versions in sorted(by_engine.items())
    ]
    return ", ".join(named), ""


def _launches_by_engine(comp: Comparison) -> dict[str, set[str]]:
    """The compared launches' engines, each with the versions it ran."""
    launches = [
        row.source(point)
        for table in comp.tables
        for row in table.rows
        for point in [None, *row.cells.values()]
    ]
    by_engine: dict[str, set[str]] = {}
    for exp in launches:
        if exp is None:
            continue
        versions = by_engine.setdefault(exp.engine, set())
        version = exp.launch_facts.engine_version or exp.engine_version
        if version:
            versions.add(str(version))
    return by_engine


def _points(comp: Comparison) -> list[BenchPoint]:
    return [p for table in comp.tables for row in table.rows for p in row.cells.values()]


def _short_name(model: str) -> str:
    """MiniMaxAI/MiniMax-M2.5 -> MiniMax-M2.5; /models/X/config.json -> X."""
    parts = [p for p in model.replace("\\", "/").split("/") if p]
    if parts and parts[-1].endswith(".json") and len(parts) > 1:
        parts.pop()
    return parts[-1] if parts else model


def markdown_report(
    comp: Comparison, context: ReportContext, predicted: bool = False, tune: TuneResult | None = None
) -> str:
    """A titled markdown document: what was measured, then for each workload, newest first, tok/s
    per layout and concurrency and TTFT and ITL per level, ready to paste into an issue or a chat.
    A simulated box says so under the title. It is pasted where anyone reads it, so a URL's
    password (a model at s3://u:p@...) or a secret in a diagnosis is blanked. `predicted` puts the
    tok/s predicted at launch beside each measured one; `tune`, the profile's newest tune
    (`cockpit.reports.tune.newest_tune`), adds its section: winner, command, what was tried."""
    lines = [report_title(context), ""]
    if banner := simulated_banner(comp):
        lines += [banner, ""]
    lines += [*context_lines(context), ""]
    if not comp.benched:
        lines.append("No benchmark results yet.")
        if comp.rows:
            lines += ["", "### Launches that failed", "", failed_launches(comp.rows, "markdown")]
    else:
        lines += _tables(comp, predicted)
    if tune is not None:
        lines += ["", tune_markdown(tune)]
    return redact_text("\n".join(lines))


def _tables(comp: Comparison, predicted: bool) -> list[str]:
    """Each table's tok/s (the table `cockpit results --format markdown` prints) and latency, its
    headings saying what it was measured with; the launches that failed are in the newest one."""
    lines: list[str] = []
    headed = labelled(comp)
    for table in comp.tables:
        suffix = f" · {table.label}" if headed else ""
        if lines:
            lines.append("")
        lines += [f"### Output tok/s{suffix}", "", markdown_table(table, predicted)]
        if any(row.cells for row in table.rows):
            lines += ["", f"### Latency (ms){suffix}", "", latency_table(table)]
    if notes := mark_notes(comp):
        for note in notes:  # each its own paragraph
            lines += ["", f"_{note}_"]
    if predicted and has_prediction(comp):
        lines += ["", f"_{PREDICTED_NOTE}_"]
        lines += [f"_{line}_" for line in prediction_sources(comp)]
    return lines


def simulated_banner(comp: Comparison) -> str:
    """The line under the title when numbers came from the simulated box: pasted, they must not
    pass for measurements of GPUs."""
    launches = [row.simulated for table in comp.tables for row in table.rows]
    if not any(launches):
        return ""
    if all(launches):
        return "> **Simulated box**: numbers are the simulator's, not measurements."
    return (
        "> **Partly simulated**: tables marked *simulated box* hold the simulator's numbers, "
        "not measurements."
    )


def report_title(context: ReportContext) -> str:
    """`## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM`: model, box and engine in one line."""
    name = context.name or _short_name(context.model)
    engine = f"{context.engine} {context.engine_version}".strip()
    return f"## {name} on {_gpus(context)} · {engine}" if engine else f"## {name} on {_gpus(context)}"


def _gpus(context: ReportContext) -> str:
    if context.gpu_count and context.gpu_label:
        return f"{context.gpu_count} × {context.gpu_label}"
    if context.gpu_count:
        return f"{context.gpu_count} GPU" + ("s" if context.gpu_count > 1 else "")
    return context.gpu_label or "GPUs not recorded"


def context_lines(context: ReportContext) -> list[str]:
    """One bullet per fact; a fact nobody recorded is left out."""
    lines = []
    if context.model:
        lines.append(f"- Model: `{context.model}`" + (f" ({context.quant})" if context.quant else ""))
    if context.engine:
        lines.append(f"- Engine: {context.engine} {context.engine_version}".rstrip())
    gpus = _gpus(context) + (f" ({context.gpu_detail})" if context.gpu_detail else "")
    lines.append(f"- GPUs: {gpus}")
    if len(context.workloads) > 1:
        lines.append(f"- Workloads: {'; '.join(context.workloads)} (a table for each, newest first)")
    elif context.input_lens or context.output_lens:
        lines.append(
            f"- Request lengths: input {_tokens(context.input_lens)}, output {_tokens(context.output_lens)}"
        )
    if context.profile:
        note = f" ({context.profile_note})" if context.profile_note else ""
        lines.append(f"- Profile: {context.profile}{note}")
    if context.date:
        lines.append(f"- Date: {context.date}")
    return lines


def _tokens(values: Sequence[int]) -> str:
    """1024 tokens; 512 and 1024 tokens when the points differ."""
    if not values:
        return "not recorded"
    words = [str(v) for v in values]
    text = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return f"{text} tokens"


def latency_table(comp: Comparison) -> str:
    """One row per layout and concurrency: tok/s (marked as in the tok/s table) with TTFT and ITL
    at p50 and p99."""
    lines = [
        "| Layout | C | tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in comp.rows:
        for level in sorted(row.cells):
            p = row.cells[level]
            mark = level_mark(p)
            tok_s = format_tok_s(p.output_tok_s) + (f" [{mark}]" if mark else "")
            cells = [row.layout.replace("|", "\\|"), str(level), tok_s]
            cells += [format_ms(v) for v in (p.ttft_ms_p50, p.ttft_ms_p99, p.itl_ms_p50, p.itl_ms_p99)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
