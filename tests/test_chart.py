"""The results chart: the legend under the plot, where it covers no curve; levels on the x axis."""

from __future__ import annotations

import re

from cockpit.faces.tui.chart import legend, render_chart

SERIES = [
    ("tp4", [1, 32, 64], [94.2, 655.0, 905.3]),
    ("tp8 ep", [1, 32, 64], [77.1, 830.4, 1512.9]),
    ("tp2 dp4 ep", [1, 32, 64, 256, 1024], [50.0, 300.0, 1400.0, 3000.0, 4079.9]),
]


def plain(text: str) -> list[str]:
    return re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()


def test_the_legend_is_a_line_under_the_plot():
    lines = plain(render_chart(SERIES, 60, 14))
    assert len(lines) <= 14
    bottom = max(i for i, line in enumerate(lines) if "└" in line)
    assert lines[-1] == "x tp4 · o tp8 ep · + tp2 dp4 ep" and len(lines) - 1 > bottom
    inside = "\n".join(lines[: bottom + 1])
    assert "tp8 ep" not in inside  # no names inside the plot
    assert inside.count("┌") == 1  # the plot's frame only: no legend box drawn over the curves


def test_the_x_axis_is_labelled_with_the_levels():
    lines = plain(render_chart(SERIES, 60, 14))
    ticks = next(line for line in lines if "1024" in line)
    assert re.findall(r"\d+", ticks) == ["1", "32", "64", "256", "1024"]


def test_a_narrow_legend_drops_whole_entries():
    assert legend(SERIES, 20) == "x tp4 · o tp8 ep"
    assert render_chart(SERIES, 30, 14) == ""  # too narrow to read: nothing rather than a mess
