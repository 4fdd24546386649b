"""The streaming client against real little servers on 127.0.0.1 that misbehave, one way each.

Every request must end in a record: counted, with a one-line reason, never an exception and
never a hang. One aiohttp server (its own loop, in a thread) serves every behaviour under its
own path prefix.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import pytest
from aiohttp import web

from cockpit.bench import aiohttp_transport as aiohttp_client
from cockpit.bench import raw_transport as rawclient
from cockpit.bench.metrics import Window, itl
from cockpit.bench.transport import RequestRecord, Timeouts

STEP_S = 0.02
EVERYTHING = Window(-math.inf, math.inf)


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def token(text: str, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return event(obj)


def usage(completion: int, prompt: int = 7) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


DONE = b"data: [DONE]\n\n"


async def sse(request: web.Request, *parts: bytes | float) -> web.StreamResponse:
    """Write each bytes part as it comes; a float is a pause of that many seconds."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
        else:
            await response.write(part)
    await response.write_eof()
    return response


async def good(request):
    return await sse(
        request,
        *[p for i in range(5) for p in (STEP_S, token(f" w{i}"))],
        token("", "length"),
        event({"id": "cmpl-1", "choices": [], "usage": usage(5)}),
        DONE,
    )


async def vllm_empty_tokens(request):
    """vLLM's shape (a real vLLM 0.32 stream): a token whose bytes do not decode yet is an empty
    chunk, the first token may be one, and finish_reason rides on the last token's chunk."""
    texts = ["", " a", "", "\ufffd b"]
    return await sse(
        request,
        *[p for t in texts for p in (STEP_S, token(t))],
        STEP_S,
        token("", "length"),
        event({"id": "cmpl-1", "choices": [], "usage": usage(5)}),
        DONE,
    )


