"""tok/s against concurrency, one line per layout, drawn by plotext as text. No Textual here.

plotext keeps its figure in module state, so call this from one thread (the screen's).
Each layout has its own marker, so the lines read without colour. plotext 6 has a new API
(`plotext.figure`); plotext 5's (`plotext.plot`) is used where that is what is installed.
"""

from __future__ import annotations

from collections.abc import Sequence

MARKERS = "xo+*#@%&"
MIN_WIDTH, MIN_HEIGHT = 40, 9  # under 9 rows plotext drops the legend, and the markers lose their names

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


def _levels(series: Sequence[Series]) -> list[int]:
    return sorted({c for _, levels, _ in series for c in levels})


def _plotext6(fig, series: Sequence[Series], width: int, height: int) -> str:
    fig.clear()
    fig.plot_size(width, height)
    fig.theme("colorless")
    for i, (name, levels, values) in enumerate(series):
        signal = fig.signal(list(levels), list(values), marker=MARKERS[i % len(MARKERS)]).label(name)
        if len(levels) > 1:
            signal.lines()
        fig.draw(signal)
    levels = _levels(series)
    ruler = fig.ruler("x")
    if len(levels) > 1 and levels[-1] / max(1, levels[0]) >= 8:
        ruler.scale("log")
    fig.label("concurrency", "x")
    fig.label("tok/s", "y")
    return str(fig.build())


def _plotext5(plt, series: Sequence[Series], width: int, height: int) -> str:
    plt.clf()
    plt.plotsize(width, height)
    plt.theme("clear")
    for i, (name, levels, values) in enumerate(series):
        plt.plot(list(levels), list(values), label=name, marker=MARKERS[i % len(MARKERS)])
    levels = _levels(series)
    if len(levels) > 1 and levels[-1] / max(1, levels[0]) >= 8:
        plt.xscale("log")
    plt.xticks(levels, [str(c) for c in levels])
    plt.xlabel("concurrency")
    plt.ylabel("tok/s")
    return plt.build()
