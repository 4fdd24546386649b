"""The streaming hot path: one request, read as SSE, stamped as bytes arrive, never raising.

aiohttp rather than httpx: httpx costs ~3x the CPU per streamed token and saturates one core
at ~200 streams (bench.md 2.2-2.3). The stream is read with ``iter_any()`` and split on blank
lines by hand; the time is taken once per read, before any parsing, and every event in that
read gets it, so parsing cost never shows up as latency. Plain token events skip
``json.loads`` only where that provably changes nothing (see ``_Stream``): malformed JSON, usage
and error events are still all caught.

A request ends in a ``RequestRecord`` whatever happens: an HTTP error, malformed JSON, a
dropped connection or a silent server become a one-line ``error``, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from array import array
from dataclasses import dataclass, field
from time import perf_counter

import aiohttp

READ_BUFSIZE = (
    1 << 20
)  # above aiohttp's default: a small one throttled vLLM's bench at long contexts (vllm#39963)
ERROR_BODY_LIMIT = 64 * 1024
_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", ())  # aiohttp >= 3.10
TIMED_OUT = "timed out after "  # how every timeout's reason starts, in both transports


def os_reason(exc: OSError) -> str:
    """ "Connection refused", not asyncio's "Connect call failed ('127.0.0.1', 8000)"."""
    return os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))


def is_timeout(record: RequestRecord) -> bool:
    """The request failed because the server stayed silent for a whole bound."""
    return record.error is not None and record.error.startswith(TIMED_OUT)


@dataclass(eq=False)
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
    chunk_times: array = field(default_factory=lambda: array("d"))
    tokens_in_chunk: array | None = None
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
    """Running totals the load generator reads for its once-a-second ticks."""

    __slots__ = ("tokens", "reads", "events")

    def __init__(self) -> None:
        self.tokens = 0
        self.reads = 0
        self.events = 0


class _Failed(Exception):
    """Ends a stream with a one-line reason."""


def new_session() -> aiohttp.ClientSession:
    """One session for a whole sweep: unlimited keep-alive connections, one per stream in flight."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE)


class Client:
    """Sends streaming requests to one URL and records them."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        api_key: str | None = None,
        request_timeout_s: float = 3600.0,
        read_timeout_s: float = 600.0,
        connect_timeout_s: float | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.session = session
        self.url = url
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.request_timeout_s = request_timeout_s
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = min(
            read_timeout_s if connect_timeout_s is None else connect_timeout_s, request_timeout_s
        )
        # sock_connect: a listen queue that never accepts; sock_read: no bytes for read_timeout_s
        # (the headers included); total bounds the whole of it.
        self.timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_read=read_timeout_s, sock_connect=self.connect_timeout_s
        )
        self.progress = progress if progress is not None else Progress()

    async def request(self, body: bytes, record: RequestRecord | None = None) -> RequestRecord:
        """Send ``body`` and read its stream into ``record``; only cancellation propagates.

        The caller may keep ``record`` before awaiting, so a request cancelled at the end of a
        window still contributes the tokens it received inside the window.
        """
        record = record if record is not None else RequestRecord()
        record.start = perf_counter()
        try:
            async with self.session.post(
                self.url, data=body, headers=self.headers, timeout=self.timeout
            ) as resp:
                record.status = resp.status
                if resp.status != 200:
                    raise _Failed(f"HTTP {resp.status}: {await _error_message(resp)}")
                kind = resp.headers.get("Content-Type", "")
                if "text/event-stream" not in kind:
                    kind = kind or "no content type"
                    raise _Failed(f"HTTP 200 without a stream ({kind}): the server ignored stream=true")
                await self._read_stream(resp, record)
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        except _Failed as failure:
            record.error = str(failure)
        except Exception as exc:
            record.error = self._reason(exc, record)
        finally:
            record.end = perf_counter()
        return record

    async def _read_stream(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        reader = SseReader(record, self.progress)
        feed = reader.feed
        async for data in resp.content.iter_any():
            feed(data, perf_counter())  # stamped before any parsing: every event of this read arrived now
        reader.finish()

    def _reason(self, exc: Exception, record: RequestRecord) -> str:
        """One line for a failure aiohttp raised."""
        if isinstance(exc, _CONNECT_TIMEOUT):
            return f"{TIMED_OUT}{self.connect_timeout_s:g} s (connecting)"
        if isinstance(exc, aiohttp.ServerTimeoutError):  # sock_read: no bytes for read_timeout_s
            return f"{TIMED_OUT}{self.read_timeout_s:g} s (no bytes)"
        if isinstance(exc, asyncio.TimeoutError):
            return f"{TIMED_OUT}{self.request_timeout_s:g} s (request limit)"
        if isinstance(exc, aiohttp.ClientConnectorError):
            return f"cannot connect: {os_reason(exc.os_error)}"
        if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionError)):
            if record.status is None:
                return "connection dropped before the response"
            return f"connection dropped after {record.chunks} chunks"
        if isinstance(exc, aiohttp.ClientError):
            return f"{type(exc).__name__}: {_first_line(str(exc))}"
        return f"client bug: {type(exc).__name__}: {_first_line(str(exc))}"


