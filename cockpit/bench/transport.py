"""The bench transport contract: what a transport does, what a request leaves behind, how it fails.

A ``Transport`` sends one streaming request per call and reads its SSE stream into a
``RequestRecord``; it never raises for anything the server or the network does. Two implement
it: ``client.AiohttpTransport`` (any URL) and ``rawclient.RawTransport`` (a bare
``asyncio.Protocol``, http:// only, for the lowest stamping error); ``sse.SseReader`` decodes
the stream for both. The load generator sees only this contract, as httpx's
``httpx/_transports/base.py`` keeps one small transport interface behind interchangeable
implementations.

What both transports send (``request_headers``), the three bounds on a request (``Timeouts``)
and every failure text both can give are written here, once; a reason only one part can meet
(a malformed SSE event, broken chunked coding) stays with that part.
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass, field
from typing import Protocol

from cockpit.core.benchrequest import DEFAULT_TIMEOUT_S, MIN_REQUEST_LIMIT_S, TOKEN_PACE_S
from cockpit.core.secrets import redact_text

TIMED_OUT = "timed out after "  # how every timeout's reason starts
ERROR_BODY_LIMIT = 64 * 1024  # the most of an error response's body that is read


@dataclass(eq=False, slots=True)
class RequestRecord:
    """One request as the client saw it; every time is ``time.perf_counter()`` seconds.

    ``chunk_times`` holds the arrival of each content chunk (an SSE event carrying output text),
    stamped when its bytes were read. ``tokens_in_chunk`` is filled only when the server says how
    many tokens each chunk carried (``continuous_usage_stats``); otherwise a chunk carries
    ``output_tokens / chunks`` tokens on average.
    """

    start: float = 0.0  # the request is sent
    end: float = 0.0  # the stream ended, failed or was cancelled
    scheduled: float | None = None  # open loop: when it was due (start - scheduled = client queueing)
    first_token: float | None = None
    last_token: float | None = None
    chunk_times: array[float] = field(default_factory=lambda: array("d"))
    tokens_in_chunk: array[int] | None = None
    usage_completion_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    cancelled: bool = False  # stopped by the load generator (end of a window): not an error
    reads: int = 0  # socket reads that delivered bytes; chunks / reads grows when the client lags

    @property
    def chunks(self) -> int:
        return len(self.chunk_times)

    @property
    def output_tokens(self) -> int:
        """The server's usage count when it sent one, else the content chunks received."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        return self.chunks

    @property
    def token_mismatch(self) -> bool:
        """Usage disagrees with the chunk count: the server coalesces tokens (or drops some)."""
        return self.usage_completion_tokens is not None and self.usage_completion_tokens != self.chunks

    @property
    def ok(self) -> bool:
        return self.error is None and not self.cancelled and self.end > 0


class Progress:
    """Running totals, across every request of a transport, that the load generator reads for its
    once-a-second ticks."""

    __slots__ = ("tokens", "reads", "events")

    def __init__(self) -> None:
        self.tokens = 0
        self.reads = 0
        self.events = 0


class Transport(Protocol):
    """Sends streaming requests to one URL and records them.

    ``request`` stamps ``record.start`` when it sends and ``record.end`` however it ends, and
    fills the record as bytes arrive, so a caller that keeps the record before awaiting still
    has the tokens of a request it cancels. It never raises, except ``asyncio.CancelledError``
    (then ``record.cancelled`` is set and the connection is dropped, so the server aborts the
    request): every other ending is a one-line ``record.error`` from this module's vocabulary.
    Each read also adds to ``progress``.
    """

    @property
    def progress(self) -> Progress: ...

    async def request(self, body: bytes, record: RequestRecord | None = None) -> RequestRecord: ...


