from __future__ import annotations

import pytest

from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout, parse_layout
from cockpit.engines import get_engine


@pytest.mark.parametrize(
    "text, expected",
    [
        ("tp4 ep2", Layout(tp=4, ep=2, expert_parallel=True)),
        ("tp8 ep", Layout(tp=8, expert_parallel=True)),
        ("pp8", Layout(pp=8)),
        ("ep8", Layout(tp=8, ep=8, expert_parallel=True)),
        ("tp2 dp4 ep", Layout(tp=2, dp=4, expert_parallel=True)),
        ("tp8 dp8 dpa ep8", Layout(tp=8, dp=8, ep=8, expert_parallel=True, dpa=True)),
        ("tp=4", Layout(tp=4)),
        ("tp 4", Layout(tp=4)),
        ("tp = 4", Layout(tp=4)),
        ("tp=4 ep=2", Layout(tp=4, ep=2, expert_parallel=True)),
        ("TP8+EP", Layout(tp=8, expert_parallel=True)),
        ("tp8,ep", Layout(tp=8, expert_parallel=True)),
        ("TP8 + EP", Layout(tp=8, expert_parallel=True)),
        ("tp8/ep", Layout(tp=8, expert_parallel=True)),
        ("tp4-ep2", Layout(tp=4, ep=2, expert_parallel=True)),
        ("  tp4   pp2 ", Layout(tp=4, pp=2)),
        ("tp8 dp8 dp-attention ep8", Layout(tp=8, dp=8, ep=8, expert_parallel=True, dpa=True)),
        ("tp8 dp8 dp_attention", Layout(tp=8, dp=8, dpa=True)),
        ("ep", Layout(expert_parallel=True)),
        ("tp1", Layout()),
    ],
)
def test_spellings(text: str, expected: Layout) -> None:
    assert parse_layout(text) == expected


@pytest.mark.parametrize(
    "layout, text",
    [
        (Layout(tp=4, ep=2), "tp4 ep2"),
        (Layout(tp=8, expert_parallel=True), "tp8 ep"),
        (Layout(pp=8), "pp8"),
        (Layout(tp=2, dp=4, expert_parallel=True), "tp2 dp4 ep"),
        (Layout(tp=8, dp=8, ep=8, dpa=True), "tp8 dp8 dpa ep8"),
        (Layout(tp=4, pp=2), "tp4 pp2"),
        (Layout(), "tp1"),
        (Layout(tp=1, ep=8), "tp1 ep8"),  # tp must show, or `ep8` would read back as tp8
        (Layout(ep=1), "ep1"),
    ],
)
def test_canonical_text(layout: Layout, text: str) -> None:
    assert str(layout) == text
    assert parse_layout(text) == layout


def test_ep8_alone_prints_with_its_tp() -> None:
    assert str(parse_layout("ep8")) == "tp8 ep8"


def test_an_ep_size_implies_expert_parallel() -> None:
    assert Layout(tp=4, ep=2).expert_parallel


def test_gpus_product() -> None:
    assert parse_layout("tp2 pp2 dp2").gpus_product == 8
    assert parse_layout("tp8 dp8 dpa ep8").gpus_product == 64  # engines decide the real count


@pytest.mark.parametrize(
    "text, words",
    [
        ("tq4 ep2", ["unknown token 'tq4'", "'tq4 ep2'", "did you mean 'tp4'?", "`tp4 ep2`"]),
        ("tp4 exp2", ["unknown token 'exp2'", "did you mean 'ep2'?"]),
        ("tensor8", ["unknown token 'tensor8'", "Layouts look like"]),
        ("8", ["unknown token '8'"]),
        ("tp4 tp8", ["'tp' is given twice"]),
        ("ep ep8", ["'ep' is given twice"]),
        ("tp0", ["'tp0'", "1 or more"]),
        ("tp4 pp0", ["'pp0'"]),
        ("", ["empty layout"]),
        ("  + , ", ["empty layout"]),
        ("dpa", ["dpa needs dp2 or more: try `tp8 dp8 dpa ep8`"]),
        ("tp8 dp1 dpa ep8", ["dpa needs dp2 or more"]),
        ("dpa4 dp2", ["dpa takes no size"]),
        ("tp", ["'tp' needs a size"]),
    ],
)
def test_errors(text: str, words: list[str]) -> None:
    with pytest.raises(CockpitError) as caught:
        parse_layout(text)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_tensor8_gets_no_suggestion() -> None:
    with pytest.raises(CockpitError, match="Layouts look like") as caught:
        parse_layout("tensor8")
    assert "did you mean" not in str(caught.value)


