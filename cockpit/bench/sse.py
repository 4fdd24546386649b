"""A streamed response's bytes into a ``RequestRecord``: the SSE decoding both transports share.

The stream is split on blank lines by hand (as vLLM's ``vllm/benchmarks/lib/endpoint_request_func.py``
does); the time is taken once per read, by the transport, before any parsing, and every event in
that read gets it, so parsing cost never shows up as latency. Plain token events skip
``json.loads`` only where that provably changes nothing (see ``_Stream``): malformed JSON, usage
and error events are still all caught.
"""

from __future__ import annotations

import json
import re
from array import array

from cockpit.bench.transport import Progress, RequestFailed, RequestRecord, error_message
from cockpit.core.benchrequest import MAX_EVENT_BYTES, mib


class SseReader:
    """Splits one stream's bytes into SSE events and records them.

    ``feed`` takes one read's bytes and the time they arrived (taken before any parsing);
    ``finish`` checks the stream ended cleanly. Both raise ``RequestFailed`` with a one-line reason.

    The bytes of an event not ended yet are kept as pieces, joined once when its end comes, so
    an event read in many pieces costs time linear in its size; an event over
    ``MAX_EVENT_BYTES`` (a server that never sends the blank line) fails the request.
    """

    __slots__ = ("record", "progress", "stream", "pending", "pending_bytes", "crlf", "cr")

    def __init__(self, record: RequestRecord, progress: Progress) -> None:
        self.record = record
        self.progress = progress
        self.stream = _Stream(record)
        self.pending: list[bytes] = []  # the unfinished event's pieces, none empty
        self.pending_bytes = 0
        self.crlf = False
        self.cr = False  # the last read ended in a \r: the next may start with its \n

    def feed(self, data: bytes, now: float) -> None:
        record = self.record
        progress = self.progress
        record.reads += 1
        progress.reads += 1
        if self.crlf or b"\r" in data:
            data = self._lf(data)
        if self.pending:
            pending = self.pending
            if b"\n\n" not in data and not (data[:1] == b"\n" and pending[-1][-1:] == b"\n"):
                self._hold(data)  # still inside the event: no join, no split
                return
            data = b"".join(pending) + data
            self.pending, self.pending_bytes = [], 0
        events = data.split(b"\n\n")
        rest = events.pop()
        if rest:
            self._hold(rest)
        if not events:
            return
        progress.events += len(events)
        stream = self.stream
        times = record.chunk_times
        tokens = 0
        # The plain-token test of _Stream.is_plain_token, inlined on whole events: the hot loop.
        head, tail, span = stream.event_head, stream.tail, stream.event_span
        for event in events:
            if head is not None and len(event) > span and event.startswith(head) and event.endswith(tail):
                text = event[len(head) : len(event) - len(tail)]
                if _UNSAFE_IN_STRING.search(text) is None and (text.isascii() or _is_utf8(text)):
                    times.append(now)
                    tokens += 1
                    if record.tokens_in_chunk is not None:
                        record.tokens_in_chunk.append(-1)
                    continue
            if len(event) > MAX_EVENT_BYTES:
                raise RequestFailed(_too_long())
            payload: bytes | None
            if event[:6] == b"data: " and b"\n" not in event:
                payload = event[6:]
            else:
                payload = _data_field(event)
                if payload is None:
                    continue  # a comment or keep-alive
            if stream.parse(payload, now):
                tokens += 1
            head, tail, span = stream.event_head, stream.tail, stream.event_span  # maybe learned now
        if tokens:
            progress.tokens += tokens
            record.last_token = now

    def _lf(self, data: bytes) -> bytes:
        """CRLF line ends as LF, a CRLF split between two reads included."""
        self.crlf = True
        if self.cr:
            data = b"\r" + data
        self.cr = data[-1:] == b"\r"
        if self.cr:
            data = data[:-1]
        return data.replace(b"\r\n", b"\n")

    def _hold(self, piece: bytes) -> None:
        """Keep a piece of the event not ended yet; past the bound, fail the request."""
        if not piece:
            return
        self.pending.append(piece)
        self.pending_bytes += len(piece)
        if self.pending_bytes > MAX_EVENT_BYTES:
            raise RequestFailed(_too_long(ended=False))

    def token_frame(self) -> tuple[bytes, bytes] | None:
        """The bytes around the text of a whole plain token event, ``data: `` and the blank line
        included, while the reader stands between two events with a template learned; None
        otherwise. A transport that sees bytes made of such events alone, each with printable
        ASCII text free of quotes and backslashes (``NOT_PLAIN_ASCII`` finds nothing in it),
        records them with ``add_tokens`` and skips ``feed``: the same result, less work."""
        stream = self.stream
        if self.pending or self.cr or stream.event_head is None:
            return None
        return stream.event_head, stream.event_tail

    def add_tokens(self, count: int, now: float, *, whole_read: bool) -> None:
        """``count`` plain token events that arrived at ``now`` (see ``token_frame``); a
        ``whole_read`` is counted as a read, else the rest of the read goes to ``feed``."""
        record = self.record
        progress = self.progress
        if whole_read:
            record.reads += 1
            progress.reads += 1
        progress.events += count
        progress.tokens += count
        times = record.chunk_times
        if count == 1:
            times.append(now)
        else:
            times.extend([now] * count)
        if record.tokens_in_chunk is not None:
            record.tokens_in_chunk.extend([-1] * count)
        record.last_token = now

    def finish(self) -> None:
        record = self.record
        if b"".join(self.pending).strip():
            raise RequestFailed(f"stream ended inside an event after {record.chunks} chunks")
        if not self.stream.done:
            raise RequestFailed("stream ended without [DONE]")
        self.progress.tokens -= self.stream.drop_empty_extras()
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
    Measured on the 0 ms mock server (perf/mockserver.py) at C=256, one core: ~5.5 instead of
    ~8 us of CPU per token, +25% tok/s (json.loads alone is ~3.5 us for a 170-byte event there).
    """

    __slots__ = (
        "record",
        "done",
        "usage_tokens",
        "head",
        "tail",
        "span",
        "event_head",
        "event_tail",
        "event_span",
        "empty",
    )

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.done = False
        self.usage_tokens = 0  # the running usage count (continuous_usage_stats)
        self.head: bytes | None = None  # None until a template is learned
        self.tail = b""
        self.span = 0
        self.event_head: bytes | None = None  # b"data: " + head: the template on a one-line event
        self.event_tail = b""  # tail + the blank line that ends the event
        self.event_span = 0
        self.empty: list[int] = []  # the chunks (indices) whose text was empty: maybe no tokens

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
            raise RequestFailed(f"malformed JSON in stream: {_clip(payload)}") from None
        if type(obj) is not dict:
            raise RequestFailed(f"malformed JSON in stream: not an object: {_clip(payload)}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        choice = choices[0] if choices and type(choices) is list else None
        text = _output_of(choice)
        token = _is_token(choice)
        if not text and ("error" in obj or obj.get("object") == "error"):
            raise RequestFailed(f"error in stream: {error_message(obj) or _clip(payload)}")
        if token:
            if not text:  # empty text or content, nothing else: maybe no token (drop_empty_extras)
                self.empty.append(len(record.chunk_times))
            record.chunk_times.append(now)
            if record.first_token is None:
                record.first_token = now
            record.last_token = now
        if usage and isinstance(usage.get("completion_tokens"), int):
            tokens = usage["completion_tokens"]
            if token:
                if record.tokens_in_chunk is None:
                    record.tokens_in_chunk = array("l", [-1] * (record.chunks - 1))
                record.tokens_in_chunk.append(tokens - self.usage_tokens)
            self.usage_tokens = tokens
            record.usage_completion_tokens = tokens
            prompt = usage.get("prompt_tokens")
            record.usage_prompt_tokens = prompt if isinstance(prompt, int) else None
        elif token:
            if record.tokens_in_chunk is not None:
                record.tokens_in_chunk.append(-1)
            if self.head is None and text and isinstance(text, str):
                self._learn(payload, text)
        return token

    def drop_empty_extras(self) -> int:
        """Forget the empty chunks that were no tokens, once the stream ended; how many.

        vLLM sends a token whose bytes do not decode yet as an empty chunk, and puts the
        finish_reason on the last token's chunk: its chunks match its usage. Other servers add an
        empty chunk for the finish_reason alone, or one before the first token. Which empty chunks
        were tokens, the usage tells: one whose running count (continuous usage) did not move
        was none, and beyond the total, the last empty ones were none. Without usage, none was."""
        record = self.record
        if not self.empty:
            return 0
        counts = record.tokens_in_chunk
        drop = {i for i in self.empty if counts is not None and counts[i] == 0}
        total = record.usage_completion_tokens
        extra = len(self.empty) if total is None else record.chunks - len(drop) - total
        # The likeliest extras first: empty chunks before any text, then the last ones, then the rest.
        first_text = next((i for i in range(record.chunks) if i not in self.empty), record.chunks)
        leading = [i for i in self.empty if i < first_text]
        rest = [i for i in reversed(self.empty) if i >= first_text]
        for index in leading + rest:
            if extra <= 0:
                break
            if index not in drop:
                drop.add(index)
                extra -= 1
        if not drop:
            return 0
        keep = [i for i in range(record.chunks) if i not in drop]
        record.chunk_times = array("d", [record.chunk_times[i] for i in keep])
        if counts is not None:
            record.tokens_in_chunk = array("l", [counts[i] for i in keep])
        record.first_token = record.chunk_times[0] if keep else None
        record.last_token = record.chunk_times[-1] if keep else None
        return len(drop)

    def _learn(self, payload: bytes, text: str) -> None:
        """Remember the bytes around this event's text literal, if it appears exactly once."""
        for literal in (json.dumps(text).encode(), json.dumps(text, ensure_ascii=False).encode()):
            if payload.count(literal) == 1:
                at = payload.index(literal)
                key = payload[:at].rstrip()
                head, tail = payload[: at + 1], payload[at + len(literal) - 1 :]
                if key.endswith((b'"text":', b'"content":')) and b"\n" not in head + tail:
                    self.head, self.tail = head, tail
                    self.span = len(head) + len(tail)
                    self.event_head = b"data: " + head
                    self.event_tail = tail + b"\n\n"
                    self.event_span = self.span + 6
                return


