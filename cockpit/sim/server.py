"""The OpenAI-compatible HTTP face of the simulated engine, shaped like vLLM's and SGLang's.

Clients (tests, the benchmark, people with curl) cannot tell it from the real servers on the
paths they use: the same routes, the same SSE chunks, usage and error bodies. Tokens are paced
by a ``Batcher``; their text is a fixed cycle of word-like pieces, so output is deterministic.
Prompt lengths are estimated without a tokenizer (about four characters a token). aiohttp
parses requests and sends headers; a stream's events are written by its ``frames.SseStream``,
which the batcher calls as each step ends (docs/simulator.md#keeping-the-clock).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any

from aiohttp import HttpVersion11, web

from .batcher import Batcher, BatcherClosed
from .frames import Ask, Chunks, SseStream, Whole, dumps, text_of
from .pacing import summary_ms

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}
DEFAULT_MAX_TOKENS = 16


@dataclass
class _Served:
    """What the app serves, kept on the app under STATE."""

    model_id: str
    engine: str
    batcher: Batcher
    max_model_len: int
    model_path: str | None
    created: int
    prompt_tokens_total: int = 0
    truth: _Truth = field(default_factory=lambda: _Truth())
    # SGLang counts tokens when a request finishes: is_streaming -> [prompt, generated]
    finished_tokens: dict[bool, list[int]] = field(default_factory=lambda: {False: [0, 0], True: [0, 0]})
    last_scrape: tuple[float, int] = (0.0, 0)  # (perf_counter, tokens out) at the last /metrics


class _Truth:
    """What the engine really did, per request: request received to first token written (TTFT)
    and the gaps between a stream's writes (ITL), each with when it started (``perf_counter``,
    one clock for every process on the machine). Clients are checked against it."""

    def __init__(self, keep: int = 100_000):
        self.ttft_s: deque[tuple[float, float]] = deque(maxlen=keep)  # (received, seconds)
        self.gaps_s: deque[tuple[float, float]] = deque(maxlen=keep)  # (previous write, seconds)

    def summary(self, since: float = -math.inf) -> dict[str, Any]:
        """Over the requests received (and the gaps begun) at ``since`` or later: a client's
        measured window, without its warm-up."""
        return {
            "ttft_ms": summary_ms(s for t, s in self.ttft_s if t >= since),
            "itl_ms": summary_ms(s for t, s in self.gaps_s if t >= since),
        }

    def reset(self) -> None:
        self.ttft_s.clear()
        self.gaps_s.clear()


STATE = web.AppKey("cockpit_sim_served", _Served)


class ApiError(Exception):
    """A request the engine refuses; rendered as vLLM's ErrorResponse."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


