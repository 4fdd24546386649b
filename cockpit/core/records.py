"""What a launch logged and what the planner predicted for it, as typed records.

The journal keeps both as JSON (its `facts` and `predicted` columns); these classes write that
JSON and read it back, so calibration and the reports read attributes, not string keys. Every
figure is optional: an older cockpit journaled fewer, an engine logs what it logs.

Two ways to read: ``from_json`` refuses a value of the wrong type in one line (``BadRecord``),
for what cockpit writes itself; ``sound`` drops it, for a row read back from a journal someone
may have edited by hand (the rest of the row still reads, as the journal's other columns do).
Keys this cockpit does not know (a newer one's) are passed over either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from cockpit.core.errors import shown


class BadRecord(ValueError):
    """A record's JSON holds a value of the wrong type: one line that names it."""


_Record = TypeVar("_Record")


# -- reading one value ---------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A finite int or float, kept as written (bool is not a number here); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _whole(value: Any) -> int | None:
    """A number with nothing after the point, as an int; None for anything else."""
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_READERS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "float": (_number, "a number"),
    "int": (_whole, "a whole number"),
    "str": (_text, "a text"),
}


def _scalars(record: type[_Record], data: Any, what: str, strict: bool) -> dict[str, Any]:
    """The record's optional scalar fields read from ``data`` by their declared type; a value
    of another type raises BadRecord (``strict``) or is left out."""
    if not isinstance(data, Mapping):
        if strict:
            raise BadRecord(f"{what} is {shown(data)}, not a JSON object")
        return {}
    values: dict[str, Any] = {}
    for f in fields(record):  # type: ignore[arg-type]
        reader = _READERS.get(str(f.type).split(" |")[0])
        if reader is None or f.name not in data or data[f.name] is None:
            continue
        value = reader[0](data[f.name])
        if value is None and strict:
            raise BadRecord(f"{what}: {f.name} is {shown(data[f.name])}, not {reader[1]}")
        if value is not None:
            values[f.name] = value
    return values


def _set_fields(record: object) -> dict[str, Any]:
    """The record's fields that hold a value, in their order: its JSON leaves the rest out."""
    return {f.name: getattr(record, f.name) for f in fields(record) if getattr(record, f.name) is not None}  # type: ignore[arg-type]


# -- what the engine logged ----------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchFacts:
    """The numbers an engine's log gave about its launch (``cockpit.runner.launchfacts`` reads
    them; docs/launchfacts.md names each). Weights, graphs and times are the busiest rank's; the KV
    cache the smallest rank's, one attention replica's pool."""

    weights_gib: float | None = None
    weights_seconds: float | None = None
    draft_weights_gib: float | None = None  # a speculative-decoding draft model, beside the target
    graph_gib: float | None = None  # CUDA graphs (may be slightly negative: the engine's own figure)
    graph_seconds: float | None = None
    graph_estimate_gib: float | None = None  # vLLM's estimate, taken off the KV cache before capture
    engine_init_seconds: float | None = None
    kv_memory_gib: float | None = None  # the KV cache on one GPU
    draft_kv_memory_gib: float | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    avail_after_load_gib: float | None = None
    weights_ranks: int | None = None  # how many ranks logged their weights (1 under vLLM's info_once)
    max_concurrency_len: int | None = None  # the request length max_concurrency is for
    engine_version: str | None = None

    def __bool__(self) -> bool:
        """Whether the engine said anything at all."""
        return any(getattr(self, f.name) is not None for f in fields(self))

    def to_json(self) -> dict[str, float | int | str]:
        """The journal's `facts`: only what the engine said."""
        return _set_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> LaunchFacts:
        """The facts cockpit wrote; a value of the wrong type raises BadRecord."""
        return cls(**_scalars(cls, data, "the launch facts", strict=True))

    @classmethod
    def sound(cls, data: Any) -> LaunchFacts:
        """What can be read of a journaled row: a value of the wrong type reads as not logged."""
        return cls(**_scalars(cls, data, "the launch facts", strict=False))


# -- what the planner predicted ------------------------------------------------------------------


@dataclass(frozen=True)
class PredictedMemory:
    """The planner's memory estimate of a launch as journaled (``planner.MemoryEstimate.to_json``),
    on one GPU (the busiest for weights) except ``kv_tokens``: over the whole server."""

    capacity_gib: float | None = None
    weights_gib: float | None = None
    weights_by_group_gib: dict[str, float] | None = None  # attention, experts, dense+shared, ...
    reserve_gib: float | None = None
    budget_gib: float | None = None
    kv_budget_gib: float | None = None
    kv_bytes_per_token: float | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    busiest_gpu: int | None = None
    expert_layer_bytes: float | None = None
    activation_gib: float | None = None
    graph_gib: float | None = None
    non_torch_gib: float | None = None
    # A hybrid model's linear-attention state (``engines.estimate.StateMemory.to_json``), kept as written.
    state: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return _set_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> PredictedMemory:
        return cls._read(data, strict=True)

    @classmethod
    def sound(cls, data: Any) -> PredictedMemory:
        return cls._read(data, strict=False)

    @classmethod
    def _read(cls, data: Any, strict: bool) -> PredictedMemory:
        what = "the predicted memory"
        values = _scalars(cls, data, what, strict)
        if not values and not isinstance(data, Mapping):
            return cls()
        groups = data.get("weights_by_group_gib")
        if groups is not None:
            groups = _numbers_by_name(groups, f"{what}'s weights_by_group_gib", strict)
        state = data.get("state")
        if state is not None and not isinstance(state, Mapping):
            if strict:
                raise BadRecord(f"{what}: state is {shown(state)}, not a JSON object")
            state = None
        return cls(**values, weights_by_group_gib=groups, state=dict(state) if state is not None else None)


