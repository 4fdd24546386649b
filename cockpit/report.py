"""Plain-text tables for the terminal (the CLI's face; the TUI draws its own)."""

from __future__ import annotations

import shutil
from typing import Sequence

from cockpit.planner import FAILS, FITS, TIGHT, Verdict

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


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Left-aligned columns; the last column is cut to the terminal width."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    width = width or shutil.get_terminal_size((160, 24)).columns
    fixed = sum(widths[:-1]) + 2 * (len(headers) - 1)
    last = max(20, width - fixed)

    def line(cells: Sequence[str]) -> str:
        out = [str(c).ljust(widths[i]) for i, c in enumerate(cells[:-1])]
        tail = str(cells[-1])
        if len(tail) > last:
            tail = tail[: last - 1] + "…"
        return "  ".join([*out, tail]).rstrip()

    rule = "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * min(widths[-1], last)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def plan_table(verdicts: Sequence[Verdict], levels: Sequence[int] = (), width: int | None = None) -> str:
    headers = ["layout", "GPUs", "engine flags", "verdict", "weights/GPU", "KV tokens"]
    headers += [f"C={c}" for c in levels] + ["reason"]
    rows = []
    for v in verdicts:
        flags = short_flags(v.placement.flags) if v.placement else "(not expressible)"
        weights = f"{v.memory.weights_gib:.1f} GiB" if v.memory else "-"
        kv = f"{v.memory.kv_tokens:,}" if v.memory and v.verdict != FAILS else "-"
        gpus = f"{v.gpus_used}" if v.placement else "-"
        speeds = [f"{v.predicted_tok_s[c]:,.0f}" if c in v.predicted_tok_s else "-" for c in levels]
        rows.append([str(v.layout), gpus, flags, verdict_mark(v.verdict), weights, kv, *speeds, v.headline])
    return format_table(headers, rows, width)


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
