"""The simulated engine's HTTP face, served for real on 127.0.0.1 and spoken to with httpx.

Each server runs on its own event loop in a background thread, so the tests stay synchronous.
Timing checks use generous windows: they check behaviour (pacing, batching, queueing), not speed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from cockpit.sim.batcher import Batcher, BatcherClosed, ConstantPacer
from cockpit.sim.server import make_app, serve

MODEL = "MiniMaxAI/MiniMax-M2.5"
STEP_S = 0.01


class ServerThread:
    """A simulated engine on a free port of 127.0.0.1, with its own loop in a thread."""

    def __init__(self, engine: str, pacer: ConstantPacer, max_model_len: int = 4096, api_key=None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.engine, self.pacer, self.max_model_len, self.api_key = engine, pacer, max_model_len, api_key
        self._call(self._start())
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self.batcher = Batcher(self.pacer)
        app = make_app(
            model_id=MODEL,
            engine=self.engine,
            batcher=self.batcher,
            max_model_len=self.max_model_len,
            model_path="/models/minimax",
            api_key=self.api_key,
        )
        self.runner = await serve(app, port=0)
        host, self.port = self.runner.addresses[0][:2]
        assert host == "127.0.0.1"

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def wait_until(self, condition: Callable[[Batcher], bool], timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.batcher):
                return True
            time.sleep(0.005)
        return condition(self.batcher)

    def stop(self) -> None:
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture(scope="module")
def vllm() -> Iterator[ServerThread]:
    server = ServerThread("vllm", ConstantPacer(step_s=STEP_S, max_running=64))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sglang() -> Iterator[ServerThread]:
    server = ServerThread("sglang", ConstantPacer(step_s=STEP_S, max_running=64))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def two_slots() -> Iterator[ServerThread]:
    server = ServerThread("vllm", ConstantPacer(step_s=STEP_S, max_running=2))
    yield server
    server.stop()


def sse_events(response: httpx.Response) -> list[str]:
    """The data payloads of an SSE stream, in order."""
    body = response.read().decode()
    assert body.endswith("\n\n")
    events = body.split("\n\n")[:-1]
    assert all(e.startswith("data: ") for e in events)
    return [e[len("data: ") :] for e in events]


def stream(url: str, path: str, body: dict) -> tuple[list[dict], str]:
    with httpx.Client(base_url=url) as client, client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        *chunks, last = sse_events(response)
    return [json.loads(c) for c in chunks], last


def assert_error(
    response: httpx.Response, status: int, err_type: str, message: str = "", param: str | None = None
) -> None:
    """vLLM's ErrorResponse nests its error (vllm/entrypoints/serve/engine/protocol.py); SGLang's is flat."""
    assert response.status_code == status
    body = response.json()
    if "error" in body:
        assert list(body) == ["error"]
        body = body["error"]
        assert list(body) == ["message", "type", "param", "code"]
    else:
        assert body["object"] == "error"
    assert body["code"] == status and body["param"] == param
    assert body["type"] == err_type
    assert message in body["message"]


def assert_not_routed(response: httpx.Response, status: int, reason: str) -> None:
    """An unknown path or method in vLLM: FastAPI's own handler answers, {"detail": reason}."""
    assert response.status_code == status and response.json() == {"detail": reason}


# -- plain endpoints -------------------------------------------------------------------------


