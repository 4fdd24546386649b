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
import random
import re
import socket
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any

from aiohttp import HttpVersion11, web

from cockpit.engines import ENGINE_NAMES, surface
from cockpit.engines.sglang.surface import SURFACE as SGLANG
from cockpit.engines.surface import EngineSurface
from cockpit.engines.vllm.surface import SURFACE as VLLM

from .batcher import Batcher, BatcherClosed
from .frames import Ask, Chunks, SseStream, Whole, dumps, text_of
from .logs.vllm import uvicorn_access_line
from .metrics import Family, RequestStats, Series, VllmFigures, render, vllm_families
from .pacing import summary_ms

DEFAULT_MAX_TOKENS = 16


@dataclass
class _Served:
    """What the app serves, kept on the app under STATE."""

    model_id: str
    engine: str
    api: EngineSurface  # the engine's surface: how its server answers
    batcher: Batcher
    max_model_len: int
    model_path: str | None
    created: int
    version: str = ""
    fingerprint: str | None = None  # vLLM's system_fingerprint
    access_log: Callable[[str], None] | None = None  # uvicorn's access lines go there (vLLM)
    stats: RequestStats | None = None  # per-request statistics, kept where the metrics read them
    prompt_tokens_total: int = 0
    truth: _Truth = field(default_factory=lambda: _Truth())
    # SGLang counts tokens when a request finishes: is_streaming -> [prompt, generated]
    finished_tokens: dict[bool, list[int]] = field(default_factory=lambda: {False: [0, 0], True: [0, 0]})
    last_scrape: tuple[float, int] = (0.0, 0)  # (perf_counter, tokens out) at the last /metrics
    pace: dict[str, str] | None = (
        None  # which truth paces the engine (cockpit.sim.witness), for /cockpit/truth
    )


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
    """A request the engine refuses; rendered as the engine's ErrorResponse."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def error_body(
    status: int, message: str, err_type: str, api: EngineSurface, param: str | None = None
) -> dict[str, Any]:
    """The engine's ErrorResponse: nested, its ErrorInfo under "error" (vLLM's, vllm/entrypoints/
    serve/engine/protocol.py), or flat, with "object": "error" (SGLang's)."""
    if api.error_body == "nested":
        return {
            "error": {"message": sanitize_message(message), "type": err_type, "param": param, "code": status}
        }
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": status}


def validation_error(message: str, param: str, value: object) -> ApiError:
    """The VLLMValidationError of vLLM as its handler answers it: 400, the parameter named in the
    message's tail and in "param" (vllm/exceptions.py, vllm/entrypoints/serve/exception_handling/)."""
    return ApiError(400, f"{message} (parameter={param}, value={value})", "BadRequestError", param)


def system_fingerprint(
    version: str, tp: int = 1, pp: int = 1, dp: int = 1, ep: bool = False, config: str = ""
) -> str:
    """The system_fingerprint of vLLM in its default "full" mode: vllm-<version>[-tpN][-ppN][-dpN][-ep]-<hash8>
    (vllm/entrypoints/serve/utils/fingerprint.py); the hash is the config's, here of what names it."""
    parts = [f"vllm-{version}"]
    parts += [f"tp{tp}"] if tp > 1 else []
    parts += [f"pp{pp}"] if pp > 1 else []
    parts += [f"dp{dp}"] if dp > 1 else []
    parts += ["ep"] if ep else []
    parts.append(hashlib.sha256(f"{version}|{config}".encode()).hexdigest()[:8])
    return "-".join(parts)


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
    version: str = "",
    fingerprint: str | None = None,
    access_log: Callable[[str], None] | None = None,
    pace: dict[str, str] | None = None,
) -> web.Application:
    """The OpenAI-compatible app; it closes ``batcher`` on shutdown so open streams end.
    With ``api_key`` (one key or several, as vLLM takes), requests need ``Authorization: Bearer``.
    ``metrics``: serve /metrics (SGLang only with --enable-metrics, sglang/srt/entrypoints/http_server.py).
    vLLM: ``version`` is what /version and the system fingerprint say (default: the newest option
    table's), ``fingerprint`` the system_fingerprint (default: built from the version),
    ``access_log`` gets uvicorn's line for each request. ``pace``: which truth paces the engine,
    shown in /cockpit/truth."""
    if engine not in ENGINE_NAMES:
        raise ValueError(f"engine must be one of {sorted(ENGINE_NAMES)}, got {engine!r}")
    api = surface(engine)
    keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    middlewares = [_errors_as_json]
    if any(keys):
        middlewares.insert(0, _require_key(api, tuple(k for k in keys if k)))
    if access_log is not None:
        middlewares.insert(0, _access_log)
    app = web.Application(middlewares=middlewares)
    if not version:
        from cockpit.engines.options import table_version

        version = table_version(engine, None)[0]
    if not api.system_fingerprint:
        fingerprint = None
    elif fingerprint is None:
        fingerprint = system_fingerprint(version, config=model_id)
    app[STATE] = _Served(
        model_id=model_id,
        engine=engine,
        api=api,
        batcher=batcher,
        max_model_len=max_model_len,
        model_path=model_path,
        created=int(time.time()),
        version=version,
        fingerprint=fingerprint,
        access_log=access_log,
        pace=pace,
        stats=RequestStats(max_model_len) if api.metric_prefix in _COUNTS_EACH_REQUEST else None,
    )
    # The engine's routes, in the order it lists them (vLLM's launcher logs them so).
    for path, methods in api.routes:
        if path != "/metrics" or metrics:
            for method in methods.split(", "):
                app.router.add_route(method, path, _HANDLERS[path])
    app.router.add_get("/cockpit/truth", _truth)
    app.on_shutdown.append(_close_batcher)
    return app


