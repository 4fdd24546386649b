"""What the load generator sends: request bodies, encoded once, so the hot path only copies bytes.

Random prompts are built from a fixed word list with a seeded RNG, so two runs send the same
text. Each request also gets a short unique tag at the start of its prompt: a real engine's
prefix cache would otherwise serve a repeated prompt without prefill and flatter the numbers.
Prompt length is in characters, four per token: the simulated engine counts ceil(chars / 4),
and real tokenizers land near that for English words.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.core.benchrequest import MAX_PROMPT_LINE_BYTES, MAX_PROMPTS_BYTES, MAX_TOKENS, mib
from cockpit.core.errors import CockpitError, shown
from cockpit.store.textfile import NotReadable, file_kind, read_bounded

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
CHARS_PER_TOKEN = 4
POOL = 64  # distinct random prompts; the per-request tag keeps every request unique anyway
POOL_BYTES = 256 << 20  # ...fewer when they are so long that 64 would not fit in this
TAG_WIDTH = 7  # "%07x " is two tokens, counted inside input_len
_HOLE = "\x00cockpit-tag\x00"

WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "foot",
    "boy",
    "age",
    "policy",
    "process",
    "music",
    "market",
    "sense",
    "nation",
    "plan",
    "college",
    "interest",
    "death",
    "experience",
    "effect",
    "class",
    "control",
    "care",
    "field",
    "development",
    "role",
    "effort",
    "rate",
    "heart",
    "drug",
    "show",
    "leader",
    "light",
    "voice",
    "wife",
    "police",
    "mind",
    "price",
    "report",
    "decision",
    "son",
    "view",
    "relationship",
    "town",
    "road",
    "arm",
    "difference",
    "value",
    "building",
    "action",
    "model",
    "season",
    "society",
    "tax",
    "director",
    "position",
    "player",
    "record",
    "paper",
    "space",
    "ground",
    "form",
    "event",
    "official",
    "matter",
    "center",
    "couple",
    "site",
]


@dataclass(frozen=True)
class Body:
    """One request body split around its tag hole: ``head + tag + tail`` is the JSON to send."""

    head: bytes
    tail: bytes
    max_tokens: int

    def render(self, tag: bytes) -> bytes:
        return self.head + tag + self.tail


@dataclass(frozen=True)
class Workload:
    """Request bodies for one endpoint; ``body(i)`` is the i-th request's bytes."""

    endpoint: str  # "completions" | "chat"
    bodies: tuple[Body, ...]
    tagged: bool = True  # random prompts get a unique tag; a user's prompts are sent as written

    @property
    def path(self) -> str:
        return ENDPOINTS[self.endpoint]

    def body(self, i: int) -> bytes:
        body = self.bodies[i % len(self.bodies)]
        return body.render(b"%07x " % (i & 0xFFFFFFF) if self.tagged else b"")

    def max_tokens(self, i: int) -> int:
        return self.bodies[i % len(self.bodies)].max_tokens


def _check_endpoint(endpoint: str) -> None:
    if endpoint not in ENDPOINTS:
        raise CockpitError(f"endpoint must be one of {', '.join(ENDPOINTS)}, got '{endpoint}'")


