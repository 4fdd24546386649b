"""Plain-text tables for the terminal (the CLI's face; the TUI draws its own)."""

from __future__ import annotations

import re
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.journal import BenchPoint, Comparison, Experiment, format_comparison, format_tok_s
from cockpit.planner import FAILS, FITS, TIGHT, Reason, Setup, Verdict
from cockpit.secrets import redact_text

MARKS = {FITS: "✓ fits", TIGHT: "~ tight", FAILS: "✗ fails"}
# The engines' own short aliases, so the table leaves room for the reason.
SHORT_FLAGS = {
    "--tensor-parallel-size": "-tp",
    "--pipeline-parallel-size": "-pp",
    "--data-parallel-size": "-dp",
    "--enable-expert-parallel": "-ep",
    "--tp-size": "--tp",
    "--ep-size": "--ep",
    "--dp-size": "--dp",
}


def short_flags(flags: Sequence[str]) -> str:
    return " ".join(SHORT_FLAGS.get(f, f) for f in flags)


def verdict_mark(verdict: str) -> str:
    """Marks as well as words, so no meaning rests on colour."""
    return MARKS[verdict]


def terminal_width() -> int | None:
    """The terminal's width when stdout is one; None for a pipe or file, where nothing is cut."""
    import shutil

    return shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else None


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Left-aligned columns. The last column (it may hold several lines) is never cut: with a
    width it wraps onto lines indented under itself, without one it runs as long as it is."""
    last_lines = [str(r[-1]).splitlines() or [""] for r in [headers, *rows]]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    widths.append(max(len(text) for lines in last_lines for text in lines))
    fixed = sum(widths[:-1]) + 2 * (len(headers) - 1)
    last = max(20, width - fixed) if width else None

    def line(cells: Sequence[str], tail: list[str]) -> list[str]:
        head = "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(cells[:-1]))
        wrapped = _wrap(tail, last)
        return [(head + "  " + wrapped[0]).rstrip(), *(" " * fixed + more for more in wrapped[1:])]

    rule = "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * min(widths[-1], last or 40)
    out = [*line(headers, last_lines[0]), rule]
    for cells, tail in zip(rows, last_lines[1:]):
        out += line(cells, tail)
    return "\n".join(out)


def _wrap(paragraphs: list[str], width: int | None) -> list[str]:
    """Each paragraph wrapped to `width`; with several (several reasons), continuation lines are
    indented two spaces so where the next one starts still shows."""
    if width is None:
        return paragraphs
    indent = "  " if len(paragraphs) > 1 else ""
    out: list[str] = []
    for text in paragraphs:
        out += textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


def reason_text(reason: Reason, full: bool = False) -> str:
    """A reason in the engine's own words, with cockpit's explanation after them.

    An OOM at load leads with torch's message (cut after "Tried to allocate ..." unless
    `full`), since that is the line a person will meet in the engine's log."""
    if reason.rule == "oom-at-load":
        words = reason.message.strip() if full else _oom_head(reason.message)
        return f"{words} ({reason.detail})" if reason.detail else words
    text = str(reason)
    if full and reason.detail and reason.detail not in text:
        text += f" ({reason.detail})"
    return text


def _oom_head(message: str) -> str:
    """torch's OOM message up to the size it tried to allocate."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    match = re.match(r"(.*?Tried to allocate \S+ \S+?)\.(\s|$)", first)
    return match[1] if match else first


def plan_table(verdicts: Sequence[Verdict], levels: Sequence[int] = (), width: int | None = None) -> str:
    """One row per layout; a single layout shows every reason in full, many show the first."""
    headers = ["layout", "GPUs", "engine flags", "verdict", "weights/GPU", "KV tokens"]
    headers += [f"C={c}" for c in levels] + ["reason"]
    rows = []
    for v in verdicts:
        flags = short_flags(v.placement.flags) if v.placement else "(not expressible)"
        weights = f"{v.memory.weights_gib:.1f} GiB" if v.memory else "-"
        kv = f"{v.memory.kv_tokens:,}" if v.memory and v.verdict != FAILS else "-"
        gpus = f"{v.gpus_used}" if v.placement else "-"
        speeds = [f"{v.predicted_tok_s[c]:,.0f}" if c in v.predicted_tok_s else "-" for c in levels]
        reason = _reason_cell(v, every=len(verdicts) == 1)
        rows.append([str(v.layout), gpus, flags, verdict_mark(v.verdict), weights, kv, *speeds, reason])
    return format_table(headers, rows, width)


def _reason_cell(v: Verdict, every: bool) -> str:
    """The table's reason: the first one (or all of them, one a line), else the KV headroom."""
    if not v.reasons:
        return v.headline
    if every:
        return "\n".join(reason_text(r, full=True) for r in v.reasons)
    return reason_text(v.reasons[0])


