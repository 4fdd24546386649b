"""One simulated request's response bytes, rendered once, and the sinks the batcher hands tokens to.

The text the simulator "generates" is a fixed cycle of words, so a stream's SSE events differ
only by the word and whether it is the last one: each distinct event is rendered (and framed for
HTTP/1.1 chunked transfer coding, or left bare for HTTP/1.0) once per request, then reused for
every later token. A
streaming request's ``SseStream`` is the batcher's ``TokenSink``: called synchronously as a step
ends, it writes that step's frame to the connection in one ``transport.write`` (the chat role
event rides with the first token, usage and ``[DONE]`` with the last), with no task wake-up, no
queue and no JSON encoding per token, and notes the true time of each write for /cockpit/truth.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from cockpit.engines.surface import EngineSurface

from .batcher import BatcherClosed

WORDS = (
    " the",
    " model",
    " runs",
    " on",
    " eight",
    " GPUs",
    " with",
    " expert",
    " parallel",
    " and",
    " tensor",
    " shards",
    ",",
    " so",
    " tokens",
    " flow",
    ".",
)
"""What the sim "generates": token at position i is WORDS[i % len(WORDS)]."""

DONE_EVENT = b"data: [DONE]\n\n"


def text_of(tokens: int) -> str:
    """The text of the first ``tokens`` tokens."""
    return "".join(WORDS[position % len(WORDS)] for position in range(tokens))


def is_last(position: int, max_tokens: int) -> bool:
    """Whether the token at ``position`` ends a request of ``max_tokens`` (the sim has no EOS)."""
    return position + 1 >= max_tokens


def chunk_frame(payload: bytes) -> bytes:
    """``payload`` as one chunk of HTTP/1.1 chunked transfer coding (RFC 9112, section 7.1),
    framed as aiohttp frames each ``StreamResponse.write``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))  # compact, as pydantic writes it


@dataclass(frozen=True)
class Ask:
    """A validated generation request."""

    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    request_id: str | None = None  # the client's X-Request-Id, which vLLM takes for the id


_ID_HOLE = "\x00id\x00"
_TEXT_HOLE = "\x00text\x00"
_WORDS_JSON = tuple(dumps(word).encode() for word in WORDS)


def _choice(
    chat: bool,
    text: str,
    finish: str | None,
    *,
    delta: dict[str, str] | None = None,
    extended: bool = True,
) -> dict[str, Any]:
    """A streamed choice. Extended, as vLLM's (vllm/entrypoints/openai/completion/serving.py and
    chat_completion/serving.py, dumped with exclude_unset): a completion's carries stop_reason,
    prompt_token_ids and token_ids, null; a chat token's token_ids, and stop_reason only on the
    one that finishes; the chat role's neither. Plain: stop_reason on every one."""
    if chat:
        body: dict[str, Any] = {"index": 0, "delta": delta if delta is not None else {"content": text}}
    else:
        body = {"index": 0, "text": text}
    if not extended:
        return {**body, "logprobs": None, "finish_reason": finish, "stop_reason": None}
    body = {**body, "logprobs": None, "finish_reason": finish}
    if not chat:
        return {**body, "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
    if delta is not None:  # the role
        return body
    if finish is not None:
        body["stop_reason"] = None
    return {**body, "token_ids": None}


def _head(chat: bool, request_id: str, created: int, model_id: str) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model_id,
    }


def _tail(last: bool, include_usage: bool, fingerprint: str | None) -> dict[str, Any]:
    """The system_fingerprint, where the engine has one (vLLM), goes on the finishing chunk when
    no usage chunk follows."""
    if last and not include_usage and fingerprint is not None:
        return {"system_fingerprint": fingerprint}
    return {}


@functools.lru_cache(maxsize=32)
def _token_templates(
    chat: bool, model_id: str, created: int, extended: bool = True, fingerprint: str | None = None
) -> tuple[tuple[bytes, bytes, bytes], ...]:
    """A token event of any request of this shape and second, cut around its id and its text:
    (before the id, between id and text, after the text), for not-last and last (without and
    with the fingerprint vLLM puts on the last when no usage chunk follows). Rendered once per
    second per shape, not per request."""
    pieces = []
    for last, tail in ((False, {}), (True, {}), (True, _tail(True, False, fingerprint))):
        head = _head(chat, _ID_HOLE, created, model_id)
        choice = _choice(chat, _TEXT_HOLE, "length" if last else None, extended=extended)
        event = b"data: " + dumps({**head, "choices": [choice], **tail}).encode()
        before_id, rest = event.split(dumps(_ID_HOLE).encode())
        between, after = rest.split(dumps(_TEXT_HOLE).encode())
        pieces.append((before_id, between, after + b"\n\n"))
    return tuple(pieces)