def random_prompt(rng: random.Random, chars: int) -> str:
    """Words from WORDS until ``chars`` characters, cut to exactly that many."""
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def _request(
    endpoint: str, model: str, text: str | None, messages: list | None, max_tokens: int
) -> dict[str, Any]:
    request: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        request["messages"] = messages if messages is not None else [{"role": "user", "content": text}]
    else:
        request["prompt"] = text
    request |= {
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    return request


def _split(request: dict[str, Any], tagged: bool) -> Body:
    encoded = json.dumps(request, separators=(",", ":")).encode()
    if not tagged:
        return Body(encoded, b"", request["max_tokens"])
    head, tail = encoded.split(json.dumps(_HOLE).encode()[1:-1], 1)
    return Body(head, tail, request["max_tokens"])


def random_workload(
    model: str, *, endpoint: str = "completions", input_len: int = 1024, output_len: int = 1024, seed: int = 0
) -> Workload:
    """Prompts of ~input_len tokens (tag included) asking for exactly output_len tokens."""
    _check_endpoint(endpoint)
    if input_len < 1 or output_len < 1:
        raise CockpitError(f"input and output lengths must be 1 or more, got {input_len} and {output_len}")
    rng = random.Random(seed)
    chars = max(0, input_len * CHARS_PER_TOKEN - (TAG_WIDTH + 1))
    bodies = []
    for _ in range(max(1, min(POOL, POOL_BYTES // max(1, chars)))):
        text = _HOLE + random_prompt(rng, chars)
        bodies.append(_split(_request(endpoint, model, text, None, output_len), tagged=True))
    return Workload(endpoint, tuple(bodies))


def jsonl_workload(
    path: str | Path, model: str, *, endpoint: str = "completions", output_len: int = 1024
) -> Workload:
    """Prompts from a JSONL file: ``{"prompt": ...}`` or ``{"messages": [...]}``, optional max_tokens.

    A ``messages`` line on the completions endpoint (or a ``prompt`` on chat) is converted, so
    one file serves both.
    """
    _check_endpoint(endpoint)
    path = Path(path).expanduser()
    bodies = []
    for number, line in _prompt_lines(path):
        if line.strip():
            bodies.append(
                _split(_jsonl_request(path, number, line, model, endpoint, output_len), tagged=False)
            )
    if not bodies:
        raise CockpitError(f"the prompts file {path} has no prompts: write one JSON object a line")
    return Workload(endpoint, tuple(bodies), tagged=False)


def check_prompts_path(path: str | Path) -> Path:
    """A prompts file that can be read whole: a regular file (a FIFO would hang the read, a
    device like /dev/zero never end it), at most ``MAX_PROMPTS_BYTES``. Only stat()ed: a FIFO
    is never opened."""
    path = Path(path).expanduser()
    try:
        info = os.stat(path)
    except OSError as err:
        raise CockpitError(f"cannot read the prompts file {path}: {err.strerror}") from None
    _check_kind(path, info)
    return path


def _check_kind(path: Path, info: os.stat_result) -> None:
    """A regular file within the size bound, else one line saying what it is."""
    kind = file_kind(info.st_mode)
    if kind is not None:
        raise CockpitError(
            f"the prompts file {path} is {kind}, not a regular file: give a JSONL file, one prompt a line"
        )
    if info.st_size > MAX_PROMPTS_BYTES:
        raise CockpitError(
            f"the prompts file {path} holds {info.st_size / (1 << 20):,.0f} MiB, more than the "
            f"{mib(MAX_PROMPTS_BYTES)} a prompts file may: give fewer prompts"
        )


def _read_bounded(path: Path) -> bytes:
    """The file's bytes: stat()ed first for the words of its error, then read by the bounded
    reader, which checks the open file again (it may have changed since)."""
    check_prompts_path(path)
    try:
        return read_bounded(path, MAX_PROMPTS_BYTES)
    except NotReadable as err:
        raise CockpitError(
            f"the prompts file {path} is {err}: give a JSONL file of at most {mib(MAX_PROMPTS_BYTES)}"
        ) from None
    except OSError as err:
        raise CockpitError(f"cannot read the prompts file {path}: {err.strerror}") from None


def _prompt_lines(path: Path) -> list[tuple[int, str]]:
    """(number, text) of each line of a prompts file; a line over ``MAX_PROMPT_LINE_BYTES`` or
    not UTF-8 is one error naming it. Lines end at newlines only: a JSON string may hold U+2028."""
    lines = []
    for number, raw in enumerate(_read_bounded(path).split(b"\n"), 1):
        if len(raw) > MAX_PROMPT_LINE_BYTES:
            raise CockpitError(
                f"{path}, line {number}: longer than {mib(MAX_PROMPT_LINE_BYTES)}; "
                f"one prompt a line, each at most {mib(MAX_PROMPT_LINE_BYTES)}"
            )
        try:
            lines.append((number, raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise CockpitError(f"the prompts file {path} is not UTF-8 text (line {number})") from None
    return lines


def _jsonl_request(
    path: Path, number: int, line: str, model: str, endpoint: str, output_len: int
) -> dict[str, Any]:
    where = f"{path}, line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise CockpitError(f"{where}: not JSON ({err.msg}); write one object a line") from None
    if not isinstance(row, dict):
        raise CockpitError(f'{where}: expected an object like {{"prompt": "..."}}')
    max_tokens = row.get("max_tokens", output_len)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 0 < max_tokens <= MAX_TOKENS:
        raise CockpitError(
            f"{where}: max_tokens must be a whole number of 1 or more and at most {MAX_TOKENS:,}, "
            f"got {shown(max_tokens)}"
        )
    prompt, messages = row.get("prompt"), row.get("messages")
    if isinstance(prompt, str) and prompt:
        text = prompt
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
        text = "\n".join(str(m.get("content") or "") for m in messages)
    else:
        raise CockpitError(
            f'{where}: needs "prompt" (a non-empty string) or "messages" (a list of '
            '{"role": ..., "content": ...} objects)'
        )
    return _request(endpoint, model, text, messages, max_tokens)


def _is_message(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("role"), str) and "content" in message