def test_health_and_models(vllm):
    response = httpx.get(f"{vllm.url}/health")
    assert response.status_code == 200 and response.content == b""
    models = httpx.get(f"{vllm.url}/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert card["id"] == MODEL and card["object"] == "model" and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 4096 and card["root"] == "/models/minimax"
    assert isinstance(card["created"], int)


def test_model_info_is_sglang_only(vllm, sglang):
    info = httpx.get(f"{sglang.url}/get_model_info").json()
    path = "/models/minimax"
    assert info == {"model_path": path, "tokenizer_path": path, "is_generation": True}
    assert httpx.get(f"{sglang.url}/v1/models").json()["data"][0]["owned_by"] == "sglang"
    assert_not_routed(httpx.get(f"{vllm.url}/get_model_info"), 404, "Not Found")


def test_metrics(vllm):
    httpx.post(f"{vllm.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    text = httpx.get(f"{vllm.url}/metrics").text
    assert f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0' in text
    assert "vllm:num_requests_waiting" in text
    assert "vllm:generation_tokens_total" in text


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_metrics_are_valid_prometheus_text(engine, request):
    """One HELP and one TYPE line per name, its series together below them (the text format's
    rule; SGLang's token counters have a series per is_streaming value)."""
    server = request.getfixturevalue(engine)
    httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": True})
    httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    names: list[str] = []
    types: list[str] = []
    histograms: set[str] = set()
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("# TYPE "):
            types.append(line.split()[2])
            if line.split()[3] == "histogram":
                histograms.add(line.split()[2])
        elif line and not line.startswith("#"):
            name = line.split("{")[0]
            base = name.rpartition("_")[0]
            if base in histograms and name.rpartition("_")[2] in ("bucket", "count", "sum"):
                name = base  # a histogram's samples: _bucket, _count and _sum under its name
            if not names or names[-1] != name:
                names.append(name)
    assert len(types) == len(set(types)) and names == types  # each name once, in one run


# -- generation ------------------------------------------------------------------------------


def test_streaming_completion(vllm):
    body = {
        "model": MODEL,
        "prompt": "x" * 40,
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, last = stream(vllm.url, "/v1/completions", body)
    assert last == "[DONE]"
    *tokens, usage = chunks
    assert len(tokens) == 5
    for chunk in tokens:
        assert chunk["object"] == "text_completion" and chunk["model"] == MODEL
        assert chunk["id"].startswith("cmpl-") and chunk["id"] == tokens[0]["id"]
        (choice,) = chunk["choices"]
        assert choice["index"] == 0 and choice["logprobs"] is None and choice["text"]
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 4 + ["length"]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_streaming_without_usage_and_with_token_ids(vllm):
    chunks, last = stream(vllm.url, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3, "stream": True})
    assert last == "[DONE]" and len(chunks) == 3 and all(c["choices"] for c in chunks)


def test_streaming_chat(vllm):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "abcdefgh"}],
        "max_completion_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, last = stream(vllm.url, "/v1/chat/completions", body)
    assert last == "[DONE]"
    role, *tokens, usage = chunks
    assert role["object"] == "chat.completion.chunk" and role["id"].startswith("chatcmpl-")
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert len(tokens) == 4 and all("content" in c["choices"][0]["delta"] for c in tokens)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 3 + ["length"]
    assert usage["usage"] == {"prompt_tokens": 2 + 4, "completion_tokens": 4, "total_tokens": 10}


