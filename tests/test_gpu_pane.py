"""GPU panes: full pids and each process's memory, numbers never cut, sparklines that fall when memory does."""

from __future__ import annotations

import asyncio
import re

import pytest
from rich.cells import cell_len
from textual.app import App, ComposeResult

from cockpit.faces.tui.format import SPARK, Field, fit, line, size, sparkline, used_of
from cockpit.faces.tui.widgets.gpu_pane import GpuGrid, GpuPane
from cockpit.telemetry.base import GpuProcess, GpuSample

GIB = 2**30
BIG, SMALL = 4194304, 1234567  # Linux's largest pid, and another 7-digit one


def held(index: int = 0, **readings) -> GpuSample:
    """A GPU held by two processes, the larger one listed second: the pane must name the larger."""
    values = dict(
        memory_used=int(47.2 * GIB),
        memory_total=141 * GIB,
        power_w=312.0,
        power_limit_w=700.0,
        utilization=87.0,
        temperature_c=54.0,
    )
    values.update(readings)
    procs = (GpuProcess(SMALL, "vllm-worker", 2 * GIB), GpuProcess(BIG, "python3", int(45.2 * GIB)))
    return GpuSample(index=index, name="NVIDIA H200", processes=procs, time=0.0, **values)


def unreadable(index: int = 1) -> GpuSample:
    """Every reading n/a, one process still listed (a driver that gives processes and nothing else)."""
    procs = (GpuProcess(BIG, "VLLM::Worker_TP0_with_a_long_name", 80 * GIB),)
    return GpuSample(index, "n/a", None, None, None, None, None, None, procs)


# Every number of a pane must be one of these: shown whole, its unit attached.
WHOLE = {
    f"{BIG}",
    "45.2G",
    "80.0G",
    "+1",
    "47.2/141G",
    "312/700W",
    "54°C",
    "87%",
    "47/141G",
    "312W",
    "54°",
    "n/a",
}
NUMBER = re.compile(r"[+\d]|n/|/")  # how a number's token starts; names (tp4, python3) start with a letter
INDEX = re.compile(r"(GPU)?\d[▶·]?")  # GPU0, 0▶: the pane's own index


def pane(sample: GpuSample, layout: str = "tp4") -> GpuPane:
    p = GpuPane(sample.index)
    p.sample, p.history, p.layout_name = sample, [sample], layout
    return p


def assert_whole(text: str, width: int) -> None:
    for row in text.splitlines():
        assert cell_len(row) <= width, (row, width)
        cut = [t for t in row.split() if NUMBER.match(t) and t not in WHOLE and not INDEX.fullmatch(t)]
        assert not cut, f"cut fields {cut} in {row!r} at width {width}"
        for run in re.findall(r"pid (\S+)", row):
            assert run == str(BIG), row  # the pid whole, and the largest process's


def rendered(sample: GpuSample, width: int, lines: int) -> str:
    p = pane(sample)
    if lines == 1:
        return p.one_line(sample, width).plain
    return "\n".join(t.plain for t in p.lines(sample, width, tall=lines == 4))


# -- every width: fields whole or absent ---------------------------------------------------------


@pytest.mark.parametrize("lines", [1, 3, 4])
@pytest.mark.parametrize("width", range(8, 48))
@pytest.mark.parametrize("sample", [held(), unreadable()], ids=["held", "n/a"])
def test_no_field_is_ever_cut(sample, width, lines):
    assert_whole(rendered(sample, width, lines), width)


def test_wide_pane_shows_the_pid_and_its_memory_on_its_own_line():
    text = rendered(held(), 28, 4)  # 120 columns: four panes of 28
    assert text.splitlines()[-1] == f"pid {BIG} python3 45.2G +1"
    assert f"{SMALL}" not in text  # the second process is the +1


def test_narrow_wide_pane_shortens_the_name_then_drops_it_never_the_pid():
    assert rendered(held(), 26, 4).splitlines()[-1] == f"pid {BIG} pyth… 45.2G +1"
    assert rendered(held(), 23, 4).splitlines()[-1] == f"pid {BIG} 45.2G +1"
    assert rendered(held(), 12, 4).splitlines()[-1] == f"pid {BIG}"


def test_short_wide_pane_puts_the_pid_in_the_title_before_temperature():
    title = rendered(held(), 23, 3).splitlines()[0]  # 100x32: three-line panes of 23
    assert title.startswith(f"GPU0 ▶ tp4 pid {BIG}") and "°C" not in title


def test_compact_pane_keeps_the_pid_and_drops_power_temperature_utilisation():
    row = rendered(held(), 37, 1)  # 80 columns: two panes of 37-38
    assert re.fullmatch(rf"0▶ █+░+ 47/141G pid {BIG} \+1", row), row
    assert "W" not in row and "°" not in row and "%" not in row
    assert rendered(held(), 38, 1).endswith(f"47/141G pid {BIG} 45.2G +1")