class Chunks:
    """Renders one request's response objects as the engine does; token events are cut from a
    template shared by every request of the same second, and each distinct one is framed once.

    ``chunked``: whether the response body goes in HTTP/1.1 chunks. aiohttp chunks a body of
    unknown length exactly when the request is HTTP/1.1; an HTTP/1.0 body is sent bare and ended
    by closing the connection (aiohttp/web_response.py, ``StreamResponse._prepare_headers``).
    ``api``: the engine's surface, which says the shapes (response_fields, request ids).
    ``fingerprint``: its system_fingerprint, where it has one (vllm/entrypoints/serve/utils/fingerprint.py).
    """

    def __init__(
        self,
        ask: Ask,
        model_id: str,
        api: EngineSurface,
        chunked: bool = True,
        fingerprint: str | None = None,
    ) -> None:
        self.ask = ask
        self.chunked = chunked
        self.extended = api.response_fields == "extended"
        self.fingerprint = fingerprint if api.system_fingerprint else None
        created = int(time.time())
        kind = "chatcmpl" if ask.chat else "cmpl"
        request_id = f"{kind}-{_request_id(api, ask.request_id)}"
        self.head = _head(ask.chat, request_id, created, model_id)
        quoted_id = dumps(request_id).encode()
        templates = _token_templates(ask.chat, model_id, created, self.extended, self.fingerprint)
        last = 2 if not ask.include_usage else 1
        self._templates = tuple(
            (before_id + quoted_id + between, after)
            for before_id, between, after in (templates[0], templates[last])
        )
        self._frames: list[bytes | None] = [None] * (2 * len(WORDS))  # (word, last) -> framed event

    def _choice(
        self, text: str, finish: str | None, *, delta: dict[str, str] | None = None
    ) -> dict[str, Any]:
        return _choice(self.ask.chat, text, finish, delta=delta, extended=self.extended)

    def _event(
        self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None, **extra: Any
    ) -> bytes:
        obj: dict[str, Any] = {**self.head, "choices": choices}
        if usage is not None:
            obj["usage"] = usage
        obj.update(extra)
        return b"data: " + dumps(obj).encode() + b"\n\n"

    def _usage(self, completion_tokens: int, *, chunk: bool = True) -> dict[str, Any]:
        """UsageInfo. Extended, as vLLM's: prompt, total, completion tokens, and on a chat chunk's
        continuous usage completion_tokens_details, null. Plain, as SGLang's: prompt, completion, total."""
        prompt = self.ask.prompt_tokens
        if not self.extended:
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            }
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        if chunk and self.ask.chat:
            usage["completion_tokens_details"] = None
        return usage

    def role(self) -> bytes:
        """A chat stream's first event: the assistant's role, no content yet (vLLM: with the
        prompt's token ids and text, null, on this first chunk only)."""
        usage = self._usage(0) if self.ask.continuous_usage else None
        choice = self._choice("", None, delta={"role": "assistant", "content": ""})
        if self.extended:
            return self._event([choice], usage, prompt_token_ids=None, prompt_text=None)
        return self._event([choice], usage)

    def token(self, position: int) -> bytes:
        """The event of the token at ``position``."""
        last = is_last(position, self.ask.max_tokens)
        word = WORDS[position % len(WORDS)]
        if self.ask.continuous_usage:
            tail = _tail(last, self.ask.include_usage, self.fingerprint)
            return self._event(
                [self._choice(word, "length" if last else None)], self._usage(position + 1), **tail
            )
        before, after = self._templates[last]
        return before + _WORDS_JSON[position % len(WORDS)] + after

    def frame(self, event: bytes) -> bytes:
        """``event`` as it goes on the wire: a chunk, or bare on an HTTP/1.0 connection."""
        return chunk_frame(event) if self.chunked else event

    def token_frame(self, position: int) -> bytes:
        """The token's event on the wire (``frame``): rendered once per distinct (word, last)."""
        if self.ask.continuous_usage:  # every event has its own usage: nothing repeats
            return self.frame(self.token(position))
        slot = position % len(WORDS) + (len(WORDS) if is_last(position, self.ask.max_tokens) else 0)
        frame = self._frames[slot]
        if frame is None:
            frame = self._frames[slot] = self.frame(self.token(position))
        return frame

    def usage(self) -> bytes:
        """The last event before [DONE] when usage is asked for (vLLM: with its fingerprint, nulls left out)."""
        usage = self._usage(self.ask.max_tokens, chunk=False)
        if self.fingerprint is not None:
            return self._event([], usage, system_fingerprint=self.fingerprint)
        return self._event([], usage)

    def whole(self, text: str) -> dict[str, Any]:
        """The non-streaming response object (extended, as vLLM's: every field of its
        CompletionResponse or ChatCompletionResponse, nulls included)."""
        if not self.extended:
            return self._plain_whole(text)
        usage = {
            **self._usage(self.ask.max_tokens, chunk=False),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }
        if self.ask.chat:
            message = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
            extra: dict[str, Any] = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
            extra = {}
        return {
            **self.head,
            "object": "chat.completion" if self.ask.chat else "text_completion",
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": self.fingerprint,
            "usage": usage,
            **extra,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    def _plain_whole(self, text: str) -> dict[str, Any]:
        if self.ask.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
            kind = "chat.completion"
        else:
            choice = self._choice(text, "length")
            kind = "text_completion"
        return {**self.head, "object": kind, "choices": [choice], "usage": self._usage(self.ask.max_tokens)}


def _request_id(api: EngineSurface, client_id: str | None) -> str:
    """What follows "cmpl-": the client's X-Request-Id where the engine takes it, else random hex
    digits (vLLM's random_uuid, vllm/utils/__init__.py: 16; SGLang's uuid4().hex: 32)."""
    if api.client_request_id and client_id is not None:
        return client_id
    digits = api.request_id_digits
    return f"{random.getrandbits(4 * digits):0{digits}x}"


class _Ends:
    """A sink's end: ``done`` resolves once, with None (all sent) or the error that cut it short.
    ``first_at`` and ``last_at``: when its first and last tokens came (perf_counter), for the
    engine's latency histograms."""

    __slots__ = ("done", "first_at", "last_at")

    def __init__(self) -> None:
        self.done: asyncio.Future[BatcherClosed | None] = asyncio.get_running_loop().create_future()
        self.first_at: float | None = None
        self.last_at: float | None = None

    def end(self, error: BatcherClosed | None) -> None:
        if not self.done.done():
            self.done.set_result(error)


class SseStream(_Ends):
    """A streaming request's ``TokenSink``: each step's frame written straight to the connection.

    Frames wait in ``pending`` until ``attach`` gives the connection (after the headers). A
    connection that is closing gets nothing more; the handler's cancellation frees the batch slot.
    """

    __slots__ = (
        "chunks",
        "closing",
        "gaps_s",
        "last_write",
        "max_tokens",
        "opening",
        "pending",
        "received",
        "transport",
        "ttft_s",
    )

    def __init__(
        self,
        chunks: Chunks,
        ttft_s: deque[tuple[float, float]],
        gaps_s: deque[tuple[float, float]],
        received: float,
    ) -> None:
        ask = chunks.ask
        self.chunks = chunks
        self.max_tokens = ask.max_tokens
        self.opening = chunks.frame(chunks.role()) if ask.chat else b""
        self.closing = (chunks.frame(chunks.usage()) if ask.include_usage else b"") + chunks.frame(DONE_EVENT)
        self.ttft_s, self.gaps_s, self.received = ttft_s, gaps_s, received
        self.last_write = 0.0
        self.transport: asyncio.WriteTransport | None = None
        self.pending = b""
        super().__init__()

    def attach(self, transport: asyncio.WriteTransport) -> None:
        self.transport = transport
        if self.pending and not transport.is_closing():
            transport.write(self.pending)
        self.pending = b""

    def token(self, position: int) -> None:
        frame = self.chunks.token_frame(position)
        if position == 0:
            frame = self.opening + frame
        if is_last(position, self.max_tokens):
            frame += self.closing
        transport = self.transport
        if transport is None:
            self.pending += frame
        elif transport.is_closing():
            return  # the client left: the handler's cancellation frees the slot
        else:
            transport.write(frame)
        now = time.perf_counter()
        if position == 0:
            self.ttft_s.append((self.received, now - self.received))
            self.first_at = now
        else:
            self.gaps_s.append((self.last_write, now - self.last_write))
        self.last_write = self.last_at = now


class Whole(_Ends):
    """A non-streaming request's ``TokenSink``: nothing to do per token, the text comes at the end."""

    __slots__ = ()

    def token(self, position: int) -> None:
        if position == 0:
            self.first_at = time.perf_counter()

    def end(self, error: BatcherClosed | None) -> None:
        self.last_at = time.perf_counter()
        super().end(error)