def _na(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def gpu_lines(samples) -> list[str]:
    """One line per GPU; a field the source could not read shows as n/a."""
    gib = 2**30
    lines = []
    for s in samples:
        used = _na(s.memory_used / gib if s.memory_used is not None else None, ".1f")
        total = _na(s.memory_total / gib if s.memory_total is not None else None, ".1f")
        power = f"{_na(s.power_w, '.0f')}/{_na(s.power_limit_w, '.0f')} W"
        procs = ", ".join(f"{p.pid} {p.name} {p.used_bytes / gib:.1f} GiB" for p in s.processes) or "idle"
        lines.append(
            f"GPU {s.index}  {s.name}  {used}/{total} GiB  {power}  util {_na(s.utilization, '.0f')}%  "
            f"{_na(s.temperature_c, '.0f')} C  {procs}"
        )
    return lines


# -- the results report: tables ready to paste ---------------------------------------------------


@dataclass(frozen=True)
class ReportContext:
    """What a reader of a pasted table needs to know besides the numbers; "" or () is unknown
    and left out, never printed as "unknown"."""

    model: str  # the repo id or path, as the journal holds it
    engine: str  # the engine's label: vLLM, SGLang
    name: str = ""  # the model's short name for the title; the model's last path part if ""
    quant: str = ""  # the quantization label, e.g. "FP8 block 128x128"
    engine_version: str = ""  # nothing journals it yet
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


def _measured(comp: Comparison, now: float | None) -> dict:
    """Request lengths and date from the bench points themselves; the date of the newest point,
    else `now` (the export's time)."""
    points = _points(comp)
    stamps = [p.created for p in points if p.created is not None]
    when = max(stamps) if stamps else (now if now is not None else time.time())
    return {
        "input_lens": tuple(sorted({p.input_len for p in points if p.input_len is not None})),
        "output_lens": tuple(sorted({p.output_len for p in points if p.output_len is not None})),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(when)),
    }


def _points(comp: Comparison) -> list[BenchPoint]:
    return [p for row in comp.rows for p in row.cells.values()]


def _short_name(model: str) -> str:
    """MiniMaxAI/MiniMax-M2.5 -> MiniMax-M2.5; /models/X/config.json -> X."""
    parts = [p for p in model.replace("\\", "/").split("/") if p]
    if parts and parts[-1].endswith(".json") and len(parts) > 1:
        parts.pop()
    return parts[-1] if parts else model


def markdown_report(comp: Comparison, context: ReportContext) -> str:
    """A titled markdown document: what was measured, tok/s per layout and concurrency, then
    TTFT and ITL per level, ready to paste into an issue or a chat. It is pasted where anyone
    reads it, so a URL's password (a model at s3://u:p@...) or a secret in a diagnosis is blanked."""
    lines = [report_title(context), "", *context_lines(context), ""]
    if not comp.rows:
        return redact_text("\n".join([*lines, "No benchmark results yet."]))
    lines += [
        "### Output tok/s",
        "",
        format_comparison(comp, "markdown"),
    ]  # the seeds' table, as `results` prints it
    if any(row.cells for row in comp.rows):
        lines += ["", "### Latency (ms)", "", latency_table(comp)]
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
            cells = [row.layout, str(level), format_tok_s(p.output_tok_s)]
            cells += [format_ms(v) for v in (p.ttft_ms_p50, p.ttft_ms_p99, p.itl_ms_p50, p.itl_ms_p99)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_ms(value: float | None) -> str:
    """Milliseconds as tok/s are written (12.3, 1,234); `-` where the client measured nothing."""
    return "-" if value is None else format_tok_s(value)