_UNSAFE_IN_STRING = re.compile(rb'[\x00-\x1f"\\]')
# A byte that is not printable ASCII, or is one of the two a JSON string escapes: text without
# any sits in the template's literal unchanged (the stricter, ASCII-only test of is_plain_token).
NOT_PLAIN_ASCII = re.compile(rb"[^\x20\x21\x23-\x5b\x5d-\x7e]")


def _is_utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_token(choice: object) -> bool:
    """Whether a chunk's choice is a step's output: its text (or chat content) is there, even
    empty, as vLLM sends a token whose bytes do not decode yet or a special token (and as `vllm
    bench serve` counts them: vllm/benchmarks/lib/endpoint_request_func.py, "text could be empty
    here"); or it holds reasoning or tool calls. A chat stream's first chunk, the role with empty
    content, is not a token."""
    if type(choice) is not dict:
        return False
    if isinstance(choice.get("text"), str):
        return True
    delta = choice.get("delta")
    if type(delta) is not dict:
        return False
    content = delta.get("content")
    if isinstance(content, str) and (content or "role" not in delta):
        return True
    return bool(delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"))


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


def _too_long(*, ended: bool = True) -> str:
    """One line for an SSE event over the bound (not its size: the same reason counts once)."""
    where = "an SSE event" if ended else "an SSE event without its end (a blank line)"
    return f"{where} over {mib(MAX_EVENT_BYTES)}: the server's stream is malformed"


def _clip(payload: bytes, limit: int = 60) -> str:
    text = payload.decode("utf-8", "replace").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