def error_body(status: int, message: str, err_type: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": status}


def text_tokens(text: str) -> int:
    """Tokens in a text without a tokenizer: about four characters each."""
    return math.ceil(len(text) / 4)


def make_app(
    *,
    model_id: str,
    engine: str,
    batcher: Batcher,
    max_model_len: int,
    model_path: str | None = None,
    api_key: str | Seq[str] | None = None,
    metrics: bool = True,
) -> web.Application:
    """The OpenAI-compatible app; it closes ``batcher`` on shutdown so open streams end.
    With ``api_key`` (one key or several, as vLLM takes), requests need ``Authorization: Bearer``.
    ``metrics``: serve /metrics (SGLang only with --enable-metrics, sglang/srt/entrypoints/http_server.py)."""
    if engine not in DEFAULT_PORTS:
        raise ValueError(f"engine must be one of {sorted(DEFAULT_PORTS)}, got {engine!r}")
    keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    middlewares = [_errors_as_json]
    if any(keys):
        middlewares.insert(0, _require_key(engine, tuple(k for k in keys if k)))
    app = web.Application(middlewares=middlewares)
    app[STATE] = _Served(model_id, engine, batcher, max_model_len, model_path, int(time.time()))
    app.router.add_get("/health", _health)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    if metrics:
        app.router.add_get("/metrics", _metrics)
    app.router.add_get("/cockpit/truth", _truth)
    if engine == "sglang":
        app.router.add_get("/get_model_info", _model_info)
    app.on_shutdown.append(_close_batcher)
    return app


async def serve(app: web.Application, host: str = "127.0.0.1", port: int | None = None) -> web.AppRunner:
    """Listen on ``host`` only; port None is the engine's default, 0 a free one.

    Returns the runner: ``runner.addresses[0][1]`` is the port, ``await runner.cleanup()`` stops.
    Handlers are cancelled when their client disconnects, so even a request still queued in
    the batcher gives its place back.
    """
    if port is None:
        port = DEFAULT_PORTS[app[STATE].engine]
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _close_batcher(app: web.Application) -> None:
    await app[STATE].batcher.close()


@web.middleware
async def _errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as JSON, as FastAPI's handlers in vLLM do, never as an HTML page."""
    try:
        return await handler(request)
    except ApiError as err:
        return web.json_response(error_body(err.status, err.message, err.err_type), status=err.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        body = error_body(exc.status, exc.reason, exc.reason)
        return web.json_response(body, status=exc.status, headers=headers)


# vLLM guards these prefixes only (/health, /metrics, /ping stay open); SGLang guards every
# path but health, readiness and metrics probes. Both let OPTIONS through, both answer 401 so.
_VLLM_GUARDED = ("/v1", "/v2", "/inference", "/cohere")
_SGLANG_OPEN = ("/health", "/ready", "/metrics")
UNAUTHORIZED = {"error": "Unauthorized"}


def _require_key(engine: str, keys: tuple[str, ...]) -> Any:
    """The engines' API-key middleware: a missing or wrong bearer token gets 401."""
    digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    def guarded(path: str) -> bool:
        if engine == "vllm":
            return path.startswith(_VLLM_GUARDED)
        return not path.startswith(_SGLANG_OPEN)

    def allowed(header: str | None) -> bool:
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        return any([hmac.compare_digest(digest, d) for d in digests])  # a list: compare every key, always

    @web.middleware
    async def require_key(request: web.Request, handler: Any) -> web.StreamResponse:
        if (
            request.method != "OPTIONS"
            and guarded(request.path)
            and not allowed(request.headers.get("Authorization"))
        ):
            return web.json_response(UNAUTHORIZED, status=401)
        return await handler(request)

    return require_key


# -- plain endpoints ---------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _models(request: web.Request) -> web.Response:
    served = request.app[STATE]
    card = {
        "id": served.model_id,
        "object": "model",
        "created": served.created,
        "owned_by": served.engine,
        "root": served.model_path or served.model_id,
        "parent": None,
        "max_model_len": served.max_model_len,
    }
    return web.json_response({"object": "list", "data": [card]})


async def _model_info(request: web.Request) -> web.Response:
    served = request.app[STATE]
    path = served.model_path or served.model_id
    return web.json_response({"model_path": path, "tokenizer_path": path, "is_generation": True})


async def _metrics(request: web.Request) -> web.Response:
    """Prometheus text under the engine's own names and labels, driven by the batcher (see
    docs/metrics.md): what cockpit's engine line and the benchmark read from a real engine."""
    served = request.app[STATE]
    families = _vllm_metrics(served) if served.engine == "vllm" else _sglang_metrics(served)
    # The simulator's own health: steps that started late mean the machine, not the model, paced them.
    batcher = served.batcher
    label = {"model_name": served.model_id}
    families += [
        _Metric("cockpit_sim_steps_total", "counter", "Simulated engine steps.", label, batcher.steps),
        _Metric("cockpit_sim_step_slips_total", "counter", "Steps that started late.", label, batcher.slips),
        _Metric(
            "cockpit_sim_dropped_seconds_total",
            "counter",
            "Schedule time the engine could not keep (its CPU was short).",
            label,
            batcher.pace.dropped_s,
        ),
    ]
    # The text format wants each name's series together under one HELP and TYPE pair.
    first_seen: dict[str, int] = {}
    for metric in families:
        first_seen.setdefault(metric.name, len(first_seen))
    families.sort(key=lambda metric: first_seen[metric.name])  # stable: series keep their order
    written: set[str] = set()
    parts = []
    for metric in families:
        parts.append(metric.render(header=metric.name not in written))
        written.add(metric.name)
    return web.Response(text="".join(parts), content_type="text/plain", charset="utf-8")


@dataclass(frozen=True)
class _Metric:
    """One series with its HELP and TYPE lines, written as prometheus_client writes them (labels sorted)."""

    name: str
    kind: str
    help: str
    labels: dict[str, str]
    value: float

    def render(self, header: bool = True) -> str:
        """The series, under its name's HELP and TYPE lines when it is the name's first."""
        labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.labels.items()))
        head = f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n" if header else ""
        return f"{head}{self.name}{{{labels}}} {float(self.value)}\n"


