"""What a tune is asked for, as typed: `tune goal=tok/s/gpu ttft<2s itl<50ms c=1,32,64 n=6
--max-num-seqs 256,512`. Pure: words in, a ``TuneSpec`` or a one-line error out.

The words, each optional and in any order:

- ``goal=tok/s`` (the server's output tok/s) or ``goal=tok/s/gpu`` (per GPU the layout uses;
  layouts that leave GPUs idle compete only for this goal);
- ``ttft<2s``, ``itl<50ms``: the latency bounds a request must meet to count (goodput);
- ``c=1,32,64``: the concurrency levels a candidate's sweep may use (default: powers of two
  from 1 to 1024), or ``rate=2,4,8``: open-loop request rates instead;
- ``in=N out=N``: request lengths (default: the profile's), ``t=S``: seconds per level;
- ``budget=30m`` (time) and ``n=6`` (launches): when to stop at the latest;
- ``--flag v1,v2``: a server argument's values to try, each combination with each layout
  (``--enforce-eager`` alone: with and without it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from cockpit.core.benchrequest import MAX_LEVELS, check_bench_number, check_rate, check_seconds, parse_levels
from cockpit.core.errors import CockpitError, shown

Goal = Literal["tok/s", "tok/s/gpu"]
_N = TypeVar("_N", int, float)
GOALS: tuple[Goal, ...] = ("tok/s", "tok/s/gpu")
_GOAL_ALIASES: dict[str, Goal] = {
    "tok/s": "tok/s",
    "tps": "tok/s",
    "throughput": "tok/s",
    "tok/s/gpu": "tok/s/gpu",
    "tps/gpu": "tok/s/gpu",
    "per-gpu": "tok/s/gpu",
}
DEFAULT_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MAX_LAUNCHES = 1000
MAX_KNOB_VALUES = 16
MAX_KNOB_COMBINATIONS = 32  # x every layout of the box: a few hundred plans at most
WITHOUT = ""  # a flag's "without it" value: `--enforce-eager` alone tries both
_BOUND = re.compile(r"^(ttft|itl)\s*(<=|<|=)\s*([0-9.]+)\s*(ms|s)?$", re.IGNORECASE)
_DURATION = re.compile(r"^([0-9.]+)\s*(s|m|h)?$", re.IGNORECASE)
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
USAGE = "tune [goal=tok/s|tok/s/gpu] [ttft<2s] [itl<50ms] [c=1,32|rate=2,4] [in=N out=N] [budget=30m|n=6] [--flag v1,v2]"


@dataclass(frozen=True)
class Knob:
    """One server argument and the values to try; ``WITHOUT`` stands for leaving it out (a
    flag without a value)."""

    flag: str
    values: tuple[str, ...]

    def argv(self, value: str) -> tuple[str, ...]:
        if value == WITHOUT:
            return ()
        return (self.flag,) if value == self.flag else (self.flag, value)


@dataclass(frozen=True)
class TuneSpec:
    goal: Goal = "tok/s"
    ttft_ms: float | None = None
    itl_ms: float | None = None
    concurrency: tuple[int, ...] = DEFAULT_LADDER  # the levels a sweep may use, ascending
    rates: tuple[float, ...] = ()  # open loop instead: request rates per second, ascending
    input_len: int | None = None  # None: the profile's
    output_len: int | None = None
    duration_s: float | None = None  # per level; None: the bench's own sizing
    budget_s: float | None = None
    max_launches: int | None = None
    knobs: tuple[Knob, ...] = field(default_factory=tuple)

    @property
    def per_gpu(self) -> bool:
        return self.goal == "tok/s/gpu"

    @property
    def levels(self) -> tuple[float, ...]:
        """What a candidate's sweep walks: rates when given, else concurrency levels."""
        return self.rates or tuple(float(c) for c in self.concurrency)

    @property
    def bounds_text(self) -> str:
        """`ttft<2000ms itl<50ms`, or "no latency bound"."""
        parts = [f"{name}<{_ms(v)}" for name, v in (("ttft", self.ttft_ms), ("itl", self.itl_ms)) if v]
        return " ".join(parts) or "no latency bound"

    def describe(self) -> str:
        """One line, as it could be typed again."""
        words = [f"goal={self.goal}", self.bounds_text if (self.ttft_ms or self.itl_ms) else ""]
        if self.rates:
            words.append("rate=" + ",".join(f"{r:g}" for r in self.rates))
        elif self.concurrency != DEFAULT_LADDER:
            words.append("c=" + ",".join(map(str, self.concurrency)))
        for name, value in (("in", self.input_len), ("out", self.output_len)):
            if value is not None:
                words.append(f"{name}={value}")
        if self.duration_s is not None:
            words.append(f"t={self.duration_s:g}")
        if self.budget_s is not None:
            words.append(f"budget={_duration_text(self.budget_s)}")
        if self.max_launches is not None:
            words.append(f"n={self.max_launches}")
        for knob in self.knobs:
            values = [v for v in knob.values if v not in (WITHOUT, knob.flag)]
            words.append(knob.flag + (" " + ",".join(values) if values else ""))
        return "tune " + " ".join(w for w in words if w)

    def to_json(self) -> dict:
        return {
            "goal": self.goal,
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "concurrency": list(self.concurrency),
            "rates": list(self.rates),
            "input_len": self.input_len,
            "output_len": self.output_len,
            "duration_s": self.duration_s,
            "budget_s": self.budget_s,
            "max_launches": self.max_launches,
            "knobs": [{"flag": k.flag, "values": list(k.values)} for k in self.knobs],
        }

    @classmethod
    def from_json(cls, data: dict) -> TuneSpec:
        """A spec journaled by ``to_json`` (``tune --resume``)."""
        try:
            return cls(
                goal=_goal(str(data["goal"])),
                ttft_ms=_optional(float, data.get("ttft_ms")),
                itl_ms=_optional(float, data.get("itl_ms")),
                concurrency=tuple(int(c) for c in data.get("concurrency") or DEFAULT_LADDER),
                rates=tuple(float(r) for r in data.get("rates") or ()),
                input_len=_optional(int, data.get("input_len")),
                output_len=_optional(int, data.get("output_len")),
                duration_s=_optional(float, data.get("duration_s")),
                budget_s=_optional(float, data.get("budget_s")),
                max_launches=_optional(int, data.get("max_launches")),
                knobs=tuple(
                    Knob(str(k["flag"]), tuple(map(str, k["values"]))) for k in data.get("knobs", ())
                ),
            )
        except (CockpitError, KeyError, TypeError, ValueError) as exc:
            raise CockpitError(
                f"the journaled tune cannot be read ({exc}): start a new one with `tune ...`"
            ) from None