async def serve(
    app: web.Application, host: str = "127.0.0.1", port: int | None = None, sock: socket.socket | None = None
) -> web.AppRunner:
    """Listen on ``host`` only; port None is the engine's default, 0 a free one; or on ``sock``,
    bound already (vLLM binds its port before it builds the engine).

    Returns the runner: ``runner.addresses[0][1]`` is the port, ``await runner.cleanup()`` stops.
    Handlers are cancelled when their client disconnects, so even a request still queued in
    the batcher gives its place back.
    """
    if port is None:
        port = app[STATE].api.default_port
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _close_batcher(app: web.Application) -> None:
    await app[STATE].batcher.close()


@web.middleware
async def _errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as JSON, never as an HTML page: vLLM's own errors as its ErrorResponse,
    an unknown route or method as FastAPI's default handler answers it ({"detail": "Not Found"}:
    vLLM registers its handler for fastapi's HTTPException, not the router's starlette one)."""
    api = request.app[STATE].api
    try:
        return await handler(request)
    except ApiError as err:
        body = error_body(err.status, err.message, err.err_type, api, err.param)
        return _json(body, status=err.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        if api.unrouted_detail:
            return _json({"detail": exc.reason}, status=exc.status, headers=headers)
        return web.json_response(
            error_body(exc.status, exc.reason, exc.reason, api), status=exc.status, headers=headers
        )


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON body as Starlette's JSONResponse writes it: compact, UTF-8 as is."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return web.Response(text=text, status=status, headers=headers, content_type="application/json")


@web.middleware
async def _access_log(request: web.Request, handler: Any) -> web.StreamResponse:
    """uvicorn's access line for each request (vLLM logs it unless --disable-uvicorn-access-log);
    a stream's is written when its headers go (``_stream``), as uvicorn does at response start."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _log_access(request, exc.status, exc.reason)
        raise
    if not request.get(_LOGGED):
        _log_access(request, response.status, response.reason)
    return response


_LOGGED = "cockpit_sim_access_logged"


def _log_access(request: web.Request, status: int, reason: str) -> None:
    served = request.app[STATE]
    if served.access_log is None or request.get(_LOGGED):
        return
    request[_LOGGED] = True
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "-"
    version = f"{request.version.major}.{request.version.minor}"
    served.access_log(uvicorn_access_line(client, request.method, request.path_qs, version, status, reason))


