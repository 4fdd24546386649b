"""What each engine says and serves, as the readers of its output need it.

The log readers (startup phases, failure diagnosis), the metrics scraper, the process finder and
the simulated engine all deal in an engine's own words: the lines that mark its startup, the
errors it raises, its Prometheus names, its launcher, and how its argument parser and its HTTP
server behave. Each engine's package holds them in one ``EngineSurface``
(cockpit/engines/<engine>/surface.py), so a reader asks the surface of the engine it was given
instead of naming engines, and the simulator prints the very texts the readers match and answers
as the engine's server answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Pattern = re.Pattern[str]


@dataclass(frozen=True, kw_only=True)
class EngineSurface:
    """One engine's vocabulary. Patterns are searched in a log line's message (its prefix gone:
    cockpit.runner.phases.log_message); texts are what the engine prints, verbatim."""

    name: str  # what a person types: "vllm"
    label: str  # what people read: "vLLM"
    default_port: int

    # -- launching -------------------------------------------------------------------------------
    # The leading words of a server command line, as the adapters write them and people type them.
    launchers: tuple[tuple[str, ...], ...]
    program: str  # what the server's argument parser calls itself in its errors
    usage: str | None  # its usage line (None: argparse writes one from the options)
    distributions: tuple[str, ...]  # the Python distributions that install the engine
    console_script: str | None  # the command that starts it with `serve` after it
    process_title: str  # a regex: the names its processes give themselves (setproctitle)
    launcher_module: str  # a regex: the module `python -m` runs
    context_flag: str  # the flag that sets the context length

    # -- the startup log (cockpit.runner.phases) ---------------------------------------------------
    signature: Pattern | None  # a line only this engine prints: tells its log from another's
    starting: tuple[str, ...]  # regexes: the engine begins to start
    load_begin: tuple[str, ...]  # regexes: weight loading begins
    weights_loaded: tuple[Pattern, ...]  # the weights are in; group gib (memory) or seconds
    kv_memory: tuple[Pattern, ...]  # the KV cache's memory is known; group gib
    kv_tokens: tuple[Pattern, ...]  # the KV cache's size in tokens; group tokens
    cuda_graphs: tuple[str, ...]  # regexes: CUDA graph capture begins
    ready_line: str  # the line that says the server serves
    # Ready lines of other engines this one prints before it is ready (SGLang's uvicorn says
    # "Application startup complete." before its warm-up request).
    not_ready_lines: tuple[str, ...] = ()

    # -- failures (cockpit.runner.diagnose) -------------------------------------------------------
    # Lines that only say something failed elsewhere: never a root cause.
    wrappers: tuple[str, ...] = ()
    # A failure's id (the diagnosis knows how to explain each id) to the engine's words for it.
    failures: Mapping[str, Pattern] = field(default_factory=dict)
    # A phase (cockpit.runner.phases) to regexes of the functions a traceback passes through in it.
    traceback_phases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    # -- across nodes (cockpit.runner.phases; docs/simulator.md#nodes) ----------------------------
    # A node begins to wait at the rendezvous (group address: where, when the line says).
    join_waiting: tuple[Pattern, ...] = ()
    # A rank entered the rendezvous: group rank names it (a number, or SGLang's "PP1 TP3"), world
    # the world size where the line says it. Searched in the whole line, not its message alone:
    # SGLang names the rank only in its prefix.
    rank_joined: tuple[Pattern, ...] = ()
    # Every rank joined: a line only printed once the process group holds the whole world.
    all_joined: tuple[Pattern, ...] = ()
    # Seconds the head's store waits for the other ranks unless told otherwise.
    join_timeout_s: float = 600.0

    # -- its argument parser (cockpit.sim.flags parses argv as the engine does) -------------------
    model_positional: bool  # the model may come first, without a flag: `vllm serve MODEL`
    model_dest: str  # where the parser keeps the model (the option's dest)
    # Its parser rewrites argv before argparse reads it (underscores, -O3, --model first, dotted keys).
    flexible_args: bool
    # The usage of the command's root parser, which reports unrecognized arguments itself (None:
    # the server's parser reports them).
    root_usage: str | None
    # Its words for a size it cannot read, with {text} (None: argparse's "invalid ... value").
    size_error: str | None
    # A part of the layout (tp, pp, dp, ep, expert_parallel, dpa, attn_dp) to the parser's dest for it.
    parallel_dests: Mapping[str, str]

    # -- its HTTP server (cockpit.sim.server and cockpit.sim.frames answer as it does) ------------
    routes: tuple[tuple[str, str], ...]  # (path, "GET, POST") the simulator serves, in the engine's order
    metrics_by_default: bool  # /metrics is served without a flag asking for it
    # --api-key guards the paths under key_protected_paths, except those under key_open_paths;
    # OPTIONS always passes.
    key_protected_paths: tuple[str, ...]
    key_open_paths: tuple[str, ...]
    # "nested": {"error": {message, type, param, code}}, file paths masked in the message;
    # "flat": {"object": "error", message, type, param, code}.
    error_body: Literal["nested", "flat"]
    unrouted_detail: bool  # an unknown route or method answers FastAPI's {"detail": reason}
    # A body that is not a JSON object: "fastapi" refuses it as FastAPI's request validation
    # error (type "Bad Request"); "engine" in the engine's own words (type BadRequestError).
    body_errors: Literal["fastapi", "engine"]
    # A model name it does not serve: refused naming the served aliases (param "model"), an empty
    # name taken for the served one; else refused plainly.
    model_aliases: bool
    # "clamp": max_tokens cut to what the prompt leaves of the context, refusing only what cannot
    # fit one token; "refuse": prompt plus max_tokens reaching the context is refused.
    context_check: Literal["clamp", "refuse"]
    # "extended": response objects with the engine's additions to OpenAI's (token ids, prompt
    # text, transfer params: null unless asked), usage as prompt, total, completion; "plain":
    # OpenAI's fields and stop_reason, usage as prompt, completion, total.
    response_fields: Literal["extended", "plain"]
    system_fingerprint: bool  # responses carry <engine>-<version>[-tpN...]-<hash8>
    request_id_digits: int  # random hex digits after "cmpl-" / "chatcmpl-"
    client_request_id: bool  # a client's X-Request-Id becomes the response's id
    # GiB it holds for activations and CUDA graphs beside a static pool of weights and KV cache
    # (None: it holds its whole budget, the planner's reserve included).
    activations_gib: float | None
    # Its memory lines ("Model loading took", "Available KV cache memory") come from the first
    # pipeline stage only: with pp > 1 they are stage 0's, not the busiest stage's.
    memory_logged_by_first_stage: bool

    # -- metrics (cockpit.telemetry.enginemetrics) -----------------------------------------------
    metric_prefix: str = ""  # every name the engine serves starts so
    # A figure's name to the engine's spellings of it, newest first.
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


# torch.distributed's words, the same under both engines (their failures name them "rank-timeout"
# and "peer-lost"). The head's store gives up on the ranks that never came
# (torch/csrc/distributed/c10d/TCPStore.cpp: "Timed out after 601 seconds waiting for clients.
# 1/2 clients joined.", the timeout plus one); a rank that never reached the head's store gives up
# connecting (torch/csrc/distributed/c10d/socket.cpp).
RANK_TIMEOUT = (
    r"DistStoreError: Timed out after (?P<seconds>\d+) seconds waiting for clients\. "
    r"(?P<joined>\d+)/(?P<world>\d+) clients joined"
    r"|(?:DistNetworkError|DistStoreError): The client socket has timed out after (?P<ms>\d+)ms while "
    r"trying to connect to \((?P<host>[^,()]+), (?P<port>\d+)\)"
)
# A peer went away: Gloo's collectives (gloo/transport/tcp/pair.cc, "Connection closed by peer
# [10.0.0.2]:45459", or a read's "Connection reset by peer"), NCCL's (ncclRemoteError), or the
# store's client when the head's store is gone ("[c10d] recvValue failed ... Failed to recv, got 0
# bytes. Connection was likely closed. Did the remote server shutdown or crash?", vllm-project/vllm#32136).
PEER_LOST = (
    r"Connection closed by peer \[(?P<peer>[^\]]+)\]:(?P<peer_port>\d+)"
    r"|(?P<reset>Connection reset by peer)"
    r"|(?P<nccl>NCCL error: remote process exited or there was a network error)"
    r"|(?P<store>Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server "
    r"shutdown or crash\?)"
)


def any_of(patterns: Iterable[str], flags: int = 0) -> Pattern:
    """One pattern that matches where any of ``patterns`` does (they must not share group names)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns), flags)