def _optional(kind: Callable[[Any], _N], value: object) -> _N | None:
    return None if value is None else kind(value)


def parse_tune(text: str) -> TuneSpec:
    """The words after `tune` (see the module's docstring); an error says which word and what to type."""
    values: dict = {}
    knobs: list[Knob] = []
    words = _tokens(text)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            flag, eq, inline = word.partition("=")
            if eq:
                knobs.append(_knob(flag, inline))
            elif i < len(words) and not words[i].startswith("-") and not _is_setting(words[i]):
                knobs.append(_knob(flag, words[i]))
                i += 1
            else:
                knobs.append(Knob(flag, (WITHOUT, flag)))
            continue
        bound = _BOUND.match(word)
        if bound:
            name, _, number, unit = bound.groups()
            values[f"{name.lower()}_ms"] = _bound_ms(word, number, unit)
            continue
        key, eq, value = word.partition("=")
        key = key.lower()
        if not eq or key not in _SETTERS:
            raise CockpitError(f"tune: {shown(word)} is not one of its words: {USAGE}")
        values.update(_SETTERS[key](word, value))
    if "concurrency" in values and "rates" in values:
        raise CockpitError("tune takes c= (closed loop) or rate= (open loop), not both")
    if len({k.flag for k in knobs}) < len(knobs):
        raise CockpitError("tune: a flag is given twice: list its values once, like --max-num-seqs 256,512")
    if math.prod(len(k.values) for k in knobs) > MAX_KNOB_COMBINATIONS:
        raise CockpitError(
            f"tune: the knobs make more than {MAX_KNOB_COMBINATIONS} combinations, each tried with every "
            "layout: give fewer values"
        )
    return TuneSpec(**values, knobs=tuple(knobs))