UNAUTHORIZED = {"error": "Unauthorized"}


def _require_key(api: EngineSurface, keys: tuple[str, ...]) -> Any:
    """The engines' API-key middleware: a missing or wrong bearer token gets 401 on the paths
    the engine guards (its surface's key_protected_paths but key_open_paths); OPTIONS passes."""
    digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    def guarded(path: str) -> bool:
        return path.startswith(api.key_protected_paths) and not path.startswith(api.key_open_paths)

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
    """The ModelList: one ModelCard, with one ModelPermission in the extended shape
    (vLLM's, vllm/entrypoints/openai/models/serving.py)."""
    served = request.app[STATE]
    card: dict[str, Any] = {
        "id": served.model_id,
        "object": "model",
        "created": served.created,
        "owned_by": served.engine,
        "root": served.model_path or served.model_id,
        "parent": None,
        "max_model_len": served.max_model_len,
    }
    if served.api.response_fields != "extended":
        return web.json_response({"object": "list", "data": [card]})
    card["permission"] = [
        {
            "id": f"modelperm-{random.getrandbits(64):016x}",
            "object": "model_permission",
            "created": int(time.time()),
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
    ]
    return _json({"object": "list", "data": [card]})


async def _version(request: web.Request) -> web.Response:
    """vllm/entrypoints/serve/instrumentator/basic.py: {"version": "0.32.0"}."""
    return _json({"version": request.app[STATE].version})


async def _load(request: web.Request) -> web.Response:
    """vllm/entrypoints/serve/instrumentator/basic.py: the generation requests in flight."""
    batcher = request.app[STATE].batcher
    return _json({"server_load": batcher.running + batcher.waiting})


async def _model_info(request: web.Request) -> web.Response:
    served = request.app[STATE]
    path = served.model_path or served.model_id
    return web.json_response({"model_path": path, "tokenizer_path": path, "is_generation": True})


async def _metrics(request: web.Request) -> web.Response:
    """Prometheus text under the engine's own names and labels, driven by the batcher (see
    docs/metrics.md): what cockpit's engine line and the benchmark read from a real engine."""
    served = request.app[STATE]
    families = _FAMILIES[served.api.metric_prefix](served)
    # The simulator's own health: steps that started late mean the machine, not the model, paced them.
    batcher = served.batcher
    label = {"model_name": served.model_id}
    for name, help, value in (
        ("cockpit_sim_steps_total", "Simulated engine steps.", batcher.steps),
        ("cockpit_sim_step_slips_total", "Steps that started late.", batcher.slips),
        (
            "cockpit_sim_dropped_seconds_total",
            "Schedule time the engine could not keep (its CPU was short).",
            batcher.pace.dropped_s,
        ),
    ):
        families.append(Family(name, "counter", help, [Series(name, label, value)]))
    # The text format wants each name's series together under one HELP and TYPE pair.
    return web.Response(text=render(families), content_type="text/plain", charset="utf-8")


def kv_usage(batcher: Batcher) -> float:
    """KV tokens reserved over the cache's tokens, 0..1 (a lone sequence larger than the cache is
    admitted anyway: it reads full)."""
    capacity = batcher.pacer.kv_tokens
    return min(1.0, batcher.kv_reserved / capacity) if capacity > 0 else 0.0


def counters(app: web.Application) -> tuple[int, int]:
    """Prompt and generated tokens so far: what vLLM's periodic stats line divides by its interval."""
    served = app[STATE]
    return served.prompt_tokens_total, served.batcher.tokens_out


NO_PREEMPTIONS = 0
"""The simulator admits a sequence only when the KV cache holds its whole life (prompt and
max_tokens: cockpit/sim/batcher.py), so it never preempts, and its preemption counters stay 0."""


def _vllm_metrics(served: _Served) -> list[Family]:
    """vllm/v1/metrics/loggers.py (PrometheusStatLogger), as cockpit/sim/metrics.py writes it."""
    batcher = served.batcher
    figures = VllmFigures(
        running=batcher.running,
        waiting=batcher.waiting,
        kv_usage=kv_usage(batcher),
        prompt_tokens=served.prompt_tokens_total,
        generation_tokens=batcher.tokens_out,
        preemptions=NO_PREEMPTIONS,
    )
    assert served.stats is not None  # kept for every engine in _COUNTS_EACH_REQUEST
    return vllm_families(figures, served.stats, served.model_id)


def _sglang_metrics(served: _Served) -> list[Family]:
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

    def one(name: str, kind: str, help: str, labels: dict[str, str], value: float) -> Family:
        return Family(name, kind, help, [Series(name, labels, value)])

    families = [
        one("sglang:num_running_reqs", "gauge", "The number of running requests.", ranks, batcher.running),
        one(
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            ranks,
            batcher.waiting,
        ),
        one("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", ranks, rate),
        one("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", ranks, 0.0),
        one("sglang:token_usage", "gauge", "The token usage.", ranks, kv_usage(batcher)),
        one(
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
            one(
                "sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels, prompt
            ),
            one(
                "sglang:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                labels,
                generated,
            ),
        ]
    return families


# Each engine's metric families, by the prefix of its Prometheus names.
_FAMILIES: dict[str, Callable[[_Served], list[Family]]] = {
    VLLM.metric_prefix: _vllm_metrics,
    SGLANG.metric_prefix: _sglang_metrics,
}
# The engines whose metrics are built from each finished request's statistics (vLLM's histograms);
# for the others the hot path keeps none.
_COUNTS_EACH_REQUEST = {VLLM.metric_prefix}


# -- generation --------------------------------------------------------------------------------


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _truth(request: web.Request) -> web.Response:
    """The simulator's own timings (not an engine endpoint), and which truth paces it (``pace``);
    ``?reset=1`` starts a new window, ``?since=T`` keeps what began at ``perf_counter`` T or later."""
    truth = request.app[STATE].truth
    try:
        since = float(request.query.get("since", "-inf"))
    except ValueError:
        raise ApiError(400, "since must be a perf_counter time in seconds") from None
    pace = request.app[STATE].batcher.pace
    body = {**truth.summary(since), "clock": pace.summary(since)}
    if request.app[STATE].pace is not None:
        body["pace"] = request.app[STATE].pace
    if request.query.get("reset"):
        truth.reset()
        pace.reset()
    return web.json_response(body)


# What answers each path an engine's surface lists.
_HANDLERS = {
    "/load": _load,
    "/version": _version,
    "/health": _health,
    "/metrics": _metrics,
    "/v1/models": _models,
    "/ping": _health,
    "/v1/chat/completions": _chat_completions,
    "/v1/completions": _completions,
    "/get_model_info": _model_info,
}


async def _generate(request: web.Request, *, chat: bool) -> web.StreamResponse:
    received = time.perf_counter()
    served = request.app[STATE]
    body = await _json_body(request, served.api)
    ask = _validate(body, served, chat=chat, request_id=request.headers.get("X-Request-Id"))
    chunks = Chunks(
        ask,
        served.model_id,
        served.api,
        chunked=request.version >= HttpVersion11,
        fingerprint=served.fingerprint,
    )
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
        _finish(served, ask, seq.generated, seq.admitted, sink, received)


def _finish(
    served: _Served, ask: Ask, generated: int, admitted: float | None, sink: Any, received: float
) -> None:
    """The per-request statistics of vLLM (vllm/v1/metrics/stats.py), once the request has ended;
    only its metrics read them."""
    if served.stats is None:
        return
    served.stats.finish(
        reason="length" if generated >= ask.max_tokens else "abort",
        prompt_tokens=ask.prompt_tokens,
        generated=generated,
        max_tokens=ask.max_tokens,
        received=received,
        admitted=admitted,
        first=sink.first_at,
        last=sink.last_at,
        end=time.perf_counter(),
    )


async def _json_body(request: web.Request, api: EngineSurface) -> dict[str, Any]:
    """The request's JSON object. Where FastAPI validates the body (vLLM), a bad one is a
    validation error: "Bad Request", FastAPI's json_invalid error as vLLM's handler words it
    (fastapi/routing.py, vllm/entrypoints/serve/exception_handling/handlers/validation.py)."""
    fastapi = api.body_errors == "fastapi"
    refused = "Bad Request" if fastapi else "BadRequestError"
    raw = await request.read()
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        if fastapi:
            error = {
                "type": "json_invalid",
                "loc": f"body.{exc.pos}",
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": exc.msg},
            }
            raise ApiError(400, f"1 validation error:\n  {error}", "Bad Request", f"body.{exc.pos}") from None
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    except ValueError as exc:  # bad UTF-8
        raise ApiError(400, f"Invalid JSON body: {exc}", refused) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", refused)
    return body


def _validate(body: dict[str, Any], served: _Served, *, chat: bool, request_id: str | None = None) -> Ask:
    model = body.get("model")
    api = served.api
    if api.model_aliases and model and model != served.model_id:  # vLLM's _check_model
        message = f"The model `{model}` does not exist. Valid aliases: {served.model_id}."
        raise ApiError(404, message, "NotFoundError", "model")
    if not api.model_aliases and model is not None and model != served.model_id:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    clamps = api.context_check == "clamp"
    prompt_tokens = _messages_tokens(body) if chat else _prompt_tokens(body)
    param = "max_tokens"
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    elif chat:
        param = "max_completion_tokens"
    requested = max_tokens is not None
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise ApiError(400, f"max_tokens must be an integer, got {max_tokens!r}.")
    if not clamps and max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.")
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(400, f"The simulated engine generates one choice per request (n=1), got n={n!r}.")
    if clamps:
        text = not (isinstance(body.get("prompt"), list) and _is_token_ids(body.get("prompt")))
        max_tokens = _clamped_max_tokens(
            served.max_model_len, prompt_tokens, max_tokens, requested, param, text
        )
    else:
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
        request_id=request_id,
    )


def _is_token_ids(prompt: Any) -> bool:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    return isinstance(prompt, list) and bool(prompt) and all(type(t) is int for t in prompt)


def _clamped_max_tokens(
    limit: int, prompt_tokens: int, max_tokens: int, requested: bool, param: str, text: bool
) -> int:
    """The checks of vLLM, in its order: max_tokens above the context (vllm/renderers/params.py:
    TokenizeParams), a prompt above it (counted on a text truncated to one token past it, hence
    "at least"), then max_tokens cut to what the context leaves (vllm/entrypoints/serve/utils/
    api_utils.py: get_max_tokens), which must still be 1 or more (vllm/sampling_params.py)."""
    if requested and max_tokens > limit:
        raise validation_error(
            f"{param}={max_tokens} cannot be greater than max_model_len={limit}. Please request fewer output tokens.",
            param,
            max_tokens,
        )
    if prompt_tokens > limit:
        count = min(prompt_tokens, limit + 1) if text else prompt_tokens
        qualifier = "at least " if count == limit + 1 else ""
        raise validation_error(
            f"This model's maximum context length is {limit} tokens. However, your prompt contains "
            f"{qualifier}{count} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "input_tokens",
            count,
        )
    max_tokens = min(max_tokens, limit - prompt_tokens)
    if max_tokens < 1:
        raise validation_error(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
    return max_tokens


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
    """Refuse what does not fit the context, in SGLang's words (it refuses == too)."""
    total = prompt_tokens + max_tokens
    limit = served.max_model_len
    if total >= limit:
        raise ApiError(
            400,
            f"Requested token count exceeds the model's maximum context length of {limit} tokens. "
            f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input "
            f"messages and {max_tokens} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit.",
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
        _log_access(request, response.status, response.reason)
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


_PATHS = (  # vllm/entrypoints/serve/exception_handling/utils.py: sanitize_message
    re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+"),
    re.compile(r"(?:/[\w\-]+)+/[\w\-]+\.\w+"),
)


def sanitize_message(message: str) -> str:
    """An error message without file paths, as vLLM words its own: "<path>" stands for each."""
    for pattern in _PATHS:
        message = pattern.sub("<path>", message)
    return message.strip()