def test_non_streaming(vllm):
    completion = httpx.post(f"{vllm.url}/v1/completions", json={"prompt": "hello", "max_tokens": 3}).json()
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["finish_reason"] == "length" and completion["choices"][0]["text"]
    nulls = {"prompt_tokens_details": None, "completion_tokens_details": None}
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5, **nulls}
    again = httpx.post(f"{vllm.url}/v1/completions", json={"prompt": "hello", "max_tokens": 3}).json()
    assert again["choices"][0]["text"] == completion["choices"][0]["text"]  # deterministic

    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}]
    body = {"messages": messages, "ignore_eos": True}
    chat = httpx.post(f"{vllm.url}/v1/chat/completions", json=body).json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"] == {
        "prompt_tokens": 0 + 4 + 1 + 4,
        "completion_tokens": 16,
        "total_tokens": 25,
        **nulls,
    }


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "status", "err_type", "message", "param"),
    [
        (
            "/v1/completions",
            b"{not json",
            400,
            "Bad Request",  # FastAPI's json_invalid, as vLLM's validation handler words it
            "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON decode error'",
            "body.1",
        ),
        ("/v1/completions", b"[1, 2]", 400, "Bad Request", "JSON object", None),
        ("/v1/completions", {"max_tokens": 3}, 400, "BadRequestError", "prompt", None),
        ("/v1/chat/completions", {"prompt": "hi"}, 400, "BadRequestError", "messages", None),
        (
            "/v1/completions",
            {"prompt": "hi", "max_tokens": 0},
            400,
            "BadRequestError",
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
            "max_tokens",
        ),
        ("/v1/completions", {"prompt": "hi", "max_tokens": "8"}, 400, "BadRequestError", "max_tokens", None),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 1.5}, 400, "BadRequestError", "max_tokens", None),
        ("/v1/completions", {"prompt": "hi", "n": 2}, 400, "BadRequestError", "n=2", None),
        (
            "/v1/completions",
            {"prompt": "hi", "stream_options": {"include_usage": True}},
            400,
            "BadRequestError",
            "stream=True",
            None,
        ),
        (
            "/v1/completions",
            {"prompt": "x" * 400, "max_tokens": 5000},
            400,
            "BadRequestError",
            "max_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer output tokens. "
            "(parameter=max_tokens, value=5000)",
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4097},
            400,
            "BadRequestError",
            "max_completion_tokens=4097 cannot be greater than max_model_len=4096.",
            "max_completion_tokens",
        ),
        (
            "/v1/completions",
            {"prompt": "x" * 20000, "max_tokens": 1},
            400,
            "BadRequestError",
            "This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097 "
            "input tokens, which exceeds this limit even without any output tokens.",
            "input_tokens",
        ),
        (
            "/v1/chat/completions",
            {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]},
            404,
            "NotFoundError",
            f"The model `gpt-4` does not exist. Valid aliases: {MODEL}.",
            "model",
        ),
    ],
)
def test_request_errors(vllm, path, body, status, err_type, message, param):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(f"{vllm.url}{path}", **kwargs)
    assert_error(response, status, err_type, message, param)
    assert vllm.wait_until(lambda b: b.running == 0 and b.waiting == 0)


def test_context_error_in_sglang_words(sglang):
    response = httpx.post(f"{sglang.url}/v1/completions", json={"prompt": "x" * 400, "max_tokens": 3996})
    message = "maximum context length of 4096 tokens. You requested a total of 4096 tokens"
    assert_error(response, 400, "BadRequestError", message)


def test_route_errors(vllm, sglang):
    assert_not_routed(httpx.get(f"{vllm.url}/v2/nothing"), 404, "Not Found")
    response = httpx.get(f"{vllm.url}/v1/completions")
    assert_not_routed(response, 405, "Method Not Allowed")
    assert "POST" in response.headers["allow"]
    assert_error(httpx.get(f"{sglang.url}/v2/nothing"), 404, "Not Found")


# -- timing and batching -----------------------------------------------------------------------


async def timed_streams(url: str, count: int, max_tokens: int) -> list[float]:
    """Run ``count`` concurrent streams; the seconds each took to reach [DONE]."""
    body = {"prompt": "hi", "max_tokens": max_tokens, "stream": True}
    async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=None)) as client:
        start = time.perf_counter()

        async def one() -> float:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                text = (await response.aread()).decode()
            assert text.count("data: ") == max_tokens + 1 and text.endswith("data: [DONE]\n\n")
            return time.perf_counter() - start

        return list(await asyncio.gather(*(one() for _ in range(count))))


def test_honest_clock_at_concurrency_one(vllm):
    (elapsed,) = asyncio.run(timed_streams(vllm.url, 1, 20))
    assert 0.15 < elapsed < 0.4  # 20 steps of 10 ms


def test_continuous_batching_serves_streams_together(vllm):
    steps_before = vllm.batcher.steps
    elapsed = asyncio.run(timed_streams(vllm.url, 8, 20))
    assert max(elapsed) < 0.5  # about one stream's 200 ms, far from 8 x 200 ms
    assert vllm.batcher.steps - steps_before < 40  # the streams shared their steps


