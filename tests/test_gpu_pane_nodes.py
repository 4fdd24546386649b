"""GPU panes and `cockpit gpus` on a cluster: a heading per node with its totals, each GPU by its
node's own index, a node whose agent does not answer said in words, sixteen GPUs and more on one
line each; one box as before."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from rich.cells import cell_len
from textual.app import App, ComposeResult
from tuipilot import until

from cockpit.faces.tui.widgets.gpu_pane import GpuGrid, GpuPane, NodeHeading
from cockpit.reports.gpus import by_node, gpu_lines
from cockpit.telemetry.base import GpuProcess, GpuSample, unknown_sample

GIB = 2**30
BIG = 4194304
HEAD, WORKER = "127.0.0.2", "127.0.0.3"
DOWN = f"node 2  {WORKER}: no samples (agent not answering)"


def gpu(index: int, node: str = "", used: float = 47.2) -> GpuSample:
    procs = (GpuProcess(BIG, "python3", int(45.2 * GIB)),)
    return GpuSample(
        index, "NVIDIA H200", int(used * GIB), 141 * GIB, 312.0, 700.0, 87.0, 54.0, procs, node=node
    )


def cluster(nodes: int = 2, per_node: int = 8, down: int | None = None) -> list[GpuSample]:
    """Global indexes (node rank x GPUs per node + local index); the `down` rank's agent gives n/a only."""
    samples = []
    for rank in range(nodes):
        host = f"127.0.0.{rank + 2}"
        for local in range(per_node):
            index = rank * per_node + local
            up = gpu(index, host, used=10.0 + local)
            samples.append(up if rank != down else replace(unknown_sample(index), node=host))
    return samples


class Grid(App):
    """The GPU grid alone, sized as the main screen sizes it (GpuGrid.fit_screen)."""

    CSS = "#gpus { grid-gutter: 0 2; padding: 0 1; }"

    def __init__(self, samples: list[GpuSample], compact: bool, screen_height: int) -> None:
        super().__init__()
        self.samples, self.compact, self.screen_height = samples, compact, screen_height

    def compose(self) -> ComposeResult:
        yield GpuGrid(id="gpus")

    async def on_mount(self) -> None:
        grid = self.query_one(GpuGrid)
        await grid.set_count(len(self.samples))
        grid.fit_screen(self.compact, self.screen_height)
        self.feed(self.samples, active=True)

    def feed(self, samples: list[GpuSample], active: bool = False) -> None:
        self.samples = samples
        by_index = {s.index: s for s in samples}
        self.query_one(GpuGrid).show(
            samples, lambda i: [by_index[i]], "tp8 pp2", tuple(range(len(samples))), active
        )


def run(samples: list[GpuSample], size: tuple[int, int], check) -> None:
    async def go() -> None:
        app = Grid(samples, compact=size[0] < 100 or size[1] < 32, screen_height=size[1])
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            await check(app, pilot)

    asyncio.run(go())


async def settle(app: App, pilot) -> None:
    """Until the grid is laid out as last told: its height, and every heading and pane shown placed."""
    grid = app.query_one(GpuGrid)

    def placed() -> bool:
        widgets = [w for w in [*app.query(NodeHeading), *grid.panes()] if w.display]
        height = grid.styles.height
        return (
            height is not None
            and grid.region.height == height.value
            and all(w.is_mounted and w.region.height for w in widgets)
        )

    await until(pilot, placed, what="the GPU grid laid out")


def headings(app: App) -> list[str]:
    return [h.render().plain for h in app.query(NodeHeading) if h.display]


def shown(app: App) -> list[GpuPane]:
    return [p for p in app.query_one(GpuGrid).panes() if p.display]


def assert_fits(widgets) -> None:
    for w in widgets:
        for row in w.render().plain.splitlines():
            assert cell_len(row) <= w.content_size.width, (row, w.content_size.width)


