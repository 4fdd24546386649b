"""A benchmark as it is asked for: every bound, every default, and the one merge of the two.

The prompt (``commands``: `bench c=1,32 n=200`), the command line (`cockpit bench -c 1,32
--requests 200`), a profile's ``bench:`` section and a tune all read their values through here, so
one value gets one answer and one line, whichever way it was typed; only ``where`` (the word or
the flag) differs. The bounds sit far above any real sweep: a typo (`c=99999999`, `--rate
1e-300`, `--output-len 1e12`) is refused in one line instead of opening that many connections,
waiting for ages or running for years. What is not asked for comes from the profile
(``BenchDefaults``), merged in one place (``BenchRequest.filled``), and what a profile does not
say from the defaults here, which `cockpit bench` run alone uses too.
Pure: text in, a number, a record or a one-line CockpitError out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cockpit.core.errors import CockpitError, shown
from cockpit.core.slo import Slo

MIN_CONCURRENCY = 1
MAX_CONCURRENCY = 100_000  # requests in flight in one level
MAX_LEVELS = 64  # concurrency levels in one sweep
MAX_TOKENS = 10_000_000  # input or output tokens of one request
MAX_REQUESTS = 10_000_000  # measured requests of one level
MAX_SECONDS = 7 * 24 * 3600.0  # a week: the longest duration or per-request timeout
MIN_RATE = 0.001  # open-loop arrivals per second: one in ~17 minutes, on average
MAX_RATE = 1_000_000.0
MAX_WORKERS = 256  # processes that send one level
MAX_LAYOUTS = 64  # layouts in one sweep
# One request: beyond its first --timeout seconds, it must keep up with one token a second on
# average (a real engine, even a loaded one, streams ten or more), so a stream that trickles is
# ended by time as well as a silent one.
TOKEN_PACE_S = 1.0
MAX_EVENT_BYTES = 1 << 20  # one SSE event; a token event is ~200 bytes
MAX_PROMPTS_BYTES = 256 << 20  # a --prompts file
MAX_PROMPT_LINE_BYTES = 16 << 20  # one line of it

DEFAULT_LEVELS = (1, 32, 64, 256, 1024)  # a profile's sweep, and `cockpit bench` run alone
DEFAULT_INPUT_LEN = 1024  # prompt tokens of one request
DEFAULT_OUTPUT_LEN = 1024  # output tokens asked of one request
DEFAULT_TIMEOUT_S = 600.0  # no bytes for this long: a loaded real engine still sends within it
MIN_REQUEST_LIMIT_S = 3600.0  # the whole of one request, unless the timeout is longer

_NUMBER_TEXT = 40  # a typed number longer than this is a typo, not a number
_WHOLE_LIMITS = {"input_len": MAX_TOKENS, "output_len": MAX_TOKENS, "requests": MAX_REQUESTS}
SECONDS_FIELDS = ("duration_s", "timeout_s")  # the sizes given in seconds, a fraction allowed


def mib(size: int) -> str:
    """``16 MiB``: how a byte bound reads in a message."""
    return f"{size / (1 << 20):g} MiB"


def typed_whole(text: str) -> object:
    """The whole number in `n=200` or `--requests 200`; the text itself when it is none (`1e10`,
    `abc`), so the bound's message echoes what was typed."""
    text = text.strip()
    if len(text) > _NUMBER_TEXT:
        return text
    try:
        return int(text)
    except ValueError:
        return text


def typed_real(text: str, *, seconds: bool = False) -> object:
    """The number in `t=30`, `t=30s` (``seconds``) or `--rate 0.5`; the text itself when it is none."""
    text = text.strip()
    if seconds:
        text = text.rstrip("s")
    if len(text) > _NUMBER_TEXT:
        return text
    try:
        return float(text)
    except ValueError:
        return text


def check_whole(field_name: str, value: object, where: str, fix: str) -> int:
    """A count (input or output tokens, requests): a whole number from 1 to its bound."""
    high = _WHOLE_LIMITS[field_name]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= high:
        raise CockpitError(
            f"{where} must be a whole number of 1 or more and at most {high:,.0f} (got {shown(value, 24)}): {fix}"
        )
    return value


def check_seconds(value: object, where: str, fix: str = "give seconds like 600") -> float:
    """Seconds to run or to wait (a level's duration, a timeout): above 0 and at most a week,
    because nan, inf or 0 would never end or never start."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        # (the comparison also refuses nan and inf)
        raise CockpitError(
            f"{where} must be a positive number of seconds, at most {MAX_SECONDS:,.0f} (got {shown(value, 24)}): {fix}"
        )
    return float(value)


def check_rate(value: object, where: str, fix: str = "like 4 for four requests a second") -> float:
    """Open-loop arrivals per second: finite, and between bounds where the next arrival is due
    within minutes (1e-300 would wait forever) and a float's sum of gaps still moves."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not MIN_RATE <= value <= MAX_RATE
    ):
        raise CockpitError(
            f"{where} must be requests per second from {MIN_RATE:g} to {MAX_RATE:,.0f} (got {shown(value, 24)}): {fix}"
        )
    return float(value)


