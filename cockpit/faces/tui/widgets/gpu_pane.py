"""One pane per GPU: memory and power bars with sparklines, utilisation, temperature, who holds it.

A pane renders itself from the last sample and the monitor's history: four lines when the screen
has the height (the processes on their own line), three when it is short, one when compact (80x24).
Every field is shown whole or not at all (format.Field): a pid or a number is never cut, and the
lower-ranked fields (name, power, temperature) give way first. Meaning is in marks and words,
colour only repeats it: `▶ tp4` for a GPU of the current layout, `· idle` for a GPU it leaves idle.

On a cluster (samples that name their node) the panes come grouped by node, each under a heading
with the node's totals, and each GPU is labelled by its node's own index (what `nvidia-smi` on that
node prints); more than eight GPUs take one line each, memory and power first. A node whose agent
does not answer is its heading alone; nodes too many for the screen are their headings alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.containers import Grid
from textual.widget import Widget

from cockpit.faces.tui.format import GIB, Field, bar, line, number, size, sparkline, used_of
from cockpit.reports.gpus import NodeGroup, by_node
from cockpit.telemetry.base import GpuProcess, GpuSample

VALUE_WIDTH = 9  # "47.2/141G": shorter values are padded so the sparklines line up across panes
BAR_MIN, SPARK_MIN = 3, 5
BAR_MIN_COMPACT = 6  # the one-line pane's bar, the pane's main mark
PANE_LINES_TALL, PANE_LINES, PANE_LINES_COMPACT = 4, 3, 1
SCREEN_CHROME = 4  # header, prompt, status line, footer
MAIN_MIN_ROWS = 24  # the picker keeps ten rows of its table over its detail
GPU_COLUMNS_WIDE, GPU_COLUMNS_COMPACT = 4, 2
ONE_LINE_ABOVE = 8  # a cluster of more GPUs than this shows one line per GPU
HEADING_GAP = 2  # the heading's parts hold spaces ("8 x H200"): two between parts


def _level_style(fraction: float | None) -> str:
    if fraction is None:
        return "dim"
    return "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"


class GpuPane(Widget):
    """A GPU's last sample and its recent history; `show()` replaces them and redraws once."""

    DEFAULT_CSS = """
    GpuPane { height: 1fr; }
    GpuPane.-idle { color: $text-muted; }
    """

    def __init__(self, index: int, **kwargs) -> None:
        super().__init__(id=f"gpu-{index}", **kwargs)
        self.index = index
        self.label = index  # the index shown: on a cluster, the GPU's index within its node
        self.in_node = False  # on a cluster: the one-line form keeps memory and power before the pid
        self.sample: GpuSample | None = None
        self.history: Sequence[GpuSample] = ()
        self.layout_name = ""  # the current layout's name when this GPU is one of its GPUs
        self.idle = False  # a layout runs and leaves this GPU idle

    def show(
        self, sample: GpuSample, history: Sequence[GpuSample], layout: str = "", idle: bool = False
    ) -> None:
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

    def processes(self) -> list[GpuProcess]:
        """Largest memory first: the one named in full is the one that matters."""
        s = self.sample
        return sorted(s.processes, key=lambda p: -p.used_bytes) if s is not None else []

    def holder(self, ranks: tuple[int, int, int, int] = (0, 1, 2, 3)) -> list[Field]:
        """pid 4194304 python3 45.2G +1 as nvitop lists it; ranks of the pid, its memory, +N, the name
        (the one field shortened, since it is a word)."""
        procs = self.processes()
        if not procs:
            return []
        first = procs[0]
        more = f"+{len(procs) - 1}" if len(procs) > 1 else ""
        pid, used, others, name = ranks
        return [
            Field(f"pid {first.pid}", pid, "bold"),
            Field(first.name, name, word=True),
            Field(size(first.used_bytes), used),
            Field(more, others),
        ]

    def render(self) -> Text:
        s = self.sample
        width = self.content_size.width or 30
        if s is None:
            return line(
                [Field(f"GPU{self.label}", 0, "bold"), Field("waiting for a sample", 1, word=True)], width
            )
        height = self.content_size.height
        if height < PANE_LINES:
            return self.one_line(s, width)
        return Text("\n").join(self.lines(s, width, tall=height >= PANE_LINES_TALL))

    def lines(self, s: GpuSample, width: int, tall: bool) -> list[Text]:
        """Title, memory, power, and (tall) the processes; a short pane puts the holder in the title."""
        power_fraction = s.power_w / s.power_limit_w if s.power_w is not None and s.power_limit_w else None
        total_gib = s.memory_total and s.memory_total / GIB
        mem = used_of(s.memory_used_gib, total_gib, "G", "{:.1f}")
        power = used_of(s.power_w, s.power_limit_w, "W")
        mem_history = [h.memory_used for h in self.history]
        power_history = [h.power_w for h in self.history]
        rows = [
            self.title(s, width, holder=not tall),
            self.meter(
                "mem", s.memory_fraction, mem, lambda w: sparkline(mem_history, w, s.memory_total), width
            ),
            self.meter(
                "pwr",
                power_fraction,
                power,
                lambda w: sparkline(power_history, w, s.power_limit_w, keep="max"),
                width,
            ),
        ]
        if tall:
            rows.append(line(self.holder(), width))
        return rows

    def title(self, s: GpuSample, width: int, holder: bool) -> Text:
        """GPU0 ▶ tp4 ... 54°C 87%; with the holder, `held` gives way to the pid it would repeat."""
        role = self.role()
        held = holder and bool(s.processes)
        fields = [Field(f"GPU{self.label}", 0, "bold")]
        if not (held and role == "held"):
            fields.append(Field(role, 1, "bold" if self.layout_name else "", word=True))
        if held:
            fields += self.holder(ranks=(2, 3, 4, 5))
        fields += [
            Field(number(s.temperature_c, "{:.0f}°C"), 7 if held else 3, right=True),
            Field(number(s.utilization, "{:.0f}%"), 6 if held else 2, right=True),
        ]
        return line(fields, width)

    @staticmethod
    def meter(
        label: str, fraction: float | None, value: str, spark: Callable[[int], str], width: int
    ) -> Text:
        """mem ████░░ 47.2/141G ▁▂▅▇: the sparkline gives way first, then the label, then the bar; the value stays."""
        style = _level_style(fraction)
        return line(
            [
                Field(label, 2),
                Field(bar(fraction, BAR_MIN), 1, style, fill=lambda w: bar(fraction, w)),
                Field(value.ljust(VALUE_WIDTH), 0),
                Field(spark(SPARK_MIN), 3, "cyan", fill=spark),
            ],
            width,
        )

    def one_line(self, s: GpuSample, width: int) -> Text:
        """0▶ ████░░ 45/141G pid 4194304 +1 87%: the pid whole before power, temperature, utilisation."""
        mark = "▶" if self.layout_name else "·" if self.idle else " "
        fraction = s.memory_fraction
        mem = used_of(s.memory_used_gib, s.memory_total and s.memory_total / GIB, "G")
        if self.in_node:
            return self.node_line(s, width, mark, mem)
        fields = [
            Field(f"{self.label}{mark}", 0, "bold" if self.layout_name else ""),
            Field(bar(fraction, BAR_MIN_COMPACT), 3, _level_style(fraction), fill=lambda w: bar(fraction, w)),
            Field(f"{mem:>7}", 1),
        ]
        fields += self.holder(ranks=(2, 4, 3, 9))  # pid, +N, its memory before utilisation; the name last
        return line(
            fields
            + [
                Field(f"{number(s.power_w, '{:.0f}W'):>4}", 8, right=True),
                Field(f"{number(s.temperature_c, '{:.0f}°'):>3}", 7, right=True),
                Field(f"{number(s.utilization, '{:.0f}%'):>4}", 5, right=True),
            ],
            width,
        )

    def node_line(self, s: GpuSample, width: int, mark: str, mem: str) -> Text:
        """0▶ ████░░ 47/141G pid 4194304 312W 87%: a cluster's GPU on one line (sixteen GPUs and more
        side by side); its memory and power kept first, then utilisation, then who holds it."""
        fraction = s.memory_fraction
        fields = [
            Field(f"{self.label}{mark}", 0, "bold" if self.layout_name else ""),
            Field(bar(fraction, BAR_MIN_COMPACT), 2, _level_style(fraction), fill=lambda w: bar(fraction, w)),
            Field(f"{mem:>7}", 1),
        ]
        fields += self.holder(ranks=(5, 7, 6, 9))
        return line(
            fields
            + [
                Field(f"{number(s.power_w, '{:.0f}W'):>4}", 3, right=True),
                Field(f"{number(s.temperature_c, '{:.0f}°'):>3}", 8, right=True),
                Field(f"{number(s.utilization, '{:.0f}%'):>4}", 4, right=True),
            ],
            width,
        )


