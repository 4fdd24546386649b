"""One pane per GPU: memory and power bars with sparklines, utilisation, temperature, who holds it.

A pane renders itself from the last sample and the monitor's history; three lines when it has
the room, one line otherwise (80x24). Meaning is in marks and words, colour only repeats it:
`▶ tp4` for a GPU of the current layout, `· idle` for a GPU the layout leaves idle.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.containers import Grid
from textual.widget import Widget

from cockpit.telemetry.base import GpuSample
from cockpit.tui.format import GIB, bar, number, sparkline

VALUE_WIDTH = 10


def _level_style(fraction: float | None) -> str:
    if fraction is None:
        return "dim"
    return "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"


class GpuPane(Widget):
    """A GPU's last sample and its recent history; `show()` replaces them and redraws once."""

    DEFAULT_CSS = """
    GpuPane { height: 3; }
    GpuPane.-idle { color: $text-muted; }
    """

    def __init__(self, index: int, **kwargs) -> None:
        super().__init__(id=f"gpu-{index}", **kwargs)
        self.index = index
        self.sample: GpuSample | None = None
        self.history: Sequence[GpuSample] = ()
        self.layout_name = ""  # the current layout's name when this GPU is one of its GPUs
        self.idle = False  # a layout runs and leaves this GPU idle

    def show(self, sample: GpuSample, history: Sequence[GpuSample], layout: str = "", idle: bool = False) -> None:
        self.sample, self.history, self.layout_name, self.idle = sample, history, layout, idle
        self.set_class(idle, "-idle")
        self.refresh()

    # -- text ------------------------------------------------------------------------------

    def role(self) -> str:
        s = self.sample
        if self.layout_name:
            return f"▶ {self.layout_name}"
        if self.idle:
            return "· idle"
        if s is not None and s.processes:
            return "held"
        return "· free"

    def holder(self) -> str:
        s = self.sample
        if s is None or not s.processes:
            return ""
        first = s.processes[0]
        more = f" +{len(s.processes) - 1}" if len(s.processes) > 1 else ""
        return f"pid {first.pid} {first.name}{more}"

    def render(self) -> Text:
        s = self.sample
        width = self.content_size.width or 30
        if s is None:
            return Text(f"GPU{self.index} waiting for the first sample", style="dim")
        if self.content_size.height < 3:
            return self._one_line(s, width)
        return self._three_lines(s, width)

    def _three_lines(self, s: GpuSample, width: int) -> Text:
        temp = number(s.temperature_c, "{:.0f}°C")
        util = number(s.utilization, "{:.0f}%")
        title = Text.assemble((f"GPU{self.index} ", "bold"), (self.role(), "bold" if self.layout_name else ""))
        extra = f" {self.holder()}" if self.holder() else ""
        tail = f"{temp} {util}"
        room = width - len(title) - len(tail) - 1
        title.append(extra[: max(0, room)])
        title.append(" " * max(1, width - len(title) - len(tail)))
        title.append(tail)

        mem_fraction = s.memory_fraction
        mem_value = f"{number(s.memory_used_gib, '{:.1f}')}/{number(s.memory_total and s.memory_total / GIB, '{:.0f}')}G"
        power_fraction = s.power_w / s.power_limit_w if s.power_w is not None and s.power_limit_w else None
        power_value = f"{number(s.power_w)}/{number(s.power_limit_w)}W"
        total = s.memory_total
        mem_line = self._meter(
            "mem", mem_fraction, mem_value, [h.memory_used for h in self.history], total, width
        )
        power_line = self._meter(
            "pwr", power_fraction, power_value, [h.power_w for h in self.history], s.power_limit_w, width
        )
        return Text("\n").join([title, mem_line, power_line])

    @staticmethod
    def _meter(label: str, fraction: float | None, value: str, history: list, top: float | None, width: int) -> Text:
        room = width - len(label) - 1 - VALUE_WIDTH - 1
        spark_width = room // 2 if room >= 10 else 0
        bar_width = max(3, room - spark_width - (1 if spark_width else 0))
        line = Text(f"{label} ")
        line.append(bar(fraction, bar_width), style=_level_style(fraction))
        line.append(f" {value:<{VALUE_WIDTH}}")
        if spark_width:
            line.append(" ")
            line.append(sparkline(history, spark_width, top), style="cyan")
        return line

    def _one_line(self, s: GpuSample, width: int) -> Text:
        mark = "▶" if self.layout_name else "·" if self.idle else " "
        mem = f"{number(s.memory_used_gib, '{:.0f}')}/{number(s.memory_total and s.memory_total / GIB, '{:.0f}')}G"
        tail = f" {mem:>7} {number(s.power_w, '{:.0f}W'):>5} {number(s.temperature_c, '{:.0f}°'):>3} {number(s.utilization, '{:.0f}%'):>4}"
        head = f"{self.index}{mark}"
        bar_width = max(3, width - len(head) - len(tail) - 1)
        line = Text(head + " ", style="bold" if self.layout_name else "")
        line.append(bar(s.memory_fraction, bar_width), style=_level_style(s.memory_fraction))
        line.append(tail)
        return line


class GpuGrid(Grid):
    """The panes, four to a row where there is room, two in a compact screen."""

    async def set_count(self, count: int) -> None:
        if len(self.panes()) == count:
            return
        await self.remove_children()
        await self.mount_all(GpuPane(i) for i in range(count))

    def panes(self) -> list[GpuPane]:
        return list(self.query(GpuPane))

    def show(self, samples: Sequence[GpuSample], history, layout: str, gpus: Sequence[int], active: bool) -> None:
        """history: index -> samples. GPUs outside an active layout's `gpus` show as idle."""
        panes = {p.index: p for p in self.panes()}
        for sample in samples:
            pane = panes.get(sample.index)
            if pane is None:
                continue
            inside = active and sample.index in gpus
            pane.show(sample, history(sample.index), layout if inside else "", idle=active and not inside)