def check_workers(value: object, where: str) -> int:
    """Processes per level: a whole number from 1 to the bound."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise CockpitError(
            f"{where} must be a number of processes from 1 to {MAX_WORKERS} or 'auto' (got {shown(value, 24)})"
        )
    return value


def check_bench_number(field_name: str, value: object, where: str, fix: str) -> int | float:
    """A benchmark size (tokens, requests, seconds) from the prompt, a profile or a tune: positive
    and bounded, as `cockpit bench`'s flags are. Seconds may have a fraction; the others are whole
    numbers. ``where`` names what was typed."""
    if field_name in SECONDS_FIELDS:
        return check_seconds(value, where, fix)
    return check_whole(field_name, value, where, fix)


def parse_levels(text: str, flag: str) -> tuple[int, ...]:
    """Concurrency levels like ``1,32,64``; ``flag`` names where they were typed, for the error."""
    parts = [x for x in text.replace(" ", "").split(",") if x]
    if len(parts) > MAX_LEVELS:
        raise CockpitError(
            f"{flag}: at most {MAX_LEVELS} concurrency levels in one sweep, got {len(parts):,}: "
            "pick fewer, like 1,32,64"
        )
    try:
        levels = tuple(int(x) for x in parts)
    except ValueError:
        raise CockpitError(f"{flag} takes concurrency levels like 1,32,64; got {shown(text)}") from None
    if not levels or min(levels) < MIN_CONCURRENCY or max(levels) > MAX_CONCURRENCY:
        raise CockpitError(
            f"{flag}: concurrency levels must be {MIN_CONCURRENCY} or more and at most "
            f"{MAX_CONCURRENCY:,}, like 1,32,64; got {shown(text)}"
        )
    return levels


def request_deadline_s(timeout_s: float, tokens: int) -> float:
    """The most one request asking for ``tokens`` may take: its first ``timeout_s`` seconds
    (connecting, the prompt's prefill, the first token), then ``TOKEN_PACE_S`` a token."""
    return timeout_s + TOKEN_PACE_S * tokens


# -- the request and its defaults -----------------------------------------------------------------


@dataclass(frozen=True)
class BenchDefaults:
    """What a profile's ``bench:`` section gives: the sweep a `bench` runs when it names none."""

    concurrency: tuple[int, ...] = DEFAULT_LEVELS
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    requests: int | None = None  # per level; None means a few times the concurrency
    duration_s: float | None = None


@dataclass(frozen=True)
class BenchRequest:
    """A benchmark as asked for (`bench c=1,32 n=200`, `--bench`, a sweep's words, a tune's level):
    None or empty where the asker said nothing, which the profile's defaults fill (``filled``)."""

    concurrency: tuple[int, ...] = ()  # empty: the profile's levels
    input_len: int | None = None
    output_len: int | None = None
    requests: int | None = None
    duration_s: float | None = None
    timeout_s: float | None = None  # per request; None: the bench client's default
    slo: Slo | None = None  # latency bounds: each level also reports its goodput
    rate: float | None = None  # open loop: Poisson arrivals per second, the levels capping requests in flight

    def filled(self, defaults: BenchDefaults) -> FilledBench:
        """The benchmark that runs: what was asked, the profile's ``defaults`` for the rest. A
        request that sizes its levels one way (n= or t=) does not get the profile's other way too."""
        requests = self.requests
        duration_s = self.duration_s
        if requests is None and duration_s is None:
            requests, duration_s = defaults.requests, defaults.duration_s
        return FilledBench(
            concurrency=self.concurrency or defaults.concurrency,
            input_len=self.input_len or defaults.input_len,
            output_len=self.output_len or defaults.output_len,
            requests=requests,
            duration_s=duration_s,
            timeout_s=self.timeout_s,
            slo=self.slo,
            rate=self.rate,
        )


@dataclass(frozen=True)
class FilledBench:
    """A benchmark with every size it runs with: a ``BenchRequest`` filled from a profile."""

    concurrency: tuple[int, ...]
    input_len: int
    output_len: int
    requests: int | None = None  # per level; with neither this nor duration_s, a few times C
    duration_s: float | None = None
    timeout_s: float | None = None  # per request; None: the bench client's DEFAULT_TIMEOUT_S
    slo: Slo | None = None
    rate: float | None = None
