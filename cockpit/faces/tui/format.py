"""Text helpers for the panes: bars, sparklines and numbers that read without colour."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.text import Text

if TYPE_CHECKING:
    from cockpit.core.planner import MemoryEstimate

GIB = 2**30
MIB = 2**20
SPARK = "▁▂▃▄▅▆▇█"
FULL, EMPTY = "█", "░"
ELLIPSIS = "…"
MIN_WORD = 3  # "py…": a name shortened further says nothing


def bar(fraction: float | None, width: int) -> str:
    """A bar of `width` cells: filled cells for the fraction, light shade for the rest, `?` when unknown."""
    if width <= 0:
        return ""
    if fraction is None:
        return "?" * width
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return FULL * filled + EMPTY * (width - filled)


def sparkline(
    values: Sequence[float | None], width: int, top: float | None = None, keep: str = "last"
) -> str:
    """The last values squeezed into `width` cells, scaled 0..top; the rightmost cell is always the newest value.

    keep="last": each cell the last value of its bucket, so a level (memory) that falls shows the fall;
    keep="max": each cell the max of its bucket, so a short spike (power) stays visible.
    """
    if width <= 0:
        return ""
    known = [v for v in values if v is not None]
    if not known:
        return " " * width
    top = top if top else max(known) or 1.0
    buckets = (
        _buckets(values, width, max if keep == "max" else _last) if len(values) > width else list(values)
    )
    buckets[-1] = values[-1]  # now, not the bucket's old peak
    return "".join(_spark_cell(v, top) for v in buckets).rjust(width)


def _last(chunk: list[float]) -> float:
    return chunk[-1]


def _buckets(
    values: Sequence[float | None], width: int, pick: Callable[[list[float]], float]
) -> list[float | None]:
    """`width` consecutive buckets of values, each reduced by `pick` over its known values (None if none)."""
    size = len(values) / width
    out: list[float | None] = []
    for i in range(width):
        chunk = [v for v in values[int(i * size) : int((i + 1) * size)] if v is not None]
        out.append(pick(chunk) if chunk else None)
    return out


def _spark_cell(value: float | None, top: float) -> str:
    if value is None:
        return " "
    return SPARK[round(max(0.0, min(1.0, value / top)) * (len(SPARK) - 1))]


def gib(n_bytes: int | None, digits: int = 1) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / GIB:.{digits}f}"


def number(value: float | None, fmt: str = "{:.0f}", unknown: str = "n/a") -> str:
    return unknown if value is None else fmt.format(value)


def size(n_bytes: int | None) -> str:
    """A process's memory as nvitop reads it, unit attached: 512M, 45.2G, 141G."""
    if n_bytes is None:
        return "n/a"
    if n_bytes < GIB:
        return f"{n_bytes / MIB:.0f}M"
    value = n_bytes / GIB
    return f"{value:.1f}G" if value < 99.95 else f"{value:.0f}G"


def used_of(used: float | None, total: float | None, unit: str, fmt: str = "{:.0f}") -> str:
    """45.2/95G, 300/600W: one field with its unit; 45.2G when the total is unknown, n/a when the value is."""
    if used is None:
        return "n/a"
    if total is None:
        return f"{fmt.format(used)}{unit}"
    return f"{fmt.format(used)}/{total:.0f}{unit}"


# -- lines of whole fields ---------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """A piece of a pane line, shown whole or not at all: a pid, a number with its unit, a name.

    rank: fields get room in rank order (0 first) and the first one that does not fit ends the line,
    so a lower rank never shows while a higher one is dropped. word: a name, shortened with … rather
    than dropped. right: pushed to the right end. fill: a bar or sparkline, drawn again at its width
    plus the room left over.
    """

    text: str
    rank: int = 0
    style: str = ""
    word: bool = False
    right: bool = False
    fill: Callable[[int], str] | None = None


def _length(fields: Sequence[Field], gap: int = 1) -> int:
    return sum(cell_len(f.text) for f in fields) + gap * max(0, len(fields) - 1)


def shorten(word: str, width: int) -> str:
    """`word` in `width` cells, ending in … when cut; "" when fewer than MIN_WORD cells are left."""
    if cell_len(word) <= width:
        return word
    if width < MIN_WORD:
        return ""
    return set_cell_size(word, width - 1) + ELLIPSIS  # by cells: a wide character is never split


def fit(fields: Sequence[Field], width: int, gap: int = 1) -> list[Field]:
    """The fields that fit in `width` cells, `gap` spaces apart, in their order, chosen by rank."""
    chosen: set[int] = set()
    shortened: dict[int, Field] = {}
    for i in sorted(range(len(fields)), key=lambda i: fields[i].rank):
        field = fields[i]
        if not field.text:
            continue
        trial = [fields[j] for j in sorted(chosen | {i})]
        over = _length(trial, gap) - width
        if over <= 0:
            chosen.add(i)
            continue
        short = shorten(field.text, cell_len(field.text) - over) if field.word else ""
        if short:
            chosen.add(i)
            shortened[i] = replace(field, text=short)
        break
    return [shortened.get(i, fields[i]) for i in sorted(chosen)]


def line(fields: Sequence[Field], width: int, gap: int = 1) -> Text:
    """The fields that fit, as one line of `width` cells: fills take the room left, right fields end it.
    `gap`: the spaces between fields (2 where the fields hold spaces themselves: a node's heading)."""
    kept = fit(fields, width, gap)
    spare = width - _length(kept, gap)
    fills = [(i, f.fill) for i, f in enumerate(kept) if f.fill]
    for n, (i, fill) in enumerate(fills):
        extra = spare // len(fills) + (1 if n < spare % len(fills) else 0)
        kept[i] = replace(kept[i], text=fill(cell_len(kept[i].text) + extra))
    spare = width - _length(kept, gap)
    text = Text()
    for n, field in enumerate(kept):
        if n:
            text.append(" " * (gap + spare if field.right and not kept[n - 1].right else gap))
        text.append(field.text, style=field.style)
    return text


def memory_line(memory: MemoryEstimate) -> str:
    """A layout's memory in one line: the weights on its busiest GPU, then its KV cache, or, where
    the weights and what the engine keeps overrun the engine's share of the GPU, by how much the
    layout does not fit (a negative KV cache reads as a size; it is not one)."""
    weights = f"weights {memory.weights_gib:.1f} GiB per GPU (busiest GPU {memory.busiest_gpu})"
    if memory.kv_budget_gib < 0:
        return f"{weights} · does not fit by {-memory.kv_budget_gib:.1f} GiB: no room for a KV cache"
    return (
        f"{weights} · KV cache {memory.kv_budget_gib:.1f} GiB, {memory.kv_tokens:,} tokens, "
        f"room for ~{memory.max_concurrency:,.0f} requests"
    )


def duration(seconds: float) -> str:
    """2m13s, 1h04m, 45s."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def gpu_ranges(gpus: Sequence[int]) -> str:
    """0-3, 0,2,5: the GPUs of a layout in a few characters."""
    gpus = sorted(gpus)
    if not gpus:
        return "-"
    if gpus == list(range(gpus[0], gpus[-1] + 1)) and len(gpus) > 2:
        return f"{gpus[0]}-{gpus[-1]}"
    return ",".join(map(str, gpus))