def test_max_running_queues_the_rest(two_slots):
    elapsed = sorted(asyncio.run(timed_streams(two_slots.url, 4, 20)))
    assert max(elapsed[:2]) < 0.35
    assert 0.35 < elapsed[3] < 0.7  # the last two waited for a free slot: ~2 x 200 ms
    assert two_slots.batcher.waiting == 0


def test_client_disconnect_frees_running_and_waiting(two_slots):
    body = {"prompt": "hi", "max_tokens": 1000, "stream": True}
    with httpx.Client(base_url=two_slots.url) as client:
        streams = [client.stream("POST", "/v1/completions", json=body) for _ in range(3)]
        responses = [s.__enter__() for s in streams]
        assert two_slots.wait_until(lambda b: b.running == 2 and b.waiting == 1)
        first_event = next(responses[0].iter_lines())
        assert first_event.startswith("data: ")
        for s in streams:
            s.__exit__(None, None, None)
    assert two_slots.wait_until(lambda b: b.running == 0 and b.waiting == 0)
    assert httpx.get(f"{two_slots.url}/health").status_code == 200


def test_client_disconnect_while_waiting_for_a_whole_response(vllm):
    request = json.dumps({"prompt": "hi", "max_tokens": 1000}).encode()
    with socket.create_connection(("127.0.0.1", vllm.port)) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(request), request)
        )
        assert vllm.wait_until(lambda b: b.running == 1)
    assert vllm.wait_until(lambda b: b.running == 0)


# -- the batcher alone -----------------------------------------------------------------------


async def token_times(batcher: Batcher, prompt_tokens: int, max_tokens: int, start: float) -> list[float]:
    async with batcher.submit(prompt_tokens, max_tokens) as seq:
        return [time.perf_counter() - start async for _ in seq]


def test_prefill_stalls_the_admitting_step():
    async def run() -> list[float]:
        batcher = Batcher(ConstantPacer(step_s=0.005, prefill_s_per_token=0.001))
        try:
            return await token_times(batcher, 50, 3, time.perf_counter())
        finally:
            await batcher.close()

    times = asyncio.run(run())
    assert 0.05 < times[0] < 0.1  # 5 ms step + 50 ms prefill
    assert times[2] - times[0] < 0.03  # then plain 5 ms steps


def test_kv_capacity_holds_back_admission():
    async def run() -> tuple[list[float], list[float], int]:
        batcher = Batcher(ConstantPacer(step_s=0.005, kv_tokens=90))
        start = time.perf_counter()
        try:
            first = asyncio.ensure_future(token_times(batcher, 40, 10, start))
            second = asyncio.ensure_future(token_times(batcher, 40, 10, start))
            await asyncio.sleep(0.02)
            waiting = batcher.waiting
            return await first, await second, waiting
        finally:
            await batcher.close()

    first, second, waiting = asyncio.run(run())
    assert waiting == 1  # 2 x (40 + 10) > 90 KV tokens
    assert second[0] >= first[-1]


def test_close_ends_waiting_sequences_and_step_hook_sees_batches():
    batches: list[int] = []

    async def run() -> None:
        batcher = Batcher(ConstantPacer(step_s=0.005, max_running=1), on_step=batches.append)
        running = batcher.submit(1, 1000)
        queued = batcher.submit(1, 1000)
        await anext(running)
        await batcher.close()
        with pytest.raises(BatcherClosed):
            await anext(queued)
        with pytest.raises(BatcherClosed):
            batcher.submit(1, 1)

    asyncio.run(run())
    assert batches and set(batches) == {1}  # one slot, one sequence served per step


# -- API keys, as the engines check them ------------------------------------------------------------

KEY = "sk-sim-secret"
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 2, "stream": True}