class SseReader:
    """Splits a stream's bytes into SSE events and records them: shared by both transports.

    ``feed`` takes one read's bytes and the time they arrived (taken before any parsing);
    ``finish`` checks the stream ended cleanly. Both raise ``_Failed`` with a one-line reason.
    """

    __slots__ = ("record", "progress", "stream", "pending", "crlf")

    def __init__(self, record: RequestRecord, progress: Progress) -> None:
        self.record = record
        self.progress = progress
        self.stream = _Stream(record)
        self.pending = b""
        self.crlf = False

    def feed(self, data: bytes, now: float) -> None:
        record = self.record
        progress = self.progress
        stream = self.stream
        times = record.chunk_times
        record.reads += 1
        progress.reads += 1
        if self.crlf or b"\r" in data:
            self.crlf = True
            data = data.replace(b"\r\n", b"\n")
        if self.pending:
            data = self.pending + data
        events = data.split(b"\n\n")
        self.pending = events.pop()
        progress.events += len(events)
        for event in events:
            if event[:6] == b"data: " and b"\n" not in event:
                payload = event[6:]
            else:
                payload = _data_field(event)
                if payload is None:
                    continue  # a comment or keep-alive
            if stream.is_plain_token(payload):
                times.append(now)
                progress.tokens += 1
                record.last_token = now
                if record.tokens_in_chunk is not None:
                    record.tokens_in_chunk.append(-1)
            elif stream.parse(payload, now):
                progress.tokens += 1

    def finish(self) -> None:
        record = self.record
        if self.pending.strip():
            raise _Failed(f"stream ended inside an event after {record.chunks} chunks")
        if not self.stream.done:
            raise _Failed("stream ended without [DONE]")
        if record.usage_completion_tokens is not None:
            self.progress.tokens += record.usage_completion_tokens - record.chunks
        _check_chunk_tokens(record)


