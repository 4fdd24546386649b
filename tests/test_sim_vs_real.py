"""The simulated vLLM against a real one: the captures in tests/fixtures/real_vllm_sim/ are the judge.

A real vLLM 0.32.0 (its CPU build) was started, asked, scraped and stopped; these tests compare
what the simulated engine prints and serves with those captures by shape: log line patterns and
their order, the files lines are logged from, JSON key sets (nulls and order included), metric
names, types, labels and help texts, error texts. Lines only the CPU path prints are left out:
the simulator plays GPU boxes (docs/simulator.md#checked-against-a-real-vllm).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import free_port
from simproc import SimProcess
from test_sim_server import ServerThread

from cockpit.sim.batcher import ConstantPacer
from cockpit.sim.flags import parse_engine_args
from cockpit.sim.logs import VLLMLog
from cockpit.sim.metrics import go_float

REAL = Path(__file__).parent / "fixtures" / "real_vllm_sim"
MODEL = "qwen3-30b-a3b-fp8"


def real(name: str) -> str:
    return (REAL / name).read_text()


# vllm/logging_utils/formatter.py: "(Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message"
TAGGED = re.compile(
    r"^\((?P<process>[\w-]+) pid=(?P<pid>\d+)\) (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"\d\d-\d\d \d\d:\d\d:\d\d \[(?P<source>(?P<file>[\w.]+\.py):\d+)\] (?P<message>.*)$"
)
ACCESS = re.compile(
    r'^INFO:     \d+\.\d+\.\d+\.\d+:\d+ - "(?:GET|POST) /\S* HTTP/1\.[01]" \d{3} [A-Z][\w ]+$'
)


def tagged(text: str) -> list[re.Match[str]]:
    return [m for line in text.splitlines() if (m := TAGGED.match(line))]


# The milestones both paths log, in the order a real vLLM logs them: (pattern, the file it logs from).
MILESTONES = (
    (r"^$", "api_utils.py"),  # the logo's first line: its message starts with a newline
    (r"^ ▄▄ ▄█ █     █     █ ▀▄▀ █  version \S+$", "api_utils.py"),
    (r"^  █▄█▀ █     █     █     █  model   \S+$", "api_utils.py"),
    (r"^non-default args: \{", "api_utils.py"),
    (r"^Resolved architecture: \w+$", "model.py"),
    (r"^Using max model len \d+$", "model.py"),
    (r"^Initializing a V1 LLM engine \(v[\d.]+\) with config: model=", "core.py"),
    (r"^DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=", "multiproc_executor.py"),
    (r"^world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=file:///tmp/vllm_dist_\w+ backend=", "parallel_state.py"),
    (r"^rank \d+ in world size \d+ is assigned as DP rank \d+, PP rank \d+, PCP rank 0, TP rank \d+", "parallel_state.py"),
    (r"^Starting to load model \S+\.\.\.$", None),  # gpu_model_runner.py on a GPU, cpu_model_runner.py on CPU
    (r"^Loading weights took [\d.]+ seconds$", "default_loader.py"),
    (r"^[A-Z]+ KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: [\d.]+x$", "kv_cache_utils.py"),
    (r"^init engine \(profile, create kv cache, warmup model\) took [\d.]+ s$", "core.py"),
    (r"^Supported tasks: \['generate'\]$", "entry.py"),
    (r"^Scale-out endpoints are disabled\. Restart vllm serve with --enable-scale-out to enable them\.$", "factories.py"),
    (r"^Starting vLLM server on http://[\d.]+:\d+$", "entry.py"),
    (r"^Available routes are:$", "launcher.py"),
    (r"^Route: /\S*, Methods: [A-Z, ]+$", "launcher.py"),
)  # fmt: skip
UVICORN_START = ("INFO:     Waiting for application startup.", "INFO:     Application startup complete.")


def milestones(text: str) -> list[tuple[int, str, str]]:
    """(milestone index, process, file:line) of each tagged line that is a milestone, in log order."""
    found = []
    for m in tagged(text):
        for i, (pattern, _) in enumerate(MILESTONES):
            if re.search(pattern, m["message"]):
                found.append((i, m["process"], m["source"]))
                break
    return found


# -- the shared simulated engine -------------------------------------------------------------------


class Served:
    def __init__(self, sim: SimProcess, url: str) -> None:
        self.sim, self.url = sim, url
        self.startup = ""  # the log until ready


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """One simulated vLLM, TP 2: asked the captures' requests, its stats logged every 0.3 s."""
    port = free_port()
    argv = ["serve", MODEL, "--tensor-parallel-size", "2", "--port", str(port), "--host", "127.0.0.1"]
    sim = SimProcess(
        "vllm",
        [*argv, "--enforce-eager"],
        tmp_path_factory.mktemp("simbox"),
        env={"VLLM_LOG_STATS_INTERVAL": "0.3"},
    )
    server = Served(sim, f"http://127.0.0.1:{port}")
    try:
        sim.wait_ready(server.url)
        server.startup = sim.output()
        yield server
    finally:
        sim.stop()