@dataclass(frozen=True)
class LaunchPrediction:
    """What the planner predicted for a launch: its memory (None: the planner had no estimate),
    how many journaled runs its constants were learned from, and the tok/s of each bench level,
    by request shape (input, output tokens) and concurrency, added as the benches run."""

    memory: PredictedMemory | None = None
    learned_runs: int | None = None
    tok_s: dict[tuple[int, int], dict[int, float]] = field(default_factory=dict)
    speed: str = ""  # which source predicted the speeds (cockpit.core.speed.SpeedSource.label)

    def tok_s_at(self, input_len: int, output_len: int, concurrency: int) -> float | None:
        """The tok/s predicted for one level; None where nothing was."""
        return self.tok_s.get((input_len, output_len), {}).get(concurrency)

    def to_json(self) -> dict[str, Any]:
        """The journal's `predicted`: {"memory": {...} or null, "learned_runs": n, "speed": "the
        source's label", "tok_s": {"<in>/<out>": {"<C>": tok/s}}}; what is not known is left out."""
        json: dict[str, Any] = {"memory": self.memory.to_json() if self.memory else None}
        if self.learned_runs is not None:
            json["learned_runs"] = self.learned_runs
        if self.speed:
            json["speed"] = self.speed
        if self.tok_s:
            json["tok_s"] = {
                f"{i}/{o}": {str(c): v for c, v in levels.items()} for (i, o), levels in self.tok_s.items()
            }
        return json

    @classmethod
    def from_json(cls, data: Any) -> LaunchPrediction:
        """A prediction cockpit wrote (or a part of one); a value of the wrong type raises BadRecord."""
        return cls._read(data, strict=True)

    @classmethod
    def sound(cls, data: Any) -> LaunchPrediction:
        """What can be read of a journaled row: a value of the wrong type reads as not predicted."""
        return cls._read(data, strict=False)

    @classmethod
    def _read(cls, data: Any, strict: bool) -> LaunchPrediction:
        what = "the launch prediction"
        if not isinstance(data, Mapping):
            if strict:
                raise BadRecord(f"{what} is {shown(data)}, not a JSON object")
            return cls()
        memory = data.get("memory")
        if memory is not None and not isinstance(memory, Mapping) and not strict:
            memory = None  # a hand-edited row: nothing known of the memory
        runs = data.get("learned_runs")
        learned_runs = _whole(runs)
        if runs is not None and learned_runs is None and strict:
            raise BadRecord(f"{what}: learned_runs is {shown(runs)}, not a whole number")
        speed = data.get("speed", "")
        if not isinstance(speed, str):
            if strict:
                raise BadRecord(f"{what}: speed is {shown(speed)}, not text")
            speed = ""
        return cls(
            memory=None if memory is None else PredictedMemory._read(memory, strict),
            learned_runs=learned_runs,
            tok_s=_tok_s(data.get("tok_s"), f"{what}'s tok_s", strict),
            speed=speed,
        )


def _numbers_by_name(data: Any, what: str, strict: bool) -> dict[str, float]:
    """{name: number}; what is not one raises BadRecord (``strict``) or is left out."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        if strict:
            raise BadRecord(f"{what} is {shown(data)}, not a JSON object")
        return {}
    numbers = {}
    for name, value in data.items():
        number = _number(value)
        if number is None and strict:
            raise BadRecord(f"{what}: {shown(name)} is {shown(value)}, not a number")
        if number is not None:
            numbers[str(name)] = number
    return numbers


def _tok_s(data: Any, what: str, strict: bool) -> dict[tuple[int, int], dict[int, float]]:
    """{"<in>/<out>": {"<C>": tok/s}} as {(in, out): {C: tok/s}}."""
    by_shape: dict[tuple[int, int], dict[int, float]] = {}
    for shape, levels in _mappings(data, what, strict).items():
        lengths = _pair(shape)
        if lengths is None:
            if strict:
                raise BadRecord(f"{what}: {shown(shape)} is not <input>/<output> tokens")
            continue
        per_level = {}
        for level, tok_s in _numbers_by_name(levels, f"{what} at {shape}", strict).items():
            concurrency = _whole_text(level)
            if concurrency is None:
                if strict:
                    raise BadRecord(f"{what} at {shape}: {shown(level)} is not a concurrency")
                continue
            per_level[concurrency] = tok_s
        by_shape[lengths] = per_level
    return by_shape


def _mappings(data: Any, what: str, strict: bool) -> Mapping[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        if strict:
            raise BadRecord(f"{what} is {shown(data)}, not a JSON object")
        return {}
    return data


def _pair(text: str) -> tuple[int, int] | None:
    """ "1024/256" -> (1024, 256)."""
    first, slash, second = str(text).partition("/")
    input_len, output_len = _whole_text(first), _whole_text(second)
    return (input_len, output_len) if slash and input_len is not None and output_len is not None else None


def _whole_text(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None