def _kv_usage(batcher: Batcher) -> float:
    """KV tokens reserved over the cache's tokens, 0..1 (a lone sequence larger than the cache is
    admitted anyway: it reads full)."""
    capacity = batcher.pacer.kv_tokens
    return min(1.0, batcher.kv_reserved / capacity) if capacity > 0 else 0.0


NO_PREEMPTIONS = 0
"""The simulator admits a sequence only when the KV cache holds its whole life (prompt and
max_tokens: cockpit/sim/batcher.py), so it never preempts, and its preemption counters stay 0."""


def _vllm_metrics(served: _Served) -> list[_Metric]:
    """vllm/v1/metrics/loggers.py (PrometheusStatLogger): counters carry `_total` on the wire, and
    every series its engine's index and the model's name, as vLLM 0.33 labels them; the simulator
    is one engine."""
    batcher = served.batcher
    label = {"engine": "0", "model_name": served.model_id}
    return [
        _Metric(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            label,
            batcher.running,
        ),
        _Metric(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            label,
            batcher.waiting,
        ),
        _Metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            label,
            _kv_usage(batcher),
        ),
        _Metric(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            label,
            NO_PREEMPTIONS,
        ),
        _Metric(  # the simulator has no prefix cache: every prompt token is a query that misses
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            label,
            served.prompt_tokens_total,
        ),
        _Metric(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            label,
            0,
        ),
        _Metric(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            label,
            served.prompt_tokens_total,
        ),
        _Metric(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            label,
            batcher.tokens_out,
        ),
    ]


def _sglang_metrics(served: _Served) -> list[_Metric]:
    """sglang/srt/observability/metrics_collector.py: the scheduler's gauges labelled per rank
    (one scheduler here: ranks 0), the tokenizer's counters per is_streaming, counted when a
    request finishes. gen_throughput is tokens over the time since the last scrape (SGLang's is
    since its last decode log)."""
    batcher = served.batcher
    ranks = {
        "model_name": served.model_id,
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    now = time.perf_counter()
    since, tokens = served.last_scrape
    rate = (batcher.tokens_out - tokens) / (now - since) if since and now > since else 0.0
    served.last_scrape = (now, batcher.tokens_out)
    families = [
        _Metric(
            "sglang:num_running_reqs", "gauge", "The number of running requests.", ranks, batcher.running
        ),
        _Metric(
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            ranks,
            batcher.waiting,
        ),
        _Metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", ranks, rate),
        _Metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", ranks, 0.0),
        _Metric("sglang:token_usage", "gauge", "The token usage.", ranks, _kv_usage(batcher)),
        _Metric(
            "sglang:num_retracted_requests_total",
            "counter",
            "Total number of retracted requests.",
            ranks,
            NO_PREEMPTIONS,
        ),
    ]
    for streaming in (False, True):
        labels = {
            "model_name": served.model_id,
            "engine_type": "unified",
            "is_streaming": str(streaming).lower(),
        }
        prompt, generated = served.finished_tokens[streaming]
        families += [
            _Metric(
                "sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels, prompt
            ),
            _Metric(
                "sglang:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                labels,
                generated,
            ),
        ]
    return families


# -- generation --------------------------------------------------------------------------------


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _truth(request: web.Request) -> web.Response:
    """The simulator's own timings (not an engine endpoint); ``?reset=1`` starts a new window,
    ``?since=T`` keeps what began at ``perf_counter`` T or later."""
    truth = request.app[STATE].truth
    try:
        since = float(request.query.get("since", "-inf"))
    except ValueError:
        raise ApiError(400, "since must be a perf_counter time in seconds") from None
    pace = request.app[STATE].batcher.pace
    body = {**truth.summary(since), "clock": pace.summary(since)}
    if request.query.get("reset"):
        truth.reset()
        pace.reset()
    return web.json_response(body)


async def _generate(request: web.Request, *, chat: bool) -> web.StreamResponse:
    received = time.perf_counter()
    served = request.app[STATE]
    ask = _validate(await _json_body(request), served, chat=chat)
    chunks = Chunks(ask, served.model_id, chunked=request.version >= HttpVersion11)
    sink = SseStream(chunks, served.truth.ttft_s, served.truth.gaps_s, received) if ask.stream else Whole()
    try:
        seq = served.batcher.submit(ask.prompt_tokens, ask.max_tokens, sink)
    except BatcherClosed:
        raise ApiError(503, "The engine is shutting down.", "ServiceUnavailableError") from None
    served.prompt_tokens_total += ask.prompt_tokens
    try:
        async with seq:  # leaving, for whatever reason (a client gone), frees the batch slot
            if isinstance(sink, SseStream):
                return await _stream(request, sink)
            return await _whole(sink, chunks)
    finally:
        finished = served.finished_tokens[ask.stream]
        finished[0] += ask.prompt_tokens
        finished[1] += seq.generated


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError as exc:  # JSONDecodeError and bad UTF-8 alike
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _validate(body: dict[str, Any], served: _Served, *, chat: bool) -> Ask:
    model = body.get("model")
    if model is not None and model != served.model_id:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    prompt_tokens = _messages_tokens(body) if chat else _prompt_tokens(body)
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise ApiError(400, f"max_tokens must be an integer, got {max_tokens!r}.")
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.")
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(400, f"The simulated engine generates one choice per request (n=1), got n={n!r}.")
    _check_context(served, prompt_tokens, max_tokens)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object.")
    options = options or {}
    return Ask(
        chat=chat,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=options.get("include_usage") is True,
        continuous_usage=options.get("continuous_usage_stats") is True,
    )


def _prompt_tokens(body: dict[str, Any]) -> int:
    """A completion prompt: a text, token ids, or a batch of one of those."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if prompt is None or prompt == [] or prompt == "":
        raise ApiError(400, "The field `prompt` is required and must not be empty.")
    if isinstance(prompt, str):
        return max(1, text_tokens(prompt))
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, f"The simulated engine serves one prompt per request, got {len(prompt)}.")
    raise ApiError(400, "prompt must be a string, a list of token ids, or a list of one of those.")


def _messages_tokens(body: dict[str, Any]) -> int:
    """Chat messages: each one's content, plus 4 tokens for its role and template."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "The field `messages` is required and must be a non-empty list.")
    total = 0
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "Each message must be an object with `role` and `content`.")
        content = message.get("content")
        if isinstance(content, list):  # content parts: count the text ones
            content = "".join(part.get("text") or "" for part in content if isinstance(part, dict))
        total += text_tokens(content if isinstance(content, str) else "") + 4
    return total