def _tokens(text: str) -> list[str]:
    """Words, with `ttft < 2s` and `c = 1,32` read as one word each."""
    text = re.sub(r"\s*(<=|<|=)\s*", r"\1", text.strip())
    return text.split()


def _is_setting(word: str) -> bool:
    return bool(_BOUND.match(word)) or word.partition("=")[0].lower() in _SETTERS and "=" in word


def _knob(flag: str, text: str) -> Knob:
    values = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not values:
        raise CockpitError(f"tune: {flag} needs values to try, like {flag} 256,512")
    if len(values) > MAX_KNOB_VALUES:
        raise CockpitError(f"tune: {flag} has {len(values)} values; give at most {MAX_KNOB_VALUES}")
    return Knob(flag, values)


def _goal_word(word: str, value: str) -> dict:
    return {"goal": _goal(value, word)}


def _goal(value: str, word: str = "") -> Goal:
    goal = _GOAL_ALIASES.get(value.lower())
    if goal is None:
        raise CockpitError(f"tune: {shown(word or value)}: the goal is goal=tok/s or goal=tok/s/gpu")
    return goal


def _bound_ms(word: str, number: str, unit: str | None) -> float:
    if unit is None:
        raise CockpitError(f"tune: {shown(word)} needs a unit: like ttft<2s or itl<50ms")
    try:
        ms = float(number) * (1000.0 if unit.lower() == "s" else 1.0)
    except ValueError:
        raise CockpitError(f"tune: {shown(word)}: give a number, like itl<50ms") from None
    if not 0 < ms <= 3_600_000 or not math.isfinite(ms):
        raise CockpitError(f"tune: {shown(word)}: a bound is above 0 and at most an hour")
    return ms


def _levels(word: str, value: str) -> dict:
    return {"concurrency": tuple(sorted(set(parse_levels(value, shown(word)))))}


def _rates(word: str, value: str) -> dict:
    try:
        rates = tuple(sorted({float(x) for x in value.split(",") if x}))
    except ValueError:
        rates = ()
    if not rates or len(rates) > MAX_LEVELS:
        raise CockpitError(
            f"tune: {shown(word)}: rates are 1 to {MAX_LEVELS} numbers of requests per second, like rate=2,4,8"
        )
    for rate in rates:
        check_rate(rate, f"tune: {shown(word)}", "like rate=2,4,8")
    return {"rates": rates}


def _length(field_name: str) -> Callable[[str, str], dict]:
    def parse(word: str, value: str) -> dict:
        try:
            number: object = int(value)
        except ValueError:
            number = value
        fix = "like in=1024 out=256"
        return {field_name: check_bench_number(field_name, number, f"tune: {shown(word)}", fix)}

    return parse


def _seconds(word: str, value: str) -> dict:
    try:
        number: object = float(value.rstrip("sS"))
    except ValueError:
        number = value
    return {"duration_s": check_seconds(number, f"tune: {shown(word)}", "like t=30")}


def _budget(word: str, value: str) -> dict:
    match = _DURATION.match(value)
    seconds = float(match[1]) * _UNIT_S[(match[2] or "s").lower()] if match else -1.0
    return {"budget_s": check_seconds(seconds, f"tune: {shown(word)}", "like budget=30m or budget=2h")}


def _launches(word: str, value: str) -> dict:
    if not value.isdigit() or not 1 <= int(value) <= MAX_LAUNCHES:
        raise CockpitError(f"tune: {shown(word)}: n= is how many launches at most, like n=6")
    return {"max_launches": int(value)}


_SETTERS: dict[str, Callable[[str, str], dict]] = {
    "goal": _goal_word,
    "c": _levels,
    "rate": _rates,
    "in": _length("input_len"),
    "out": _length("output_len"),
    "t": _seconds,
    "budget": _budget,
    "n": _launches,
}


def _ms(value: float) -> str:
    return f"{value / 1000:g}s" if value >= 1000 and value % 1000 == 0 else f"{value:g}ms"


def _duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
