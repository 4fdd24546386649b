"""`cockpit plan`: the planner's verdicts as a terminal table, one row per layout.

Marks as well as words (✓ fits, ~ tight, ✗ fails) so no meaning rests on colour, and the reason
column wraps to the terminal instead of being cut.
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Mapping, Sequence

from cockpit.core.planner import FAILS, FITS, TIGHT, Reason, Verdict
from cockpit.reports.measured import LastMeasured

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


def plan_table(
    verdicts: Sequence[Verdict],
    levels: Sequence[int] = (),
    width: int | None = None,
    measured: Mapping[str, LastMeasured] | None = None,
) -> str:
    """One row per layout; a single layout shows every reason in full, many show the first.
    `measured` (layout -> its newest numbers on this box) adds a "last measured" column beside
    the predicted ones, where at least one shown layout has been measured."""
    measured = {str(v.layout): m for v in verdicts if (m := (measured or {}).get(str(v.layout)))}
    headers = ["layout", "GPUs", "engine flags", "verdict", "weights/GPU", "KV tokens"]
    headers += [f"C={c}" for c in levels] + (["last measured"] if measured else []) + ["reason"]
    rows = []
    for v in verdicts:
        flags = short_flags(v.placement.flags) if v.placement else "(not expressible)"
        weights = f"{v.memory.weights_gib:.1f} GiB" if v.memory else "-"
        kv = f"{v.memory.kv_tokens:,}" if v.memory and v.verdict != FAILS else "-"
        gpus = f"{v.gpus_used}" if v.placement else "-"
        speeds = [f"{v.predicted_tok_s[c]:,.0f}" if c in v.predicted_tok_s else "-" for c in levels]
        if measured:
            last = measured.get(str(v.layout))
            speeds.append(measured_cell(last) if last else "-")
        reason = _reason_cell(v, every=len(verdicts) == 1)
        rows.append([str(v.layout), gpus, flags, verdict_mark(v.verdict), weights, kv, *speeds, reason])
    return format_table(headers, rows, width) + node_split(verdicts, width)


def node_split(verdicts: Sequence[Verdict], width: int | None = None) -> str:
    """Under the table, for layouts across a cluster's nodes: what each node holds
    (`tp8 pp2: node 1: PP stage 0, GPUs 0-7; node 2: PP stage 1, GPUs 0-7`); nothing on one box.
    What the network costs is among the verdicts' warnings, which the caller prints."""
    spread = [v for v in verdicts if v.nodes]
    if not spread:
        return ""
    lines: list[str] = []
    for v in spread:
        text = f"{v.layout}: " + "; ".join(str(n) for n in v.nodes)
        lines += _wrap([text], max(40, width - 2) if width else None)
    return "\n\nacross nodes:\n" + "\n".join("  " + line for line in lines)


def measured_cell(last: LastMeasured) -> str:
    """`47.9 GiB, 311,296 tok, 1,513 tok/s at C=64`: what the engine logged for weights per GPU
    and the KV pool, and the best tok/s benchmarked, in the predicted columns' units."""
    parts = []
    if last.memory.weights_gib is not None:
        parts.append(f"{last.memory.weights_gib:.1f} GiB")
    if last.memory.kv_tokens is not None:
        parts.append(f"{last.memory.kv_tokens:,} tok")
    if (best := last.best) is not None:
        parts.append(f"{best.output_tok_s:,.0f} tok/s at C={best.concurrency}")
    return ", ".join(parts) or "-"


def _reason_cell(v: Verdict, every: bool) -> str:
    """The table's reason: the first one (or all of them, one a line), else the KV headroom."""
    if not v.reasons:
        return v.headline
    if every:
        return "\n".join(reason_text(r, full=True) for r in v.reasons)
    return reason_text(v.reasons[0])
