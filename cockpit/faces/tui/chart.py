"""tok/s against concurrency, one line per layout, drawn by plotext as text. No Textual here.

plotext keeps its figure in module state, so call this from one thread (the screen's).
Each layout has its own marker, so the lines read without colour. plotext 6 has a new API
(`plotext.figure`); plotext 5's (`plotext.plot`) is used where that is what is installed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MARKERS = "xo+*#@%&"
MIN_WIDTH, MIN_HEIGHT = 40, 9  # the plot needs about 8 rows to be read, and the legend one more

Series = tuple[str, Sequence[int], Sequence[float]]  # layout, concurrency levels, tok/s


def render_chart(series: Sequence[Series], width: int, height: int) -> str:
    """The chart as text with ANSI codes, or "" when it does not fit or there is nothing to draw."""
    series = [s for s in series if len(s[1]) > 0]
    if width < MIN_WIDTH or height < MIN_HEIGHT or not series:
        return ""
    try:
        import plotext
    except ImportError:
        return ""
    try:
        if hasattr(plotext, "figure") and hasattr(plotext.figure, "signal"):
            return _plotext6(plotext.figure, series, width, height)
        return _plotext5(plotext, series, width, height)
    except Exception:  # a chart is a nicety: a plotext quirk must not take the pane down
        return ""


def _log_scale(levels: Sequence[int]) -> bool:
    return len(levels) > 1 and levels[-1] / max(1, levels[0]) >= 8


def _levels(series: Sequence[Series]) -> list[int]:
    return sorted({c for _, levels, _ in series for c in levels})


def legend(series: Sequence[Series], width: int) -> str:
    """`x tp4 · o tp8 ep`: the markers' names on a line of their own, under the plot, where
    they cover no curve (plotext's own legend box sits inside the plot area)."""
    entries = [f"{MARKERS[i % len(MARKERS)]} {name}" for i, (name, _, _) in enumerate(series)]
    line = ""
    for entry in entries:
        candidate = f"{line} · {entry}" if line else entry
        if len(candidate) > width:
            break
        line = candidate
    return line


def _tick_label(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 10_000 else f"{value:,.0f}"


def _plotext6(fig, series: Sequence[Series], width: int, height: int) -> str:
    """Concurrency on a log axis drawn by hand (log2 positions, ticks named by the levels):
    plotext 6's own log scale mislays custom ticks."""
    levels = _levels(series)
    place = (lambda c: math.log2(max(c, 1))) if _log_scale(levels) else float
    fig.clear()
    fig.plot_size(width, height - 1)  # the legend's line goes under it
    fig.theme("colorless")
    for i, (_, xs, values) in enumerate(series):
        signal = fig.signal([place(c) for c in xs], list(values), marker=MARKERS[i % len(MARKERS)])
        if len(xs) > 1:
            signal.lines()
        fig.draw(signal)
    fig.ruler("x").ticks([place(c) for c in levels], [str(c) for c in levels])
    top = max(max(values) for _, _, values in series)
    fig.ruler("y").ticks([0, top / 2, top], [_tick_label(v) for v in (0, top / 2, top)])
    fig.label("concurrency", "x")
    fig.label("tok/s", "y")
    return str(fig.build()).rstrip("\n") + "\n" + legend(series, width)


def _plotext5(plt, series: Sequence[Series], width: int, height: int) -> str:
    plt.clf()
    plt.plotsize(width, height - 1)  # the legend's line goes under it
    plt.theme("clear")
    for i, (_, levels, values) in enumerate(series):
        plt.plot(list(levels), list(values), marker=MARKERS[i % len(MARKERS)])
    levels = _levels(series)
    if len(levels) > 1 and levels[-1] / max(1, levels[0]) >= 8:
        plt.xscale("log")
    plt.xticks(levels, [str(c) for c in levels])
    plt.xlabel("concurrency")
    plt.ylabel("tok/s")
    return plt.build().rstrip("\n") + "\n" + legend(series, width)