# -- the screen -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(120, 50), (120, 40), (80, 24)])
def test_sixteen_gpus_on_two_nodes_show_a_heading_each_and_local_indexes(size):
    async def check(app, pilot) -> None:
        grid = app.query_one(GpuGrid)
        assert headings(app) == [
            f"node 1  {HEAD}  8 x H200  108/1128 GiB  2496 W",  # 10+11+...+17 GiB, 8 x 312 W
            f"node 2  {WORKER}  8 x H200  108/1128 GiB  2496 W",
        ]
        panes = shown(app)
        assert len(panes) == 16 and all(p.content_size.height == 1 for p in panes)  # one line each
        rows: dict[int, list[GpuPane]] = {}
        for p in panes:
            rows.setdefault(p.region.y, []).append(p)
        node_rows = -(-8 // (2 if size[0] < 100 else 4))
        room = size[1] - 4  # header, prompt, status line, footer
        assert (
            grid.region.height == 2 * (1 + node_rows) <= max(room - 24, room // 2)
        )  # the main area keeps its rows
        for p in panes:
            text = p.render().plain
            assert text.startswith(f"{p.index % 8}▶"), text  # the node's own index, in the layout
            assert f"{10 + p.index % 8}/141G" in text and "312W" in text  # memory and power first
        [head, worker] = app.query(NodeHeading)
        assert head.region.y < min(p.region.y for p in panes[:8]) <= max(p.region.y for p in panes[:8])
        assert max(p.region.y for p in panes[:8]) < worker.region.y < min(p.region.y for p in panes[8:])
        assert_fits([*panes, head, worker])

    run(cluster(), size, check)


def test_a_node_whose_agent_does_not_answer_is_its_heading_alone():
    async def check(app, pilot) -> None:
        assert headings(app) == [f"node 1  {HEAD}  8 x H200  108/1128 GiB  2496 W", DOWN]
        assert [p.index for p in shown(app)] == list(range(8))
        assert app.query_one(GpuGrid).region.height == 1 + 2 + 1
        app.feed(cluster())  # the agent is back
        await settle(app, pilot)
        assert len(shown(app)) == 16 and headings(app)[1].startswith(f"node 2  {WORKER}  8 x H200")
        assert [p.render().plain[0] for p in shown(app)[8:12]] == ["0", "1", "2", "3"]

    run(cluster(down=1), (120, 50), check)


def test_too_many_nodes_for_the_screen_show_their_headings_alone():
    async def check(app, pilot) -> None:
        assert len(headings(app)) == 8 and not shown(app)
        assert app.query_one(GpuGrid).region.height == 8
        assert headings(app)[7].startswith("node 8  127.0.0.9  8 x H200")

    run(cluster(nodes=8), (120, 50), check)


def test_eight_gpus_on_two_nodes_keep_the_pane_of_one_box():
    async def check(app, pilot) -> None:
        panes = shown(app)
        assert len(headings(app)) == 2 and len(panes) == 8
        assert all(p.content_size.height == 4 for p in panes)
        titles = [p.render().plain.splitlines()[0].split()[0] for p in panes]
        assert titles == ["GPU0", "GPU1", "GPU2", "GPU3"] * 2
        assert_fits(panes)

    run(cluster(per_node=4), (120, 50), check)


def test_one_box_has_no_heading_and_its_global_indexes():
    async def check(app, pilot) -> None:
        grid = app.query_one(GpuGrid)
        assert not headings(app) and len(shown(app)) == 8
        assert [p.render().plain.split()[0] for p in shown(app)] == [f"GPU{i}" for i in range(8)]
        assert grid.styles.grid_size_columns == 4 and grid.region.height == 2 * 4  # as the main screen had it

    run([gpu(i) for i in range(8)], (120, 40), check)


def test_a_grid_that_goes_from_a_cluster_to_one_box_drops_its_headings():
    async def check(app, pilot) -> None:
        assert len(headings(app)) == 2
        app.feed([gpu(i) for i in range(16)])
        await until(pilot, lambda: not list(app.query(NodeHeading)), what="the headings gone")
        await settle(app, pilot)
        panes = shown(app)
        assert not list(app.query(NodeHeading)) and len(panes) == 16
        assert [p.render().plain.split()[0] for p in panes] == [f"GPU{i}" for i in range(16)]
        assert app.query_one(GpuGrid).region.height == 4 * 4 and panes[15].content_size.height == 4

    run(cluster(), (120, 50), check)


@pytest.mark.parametrize("width", range(8, 48))
def test_a_cluster_gpu_line_keeps_memory_then_power_and_never_cuts_a_field(width):
    pane = GpuPane(9)
    pane.label, pane.in_node, pane.layout_name = 1, True, "tp8 pp2"
    row = pane.one_line(gpu(9, WORKER), width).plain
    assert cell_len(row) <= width
    whole = {"1▶", "47/141G", str(BIG), "pid", "312W", "87%", "54°", "45.2G", "python3"}
    assert all(token in whole or set(token) <= set("█░") for token in row.split()), row
    kept = [word in row for word in ("47/141G", "312W", "87%", f"pid {BIG}")]
    assert kept == sorted(kept, reverse=True), row  # memory, then power, then utilisation, then the pid


# -- `cockpit gpus` -------------------------------------------------------------------------------


def test_gpus_report_groups_by_node_with_local_indexes():
    lines = gpu_lines(cluster(down=1))
    assert lines[0] == f"node 1  {HEAD}  8 x H200  108/1128 GiB  2496 W"
    assert lines[1].startswith(
        "  GPU 0  NVIDIA H200  10.0/141.0 GiB  312/700 W  util 87%  54 C  4194304 python3"
    )
    assert lines[8].startswith("  GPU 7  NVIDIA H200  17.0/141.0 GiB")
    assert lines[9:] == [DOWN]


def test_gpus_report_of_one_box_is_unchanged():
    idle = GpuSample(3, "NVIDIA H200", None, 141 * GIB, None, 700.0, None, None)
    assert gpu_lines([gpu(0), idle]) == [
        "GPU 0  NVIDIA H200  47.2/141.0 GiB  312/700 W  util 87%  54 C  4194304 python3 45.2 GiB",
        "GPU 3  NVIDIA H200  n/a/141.0 GiB  n/a/700 W  util n/a%  n/a C  idle",
    ]


def test_nodes_are_numbered_in_index_order_and_one_box_has_none():
    groups = by_node(list(reversed(cluster(nodes=3, per_node=2))))
    assert [(g.number, g.host, [g.local(s) for s in g.samples]) for g in groups] == [
        (1, HEAD, [0, 1]),
        (2, WORKER, [0, 1]),
        (3, "127.0.0.4", [0, 1]),
    ]
    assert by_node([gpu(0), gpu(1)]) == []