class NodeHeading(Widget):
    """A node's line over its GPUs: node 1  gpu-a  8 x H200  312/1128 GiB  180 W."""

    DEFAULT_CSS = """
    NodeHeading { height: 1fr; }
    NodeHeading.-down { color: $text-warning; }
    """

    def __init__(self, group: NodeGroup, **kwargs) -> None:
        super().__init__(**kwargs)
        self.group = group

    def show(self, group: NodeGroup) -> None:
        self.group = group
        self.set_class(not group.answered, "-down")
        self.refresh()

    def render(self) -> Text:
        """The host shortened before a total is dropped; the GPU count and type give way first."""
        title, host, *rest = self.group.heading()
        ranks = (4, 2, 3)  # 8 x H200, the memory, the power
        fields = [Field(title, 0, "bold"), Field(host, 1, word=True)]
        fields += [Field(text, rank) for text, rank in zip(rest, ranks, strict=False)]
        return line(fields, self.content_size.width or 80, gap=HEADING_GAP)


class GpuGrid(Grid):
    """The panes, four to a row where there is room, two in a compact screen; grouped by node on a cluster."""

    # The main screen calls `fit_screen` with its size: it sets the columns, the rows and the height.
    DEFAULT_CSS = """
    GpuGrid {
        grid-size: 4;
        grid-gutter: 0 2;
        padding: 0 1;
        height: 8;
    }
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.count = 0
        self.groups: list[NodeGroup] = []  # by node on a cluster; [] on one box
        self.headings: list[NodeHeading] = []
        self._node_shape: tuple = ()  # the nodes, their GPUs and which answer, as last fitted
        self._fitted_to = (False, 0)  # compact, screen height: the last fit_screen's

    @staticmethod
    def pane_lines(compact: bool, rows: int, screen_height: int) -> int:
        """Lines per pane: four (a line for the processes) while the main area keeps MAIN_MIN_ROWS."""
        if compact:
            return PANE_LINES_COMPACT
        room = screen_height - SCREEN_CHROME - rows * PANE_LINES_TALL
        return PANE_LINES_TALL if room >= MAIN_MIN_ROWS else PANE_LINES

    async def set_count(self, count: int) -> None:
        if len(self.panes()) == count:
            return
        self.count = count
        await self.remove_children()
        self.groups, self.headings, self._node_shape = [], [], ()
        self.styles.grid_rows = None
        await self.mount_all(GpuPane(i) for i in range(count))

    def panes(self) -> list[GpuPane]:
        return list(self.query(GpuPane))

    # -- size -------------------------------------------------------------------------------

    def fit_screen(self, compact: bool, screen_height: int) -> None:
        """Columns, rows and height for a screen of `screen_height` lines (compact: 80x24 and the like)."""
        self._fitted_to = (compact, screen_height)
        if self.groups:
            self._fit_nodes(compact, screen_height)
            return
        count = max(1, self.count)
        columns = min(GPU_COLUMNS_COMPACT if compact else GPU_COLUMNS_WIDE, count)
        rows = -(-count // columns)
        self.styles.grid_size_columns = columns
        self.styles.height = rows * self.pane_lines(compact, rows, screen_height)  # panes fill their rows

    def _fit_nodes(self, compact: bool, screen_height: int) -> None:
        """A heading row per node, then its GPUs in whole rows: the columns divide every node's count.
        Panes as on one box up to eight GPUs, one line each above; headings alone where even that
        leaves the main area less than its minimum (or half the screen, on a short one)."""
        groups = self.groups
        most = GPU_COLUMNS_COMPACT if compact else GPU_COLUMNS_WIDE
        per_node = math.gcd(*(len(g.samples) for g in groups))
        columns = max(c for c in range(1, most + 1) if per_node % c == 0)
        gpu_rows = sum(-(-len(g.samples) // columns) for g in groups if g.answered)
        if compact or sum(len(g.samples) for g in groups) > ONE_LINE_ABOVE:
            lines = PANE_LINES_COMPACT
        else:
            lines = self.pane_lines(False, gpu_rows, screen_height - len(groups))
        budget = max(screen_height - SCREEN_CHROME - MAIN_MIN_ROWS, (screen_height - SCREEN_CHROME) // 2)
        if len(groups) + gpu_rows * lines > budget:
            lines = PANE_LINES_COMPACT
        summary = len(groups) + gpu_rows * lines > budget
        panes = {p.index: p for p in self.panes()}
        heights: list[int] = []
        for group in groups:
            shown = group.answered and not summary
            heights += [1] + [lines] * (-(-len(group.samples) // columns) if shown else 0)
            for s in group.samples:
                panes[s.index].display = shown
        for heading in self.headings:
            heading.styles.column_span = columns
        self.styles.grid_size_columns = columns
        self.styles.grid_rows = " ".join(map(str, heights))
        self.styles.height = sum(heights)

    # -- samples ----------------------------------------------------------------------------

    def show(
        self,
        samples: Sequence[GpuSample],
        history: Callable[[int], Sequence[GpuSample]],
        layout: str,
        gpus: Sequence[int],
        active: bool,
    ) -> None:
        """history: index -> samples. GPUs outside an active layout's `gpus` show as idle."""
        panes = {p.index: p for p in self.panes()}
        self._group([s for s in samples if s.index in panes], panes)
        for sample in samples:
            pane = panes.get(sample.index)
            if pane is None:
                continue
            inside = active and sample.index in gpus
            pane.show(sample, history(sample.index), layout if inside else "", idle=active and not inside)

    def _group(self, samples: Sequence[GpuSample], panes: dict[int, GpuPane]) -> None:
        """Headings before each node's first pane, and the panes' labels, when the nodes change."""
        groups = by_node(samples)
        shape = tuple((g.host, tuple(s.index for s in g.samples), g.answered) for g in groups)
        for heading, group in zip(self.headings, groups, strict=False):
            heading.show(group)
        if shape == self._node_shape:
            return
        if [s[:2] for s in shape] != [s[:2] for s in self._node_shape]:
            for heading in self.headings:
                heading.remove()
            self.headings = [NodeHeading(group) for group in groups]
            for heading, group in zip(self.headings, groups, strict=True):
                self.mount(heading, before=panes[group.samples[0].index])
                heading.show(group)
            for pane in panes.values():
                pane.label, pane.in_node, pane.display = pane.index, False, True
            for group in groups:
                for s in group.samples:
                    panes[s.index].label, panes[s.index].in_node = group.local(s), True
        self.groups, self._node_shape = groups, shape
        if not groups:
            self.styles.grid_rows = None
        self.fit_screen(*self._fitted_to)
