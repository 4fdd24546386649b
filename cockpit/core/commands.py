"""What a person asks cockpit to do, typed: the prompt's words (cockpit.faces.prompt) and the command
line's arguments both become one of these, and the jobs below the faces take nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.layout import Layout

if TYPE_CHECKING:
    from cockpit.core.tuning.spec import TuneSpec


@dataclass(frozen=True)
class Try:
    layout: Layout


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Plan:
    layout: Layout | None = None


@dataclass(frozen=True)
class Sweep:
    layouts: tuple[Layout, ...] = field(default_factory=tuple)
    bench: BenchRequest = BenchRequest()  # the benchmark each layout gets: `bench`'s own words


@dataclass(frozen=True)
class Tune:
    """`tune ...`: find the best layout and knobs for a goal (cockpit.core.tuning.spec has the words);
    `tune --resume` continues the profile's unfinished tune."""

    spec: TuneSpec | None = None  # None: resume
    resume: bool = False


@dataclass(frozen=True)
class Results:
    pass


@dataclass(frozen=True)
class Export:
    fmt: str = "md"
    predicted: bool = False  # beside each measured tok/s, the one predicted at launch (`results --predicted`)


@dataclass(frozen=True)
class Use:
    profile: str
    engine: str | None = None  # `use kimi-k2.6 on vllm`: the profile on another engine


@dataclass(frozen=True)
class Help:
    pass


@dataclass(frozen=True)
class Quit:
    pass


Command = Try | BenchRequest | Stop | Plan | Sweep | Tune | Results | Export | Use | Help | Quit
