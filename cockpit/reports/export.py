"""The results as a document to paste: a title, what was measured, tok/s and latency per layout.

Made for an issue or a chat, where the reader has no journal and no profile: the model, the
engine, the GPUs, the request lengths and the date come with the numbers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from cockpit.journal import BenchPoint, Experiment
from cockpit.planner import Setup
from cockpit.reports.comparison import Comparison
from cockpit.reports.numbers import format_ms, format_tok_s
from cockpit.reports.results import format_comparison
from cockpit.reports.tune import tune_markdown
from cockpit.secrets import redact_text
from cockpit.tune.events import TuneResult


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
    profile: str = ""
    profile_note: str = ""  # why this profile: "the newest experiment's"
    date: str = ""


def context_from_setup(
    setup: Setup, profile: str, comp: Comparison, now: float | None = None, note: str = ""
) -> ReportContext:
    """The context of a profile that still resolves: model, quantization, box and engine from its Setup."""
    hw = setup.hardware
    return ReportContext(
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


def context_from_journal(
    experiments: Sequence[Experiment], comp: Comparison, now: float | None = None, note: str = ""
) -> ReportContext:
    """The context of a profile that no longer loads (deleted, renamed): what the journal kept,
    the model, the engine and the most GPUs one of its layouts used."""
    from cockpit.engines import ENGINES

    newest = max(experiments, key=lambda e: (e.started, e.id)) if experiments else None
    engine = newest.engine if newest else ""
    count = max((len(e.gpus) for e in experiments), default=0)
    return ReportContext(
        model=newest.model if newest else "",
        engine=ENGINES[engine].label if engine in ENGINES else engine,
        gpu_count=count or None,
        profile=comp.profile or "",
        profile_note=note,
        **_measured(comp, now),
    )


class _Measured(TypedDict):
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
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
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(when)),
        "engine_version": engine_versions(comp),
    }


def engine_versions(comp: Comparison) -> str:
    """The engine versions the compared launches ran: as the engine logged it, else as cockpit
    knew it at launch; several are listed, none is "" (older journals kept none)."""
    launches = [row.source(point) for row in comp.rows for point in [None, *row.cells.values()]]
    versions = {
        str(exp.facts.get("engine_version") or exp.engine_version)
        for exp in launches
        if exp is not None and (exp.facts.get("engine_version") or exp.engine_version)
    }
    return ", ".join(sorted(versions))


def _points(comp: Comparison) -> list[BenchPoint]:
    return [p for row in comp.rows for p in row.cells.values()]


def _short_name(model: str) -> str:
    """MiniMaxAI/MiniMax-M2.5 -> MiniMax-M2.5; /models/X/config.json -> X."""
    parts = [p for p in model.replace("\\", "/").split("/") if p]
    if parts and parts[-1].endswith(".json") and len(parts) > 1:
        parts.pop()
    return parts[-1] if parts else model


def markdown_report(
    comp: Comparison, context: ReportContext, predicted: bool = False, tune: TuneResult | None = None
) -> str:
    """A titled markdown document: what was measured, tok/s per layout and concurrency, then
    TTFT and ITL per level, ready to paste into an issue or a chat. It is pasted where anyone
    reads it, so a URL's password (a model at s3://u:p@...) or a secret in a diagnosis is blanked.
    `predicted` puts the tok/s predicted at launch beside each measured one; `tune`, the profile's
    newest tune (`cockpit.reports.tune.newest_tune`), adds its section: winner, command, what was tried."""
    lines = [report_title(context), "", *context_lines(context), ""]
    if not comp.rows:
        lines.append("No benchmark results yet.")
    else:
        lines += [
            "### Output tok/s",
            "",
            format_comparison(comp, "markdown", predicted),
        ]  # the table `cockpit results --format markdown` prints
        if any(row.cells for row in comp.rows):
            lines += ["", "### Latency (ms)", "", latency_table(comp)]
    if tune is not None:
        lines += ["", tune_markdown(tune)]
    return redact_text("\n".join(lines))


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
    if context.input_lens or context.output_lens:
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
    """One row per layout and concurrency: tok/s with TTFT and ITL at p50 and p99."""
    lines = [
        "| Layout | C | tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in comp.rows:
        for level in sorted(row.cells):
            p = row.cells[level]
            cells = [row.layout.replace("|", "\\|"), str(level), format_tok_s(p.output_tok_s)]
            cells += [format_ms(v) for v in (p.ttft_ms_p50, p.ttft_ms_p99, p.itl_ms_p50, p.itl_ms_p99)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