class _Stream:
    """One stream's parsing state, and the shortcut that skips json.loads for plain token events.

    The first plain token event (output text, no usage) is parsed in full and becomes a
    template: its bytes before and after the text's string literal. A later event with the same
    bytes around a string literal holding no quote, backslash or control character is valid JSON
    of the same shape with other text, so it is a token: no parse needed. Anything else (the last
    chunk with its finish_reason, usage, errors, escaped text, garbage) takes the full parse.
    Measured on the 0 ms mock server at C=256, one core: ~5.5 instead of ~8 us of CPU per token,
    +25% tok/s (json.loads alone is ~3.5 us for a 170-byte event on that machine).
    """

    __slots__ = ("record", "done", "usage_tokens", "head", "tail", "span")

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.done = False
        self.usage_tokens = 0  # the running usage count (continuous_usage_stats)
        self.head = self.tail = None
        self.span = 0

    def is_plain_token(self, payload: bytes) -> bool:
        head, tail = self.head, self.tail
        if (
            head is None
            or len(payload) <= self.span
            or not payload.startswith(head)
            or not payload.endswith(tail)
        ):
            return False
        text = payload[len(head) : len(payload) - len(tail)]
        return _UNSAFE_IN_STRING.search(text) is None and (text.isascii() or _is_utf8(text))

    def parse(self, payload: bytes, now: float) -> bool:
        """The full parse; True when the event is a content chunk (and was recorded)."""
        record = self.record
        if payload == b"[DONE]":
            self.done = True
            return False
        try:
            obj = json.loads(payload)
        except ValueError:
            raise _Failed(f"malformed JSON in stream: {_clip(payload)}") from None
        if type(obj) is not dict:
            raise _Failed(f"malformed JSON in stream: not an object: {_clip(payload)}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        text = _output_of(choices[0]) if choices and type(choices) is list else None
        if not text and ("error" in obj or obj.get("object") == "error"):
            raise _Failed(f"error in stream: {_message(obj) or _clip(payload)}")
        if text:
            record.chunk_times.append(now)
            if record.first_token is None:
                record.first_token = now
            record.last_token = now
        if usage and isinstance(usage.get("completion_tokens"), int):
            tokens = usage["completion_tokens"]
            if text:
                if record.tokens_in_chunk is None:
                    record.tokens_in_chunk = array("l", [-1] * (record.chunks - 1))
                record.tokens_in_chunk.append(tokens - self.usage_tokens)
            self.usage_tokens = tokens
            record.usage_completion_tokens = tokens
            prompt = usage.get("prompt_tokens")
            record.usage_prompt_tokens = prompt if isinstance(prompt, int) else None
        elif text:
            if record.tokens_in_chunk is not None:
                record.tokens_in_chunk.append(-1)
            if self.head is None and isinstance(text, str):
                self._learn(payload, text)
        return bool(text)

    def _learn(self, payload: bytes, text: str) -> None:
        """Remember the bytes around this event's text literal, if it appears exactly once."""
        for literal in (json.dumps(text).encode(), json.dumps(text, ensure_ascii=False).encode()):
            if payload.count(literal) == 1:
                at = payload.index(literal)
                key = payload[:at].rstrip()
                if key.endswith((b'"text":', b'"content":')):
                    self.head, self.tail = payload[: at + 1], payload[at + len(literal) - 1 :]
                    self.span = len(self.head) + len(self.tail)
                return


_UNSAFE_IN_STRING = re.compile(rb'[\x00-\x1f"\\]')


def _is_utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _output_of(choice: object) -> object:
    """A choice's output: completion text, chat content, reasoning or tool calls (falsy if none).

    A chat stream's role-only first chunk carries none and is not a token.
    """
    if type(choice) is not dict:
        return None
    if choice.get("text"):
        return choice["text"]
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    if delta.get("content"):
        return delta["content"]
    return delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")


def _check_chunk_tokens(record: RequestRecord) -> None:
    """Keep per-chunk token counts only if every chunk had one and they add up to usage."""
    counts = record.tokens_in_chunk
    if counts is None:
        return
    if len(counts) != record.chunks or min(counts, default=0) < 0 or sum(counts) != record.output_tokens:
        record.tokens_in_chunk = None


def _data_field(event: bytes) -> bytes | None:
    """The data of a general SSE event: its ``data:`` lines joined; None if it has none."""
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


async def _error_message(resp: aiohttp.ClientResponse) -> str:
    """The message of an error body: OpenAI's {"error": {"message"}}, vLLM's {"message"}, or text."""
    try:
        raw = await resp.content.read(ERROR_BODY_LIMIT)
    except Exception:
        return resp.reason or "no body"
    return error_text(raw, resp.reason)


def error_text(raw: bytes, reason: str | None) -> str:
    """One line from an error body (see ``_error_message``); the reason phrase if it has none."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return _first_line(raw.decode("utf-8", "replace")) or reason or "no body"
    return _message(obj) or _first_line(raw.decode("utf-8", "replace"))


def _message(obj: object) -> str:
    if not isinstance(obj, dict):
        return ""
    error = obj.get("error")
    if isinstance(error, dict):
        return _first_line(str(error.get("message") or ""))
    if isinstance(error, str):
        return _first_line(error)
    return _first_line(str(obj.get("message") or obj.get("detail") or ""))


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _clip(payload: bytes, limit: int = 60) -> str:
    text = payload.decode("utf-8", "replace").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