def test_bad_sizes_in_code_are_refused() -> None:
    with pytest.raises(CockpitError):
        Layout(tp=0)
    with pytest.raises(CockpitError):
        Layout(ep=0)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("moe", [True, False])
def test_enumerated_layouts_round_trip(engine: str, n: int, moe: bool) -> None:
    layouts = enumerate_layouts(n, moe=moe, engine=engine)
    assert layouts
    assert len(set(layouts)) == len(layouts)
    for layout in layouts:
        assert parse_layout(str(layout)) == layout


def enumerate_layouts(n: int, *, moe: bool, engine: str) -> list[Layout]:
    return get_engine(engine).candidate_layouts(n, moe=moe)


def names(n: int, *, moe: bool, engine: str) -> list[str]:
    return [str(x) for x in enumerate_layouts(n, moe=moe, engine=engine)]


def test_vllm_moe_on_eight() -> None:
    listed = names(8, moe=True, engine="vllm")
    for text in ["tp8 ep", "tp4 dp2 ep", "tp6", "pp8", "tp4", "tp8", "tp1"]:
        assert text in listed
    assert listed[0] == "tp8"
    assert "pp8 ep" not in listed  # tp x dp = 1: nothing to spread experts over


def test_vllm_layouts_fit_the_box() -> None:
    for layout in enumerate_layouts(8, moe=True, engine="vllm"):
        assert layout.gpus_product <= 8
        assert layout.ep is None and not layout.dpa


def test_sglang_moe_on_eight() -> None:
    listed = names(8, moe=True, engine="sglang")
    for text in ["tp8 ep8", "tp4 ep2", "tp8 dp8 dpa ep8", "pp8", "tp8 dp8 dpa", "tp4", "tp6"]:
        assert text in listed
    assert "tp8 ep" not in listed  # SGLang takes an explicit --ep-size
    for layout in enumerate_layouts(8, moe=True, engine="sglang"):
        if layout.ep is not None:
            assert layout.tp % layout.ep == 0
        if layout.dpa:
            assert layout.pp == 1 and layout.tp % layout.dp == 0
        else:
            assert layout.gpus_product <= 8


def test_no_expert_parallel_for_dense_models() -> None:
    for engine in ("vllm", "sglang"):
        assert not any(x.expert_parallel for x in enumerate_layouts(8, moe=False, engine=engine))


def test_order_is_by_gpus_then_tp() -> None:
    listed = names(8, moe=True, engine="sglang")
    assert listed[0] == "tp8"
    assert listed.index("tp8 dp8 dpa ep8") < listed.index("tp4 pp2")  # dpa adds no GPUs
    assert listed.index("tp4 ep2") < listed.index("tp2")
    assert listed[-1] == "tp1"


def test_deterministic() -> None:
    assert enumerate_layouts(8, moe=True, engine="vllm") == enumerate_layouts(8, moe=True, engine="vllm")


def test_small_boxes() -> None:
    assert names(1, moe=True, engine="vllm") == ["tp1"]
    assert names(2, moe=False, engine="vllm") == ["tp2", "dp2", "pp2", "tp1"]


def test_bad_engine_and_box() -> None:
    with pytest.raises(CockpitError, match="unknown engine 'trtllm': use one of vllm, sglang"):
        enumerate_layouts(8, moe=True, engine="trtllm")
    with pytest.raises(CockpitError, match="1 GPU or more"):
        enumerate_layouts(0, moe=True, engine="vllm")


@pytest.mark.parametrize(
    "text, words",
    [
        ("tp99999999999", ["too big", "at most 512"]),
        ("tp513", ["'tp513'", "at most 512"]),
        ("dp" + "9" * 5000, ["too big"]),  # int() alone would refuse 5000 digits with a ValueError
        ("tp" + "0" * 5000, ["not a size"]),
        ("tp10**9", ["plain whole numbers"]),
        ("tp4.5", ["plain whole numbers"]),
        ("x" * 500, ["unknown token"]),
    ],
)
def test_absurd_sizes_are_one_short_line(text: str, words: list[str]) -> None:
    with pytest.raises(CockpitError) as caught:
        parse_layout(text)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    for word in words:
        assert word in message


def test_the_largest_size_is_one_box() -> None:
    assert parse_layout("tp512").tp == 512 and parse_layout("tp0008").tp == 8
    with pytest.raises(CockpitError, match="from 1 to 512"):
        Layout(pp=513)