async def vllm_chat_empty_tokens(request):
    role = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    words = [
        event({"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
        for w in ("del", "")
    ]
    last = event({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]})
    parts = [p for w in [*words, last] for p in (STEP_S, w)]
    return await sse(request, role, *parts, event({"choices": [], "usage": usage(3)}), DONE)


async def mixed_empty_chunks(request):
    """An empty chunk before the first token, an undecodable token inside, an empty finish chunk:
    usage says 3, so the first and the last empty chunks were no tokens, the middle one was."""
    parts = [token(""), STEP_S, token(" a"), STEP_S, token(""), STEP_S, token(" b"), token("", "stop")]
    return await sse(request, *parts, event({"id": "cmpl-1", "choices": [], "usage": usage(3)}), DONE)


async def coalesced(request):
    """12 tokens, three per chunk, a chunk every 3 steps; usage only at the end."""
    chunks = [token(" a b c") for _ in range(4)]
    return await sse(
        request,
        *[p for c in chunks for p in (3 * STEP_S, c)],
        event({"id": "cmpl-1", "choices": [], "usage": usage(12)}),
        DONE,
    )


async def continuous(request):
    """continuous_usage_stats: the running count on every chunk says how many tokens each carried."""
    counts = [1, 3, 2]
    parts: list[bytes | float] = [event({"choices": [{"index": 0, "text": ""}], "usage": usage(0)})]
    total = 0
    for k in counts:
        total += k
        parts += [k * STEP_S, token(" x" * k, usage=usage(total))]
    return await sse(request, *parts, event({"choices": [], "usage": usage(total)}), DONE)


async def no_usage(request):
    return await sse(request, *[token(f" t{i}") for i in range(4)], DONE)


async def chat(request):
    role = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    words = [event({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in (" hi", " there")]
    return await sse(request, role, STEP_S, *words, event({"choices": [], "usage": usage(2)}), DONE)


async def crlf(request):
    return await sse(request, *[t.replace(b"\n", b"\r\n") for t in (token(" a"), token(" b"), DONE)])


async def malformed(request):
    return await sse(
        request, token(" a"), token(" b"), b'data: {"choices": [{"text": " c"\n\n', token(" d"), DONE
    )


async def malformed_like_a_token(request):
    """Same bytes around the text as the tokens before it, but the text breaks the JSON string."""
    bad = token(" c").replace(b'" c"', b'" c"x"')
    return await sse(request, token(" a"), token(" b"), bad, DONE)


async def error_event(request):
    return await sse(request, token(" a"), event({"error": {"message": "engine died", "code": 500}}), DONE)


async def dropped(request):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for text in (" a", " b", " c"):
        await response.write(token(text))
    await asyncio.sleep(0.05)
    request.transport.close()  # mid-stream: no terminating chunk, no [DONE]
    await asyncio.sleep(0.05)
    return response


FLAKY = [0]


async def flaky(request):
    """Every other request drops mid-stream; the rest are good."""
    FLAKY[0] += 1
    return await (dropped(request) if FLAKY[0] % 2 else good(request))


async def no_done(request):
    return await sse(request, token(" a"), token(" b"))


async def rate_limited(request):
    body = {
        "error": {"message": "Rate limit reached for requests", "type": "rate_limit_exceeded", "code": 429}
    }
    return web.json_response(body, status=429)


async def server_error(request):
    body = {
        "object": "error",
        "message": "Internal server error\nTraceback: ...",
        "type": "InternalServerError",
        "code": 500,
    }
    return web.json_response(body, status=500)


async def not_streamed(request):
    return web.json_response({"choices": [{"text": "all at once"}], "usage": usage(3)})


async def silent(request):
    await asyncio.sleep(30)  # cancelled when the client gives up
    return web.Response()


async def stalls(request):
    return await sse(request, token(" a"), token(" b"), 30.0, DONE)


ROUTES = {
    "good": good,
    "vllm-empty": vllm_empty_tokens,
    "mixed-empty": mixed_empty_chunks,
    "vllm-chat-empty": vllm_chat_empty_tokens,
    "coalesced": coalesced,
    "continuous": continuous,
    "no-usage": no_usage,
    "chat": chat,
    "crlf": crlf,
    "malformed": malformed,
    "malformed-like-a-token": malformed_like_a_token,
    "error-event": error_event,
    "dropped": dropped,
    "flaky": flaky,
    "no-done": no_done,
    "429": rate_limited,
    "500": server_error,
    "not-streamed": not_streamed,
    "silent": silent,
    "stalls": stalls,
}


class Server:
    """Every behaviour at /<name>/v1/completions, on a free port, its loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)

    async def _start(self) -> None:
        app = web.Application()
        for name, handler in ROUTES.items():
            app.router.add_post(f"/{name}/v1/completions", handler)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture(scope="module")
def server():
    srv = Server()
    yield srv
    srv.stop()


TRANSPORTS = {"aiohttp": aiohttp_client, "raw": rawclient}
TRANSPORT_CLASSES = {"aiohttp": aiohttp_client.AiohttpTransport, "raw": rawclient.RawTransport}


@pytest.fixture(params=list(TRANSPORTS))
def transport(request) -> str:
    """Every misbehaving-server test runs against both transports: aiohttp and the raw protocol."""
    return request.param


def fetch(
    server: Server,
    name: str,
    transport: str = "aiohttp",
    *,
    read_timeout_s: float = 5.0,
    request_timeout_s: float = 10.0,
) -> RequestRecord:
    module = TRANSPORTS[transport]

    async def go() -> RequestRecord:
        async with module.new_session() as session:
            client = TRANSPORT_CLASSES[transport](
                session,
                f"{server.url}/{name}/v1/completions",
                timeouts=Timeouts.of(request_timeout_s, read_timeout_s),
            )
            return await client.request(b'{"prompt": "hi", "stream": true}')

    return asyncio.run(go())


def test_a_well_behaved_stream_counts_every_token(server, transport):
    record = fetch(server, "good", transport)
    assert record.error is None and record.ok and record.status == 200
    assert record.chunks == 5 and record.output_tokens == 5 and not record.token_mismatch
    assert record.usage_prompt_tokens == 7
    assert record.start < record.first_token < record.last_token <= record.end
    assert list(record.chunk_times) == sorted(record.chunk_times)
    assert record.first_token - record.start == pytest.approx(STEP_S, abs=0.015)
    assert itl([record], EVERYTHING).p50 == pytest.approx(STEP_S * 1e3, abs=10)


def test_empty_chunks_that_are_tokens_count_as_vllm_counts_them(server, transport):
    """Every token of vLLM's stream is a chunk, empty or not (`vllm bench serve` counts them all):
    the first token's empty chunk starts TTFT, and each gap is one step."""
    record = fetch(server, "vllm-empty", transport)
    assert record.error is None
    assert record.chunks == 5 and record.output_tokens == 5 and not record.token_mismatch
    assert record.first_token - record.start == pytest.approx(STEP_S, abs=0.015)
    assert itl([record], EVERYTHING).count == 4
    assert itl([record], EVERYTHING).p50 == pytest.approx(STEP_S * 1e3, abs=10)


def test_empty_chunks_beyond_the_usage_are_dropped_leading_and_trailing_first(server, transport):
    record = fetch(server, "mixed-empty", transport)
    assert record.error is None
    assert record.chunks == 3 and not record.token_mismatch
    assert record.first_token - record.start == pytest.approx(STEP_S, abs=0.015)  # " a", not the empty one
    gaps = list(record.chunk_times)
    assert gaps[1] - gaps[0] == pytest.approx(STEP_S, abs=0.015)  # the empty token inside is kept


def test_a_chat_streams_role_chunk_is_no_token_but_its_empty_content_chunks_are(server, transport):
    record = fetch(server, "vllm-chat-empty", transport)
    assert record.error is None
    assert record.chunks == 3 and record.output_tokens == 3 and not record.token_mismatch
    assert record.first_token - record.start == pytest.approx(STEP_S, abs=0.015)


def test_coalesced_chunks_count_usage_tokens_and_split_their_gap(server, transport):
    record = fetch(server, "coalesced", transport)
    assert record.error is None
    assert record.chunks == 4 and record.output_tokens == 12
    assert record.token_mismatch  # the server coalesces: usage 12, chunks 4
    gaps = itl([record], EVERYTHING)
    assert gaps.count == 9  # 3 gaps after the first chunk, each split over its 3 tokens
    assert gaps.p50 == pytest.approx(STEP_S * 1e3, abs=8)  # a chunk every 3 steps, 3 tokens each


def test_continuous_usage_tells_each_chunks_tokens(server, transport):
    record = fetch(server, "continuous", transport)
    assert record.error is None
    assert record.chunks == 3 and record.output_tokens == 6
    assert list(record.tokens_in_chunk) == [1, 3, 2]
    gaps = itl([record], EVERYTHING)
    assert gaps.count == 5  # the 3- and 2-token chunks' gaps, split per token
    assert gaps.p50 == pytest.approx(STEP_S * 1e3, abs=8)


def test_without_usage_tokens_are_counted_from_chunks(server, transport):
    record = fetch(server, "no-usage", transport)
    assert record.error is None
    assert record.usage_completion_tokens is None
    assert record.output_tokens == record.chunks == 4 and not record.token_mismatch


def test_chat_role_chunk_is_not_a_token(server, transport):
    record = fetch(server, "chat", transport)
    assert record.error is None and record.chunks == 2 and record.output_tokens == 2
    assert record.first_token - record.start >= STEP_S * 0.8  # timed from " hi", not the role chunk


def test_crlf_separated_events_are_read(server, transport):
    record = fetch(server, "crlf", transport)
    assert record.error is None and record.chunks == 2


@pytest.mark.parametrize("name", ["malformed", "malformed-like-a-token"])
def test_malformed_json_mid_stream_is_a_counted_error(server, name, transport):
    record = fetch(server, name, transport)
    assert record.error is not None and record.error.startswith("malformed JSON in stream: ")
    assert record.chunks == 2 and not record.ok


def test_an_error_event_in_the_stream_is_an_error(server, transport):
    record = fetch(server, "error-event", transport)
    assert record.error == "error in stream: engine died"


def test_dropped_connection_is_an_error_with_the_chunks_it_got(server, transport):
    record = fetch(server, "dropped", transport)
    assert record.error == "connection dropped after 3 chunks"
    assert record.chunks == 3


def test_stream_without_done_is_an_error(server, transport):
    assert fetch(server, "no-done", transport).error == "stream ended without [DONE]"


def test_http_errors_carry_status_and_message(server, transport):
    limited = fetch(server, "429", transport)
    assert limited.status == 429 and limited.error == "HTTP 429: Rate limit reached for requests"
    failed = fetch(server, "500", transport)
    assert failed.status == 500 and failed.error == "HTTP 500: Internal server error"
    assert failed.chunks == 0 and failed.first_token is None


def test_a_json_answer_to_a_stream_request_is_an_error(server, transport):
    record = fetch(server, "not-streamed", transport)
    assert record.error.startswith("HTTP 200 without a stream (application/json")


@pytest.mark.parametrize("name, chunks", [("silent", 0), ("stalls", 2)])
def test_a_silent_server_times_out_as_a_counted_error(server, name, chunks, transport):
    started = time.perf_counter()
    record = fetch(server, name, transport, read_timeout_s=0.3)
    assert time.perf_counter() - started < 1.5
    assert record.error == "timed out after 0.3 s (no bytes)"
    assert record.chunks == chunks


def test_the_request_limit_bounds_a_slow_stream(server, transport):
    record = fetch(server, "stalls", transport, read_timeout_s=5, request_timeout_s=0.3)
    assert record.error == "timed out after 0.3 s (request limit)"


def test_a_refused_connection_is_an_error(transport):
    async def go() -> RequestRecord:
        async with TRANSPORTS[transport].new_session() as session:
            from helpers import free_port

            client = TRANSPORT_CLASSES[transport](session, f"http://127.0.0.1:{free_port()}/v1/completions")
            return await client.request(b"{}")

    record = asyncio.run(go())
    assert record.error.startswith("cannot connect: ") and record.status is None


def test_a_cancelled_request_keeps_what_it_received(server, transport):
    async def go() -> RequestRecord:
        async with TRANSPORTS[transport].new_session() as session:
            client = TRANSPORT_CLASSES[transport](session, f"{server.url}/stalls/v1/completions")
            record = RequestRecord()
            task = asyncio.create_task(client.request(b"{}", record))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return record

    record = asyncio.run(go())
    assert record.cancelled and record.error is None and not record.ok
    assert record.chunks == 2 and record.end > record.last_token


def test_the_api_key_is_sent_as_a_bearer_token_and_never_shown():
    from cockpit.bench.config import BenchConfig

    cfg = BenchConfig(url="http://x", api_key="sk-secret")
    assert "sk-secret" not in repr(cfg)
    client = aiohttp_client.AiohttpTransport(None, "http://x", api_key="sk-secret")
    assert client.headers["Authorization"] == "Bearer sk-secret"
    raw = rawclient.RawTransport(None, "http://x/v1/completions", api_key="sk-secret")
    assert b"Authorization: Bearer sk-secret\r\n" in raw.head


def test_the_raw_transport_keeps_its_connections_alive(server):
    async def go() -> list[RequestRecord]:
        async with rawclient.new_session() as session:
            client = rawclient.RawTransport(session, f"{server.url}/no-usage/v1/completions")
            records = [await client.request(b"{}") for _ in range(3)]
            assert len(session.open) == 1  # one connection, reused by each request in turn
            bad = await rawclient.RawTransport(session, f"{server.url}/500/v1/completions").request(b"{}")
            assert (
                bad.error == "HTTP 500: Internal server error" and not session.open
            )  # it took that one, closed it
            return records

    assert [r.chunks for r in asyncio.run(go())] == [4, 4, 4]


def chunked(*events: bytes, extension: bytes = b"") -> bytes:
    """A 200 event-stream response, one chunk frame per event, as uvicorn sends it."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    frames = b"".join(b"%x%s\r\n%s\r\n" % (len(e), extension, e) for e in events)
    return head + frames + b"0\r\n\r\n"


class _Wire(asyncio.Transport):
    """The socket side of a raw connection, for feeding it bytes split exactly as a test says."""

    def write(self, data) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def read_in_pieces(response: bytes, cuts: list[int]) -> tuple[RequestRecord, int]:
    """The record a raw connection makes of ``response`` read in pieces ending at ``cuts``."""
    from cockpit.bench.sse import SseReader
    from cockpit.bench.transport import Progress, RequestFailed

    async def go() -> tuple[RequestRecord, int]:
        conn = rawclient._Conn(rawclient.new_session())
        conn.connection_made(_Wire())
        record, progress = RequestRecord(), Progress()
        done = conn.start(b"", record, SseReader(record, progress), Timeouts(), time.perf_counter() + 60)
        for start, end in zip([0, *cuts], [*cuts, len(response)]):
            conn.data_received(response[start:end])
        try:
            await done
        except RequestFailed as failure:  # as RawTransport.request records it
            record.error = str(failure)
        return record, progress.tokens

    return asyncio.run(go())


def test_a_chunked_stream_reads_the_same_however_its_bytes_are_split():
    """Whole frames of plain tokens take the fast path, anything else the general one: quoted
    and non-ASCII text, chunk extensions, a frame cut anywhere, usage, [DONE]."""
    events = [
        token(" a"),
        token(" b"),
        token(' say "hi"'),
        token(" ünï"),
        token(" c"),
        *[token(f" t{i}") for i in range(6)],
        token(" z", "length"),
        event({"id": "cmpl-1", "choices": [], "usage": usage(12)}),
        DONE,
    ]
    whole = chunked(*events)
    expected, tokens = read_in_pieces(whole, [])
    assert expected.error is None and expected.chunks == 12 and tokens == 12
    assert expected.usage_completion_tokens == 12 and not expected.token_mismatch
    pieces = [
        list(range(1, len(whole))),  # a byte at a time
        list(range(97, len(whole), 97)),  # cut inside frames
        [whole.index(b"\r\n\r\n") + 4 + len(chunked(events[0])) - len(chunked())],  # after the first frame
    ]
    for cuts in pieces:
        record, counted = read_in_pieces(whole, cuts)
        assert (record.error, record.chunks, counted) == (None, 12, 12), cuts[:3]
        assert record.usage_completion_tokens == 12 and record.first_token is not None
    extended, counted = read_in_pieces(chunked(*events, extension=b";x=1"), [])
    assert (extended.error, extended.chunks, counted) == (None, 12, 12)


def test_a_broken_chunk_frame_is_a_counted_error_on_either_path():
    frames = chunked(token(" a"), token(" b"), token(" c"), DONE)
    broken = frames.replace(b"\r\n" + token(" c") + b"\r\n", b"\r\n" + token(" c") + b"XX", 1)
    for cuts in ([], list(range(1, len(broken)))):
        record, _ = read_in_pieces(broken, cuts)
        assert record.error == "broken chunked encoding", cuts[:3]


# -- what the client sends ---------------------------------------------------------------------------


def test_random_prompts_have_the_length_asked_and_are_unique_and_reproducible():
    from cockpit.bench.workload import random_workload
    from cockpit.sim.server import text_tokens

    workload = random_workload("m", input_len=100, output_len=7, seed=3)
    first, second = json.loads(workload.body(0)), json.loads(workload.body(1))
    assert workload.path == "/v1/completions"
    assert text_tokens(first["prompt"]) == 100 and len(first["prompt"]) == 400
    assert first["prompt"] != second["prompt"]  # a repeated prompt would hit the prefix cache
    assert (
        json.loads(workload.body(len(workload.bodies)))["prompt"] != first["prompt"]
    )  # tags keep cycles unique
    assert {k: first[k] for k in ("model", "max_tokens", "ignore_eos", "stream", "stream_options")} == {
        "model": "m",
        "max_tokens": 7,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert random_workload("m", input_len=100, output_len=7, seed=3).body(5) == workload.body(5)
    assert random_workload("m", input_len=100, output_len=7, seed=4).body(5) != workload.body(5)
    chat = json.loads(random_workload("m", endpoint="chat", input_len=10, output_len=2).body(0))
    assert chat["messages"][0]["role"] == "user" and len(chat["messages"][0]["content"]) == 40


def test_jsonl_prompts_are_read_and_a_bad_line_is_named(tmp_path):
    from cockpit.bench.workload import jsonl_workload
    from cockpit.core.errors import CockpitError

    path = tmp_path / "prompts.jsonl"
    path.write_text(
        '{"prompt": "hello there"}\n\n{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}\n'
    )
    completions = jsonl_workload(path, "m", output_len=9)
    assert [json.loads(completions.body(i))["prompt"] for i in range(2)] == ["hello there", "hi"]
    assert [completions.max_tokens(i) for i in range(2)] == [9, 5]
    chat = jsonl_workload(path, "m", endpoint="chat")
    assert json.loads(chat.body(0))["messages"] == [{"role": "user", "content": "hello there"}]

    path.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    with pytest.raises(CockpitError, match=r"prompts.jsonl, line 2: needs \"prompt\""):
        jsonl_workload(path, "m")
    path.write_text('{"prompt": "ok"}\n{"prompt": "x", "max_tokens": 0}\n')
    with pytest.raises(CockpitError, match="line 2: max_tokens must be"):
        jsonl_workload(path, "m")
    path.write_text('{"prompt": "ok"}\n{oops\n')
    with pytest.raises(CockpitError, match="line 2: not JSON"):
        jsonl_workload(path, "m")
    with pytest.raises(CockpitError, match="cannot read the prompts file"):
        jsonl_workload(tmp_path / "missing.jsonl", "m")


def test_plain_tokens_skip_the_parse_only_when_that_changes_nothing():
    from cockpit.bench.sse import _Stream

    def payload(raw: bytes) -> bytes:
        return raw.removeprefix(b"data: ").removesuffix(b"\n\n")

    stream = _Stream(RequestRecord())
    assert not stream.is_plain_token(payload(token(" a")))  # nothing learned yet
    assert stream.parse(payload(token(" a")), 1.0)  # parsed in full; its shape becomes the template
    assert stream.is_plain_token(payload(token(" b")))
    assert stream.is_plain_token(payload(token(" b")).replace(b" b", " ünï".encode()))  # raw UTF-8 text
    assert not stream.is_plain_token(payload(token(" b")).replace(b" b", b"\xff"))  # not UTF-8: parse
    for other in (token(""), token(" c", "length"), token(" x", usage=usage(3)), token(' a"b'), token("\n")):
        assert not stream.is_plain_token(payload(other)), other
    assert not stream.is_plain_token(payload(token(" c")).replace(b'" c"', b'" c"x"'))


# -- a sweep against servers that fail ------------------------------------------------------------


def test_a_sweep_against_a_failing_server_reports_errors_and_ends(server, transport):
    from cockpit.bench.concurrency_sweep import LevelDone, run_sweep
    from cockpit.bench.config import BenchConfig

    events: list = []
    cfg = BenchConfig(
        url=f"{server.url}/429",
        model="m",
        concurrency=(2, 4),
        input_len=4,
        output_len=4,
        requests=3,
        transport=transport,
    )
    started = time.perf_counter()
    results = asyncio.run(run_sweep(cfg, events.append))
    assert time.perf_counter() - started < 2
    assert [r.concurrency for r in results] == [2, 4]
    for result in results:
        assert result.output_tok_s == 0 and result.requests == 0
        assert result.errors >= result.concurrency  # the whole warm-up failed: no window was measured
        assert list(result.error_reasons) == ["HTTP 429: Rate limit reached for requests"]
    assert sum(isinstance(e, LevelDone) for e in events) == 2


def test_a_sweep_mixing_good_and_failing_requests_counts_both(server, transport):
    """Every other stream drops mid-way: the window still closes, both kinds are counted."""
    from cockpit.bench.concurrency_sweep import run_sweep
    from cockpit.bench.config import BenchConfig

    cfg = BenchConfig(url=f"{server.url}/flaky", model="m", concurrency=(2,), requests=8, transport=transport)
    [result] = asyncio.run(run_sweep(cfg, lambda event: None))
    assert result.requests + result.errors == 8
    assert result.requests >= 2 and result.errors >= 2
    assert result.error_reasons == {"connection dropped after 3 chunks": result.errors}
    assert result.output_tok_s > 0 and result.itl_ms.p50 == pytest.approx(STEP_S * 1e3, abs=10)
    assert "in flight" not in result.client_note  # failures empty the pipeline: not the client's fault


def test_without_a_model_the_server_is_asked_and_a_dead_one_is_reported():
    from helpers import free_port

    from cockpit.bench.concurrency_sweep import run_sweep
    from cockpit.bench.config import BenchConfig
    from cockpit.core.errors import CockpitError

    cfg = BenchConfig(url=f"http://127.0.0.1:{free_port()}", concurrency=(1,))
    with pytest.raises(CockpitError, match=r"cannot reach http://127.0.0.1:\d+/v1/models"):
        asyncio.run(run_sweep(cfg, lambda event: None))


def test_both_transports_send_the_contracts_headers():
    from cockpit.bench.transport import request_headers

    headers = request_headers("sk-secret")
    aio = aiohttp_client.AiohttpTransport(None, "http://x", api_key="sk-secret")
    raw = rawclient.RawTransport(None, "http://x/v1/completions", api_key="sk-secret")
    assert aio.headers == headers
    assert all(f"\r\n{name}: {value}\r\n".encode() in raw.head for name, value in headers.items())


def test_connecting_never_outlasts_the_whole_request():
    """However the bounds are given, a connect wait is cut at the request's own limit."""
    assert Timeouts(request_s=5.0).connect_s == 5.0
    assert Timeouts.of(5.0, 30.0).connect_s == 5.0  # bounded like a read, then by the request
    assert Timeouts.of(60.0, 30.0).connect_s == 30.0 and Timeouts.of(60.0, 30.0, 2.0).connect_s == 2.0