def _check_context(served: _Served, prompt_tokens: int, max_tokens: int) -> None:
    """Refuse what does not fit the context, in the engine's words (SGLang also refuses ==)."""
    total = prompt_tokens + max_tokens
    limit = served.max_model_len
    if served.engine == "sglang" and total >= limit:
        raise ApiError(
            400,
            f"Requested token count exceeds the model's maximum context length of {limit} tokens. "
            f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input "
            f"messages and {max_tokens} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit.",
        )
    if served.engine == "vllm" and total > limit:
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
        )


SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8"}


async def _stream(request: web.Request, stream: SseStream) -> web.StreamResponse:
    """SSE as vLLM writes it: one event per token, then usage if asked, then [DONE]. The batcher
    writes the events (cockpit/sim/frames.py); this handler sends the headers, waits for the
    end and closes the body. A stream cut short (the engine stopping, a sink that failed, the
    handler cancelled) aborts the connection, so the client sees a broken stream, never a clean
    end without [DONE]."""
    response = web.StreamResponse(headers=SSE_HEADERS)
    transport = request.transport
    try:
        await response.prepare(request)  # sends the headers (StreamResponse does, at once)
        if transport is None or transport.is_closing():
            return response  # the client left before the headers
        stream.attach(transport)
        if await stream.done is None:
            await response.write_eof()  # the last chunk (HTTP/1.1); HTTP/1.0 ends by closing
            return response
    except ConnectionResetError:
        return response  # the client left: the stream just ends
    except BaseException:
        if transport is not None:
            transport.abort()
        raise
    if transport is not None:
        transport.abort()  # BatcherClosed: the engine stopped or the sink failed mid-stream
    return response


async def _whole(sink: Whole, chunks: Chunks) -> web.Response:
    if await sink.done is not None:
        raise ApiError(503, "The engine is shutting down.", "ServiceUnavailableError")
    return web.json_response(chunks.whole(text_of(chunks.ask.max_tokens)), dumps=dumps)
