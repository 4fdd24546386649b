"""Text helpers for the panes: bars, sparklines and numbers that read without colour."""

from __future__ import annotations

from collections.abc import Sequence

GIB = 2**30
SPARK = "▁▂▃▄▅▆▇█"
FULL, EMPTY = "█", "░"


def bar(fraction: float | None, width: int) -> str:
    """A bar of `width` cells: filled cells for the fraction, light shade for the rest, `?` when unknown."""
    if width <= 0:
        return ""
    if fraction is None:
        return "?" * width
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return FULL * filled + EMPTY * (width - filled)


def sparkline(values: Sequence[float | None], width: int, top: float | None = None) -> str:
    """The last values squeezed into `width` cells (each cell the max of its bucket), scaled 0..top."""
    if width <= 0:
        return ""
    known = [v for v in values if v is not None]
    if not known:
        return " " * width
    top = top if top else max(known) or 1.0
    buckets: list[float | None]
    if len(values) > width:
        size = len(values) / width
        buckets = []
        for i in range(width):
            chunk = [v for v in values[int(i * size) : int((i + 1) * size)] if v is not None]
            buckets.append(max(chunk) if chunk else None)
    else:
        buckets = list(values)
    cells = []
    for v in buckets:
        if v is None:
            cells.append(" ")
        else:
            level = round(max(0.0, min(1.0, v / top)) * (len(SPARK) - 1))
            cells.append(SPARK[level])
    return "".join(cells).rjust(width)


def gib(n_bytes: int | None, digits: int = 1) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / GIB:.{digits}f}"


def number(value: float | None, fmt: str = "{:.0f}", unknown: str = "n/a") -> str:
    return unknown if value is None else fmt.format(value)


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