def test_free_compact_pane_keeps_its_readings_aligned_right():
    free = GpuSample(4, "H200", GIB // 2, 141 * GIB, 312.0, 700.0, 87.0, 54.0)
    p = pane(free, layout="")
    p.idle = True
    row = p.one_line(free, 38).plain
    assert row.startswith("4· ░") and row.endswith(" 0/141G 312W 54°  87%") and len(row) == 38


def test_unreadable_gpu_says_n_a_without_units_glued_to_it():
    text = rendered(unreadable(), 28, 4)
    assert "n/a/n/a" not in text and "pid 4194304 VLLM::Wor… 80.0G" in text


# -- in a running app: the sizes the main screen gives the panes --------------------------------


class Grid(App):
    """A GpuGrid sized as MainScreen._fit sizes it, alone."""

    CSS = "#gpus { grid-gutter: 0 2; padding: 0 1; }"

    def __init__(self, compact: bool, screen_height: int) -> None:
        super().__init__()
        self.compact, self.screen_height = compact, screen_height

    def compose(self) -> ComposeResult:
        yield GpuGrid(id="gpus")

    async def on_mount(self) -> None:
        grid = self.query_one(GpuGrid)
        await grid.set_count(8)
        columns = 2 if self.compact else 4
        rows = 8 // columns
        grid.styles.grid_size_columns = columns
        grid.styles.height = rows * GpuGrid.pane_lines(self.compact, rows, self.screen_height)
        samples = [held(0), unreadable(1)] + [held(i, memory_used=int(47.2 * GIB)) for i in range(2, 8)]
        grid.show(samples, lambda i: samples[i : i + 1], "tp4", (0, 1, 2, 3), True)


@pytest.mark.parametrize(("size", "lines", "min_width"), [((120, 40), 4, 26), ((80, 24), 1, 36)])
def test_panes_in_an_app_show_the_whole_pid(size, lines, min_width):
    async def go() -> None:
        app = Grid(compact=size[0] < 100, screen_height=size[1])
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.1)
            panes = app.query_one(GpuGrid).panes()
            for p in panes:
                assert p.content_size.height == lines and p.content_size.width >= min_width
                assert_whole(p.render().plain, p.content_size.width)
            assert f"pid {BIG}" in panes[0].render().plain and f"pid {BIG}" in panes[1].render().plain
            if lines == 4:
                assert "45.2G" in panes[0].render().plain

    asyncio.run(go())


def test_four_line_panes_only_while_the_main_area_keeps_its_room():
    assert GpuGrid.pane_lines(compact=False, rows=2, screen_height=40) == 4
    assert GpuGrid.pane_lines(compact=False, rows=2, screen_height=32) == 3
    assert GpuGrid.pane_lines(compact=False, rows=4, screen_height=40) == 3  # 16 GPUs
    assert GpuGrid.pane_lines(compact=True, rows=4, screen_height=24) == 1


# -- sparklines ---------------------------------------------------------------------------------


def test_memory_sparkline_falls_in_its_last_cell_when_the_server_stops():
    history = [float(i) for i in range(100)] + [99.0] * 50 + [0.0] * 3  # rise, hold, stop
    spark = sparkline(history, 10, top=100.0)
    assert spark[-1] == SPARK[0]
    assert spark[-2] == SPARK[-1]  # the bucket before still held the memory


def test_power_sparkline_keeps_spikes_and_still_ends_with_now():
    history = [100.0] * 40
    history[17] = 600.0
    spark = sparkline(history + [0.0], 8, top=600.0, keep="max")
    assert SPARK[-1] in spark and spark[-1] == SPARK[0]
    assert SPARK[-1] not in sparkline(history + [0.0], 8, top=600.0)  # keep="last" smooths it away


def test_short_history_is_right_aligned_and_unknown_is_blank():
    assert sparkline([0.0, None, 2.0], 5, top=2.0) == f"  {SPARK[0]} {SPARK[-1]}"
    assert sparkline([None, None], 4) == "    "


# -- fields --------------------------------------------------------------------------------------


def test_a_lower_rank_never_shows_when_a_higher_one_is_dropped():
    fields = [Field("GPU0", 0), Field("pid 4194304", 1), Field("87%", 2)]
    assert [f.text for f in fit(fields, 15)] == ["GPU0"]  # 87% would fit, the pid does not: neither shows
    assert [f.text for f in fit(fields, 16)] == ["GPU0", "pid 4194304"]


def test_a_word_is_shortened_with_an_ellipsis_or_dropped():
    fields = [Field("pid 4194304", 0), Field("python3", 1, word=True)]
    assert line(fields, 17).plain == "pid 4194304 pyth…"
    assert line(fields, 14).plain == "pid 4194304"  # "p…" says nothing


def test_fills_take_the_room_and_right_fields_end_the_line():
    fields = [Field("mem", 0), Field("##", 1, fill=lambda w: "#" * w), Field("87%", 0, right=True)]
    assert line(fields, 20).plain == "mem " + "#" * 12 + " 87%"
    assert line([Field("GPU0", 0), Field("87%", 1, right=True)], 12).plain == "GPU0     87%"


def test_units_stay_attached():
    assert used_of(45.2, 95.0, "G", "{:.1f}") == "45.2/95G"
    assert used_of(300.0, 600.0, "W") == "300/600W"
    assert used_of(300.0, None, "W") == "300W" and used_of(None, 600.0, "W") == "n/a"
    assert [size(n) for n in (300 * 2**20, int(45.2 * GIB), 141 * GIB)] == ["300M", "45.2G", "141G"]
