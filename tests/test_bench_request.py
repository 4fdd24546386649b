"""One benchmark request, one set of bounds and defaults: the prompt, `cockpit bench`, the run
config and a profile all agree, and a profile's defaults are merged in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.bench.command import add_bench_parser, config_from_args
from cockpit.bench.config import BenchConfig
from cockpit.bench.transport import Timeouts
from cockpit.core.benchrequest import (
    DEFAULT_INPUT_LEN,
    DEFAULT_LEVELS,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_TIMEOUT_S,
    MAX_CONCURRENCY,
    BenchDefaults,
    BenchRequest,
    FilledBench,
)
from cockpit.core.errors import CockpitError
from cockpit.core.slo import Slo
from cockpit.faces.prompt import parse_command

PACKAGE = Path(__file__).resolve().parent.parent / "cockpit"
URL = "http://127.0.0.1:9"


def _bench_args(*argv: str):
    import argparse

    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers())
    return parser.parse_args(["bench", "--url", URL, *argv])


def _prompt_takes(level: int) -> bool:
    try:
        parse_command(f"bench c={level}")
    except CockpitError:
        return False
    return True


def _config_takes(level: int) -> bool:
    try:
        BenchConfig(url=URL, concurrency=(level,))
    except CockpitError:
        return False
    return True


@pytest.mark.parametrize("level", [1, 70_000, MAX_CONCURRENCY, MAX_CONCURRENCY + 1, 0])
def test_the_prompt_and_the_bench_config_take_the_same_levels(level):
    """c=70000 is taken by both or refused by both: one MAX_CONCURRENCY."""
    assert _prompt_takes(level) == _config_takes(level)
    assert _prompt_takes(level) == (1 <= level <= MAX_CONCURRENCY)


def test_cockpit_bench_flags_take_the_same_levels_as_the_prompt():
    assert config_from_args(_bench_args("-c", "1,70000")).concurrency == (1, 70_000)
    with pytest.raises(CockpitError, match="at most 100,000"):
        config_from_args(_bench_args("-c", f"{MAX_CONCURRENCY + 1}"))


def test_every_default_is_the_same_one():
    """The profile's bench section, the run config, `cockpit bench` alone and the transports'
    timeouts start from the same levels, lengths and 600 s."""
    assert DEFAULT_LEVELS == (1, 32, 64, 256, 1024) and DEFAULT_TIMEOUT_S == 600
    profile = BenchDefaults()
    config = BenchConfig(url=URL)
    alone = config_from_args(_bench_args())
    for defaults in (profile, config, alone):
        assert defaults.concurrency == DEFAULT_LEVELS
        assert (defaults.input_len, defaults.output_len) == (DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN)
    assert config.timeout == alone.timeout == DEFAULT_TIMEOUT_S
    assert Timeouts().read_s == Timeouts().connect_s == DEFAULT_TIMEOUT_S


def test_what_is_not_asked_comes_from_the_profile():
    defaults = BenchDefaults(concurrency=(1, 8), input_len=512, output_len=64, requests=40)
    assert BenchRequest().filled(defaults) == FilledBench((1, 8), 512, 64, requests=40)
    asked = BenchRequest(concurrency=(4,), input_len=16, output_len=8, timeout_s=30.0, slo=Slo(itl_ms=50))
    assert asked.filled(defaults) == FilledBench((4,), 16, 8, requests=40, timeout_s=30.0, slo=Slo(itl_ms=50))


def test_a_request_sized_one_way_does_not_get_the_profile_s_other_way():
    """n= and t= exclude each other: asked for seconds, the profile's request count is not added."""
    by_requests = BenchDefaults(requests=40)
    by_seconds = BenchDefaults(duration_s=30.0)
    assert BenchRequest(duration_s=5.0).filled(by_requests).requests is None
    assert BenchRequest(duration_s=5.0).filled(by_requests).duration_s == 5.0
    assert BenchRequest(requests=7).filled(by_seconds).duration_s is None
    assert BenchRequest().filled(by_seconds) == FilledBench(DEFAULT_LEVELS, 1024, 1024, duration_s=30.0)


def test_the_timeout_left_unasked_stays_the_bench_child_s_default():
    """None: the child's --timeout is not written, so its argv stays as it was."""
    assert BenchRequest().filled(BenchDefaults()).timeout_s is None


def test_the_prompt_parses_into_the_request():
    assert parse_command("bench c=1,8 n=20 timeout=30") == BenchRequest((1, 8), requests=20, timeout_s=30.0)