@pytest.fixture(scope="module")
def keyed_vllm() -> Iterator[ServerThread]:
    server = ServerThread("vllm", ConstantPacer(step_s=STEP_S, max_running=8), api_key=[KEY, "sk-second"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keyed_sglang() -> Iterator[ServerThread]:
    server = ServerThread("sglang", ConstantPacer(step_s=STEP_S, max_running=8), api_key=KEY)
    yield server
    server.stop()


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401 and response.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {KEY}", KEY, f"Bearer {KEY}x"])
def test_vllm_with_a_key_refuses_requests_without_it(keyed_vllm, header):
    headers = {"Authorization": header} if header else {}
    assert_unauthorized(httpx.post(keyed_vllm.url + "/v1/completions", json=BODY, headers=headers))
    assert_unauthorized(httpx.get(keyed_vllm.url + "/v1/models", headers=headers))
    assert_unauthorized(
        httpx.get(keyed_vllm.url + "/v1/no-such-path", headers=headers)
    )  # before routing, as vLLM


def test_vllm_with_a_key_serves_any_of_its_keys_and_leaves_health_and_metrics_open(keyed_vllm):
    for header in (f"Bearer {KEY}", f"bearer {KEY}", "Bearer sk-second"):
        response = httpx.get(keyed_vllm.url + "/v1/models", headers={"Authorization": header})
        assert response.status_code == 200 and response.json()["data"][0]["id"] == MODEL
    chunks, last = stream_with(keyed_vllm.url, {"Authorization": f"Bearer {KEY}"})
    assert last == "[DONE]" and "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    for path in ("/health", "/metrics"):
        assert httpx.get(keyed_vllm.url + path).status_code == 200
    assert httpx.options(keyed_vllm.url + "/v1/completions").status_code != 401


def test_sglang_with_a_key_guards_everything_but_health_and_metrics(keyed_sglang):
    for path in ("/get_model_info", "/v1/models", "/cockpit/truth"):
        assert_unauthorized(httpx.get(keyed_sglang.url + path))
    assert_unauthorized(httpx.post(keyed_sglang.url + "/v1/completions", json=BODY))
    assert (
        httpx.get(
            keyed_sglang.url + "/get_model_info", headers={"Authorization": f"Bearer {KEY}"}
        ).status_code
        == 200
    )
    for path in ("/health", "/metrics"):
        assert httpx.get(keyed_sglang.url + path).status_code == 200


def stream_with(url: str, headers: dict) -> tuple[list[dict], str]:
    with (
        httpx.Client(base_url=url, headers=headers) as client,
        client.stream("POST", "/v1/completions", json=BODY) as response,
    ):
        assert response.status_code == 200
        *chunks, last = sse_events(response)
    return [json.loads(c) for c in chunks], last


def test_which_keys_an_engine_requires():
    from cockpit.engines import api_keys

    env = {"VLLM_API_KEY": "from-env"}
    assert api_keys("vllm", ["--port", "1"], env) == ("from-env",)  # vLLM falls back to VLLM_API_KEY
    assert api_keys("vllm", ["--api-key", "a", "b", "--port", "1"], env) == (
        "a",
        "b",
    )  # --api-key wins, one or more
    assert api_keys("vllm", ["--api-key=a"], {}) == ("a",)
    assert api_keys("sglang", [], env) == ()  # SGLang reads --api-key only
    assert api_keys("sglang", ["--api-key", "k", "x"], env) == ("k",)
    assert api_keys("vllm", [], {"VLLM_API_KEY": ""}) == ()


def generated_tokens(url: str) -> float:
    """The sum of the engine's generation-token counter series in its /metrics."""
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if ":generation_tokens_total{" in line)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_generated_tokens_count_per_step_in_vllm_and_per_finished_request_in_sglang(engine):
    """vLLM adds each step's tokens to its counter (vllm/v1/metrics/stats.py, IterationStats);
    SGLang adds a request's tokens when it finishes (sglang/srt/managers/tokenizer_manager.py,
    collect_metrics), so mid-stream its counter has not moved."""
    server = ServerThread(engine, ConstantPacer(step_s=STEP_S, max_running=64))
    try:
        body = {"prompt": "hi", "max_tokens": 40, "stream": True}
        with (
            httpx.Client(base_url=server.url) as client,
            client.stream("POST", "/v1/completions", json=body) as response,
        ):
            lines = response.iter_lines()
            seen = 0
            while seen < 10:
                seen += next(lines).startswith("data: {")
            mid_stream = generated_tokens(server.url)
            for _ in lines:
                pass
        deadline = time.monotonic() + 2.0  # the handler counts a request as it returns
        while (finished := generated_tokens(server.url)) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.stop()
    if engine == "vllm":
        assert 10 <= mid_stream < 40
    else:
        assert mid_stream == 0
    assert finished == 40


# -- the body on the wire: HTTP/1.0 and 1.1, and a stream cut short ---------------------------


def raw_post(
    port: int, version: str, body: dict, cut: Callable[[], None] | None = None
) -> tuple[bytes, bytes]:
    """POST /v1/completions over a plain socket; the response's head and body as sent, read to
    the connection's end. ``cut`` is called once the first bytes of the body have come."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + payload)
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if cut is not None and b"data: {" in data:
                    cut, call = None, cut
                    call()
        except ConnectionResetError:
            pass  # an aborted connection may end in a reset
    response_head, _, response_body = data.partition(b"\r\n\r\n")
    return response_head, response_body


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The payload of a chunked body, and whether it ended with the last chunk (RFC 9112, 7.1)."""
    payload = b""
    while body:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            return payload, False
        size = int(size_line, 16)
        if size == 0:
            return payload, rest == b"\r\n"
        payload, body = payload + rest[:size], rest[size + 2 :]
    return payload, False


def event_texts(body: bytes) -> list[str]:
    """Each SSE event's text, with what differs per request (its id and second) left out."""
    events = body.decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    texts = []
    for event in events[:-2]:
        assert event.startswith("data: {")
        obj = json.loads(event.removeprefix("data: "))
        texts.append(json.dumps({k: v for k, v in obj.items() if k not in ("id", "created")}))
    return texts


def test_http_1_0_streams_bare_events_and_1_1_chunks_the_same_events(vllm):
    body = {"prompt": "hi", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    head_10, body_10 = raw_post(vllm.port, "1.0", body)
    assert b"transfer-encoding" not in head_10.lower()
    assert body_10.startswith(b"data: {") and body_10.endswith(b"data: [DONE]\n\n")
    head_11, body_11 = raw_post(vllm.port, "1.1", body)
    assert b"transfer-encoding: chunked" in head_11.lower()
    payload_11, complete = dechunk(body_11)
    assert complete
    assert event_texts(payload_11) == event_texts(body_10)
    assert len(event_texts(body_10)) == 6  # five tokens and the usage


def test_a_stream_the_engine_stops_mid_way_is_broken_not_ended():
    """A shutdown mid-stream aborts the connection: no last chunk, no [DONE], so the client can
    tell the stream was cut short."""
    server = ServerThread("vllm", ConstantPacer(step_s=STEP_S))
    try:
        body = {"prompt": "hi", "max_tokens": 4000, "stream": True}
        _, sent = raw_post(server.port, "1.1", body, cut=lambda: server._call(server.batcher.close()))
        payload, complete = dechunk(sent)
        assert payload.startswith(b"data: {") and not complete and b"[DONE]" not in payload
    finally:
        server.stop()


def test_a_failing_sink_ends_with_an_error_and_its_token_is_not_counted():
    class Failing:
        def __init__(self) -> None:
            self.ended: list[BaseException | None] = []

        def token(self, position: int) -> None:
            if position == 2:
                raise OSError("the write failed")

        def end(self, error: BatcherClosed | None) -> None:
            self.ended.append(error)

    async def run() -> tuple[Batcher, Failing]:
        batcher = Batcher(ConstantPacer(step_s=0.001))
        sink = Failing()
        seq = batcher.submit(0, 5, sink)
        while not sink.ended:
            await asyncio.sleep(0.001)
        await batcher.close()
        assert seq.generated == 2
        return batcher, sink

    batcher, sink = asyncio.run(run())
    (error,) = sink.ended
    assert isinstance(error, BatcherClosed) and "the token sink failed" in str(error)
    assert batcher.tokens_out == 2