# -- the start-up log ---------------------------------------------------------------------------


def test_every_tagged_line_has_the_real_loggers_format(served):
    real_lines = [line for line in real("serve_and_sigterm.log").splitlines() if line.startswith("(")]
    assert real_lines and all(TAGGED.match(line) for line in real_lines if "VllmWorker-" not in line)
    sim_lines = [line for line in served.startup.splitlines() if line.startswith("(")]
    assert sim_lines and all(TAGGED.match(line) for line in sim_lines), [
        line for line in sim_lines if not TAGGED.match(line)
    ]


def test_each_process_has_its_own_pid_as_the_real_ones_do(served):
    def pids(text: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for m in tagged(text):
            out.setdefault(m["process"].split("_")[0], set()).add(m["pid"])
        return out

    real_pids, sim_pids = pids(real("serve_and_sigterm.log")), pids(served.startup)
    assert {"APIServer", "EngineCore", "Worker"} <= set(real_pids) and set(sim_pids) == {
        "APIServer",
        "EngineCore",
        "Worker",
    }
    for found in (real_pids, sim_pids):
        api, core = found["APIServer"], found["EngineCore"]
        assert len(api) == 1 and len(core) == 1 and api != core and not found["Worker"] & (api | core)
    assert sim_pids["APIServer"] == {str(served.sim.proc.pid)}
    assert len(sim_pids["Worker"]) == 2  # one per GPU: a worker keeps its pid when it is renamed Worker_TPn
    assert f"INFO:     Started server process [{served.sim.proc.pid}]" in served.startup


def test_the_milestones_come_in_the_real_order_from_the_real_files(served):
    real_found = milestones(real("serve_and_sigterm.log"))
    sim_found = milestones(served.startup)

    def order(found: list[tuple[int, str, str]]) -> list[int]:
        return list(dict.fromkeys(i for i, _, _ in found))  # each milestone where it first comes

    assert order(real_found) == list(range(len(MILESTONES))), "the capture no longer shows every milestone"
    assert order(sim_found) == order(real_found)
    sources = {i: f for i, _, f in real_found}
    for i, _, source in sim_found:  # the file and line vLLM 0.32.0 logs each from
        expected = MILESTONES[i][1]
        assert expected is None or source.split(":")[0] == expected and source == sources[i], (
            MILESTONES[i][0],
            source,
        )
    real_by = {i: p.split("_")[0] for i, p, _ in real_found}
    assert {i: p.split("_")[0] for i, p, _ in sim_found} == real_by  # who says each


def test_the_simulator_prints_no_line_the_real_engine_does_not_know(served):
    """Every tagged line's message matches a real line's (numbers and names aside), or is one only a
    GPU prints (the model runner's memory, the CUDA graphs, the GPU worker's KV memory). With
    --enforce-eager both the API server and the engine core warn, as the real ones did."""
    gpu_only = re.compile(
        r"^Model loading took|^Estimated CUDA graph memory|^Available KV cache memory|^Graph capturing finished"
    )
    shapes = {_shape(m["message"]) for m in tagged(real("serve_and_sigterm.log"))}
    for m in tagged(served.startup):
        message = m["message"]
        assert gpu_only.search(message) or _shape(message) in shapes, message
    eager = {(m["process"], m["source"]) for m in tagged(served.startup) if m["level"] == "WARNING"}
    real_eager = {
        (m["process"], m["source"])
        for m in tagged(real("serve_and_sigterm.log"))
        if m["source"] in ("vllm.py:1703", "vllm.py:1727")
    }
    assert (
        eager
        == real_eager
        == {(p, f"vllm.py:{n}") for p in ("APIServer", "EngineCore") for n in (1703, 1727)}
    )


def _shape(message: str) -> str:
    """A message with its values blanked: numbers, quoted strings, paths, the config's details."""
    message = re.sub(r"with config: .*", "with config: ...", message)
    message = re.sub(r"non-default args: .*", "non-default args: ...", message)
    message = re.sub(r"(version|model)( +)\S+$", r"\1\2X", message)
    message = re.sub(r"(Resolved architecture:|Starting to load model|Route:) \S+", r"\1 X", message)
    message = re.sub(r"file:///\S+", "F", message)
    message = re.sub(r"backend=\w+", "backend=B", message)
    message = re.sub(r"\b(GPU|CPU)\b", "DEV", message)
    message = re.sub(r"Methods: [A-Z, ]+", "Methods: M", message)
    message = re.sub(r"VLLM::\w+", "VLLM::W", message)
    message = re.sub(r"process EngineCore\w*", "process E", message)
    message = re.sub(r"https?://[\w.]+:\d+", "URL", message)
    message = re.sub(r"\bN/A\b", "0", message)
    return re.sub(r"\d[\d,.]*", "0", message)


def test_the_logo_is_the_real_one(served):
    real_logo = [m["message"] for m in tagged(real("serve_and_sigterm.log")) if m["file"] == "api_utils.py"][
        :6
    ]
    sim_logo = [m["message"] for m in tagged(served.startup) if m["file"] == "api_utils.py"][:6]
    assert [line.replace("0.32.0", "V").replace("/tmp/tiny", "M") for line in real_logo] == [
        line.replace("0.33.0", "V").replace(MODEL, "M") for line in sim_logo
    ]


def test_the_plain_version_line_where_vllm_prints_no_logo():
    lines: list[str] = []
    args = parse_engine_args("vllm", ["serve", MODEL])
    VLLMLog(lines.append, {"VLLM_DISABLE_LOG_LOGO": "1"}).announce(args)
    assert lines[0].endswith(f"[api_utils.py:347] vLLM server version {args.version}, serving model {MODEL}")
    assert len(lines) == 2


def test_non_default_args_name_the_model_in_vllms_order():
    """vllm serve puts the positional model in args.model: the real log names it after the frontend's
    options, before the engine's."""
    real_args = re.search(r"non-default args: (\{.*\})", real("serve_and_sigterm.log"))
    assert real_args is not None
    real_keys = list(eval(real_args[1]))  # a dict's repr
    lines: list[str] = []
    argv = ["serve", "m", "--enforce-eager", "--port", "18000", "--host", "127.0.0.1", "--api-key", "k"]
    VLLMLog(lines.append).announce(parse_engine_args("vllm", argv))
    logged = re.search(r"non-default args: (\{.*\})", lines[-1])
    assert logged is not None
    sim = eval(logged[1])
    assert [k for k in sim if k in real_keys] == [k for k in real_keys if k in sim]
    assert [k for k in sim if k != "api_key"] == ["host", "port", "model", "enforce_eager"]
    assert sim["model"] == "m" and sim["api_key"] == "***"  # redacted, as vLLM does


def test_the_address_without_host_is_vllms_all_interfaces():
    """vllm/entrypoints/launchers/launcher.py: setup_server binds "" and names it 0.0.0.0."""
    lines: list[str] = []
    VLLMLog(lines.append).ready(parse_engine_args("vllm", ["serve", MODEL]))
    assert any(line.endswith("[entry.py:140] Starting vLLM server on http://0.0.0.0:8000") for line in lines)
    lines.clear()
    VLLMLog(lines.append).ready(parse_engine_args("vllm", ["serve", MODEL, "--host", "::1", "--port", "9"]))
    assert any(line.endswith("Starting vLLM server on http://[::1]:9") for line in lines)


def test_uvicorn_says_what_it_said_and_logs_each_request(served):
    real_text, sim_text = real("serve_and_sigterm.log"), served.startup
    for line in UVICORN_START:
        assert line in real_text and line in sim_text
    httpx.get(served.url + "/health")
    time.sleep(0.2)
    real_access = [line for line in real_text.splitlines() if line.startswith("INFO:     1")]
    assert real_access and all(ACCESS.match(line) for line in real_access)
    sim_access = [line for line in served.sim.output().splitlines() if line.startswith("INFO:     1")]
    assert sim_access and all(ACCESS.match(line) for line in sim_access)
    assert any(line.endswith('"GET /health HTTP/1.1" 200 OK') for line in sim_access)


def test_the_periodic_stats_line_is_the_real_ones(served):
    (real_line,) = tagged(real("stats.log"))
    body = {"model": MODEL, "prompt": "hello world", "max_tokens": 30}
    httpx.post(served.url + "/v1/completions", json=body, timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [m for m in tagged(served.sim.output()) if m["file"] == "loggers.py"]
        if found:
            break
        time.sleep(0.1)
    assert found
    assert _shape(found[0]["message"]) == _shape(real_line["message"])
    assert (found[0]["process"], found[0]["source"]) == (real_line["process"], real_line["source"])


# -- HTTP: streams, whole responses, errors, models, version ----------------------------------------


def sse(text: str) -> list[dict]:
    events = [e.removeprefix("data: ") for e in text.strip().split("\n\n")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def shape(obj: object) -> object:
    """Keys in order, recursively, values by kind: what two responses must share."""
    if isinstance(obj, dict):
        return [(k, shape(v)) for k, v in obj.items()]
    if isinstance(obj, list):
        return [shape(v) for v in obj]
    return None if obj is None else type(obj).__name__


def streamed(url: str, path: str, body: dict) -> list[dict]:
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post(path, json=body)
    assert response.status_code == 200
    return sse(response.text)


@pytest.mark.parametrize(
    ("path", "capture", "body"),
    [
        ("/v1/completions", "completion_stream.txt", {"prompt": "Hello", "max_tokens": 6}),
        ("/v1/chat/completions", "chat_stream.txt", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ],
)  # fmt: skip
def test_streamed_chunks_have_the_real_keys_nulls_and_order(served, path, capture, body):
    real_chunks = sse(real(capture))
    sim_chunks = streamed(
        served.url, path, {"model": MODEL, **body, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert len(sim_chunks) == len(real_chunks)
    for sim, got in zip(sim_chunks, real_chunks, strict=True):
        assert shape(sim) == shape(got)
    *_, last, usage = sim_chunks
    assert last["choices"][0]["finish_reason"] == "length" and usage["choices"] == []
    assert usage["system_fingerprint"].startswith("vllm-0.33.0-tp2-")
    assert re.fullmatch(r"(cmpl|chatcmpl)-[0-9a-f]{16}", sim_chunks[0]["id"])
    assert re.fullmatch(r"(cmpl|chatcmpl)-[0-9a-f]{16}", real_chunks[0]["id"])


def test_without_usage_the_finishing_chunk_carries_the_fingerprint(served):
    """vllm/entrypoints/openai/*/serving.py stamp the fingerprint on the finishing chunk when no
    usage chunk follows."""
    chunks = streamed(served.url, "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True})
    assert "system_fingerprint" not in chunks[0] and chunks[-1]["system_fingerprint"].startswith("vllm-")


def test_the_client_request_id_names_the_response(served):
    """vllm/entrypoints/serve/engine/serving.py: _base_request_id takes X-Request-Id."""
    response = httpx.post(
        served.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers={"X-Request-Id": "abc"}
    )
    assert response.json()["id"] == "cmpl-abc"


def test_a_whole_completion_has_every_real_field(served):
    real_body = json.loads(real("completion_nostream.json"))
    sim_body = httpx.post(served.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 4}).json()
    assert shape(sim_body) == shape(real_body)
    assert (
        sim_body["system_fingerprint"]
        == streamed(served.url, "/v1/completions", {"prompt": "x", "max_tokens": 1, "stream": True})[-1][
            "system_fingerprint"
        ]
    )


def test_a_whole_chat_has_every_field_of_vllms_response(served):
    """vllm/entrypoints/openai/chat_completion/protocol.py: ChatCompletionResponse, dumped whole."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    chat = httpx.post(served.url + "/v1/chat/completions", json=body).json()
    assert list(chat) == [
        "id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
        "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics",
    ]  # fmt: skip
    (choice,) = chat["choices"]
    assert list(choice) == [
        "index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids", "routed_experts",
    ]  # fmt: skip
    assert list(choice["message"]) == [
        "role", "content", "refusal", "annotations", "audio", "function_call", "reasoning",
    ]  # fmt: skip
    assert list(chat["usage"]) == list(json.loads(real("completion_nostream.json"))["usage"])


def http_body(capture: str) -> tuple[int, dict]:
    head, _, body = real(capture).partition("\n\n")
    return int(head.split()[1]), json.loads(body)


def test_an_unknown_model_is_refused_in_the_real_words(served):
    status, real_body = http_body("wrong_model.txt")
    response = httpx.post(
        served.url + "/v1/completions", json={"model": "wrong", "prompt": "x", "max_tokens": 2}
    )
    assert response.status_code == status == 404
    body = response.json()
    assert shape(body) == shape(real_body)
    assert body["error"]["message"] == f"The model `wrong` does not exist. Valid aliases: {MODEL}."
    assert real_body["error"]["message"] == "The model `wrong` does not exist. Valid aliases: <path>"
    assert {k: v for k, v in body["error"].items() if k != "message"} == {
        k: v for k, v in real_body["error"].items() if k != "message"
    }


def test_a_path_in_an_error_is_hidden_as_vllm_hides_it():
    server = ServerThread("vllm", ConstantPacer(step_s=0.01))
    try:
        response = httpx.post(server.url + "/v1/completions", json={"model": "/tmp/tiny", "prompt": "x"})
    finally:
        server.stop()
    assert (
        response.json()["error"]["message"]
        == "The model `<path>` does not exist. Valid aliases: MiniMaxAI/MiniMax-M2.5."
    )


def test_too_many_tokens_is_refused_in_the_real_words():
    status, real_body = http_body("too_long.txt")
    limit = int(re.search(r"max_model_len=(\d+)", real_body["error"]["message"])[1])  # type: ignore[index]
    asked = int(re.search(r"max_tokens=(\d+)", real_body["error"]["message"])[1])  # type: ignore[index]
    server = ServerThread("vllm", ConstantPacer(step_s=0.01), max_model_len=limit)
    try:
        response = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": asked})
    finally:
        server.stop()
    assert response.status_code == status == 400
    assert response.json() == real_body


def test_a_prompt_and_max_tokens_past_the_context_are_cut_not_refused():
    """vllm/entrypoints/serve/utils/api_utils.py: get_max_tokens takes the smaller of max_tokens and
    what the context leaves; only a prompt past the context is refused."""
    server = ServerThread("vllm", ConstantPacer(step_s=0.001), max_model_len=64)
    try:
        whole = httpx.post(
            server.url + "/v1/completions", json={"prompt": "x" * 200, "max_tokens": 60}
        ).json()
        over = httpx.post(server.url + "/v1/completions", json={"prompt": "x" * 400, "max_tokens": 1})
        ids = httpx.post(server.url + "/v1/completions", json={"prompt": list(range(70)), "max_tokens": 1})
        full = httpx.post(server.url + "/v1/completions", json={"prompt": list(range(64)), "max_tokens": 1})
    finally:
        server.stop()
    assert whole["usage"] == {
        "prompt_tokens": 50,
        "total_tokens": 64,
        "completion_tokens": 14,
        **NULL_DETAILS,
    }
    assert over.status_code == 400 and over.json()["error"] == {
        "message": "This model's maximum context length is 64 tokens. However, your prompt contains at least 65 "
        "input tokens, which exceeds this limit even without any output tokens. Please reduce the length of "
        "the input prompt. (parameter=input_tokens, value=65)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
    assert "your prompt contains 70 input tokens" in ids.json()["error"]["message"]
    assert (
        full.json()["error"]["message"]
        == "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    )


NULL_DETAILS = {"prompt_tokens_details": None, "completion_tokens_details": None}


def test_models_and_version_have_vllms_shapes(served):
    """vllm/entrypoints/serve/engine/protocol.py: ModelCard with one ModelPermission;
    vllm/entrypoints/serve/instrumentator/basic.py: /version (the real one said {"version":"0.32.0"})."""
    models = httpx.get(served.url + "/v1/models").json()
    (card,) = models["data"]
    assert list(card) == [
        "id",
        "object",
        "created",
        "owned_by",
        "root",
        "parent",
        "max_model_len",
        "permission",
    ]
    (permission,) = card["permission"]
    assert list(permission) == [
        "id", "object", "created", "allow_create_engine", "allow_sampling", "allow_logprobs",
        "allow_search_indices", "allow_view", "allow_fine_tuning", "organization", "group", "is_blocking",
    ]  # fmt: skip
    assert permission["id"].startswith("modelperm-") and permission["object"] == "model_permission"
    version = httpx.get(served.url + "/version")
    assert version.json() == {"version": "0.33.0"} and shape(version.json()) == shape({"version": "0.32.0"})
    assert httpx.get(served.url + "/load").json() == {"server_load": 0}


def test_the_routes_logged_are_the_routes_served_in_the_real_order(served):
    real_routes = [
        m["message"] for m in tagged(real("serve_and_sigterm.log")) if m["message"].startswith("Route: ")
    ]
    sim_routes = [m["message"] for m in tagged(served.startup) if m["message"].startswith("Route: ")]
    assert sim_routes == [r for r in real_routes if r in sim_routes]  # a part of the real list, in its order
    for route in sim_routes:
        path, methods = re.fullmatch(r"Route: (\S+), Methods: (.+)", route).groups()  # type: ignore[union-attr]
        for method in methods.split(", "):
            assert httpx.request(method, served.url + path, timeout=10).status_code != 404, route
    assert httpx.get(served.url + "/no-such-route").json() == {"detail": "Not Found"}  # FastAPI's own handler


# -- /metrics ----------------------------------------------------------------------------------------


def families(text: str) -> dict[str, tuple[str, str, set[frozenset[str]]]]:
    """name -> (type, help, the label-name sets of its samples), from Prometheus text."""
    out: dict[str, list] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split()[2]
            out[current] = ["", line.split(" ", 3)[3] if line.count(" ") >= 3 else "", set()]
        elif line.startswith("# TYPE "):
            out[line.split()[2]][0] = line.split()[3]
        elif line and not line.startswith("#"):
            labels = re.search(r"\{(.*)\}", line)
            names = frozenset(re.findall(r'(\w+)="', labels[1])) if labels else frozenset()
            out[current][2].add(names - {"le"})
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


IMPORTANT = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
    "vllm:request_success_created", "vllm:prompt_tokens_created",
}  # fmt: skip


def test_every_metric_served_is_the_real_engines_with_its_type_help_and_labels(served):
    httpx.post(served.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    real_families = families(real("metrics.txt"))
    sim_families = families(httpx.get(served.url + "/metrics").text)
    ours = {n for n in sim_families if n.startswith("cockpit_sim_")}  # the simulator's own health
    assert ours == {
        "cockpit_sim_steps_total",
        "cockpit_sim_step_slips_total",
        "cockpit_sim_dropped_seconds_total",
    }
    for name, (kind, help, labels) in sim_families.items():
        if name in ours:
            continue
        assert name in real_families, name
        assert (kind, help, labels) == real_families[name], name
    assert set(sim_families) >= IMPORTANT
    real_order = [n for n in real_families if n in sim_families]
    assert [n for n in sim_families if n not in ours] == real_order


def test_histogram_buckets_and_values_are_written_as_prometheus_client_writes_them():
    """Bucket bounds are vLLM's (vllm/v1/metrics/buckets.py), the token ones up to max_model_len."""

    def buckets(text: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, le in re.findall(r'^(vllm:\w+)_bucket\{.*le="([^"]+)"', text, re.M):
            out.setdefault(name, []).append(le)
        return out

    real_text = real("metrics.txt")
    limit = int(re.search(r"Using max model len (\d+)", real("serve_and_sigterm.log"))[1])  # type: ignore[index]
    server = ServerThread("vllm", ConstantPacer(step_s=0.001), max_model_len=limit)
    try:
        httpx.post(server.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 5})
        sim_text = httpx.get(server.url + "/metrics").text
    finally:
        server.stop()
    real_buckets, sim_buckets = buckets(real_text), buckets(sim_text)
    assert sim_buckets and all(sim_buckets[n] == real_buckets[n] for n in sim_buckets)
    created = re.findall(r"^vllm:\w+_created\{[^}]*\} (\S+)$", real_text, re.M)
    assert all(re.fullmatch(r"\d\.\d+e\+09", v) for v in created)
    assert [go_float(v) for v in (1796198257.213057, 24.0, 0.0, float("inf"), 1e6, 0.001)] == [
        "1.796198257213057e+09", "24.0", "0.0", "+Inf", "1e+06", "0.001",
    ]  # fmt: skip
    success = re.search(
        r'vllm:request_success_total\{engine="0",finished_reason="length",[^}]*\} (\S+)', sim_text
    )
    assert success is not None and success[1] == "1.0"
    assert re.search(r"vllm:time_to_first_token_seconds_count\{[^}]*\} 1\.0$", sim_text, re.M)
    assert re.search(r"vllm:inter_token_latency_seconds_count\{[^}]*\} 4\.0$", sim_text, re.M)


# -- argparse, a config vLLM refuses, a port taken ------------------------------------------------------


def sim_run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COCKPIT_SIM_STATE": str(tmp_path), "COCKPIT_SIM_TIME_SCALE": "50"}
    return subprocess.run(
        [sys.executable, "-m", "cockpit.sim", "vllm", "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("capture", "flags"),
    [("badvalue.log", ["--max-num-seqs", "abc"]), ("badchoice.log", ["--kv-cache-dtype", "fp9"])],
)
def test_argparse_refuses_as_the_real_parser_does(tmp_path, capture, flags):
    """Exit 2, argparse's usage then its error, the prog named after the entrypoint."""
    real_lines = real(capture).splitlines()
    api_server = sim_run(
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, *flags], tmp_path
    )
    serve = sim_run(["serve", MODEL, *flags], tmp_path)
    assert api_server.returncode == serve.returncode == 2
    sim_lines = api_server.stderr.splitlines()
    assert "DeprecationWarning: `vllm.entrypoints.openai.api_server` is deprecated" in sim_lines[0]
    usage = next(line for line in sim_lines if line.startswith("usage: "))
    assert usage.split()[:2] == real_lines[0].split()[:2] == ["usage:", "api_server.py"]
    error = real_lines[-1]
    if "invalid choice" in error:  # the choices are each version's own
        error = error.split(" (choose from ")[0]
    assert sim_lines[-1].startswith(error)
    assert serve.stderr.splitlines()[0] == "usage: vllm serve [model_tag] [options]"
    assert serve.stderr.splitlines()[-1].startswith(error.replace("api_server.py:", "vllm serve:"))


def _frames(text: str) -> list[tuple[str, str]]:
    """The traceback's vLLM and pydantic frames: (file under site-packages, function)."""
    return re.findall(
        r'File "[^"]*/site-packages/((?:vllm|pydantic)/[^"]+)", line \d+, in (\w+)', text
    ) or re.findall(r'File "[^"]*/dist-packages/((?:vllm|pydantic)/[^"]+)", line \d+, in (\w+)', text)


def _after_args(text: str) -> list[str]:
    """The tagged messages between the non-default args and the traceback, but the warning about
    the host's open-files limit (vllm/utils/system_utils.py: set_ulimit), which is the host's."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "non-default args:" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("Traceback"))
    return [m["message"] for m in tagged("\n".join(lines[start + 1 : end])) if "ulimit" not in m["message"]]


def test_a_context_above_the_models_fails_in_the_real_config_traceback(tmp_path):
    real_text = real("maxlen.log")
    api_server = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL]
    done = sim_run([*api_server, "--max-model-len", "10000000", "--port", str(free_port())], tmp_path)
    assert done.returncode == 1
    out = done.stderr + done.stdout  # the warnings (stderr) come first
    assert (
        [_shape(m) for m in _after_args(out)]
        == [_shape(m) for m in _after_args(real_text)]
        == ["Resolved architecture: X"]
    )
    real_frames = [f for f in _frames(real_text) if not f[0].startswith("vllm/tracing")]
    assert [f for f in _frames(out) if f[0].startswith(("vllm/", "pydantic/"))] == real_frames
    real_tail, sim_tail = real_text.strip().splitlines()[-3:], out.strip().splitlines()[-3:]
    assert (
        sim_tail[0]
        == real_tail[0]
        == "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"
    )
    assert (
        sim_tail[1].split(" [type=")[1] == real_tail[1].split(" [type=")[1]
    )  # what pydantic shows of the input
    assert sim_tail[1].startswith(
        "  Value error, User-specified max_model_len (10000000) is greater than the derived"
    )
    assert sim_tail[2] == real_tail[2]


def test_a_port_taken_fails_before_the_engine_as_the_real_one(tmp_path):
    real_text = real("portinuse.log")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = sim_run(
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                MODEL,
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
            ],
            tmp_path,
        )
    assert done.returncode == 1
    out = done.stderr + done.stdout  # the warnings (stderr) come first
    assert _after_args(real_text) == [] and _after_args(out) == []
    assert _frames(out) == _frames(real_text)
    assert (
        out.strip().splitlines()[-1]
        == real_text.strip().splitlines()[-1]
        == "OSError: [Errno 98] Address already in use"
    )


# -- SIGTERM ----------------------------------------------------------------------------------------------


def test_sigterm_says_what_the_real_engine_says(tmp_path):
    port = free_port()
    sim = SimProcess("vllm", ["serve", MODEL, "--tensor-parallel-size", "2", "--port", str(port)], tmp_path)
    try:
        sim.wait_ready(f"http://127.0.0.1:{port}")
    finally:
        assert sim.stop() == 0  # SIGTERM
    text = sim.log_path.read_text()
    shutdown = text[text.index("[shutdown] API server: shutdown triggered") - 80 :]
    real_text = real("sigterm_tail.log")

    def said(log: str) -> list[tuple[str, str]]:
        return [
            (m["process"].split("_")[0], _shape(m["message"]))
            for m in tagged(log)
            if "[shutdown]" in m["message"] or "Parent process exited" in m["message"]
        ]

    def by_process(found: list[tuple[str, str]], process: str) -> list[str]:
        out: list[str] = []
        for p, message in found:
            if p == process and (not out or out[-1] != message):
                out.append(message)
        return out

    real_said, sim_said = said(real_text), said(shutdown)
    for process in ("APIServer", "EngineCore", "Worker"):
        assert by_process(sim_said, process) == by_process(real_said, process), process
    uvicorn = [line for line in shutdown.splitlines() if line.startswith("INFO:     ") and "pid=" not in line]
    assert uvicorn[-3:] == real_text.strip().splitlines()[-3:]
