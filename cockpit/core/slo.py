"""Latency bounds (an SLO) and which requests meet them: what goodput counts.

Goodput is the throughput of the requests that met their latency bounds, the measure DistServe
(Zhong et al., "DistServe: Disaggregating Prefill and Decoding for Goodput-optimized Large
Language Model Serving", OSDI 2024) optimises, because tokens that arrive too late serve nobody.
A request is good as in vLLM's ``vllm bench serve --goodput`` (``vllm/benchmarks/serve.py``,
``calculate_metrics``): each of its own latencies is within its bound (``bound >= value``, in
ms). The bounds here are TTFT and the request's mean inter-token latency, TPOT =
(last token - first token) / (output tokens - 1); a request with one output token has no
inter-token gap and passes that bound, as vLLM counts its TPOT as 0.

Pure: the core (``commands``) carries a ``Slo`` in the ``bench`` and ``tune`` words, and the load
generator applies it to its records.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from cockpit.core.errors import CockpitError, shown

EXAMPLE = "ttft=2000,itl=50"
NONE = "none"  # no bound: goodput is the completed requests' throughput
_KEYS = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "itl_ms"}  # tpot: vLLM's name for the same bound
_BOUND = re.compile(r"(?P<key>[a-z]+)(?:<=|=|:|<)(?P<value>[0-9.]+(?:e[+-]?[0-9]+)?)(?P<unit>ms|s)?")


class TimedRequest(Protocol):
    """What a bound reads of a request (``bench.transport.RequestRecord``): perf_counter seconds."""

    @property
    def start(self) -> float: ...

    @property
    def first_token(self) -> float | None: ...

    @property
    def last_token(self) -> float | None: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def ok(self) -> bool: ...


@dataclass(frozen=True)
class Slo:
    """Per-request latency bounds in ms; None: that latency is not bounded."""

    ttft_ms: float | None = None
    itl_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "itl_ms"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf
            ):
                raise CockpitError(
                    f"the {name[:-3]} bound must be a positive number of ms, got {shown(value)}"
                )

    def is_good(self, request: TimedRequest) -> bool:
        """The request succeeded, a token came back, and each bounded latency is within its bound.

        A failed or cancelled request, or one that returned no token, is never good."""
        if not request.ok or request.first_token is None:
            return False
        if self.ttft_ms is not None and (request.first_token - request.start) * 1e3 > self.ttft_ms:
            return False
        if self.itl_ms is not None and request.output_tokens > 1 and request.last_token is not None:
            tpot_s = (request.last_token - request.first_token) / (request.output_tokens - 1)
            if tpot_s * 1e3 > self.itl_ms:
                return False
        return True

    def describe(self) -> str:
        """For people: ``ttft<=2000ms itl<=50ms``."""
        parts = [f"{key}<={_number(value)}ms" for key, value in self._bounds()]
        return " ".join(parts) or "no latency bound"

    def to_arg(self) -> str:
        """As ``parse_slo`` reads it (``cockpit bench --goodput``): ``ttft=2000,itl=50``, or
        ``none`` for no bound (every completed request is good)."""
        # 15 digits: the child reads back what was typed (`:g` would cut 1234.5678 to 1234.57)
        return ",".join(f"{key}={value:.15g}" for key, value in self._bounds()) or NONE

    def to_json(self) -> dict[str, float]:
        return {f"{key}_ms": value for key, value in self._bounds()}

    @classmethod
    def from_json(cls, data: Any) -> Slo | None:
        """A Slo from ``to_json``'s dict (a journal's extra); None when there is none."""
        if not isinstance(data, dict):
            return None
        return cls(ttft_ms=data.get("ttft_ms"), itl_ms=data.get("itl_ms"))

    def _bounds(self) -> list[tuple[str, float]]:
        pairs = (("ttft", self.ttft_ms), ("itl", self.itl_ms))
        return [(key, value) for key, value in pairs if value is not None]


def parse_slo(text: str, where: str = "--goodput") -> Slo:
    """Bounds typed as ``ttft=2000,itl=50`` (ms), or ``none``. Also read: ``:`` or ``<`` for
    ``=`` (vLLM's ``ttft:2000``; ``ttft<2s``), an ``ms`` or ``s`` unit, spaces for commas, and
    ``tpot`` for ``itl``. ``where`` names what was typed, for the error."""
    fix = f"type bounds in ms like {EXAMPLE} (ttft and/or itl), or {NONE}"
    bounds: dict[str, float] = {}
    items = [item for item in re.split(r"[,\s]+", text.strip().lower()) if item]
    if items == [NONE]:
        return Slo()
    if not items:
        raise CockpitError(f"{where} needs latency bounds: {fix}")
    for item in items:
        match = _BOUND.fullmatch(item)
        if match is None or match["key"] not in _KEYS:
            raise CockpitError(f"{where}: cannot read {shown(item)}: {fix}")
        try:
            value = float(match["value"]) * (1e3 if match["unit"] == "s" else 1.0)
        except ValueError:
            raise CockpitError(f"{where}: cannot read {shown(item)}: {fix}") from None
        name = _KEYS[match["key"]]
        if name in bounds:
            raise CockpitError(f"{where}: {match['key']} is bounded twice in {shown(text)}: {fix}")
        if not 0 < value < math.inf:
            raise CockpitError(
                f"{where}: the {match['key']} bound must be above 0 ms, got {shown(item)}: {fix}"
            )
        bounds[name] = value
    return Slo(**bounds)


def _number(value: float) -> str:
    return f"{value:g}"