def request_headers(api_key: str | None) -> dict[str, str]:
    """The headers of every request: a JSON body, an event stream back, the key as a bearer token
    (the OpenAI API's authentication)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


@dataclass(frozen=True)
class Timeouts:
    """The bounds on one request, in seconds, and the reason each gives when it runs out.

    ``connect_s`` bounds connecting (a listen queue that never accepts); ``read_s`` any wait for
    a token once the request is sent: the first one, and each gap after it. Bytes that carry no
    token (SSE comments, keep-alives, empty events) do not reset it, so a server that only pings
    still fails in ``read_s``. Beyond its first ``read_s``, a request must also keep up with one
    token every ``pace_s`` on average (a stream that trickles ends too), and ``request_s`` bounds
    the whole of it, connecting included.
    """

    request_s: float = MIN_REQUEST_LIMIT_S
    read_s: float = DEFAULT_TIMEOUT_S
    connect_s: float = DEFAULT_TIMEOUT_S
    pace_s: float = TOKEN_PACE_S

    def __post_init__(self) -> None:  # connecting can never outlast the whole request
        object.__setattr__(self, "connect_s", min(self.connect_s, self.request_s))

    @classmethod
    def of(cls, request_s: float, read_s: float, connect_s: float | None = None) -> Timeouts:
        """Connecting is bounded like a read unless told otherwise, and never beyond the request."""
        return cls(request_s, read_s, read_s if connect_s is None else connect_s)

    def connecting(self) -> str:
        return f"{TIMED_OUT}{self.connect_s:g} s (connecting)"

    def no_bytes(self) -> str:
        return f"{TIMED_OUT}{self.read_s:g} s (no bytes)"

    def no_token(self) -> str:
        """Bytes came, but none was a token: pings and comments do not keep a request alive."""
        return f"{TIMED_OUT}{self.read_s:g} s (no token, only keep-alives)"

    def too_slow(self) -> str:
        return f"{TIMED_OUT}{self.read_s:g} s + {self.pace_s:g} s a token (the stream fell behind)"

    def paced_until(self, sent: float, tokens: int) -> float:
        """When a request sent at ``sent`` that has ``tokens`` so far is too slow."""
        return sent + self.read_s + self.pace_s * tokens

    def silent(self, sent: float, record: RequestRecord, body_at: float, now: float) -> str | None:
        """Why the request must end at ``now`` for lack of tokens; None while it may go on.
        ``body_at``: when bytes of the response body last came (pings and comments too)."""
        progress = max(sent, record.last_token or 0.0)
        if now - progress >= self.read_s:
            return self.no_token() if body_at > progress else self.no_bytes()
        if now >= self.paced_until(sent, record.chunks):
            return self.too_slow()
        return None

    def next_check(self, sent: float, record: RequestRecord) -> float:
        """The next instant ``silent`` may say to stop, if no token comes before it."""
        progress = max(sent, record.last_token or 0.0)
        return min(progress + self.read_s, self.paced_until(sent, record.chunks))

    def request_limit(self) -> str:
        return f"{TIMED_OUT}{self.request_s:g} s (request limit)"


DEFAULT_TIMEOUTS = Timeouts()


# -- failures ---------------------------------------------------------------------------------------


class RequestFailed(Exception):
    """Ends a request with a one-line reason: the record's ``error``."""


def is_timeout(error: str | None) -> bool:
    """A request's error says the server stayed silent for a whole bound."""
    return error is not None and error.startswith(TIMED_OUT)


def http_error(status: int, message: str) -> str:
    return f"HTTP {status}: {message}"


def check_event_stream(content_type: str) -> None:
    """A 200 answer must be an event stream: JSON means the server ignored ``stream: true``."""
    if "text/event-stream" not in content_type:
        kind = content_type or "no content type"
        raise RequestFailed(f"HTTP 200 without a stream ({kind}): the server ignored stream=true")


def cannot_connect(error: OSError) -> str:
    """ "Connection refused", not asyncio's "Connect call failed ('127.0.0.1', 8000)"."""
    reason = os.strerror(error.errno) if error.errno else (error.strerror or str(error))
    return f"cannot connect: {reason}"


def connection_dropped(record: RequestRecord) -> str:
    if record.status is None:
        return "connection dropped before the response"
    return f"connection dropped after {record.chunks} chunks"


def client_bug(error: BaseException) -> str:
    """An exception no reason above foresaw: still one line, never a crash."""
    return f"client bug: {type(error).__name__}: {first_line(str(error))}"


def error_text(raw: bytes, reason: str | None) -> str:
    """One line from an error body: OpenAI's {"error": {"message"}}, vLLM's {"message"}, or its
    text; the status line's reason phrase if it has none."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return first_line(raw.decode("utf-8", "replace")) or reason or "no body"
    return error_message(obj) or first_line(raw.decode("utf-8", "replace"))


def error_message(obj: object) -> str:
    """The message of a JSON error object (a body, or an error event in a stream); "" if none."""
    if not isinstance(obj, dict):
        return ""
    error = obj.get("error")
    if isinstance(error, dict):
        return first_line(str(error.get("message") or ""))
    if isinstance(error, str):
        return first_line(error)
    return first_line(str(obj.get("message") or obj.get("detail") or ""))


def first_line(text: str, limit: int = 200) -> str:
    """The first line of a failure's text, cut, with any URL password or bearer token in it
    blanked: a reason is printed and journaled."""
    text = text[: 16 * limit]
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = redact_text(line)
    return line if len(line) <= limit else line[: limit - 3] + "..."
