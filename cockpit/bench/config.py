"""One sweep's configuration, as `cockpit bench` and the tests build it: checked when it is made.

The load generator (``loadgen``) and its worker processes (``workers``) both read it; its
defaults and bounds are the benchmark's own (``cockpit.core.benchrequest``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cockpit.bench.workload import ENDPOINTS
from cockpit.core.benchrequest import (
    DEFAULT_INPUT_LEN,
    DEFAULT_LEVELS,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_TIMEOUT_S,
    MAX_CONCURRENCY,
    MAX_WORKERS,
    MIN_REQUEST_LIMIT_S,
    check_rate,
)
from cockpit.core.errors import CockpitError
from cockpit.core.slo import Slo

TRANSPORTS = ("auto", "aiohttp", "raw")


@dataclass(frozen=True)
class BenchConfig:
    """One sweep. ``requests`` and ``duration_s`` size the measured window of every level
    (whichever comes first); with neither, a level measures max(2*C, 8) completions: after C of
    warm-up, three whole "rounds" of C in all (with fixed lengths a closed loop runs in waves,
    and whole waves average them fairly), and at least 8 samples at C=1. ``warmup`` defaults to
    C completions and is never less than C in closed loop; in open loop it defaults to ~10 s of
    arrivals, at most C. A level whose first 8 (and at least ``warmup``) requests all fail is
    not measured: its result carries the errors; so is one whose first C requests all timed out.

    ``timeout`` bounds every wait of a request: connecting, the response headers, and each gap
    between reads of the stream. ``request_timeout_s`` bounds a whole request (default: an hour,
    or the timeout if longer), so a stream that trickles forever still ends.

    ``workers`` spreads each level over that many processes, one event loop each, when one
    core cannot drive it (``workers.py``); 1 sends from this process, as always; None chooses
    per level from the level before (``workers.plan_workers``).

    ``slo``: latency bounds; each level then also reports its goodput (``LevelResult``)."""

    url: str
    model: str | None = None  # None: the first id of GET /v1/models
    endpoint: str = "completions"  # or "chat"
    concurrency: tuple[int, ...] = DEFAULT_LEVELS
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    requests: int | None = None
    duration_s: float | None = None
    rate: float | None = None  # open loop: Poisson arrivals per second; concurrency caps in flight
    jsonl: str | None = None
    warmup: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    request_timeout_s: float | None = None
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token, never shown
    seed: int = 0
    # "auto": the raw asyncio.Protocol transport (rawclient) for http://, aiohttp for https://
    transport: str = "auto"
    workers: int | None = 1  # processes per level; None: chosen per level (see above)
    slo: Slo | None = None  # latency bounds: each level's goodput counts the requests within them

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise CockpitError(f"the server URL must start with http:// or https://, got '{self.url}'")
        if self.transport not in TRANSPORTS:
            raise CockpitError(f"transport must be one of {', '.join(TRANSPORTS)}, got '{self.transport}'")
        if self.transport == "raw" and not self.url.startswith("http://"):
            raise CockpitError("the raw transport speaks http:// only: use transport 'aiohttp' for https://")
        if self.endpoint not in ENDPOINTS:
            raise CockpitError(f"endpoint must be one of {', '.join(ENDPOINTS)}, got '{self.endpoint}'")
        if not self.concurrency or any(c < 1 or c > MAX_CONCURRENCY for c in self.concurrency):
            raise CockpitError(
                f"concurrency levels must be between 1 and {MAX_CONCURRENCY}, got {self.concurrency}"
            )
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise CockpitError(f"workers must be between 1 and {MAX_WORKERS}, got {self.workers}")
        for name in ("input_len", "output_len", "requests", "warmup"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "warmup" else 1):
                raise CockpitError(f"{name} must be 1 or more, got {value}")
        if self.rate is not None:
            check_rate(self.rate, "rate")  # inf or 1e-300: arrivals that overflow or never come
        for name in ("duration_s", "rate", "timeout", "request_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise CockpitError(f"{name} must be above 0, got {value}")
        for name in ("timeout", "request_timeout_s"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise CockpitError(f"{name} must be a finite number of seconds, got {value}")

    @property
    def request_limit_s(self) -> float:
        """The bound on one whole request."""
        if self.request_timeout_s is not None:
            return self.request_timeout_s
        return max(MIN_REQUEST_LIMIT_S, self.timeout)

    @property
    def resolved_transport(self) -> str:
        """The transport this sweep uses: "raw" or "aiohttp"."""
        if self.transport == "auto":
            return "raw" if self.url.startswith("http://") else "aiohttp"
        return self.transport

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    def measured_requests(self, concurrency: int) -> int | None:
        """Completions that end the window; None when only the duration does."""
        if self.requests is not None:
            return self.requests
        if self.duration_s is not None:
            return None
        return max(2 * concurrency, 8)

    def warmup_requests(self, concurrency: int) -> int:
        if self.rate is not None:
            default = min(concurrency, max(1, math.ceil(self.rate * 10)))
            return self.warmup if self.warmup is not None else default
        return max(concurrency, self.warmup or 0)
