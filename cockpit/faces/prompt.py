"""The prompt grammar: what the user types -> a Command. One registry feeds parsing, help and completion.

`try tp4 ep2` (or just `tp4 ep2`), `bench c=1,32,64 in=1024 out=1024 n=200 timeout=600`, `stop`, `plan tp8`,
`sweep tp8, pp8, tp8 ep8`, `results`, `export md predicted`, `use kimi-k2.6`, `help`, `quit`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from cockpit.core.benchrequest import (
    MAX_LAYOUTS,
    SECONDS_FIELDS,
    BenchRequest,
    check_bench_number,
    parse_levels,
    typed_real,
    typed_whole,
)
from cockpit.core.commands import Command, Export, Help, Plan, Quit, Results, Stop, Sweep, Try, Tune, Use
from cockpit.core.errors import CockpitError, shown
from cockpit.core.layout import parse_layout


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str
    summary: str


COMMANDS = (
    CommandSpec(
        "try",
        "try <layout> [--server-flag value ...]",
        "launch a layout, with server flags for this run (`tp8 ep --max-num-seqs 512`)",
    ),
    CommandSpec(
        "bench",
        "bench [c=1,32,64] [in=N] [out=N] [n=N|t=S] [timeout=S]",
        "run a concurrency sweep on the server (timeout=S: seconds one request may take)",
    ),
    CommandSpec("stop", "stop", "stop the running server"),
    CommandSpec("plan", "plan [<layout>]", "show the verdict for one layout, or for all"),
    CommandSpec(
        "sweep",
        "sweep <layout> [--flag v], <layout>, ... [c=1,32 in=N out=N n=N|t=S timeout=S]",
        "launch, bench, stop each layout in turn",
    ),
    CommandSpec(
        "tune",
        "tune [goal=tok/s|tok/s/gpu] [ttft<2s] [itl<50ms] [c=1,32|rate=2,4] [in=N out=N] [budget=30m|n=6] [--flag v1,v2] | tune --resume",
        "find the best layout and knobs under latency bounds: launch, measure, learn, stop when nothing left can win",
    ),
    CommandSpec("results", "results", "show the comparison table of this profile"),
    CommandSpec(
        "export",
        "export md|csv [predicted]",
        "write the comparison table to a file (predicted: the tok/s predicted at launch beside each measured)",
    ),
    CommandSpec(
        "use", "use <profile> [on vllm|sglang]", "switch to another profile, on its engine or another"
    ),
    CommandSpec("help", "help", "list the commands and keys"),
    CommandSpec("quit", "quit", "leave cockpit"),
)
NAMES = tuple(c.name for c in COMMANDS)
EXPORT_FORMATS = ("md", "csv")
EXPORT_PREDICTED = "predicted"  # `export md predicted`; `--predicted`, as `cockpit results` spells it, too
_LAYOUT_KEYS = {"tp", "pp", "dp", "ep"}  # `tp=4` is a layout's word
_BENCH_KEYS = {
    "c": "concurrency",
    "in": "input_len",
    "out": "output_len",
    "n": "requests",
    "t": "duration_s",
    "timeout": "timeout_s",
}
_BENCH_WORDS = "c=1,32,64 in=N out=N n=N or t=S, timeout=S"

# The bounds on benchmark sizes are cockpit.core.benchrequest's, which `cockpit bench`'s flags read too.
# A prompt line is typed or pasted: longer than this it is a paste gone wrong, refused before
# any parsing, so a 10 MB paste costs nothing.
MAX_LINE = 64 * 1024


def parse_command(text: str) -> Command:
    """Parse one prompt line; a bad line is a one-line CockpitError with the nearest spelling."""
    if len(text) > MAX_LINE:
        raise CockpitError(
            f"a command is at most {MAX_LINE:,} characters, this one has {len(text):,}: "
            f"type it again, shorter (it starts {shown(text[:40])})"
        )
    text = text.strip()
    if not text:
        raise CockpitError("type a command: `try tp4 ep2`, `bench`, `stop`, `help`")
    word, _, rest = text.partition(" ")
    word, rest = word.lower(), rest.strip()
    if word == "try":
        if not rest:
            raise CockpitError("try needs a layout: `try tp4 ep2`")
        return Try(parse_layout(rest))
    if word == "bench":
        return _bench(rest)
    if word in ("stop", "results", "help", "quit", "?", "q", "exit"):
        plain: dict[str, Command] = {"stop": Stop(), "results": Results(), "help": Help(), "?": Help()}
        return plain.get(word, Quit())
    if word == "plan":
        return Plan(parse_layout(rest) if rest else None)
    if word == "sweep":
        return _sweep(rest)
    if word == "tune":
        return _tune(rest)
    if word == "export":
        return _export(rest)
    if word == "use":
        if not rest:
            raise CockpitError("use needs a profile name: `use kimi-k2.6`, or `use kimi-k2.6 on vllm`")
        return _use(rest)
    # A bare layout means try.
    try:
        return Try(parse_layout(text))
    except CockpitError as layout_error:
        guess = difflib.get_close_matches(word, NAMES, n=1, cutoff=0.6)
        if guess:
            raise CockpitError(
                f"unknown command {shown(word)}: did you mean '{guess[0]}'? Type `help` for the list"
            ) from None
        if any(ch.isdigit() for ch in text):
            raise layout_error
        raise CockpitError(
            f"unknown command {shown(word)}: try `try tp4 ep2`, `bench`, `stop`, or `help`"
        ) from None


def _tune(rest: str) -> Tune:
    from cockpit.core.tuning.spec import parse_tune

    words = rest.split()
    if "--resume" in words:
        if len(words) > 1:
            raise CockpitError("`tune --resume` continues the last tune as it was asked: give no other words")
        return Tune(None, resume=True)
    return Tune(parse_tune(rest))


def _export(rest: str) -> Export:
    """`export`, `export csv`, `export md predicted`, `export --predicted csv`: a format (md when
    none is given) and perhaps the predictions."""
    fmt, predicted = "", False
    for word in rest.lower().split():
        if word.removeprefix("--") == EXPORT_PREDICTED:
            predicted = True
        elif not fmt and word in (*EXPORT_FORMATS, "markdown"):
            fmt = "md" if word == "markdown" else word
        else:
            raise CockpitError(
                f"export writes md or csv, with or without `{EXPORT_PREDICTED}`, not {shown(word)}: "
                f"`export md` or `export csv {EXPORT_PREDICTED}`"
            )
    return Export(fmt or "md", predicted)


_ENGINE_SUFFIX = re.compile(r"\s+(?:(?:on|with)\s+|--engine[=\s]\s*)?(vllm|sglang)\s*$", re.IGNORECASE)


def _use(rest: str) -> Use:
    """`use kimi-k2.6`, `use kimi-k2.6 on vllm`, `use kimi-k2.6 vllm`, `use kimi-k2.6 --engine=vllm`;
    a profile path may hold spaces."""
    match = _ENGINE_SUFFIX.search(rest)
    if match is None:
        return Use(rest)
    return Use(rest[: match.start()].strip(), match[1].lower())


def _is_bench_token(token: str) -> bool:
    key, eq, _ = token.partition("=")
    return bool(eq) and key.lower() in _BENCH_KEYS


def _sweep(rest: str) -> Sweep:
    """`sweep tp4, tp8 ep --max-num-seqs 512 c=1,8 out=64`: layouts (each with its knobs)
    separated by commas, then `bench`'s words.

    A word is the bench's when its key is one of bench's (c=, in=, out=, n=, t=, timeout=); `tp=4`
    stays a layout's, and a knob's words (from its dash to the next comma) are the knob's, quotes
    and all."""
    words = _words(rest)
    in_knobs = False
    for word in words:
        if word.startswith("-"):
            in_knobs = True
        key, eq, _ = word.partition("=")
        if eq and not in_knobs and key.lower() not in _BENCH_KEYS and key.lower() not in _LAYOUT_KEYS:
            raise CockpitError(
                f"sweep: {shown(word)} is neither a layout nor a bench setting (c=, in=, out=, n=, t=, timeout=)"
            )
        if len(_entries(word)) > 1:  # a comma outside quotes: the next layout starts
            in_knobs = False
    bench_words = [w for w in words if _is_bench_token(w)]
    layout_text = " ".join(w for w in words if not _is_bench_token(w))
    parts = [part for part in _entries(layout_text) if part.strip()]
    if len(parts) > MAX_LAYOUTS:
        raise CockpitError(
            f"sweep: at most {MAX_LAYOUTS} layouts in one sweep, got {len(parts):,}: "
            "split it into several sweeps"
        )
    layouts = tuple(parse_layout(part) for part in parts)
    if not layouts:
        raise CockpitError("sweep needs layouts separated by commas: `sweep tp8, pp8, tp8 ep8 c=1,32`")
    return Sweep(layouts, _bench(" ".join(bench_words), command="sweep"))


def _words(text: str) -> list[str]:
    """Words split at the spaces outside quotes, the quotes kept for the layout parser; `c = 1,32`
    outside quotes reads as `c=1,32`."""
    joined: list[list[str]] = []  # each word's pieces, joined once at the end: linear in the text
    for word in _split_outside(text, str.isspace, brackets=False):
        if not word:
            continue
        last = joined[-1] if joined else None
        if (
            last is not None
            and (word.startswith("=") or last[-1].endswith("="))
            and not last[0].startswith("-")
        ):
            last.append(word)  # `c = 1`, `c= 1`, `c =1` -> `c=1`
        else:
            joined.append([word])
    return ["".join(pieces) for pieces in joined]


def _entries(text: str) -> list[str]:
    """Split at the commas between layouts, not at those inside quotes, braces or brackets
    (a knob's JSON value: --compilation-config '{"mode": 3, ...}')."""
    return _split_outside(text, lambda char: char == ",", brackets=True)


def _split_outside(text: str, is_separator: Callable[[str], bool], *, brackets: bool) -> list[str]:
    """``text`` cut at the separators that stand outside quotes (and, with ``brackets``, outside
    ``{}`` and ``[]``)."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif brackets and char in "{[":
            depth += 1
        elif brackets and char in "}]":
            depth = max(0, depth - 1)
        elif depth == 0 and is_separator(char):
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _joined_equals(text: str) -> str:
    """`c = 1,32` and `c= 1,32` read as `c=1,32`."""
    return text.replace(" =", "=").replace("= ", "=")


def _bench(rest: str, command: str = "bench") -> BenchRequest:
    """`c=1,32,64 in=N out=N n=N|t=S timeout=S`; an error echoes the word as it was typed."""
    values: dict = {}
    for token in _joined_equals(rest).split():
        key, eq, value = token.partition("=")
        field_name = _BENCH_KEYS.get(key.lower())
        if not eq or field_name is None:
            raise CockpitError(f"{command} takes {_BENCH_WORDS}; {shown(token)} is not one of them")
        if field_name == "concurrency":  # its own message, which names the token
            values[field_name] = parse_levels(value, shown(token))
            continue
        number = typed_real(value, seconds=True) if field_name in SECONDS_FIELDS else typed_whole(value)
        values[field_name] = check_bench_number(
            field_name, number, f"{shown(token)}: {key}=", f"e.g. `{command} c=1,32,64 n=200 timeout=600`"
        )
    if "requests" in values and "duration_s" in values:
        raise CockpitError(f"{command} takes n= (requests) or t= (seconds), not both")
    return BenchRequest(**values)


def completions(
    text: str, layouts: tuple[str, ...] = (), profiles: tuple[str, ...] = (), flags: tuple[str, ...] = ()
) -> list[str]:
    """Candidates for Tab: command names, then layouts after `try`/`plan`, profiles after `use`,
    formats and `predicted` after `export`, and the engine's server flags (``flags``) for a word
    that starts with a dash."""
    word, space, rest = text.partition(" ")
    if word == "export" and space:
        return _export_completions(rest)
    if word in ("try", "plan", "sweep") and space and rest:
        head, _, last = text.rpartition(" ")
        if last.startswith("-"):
            return [f"{head} {flag}" for flag in flags if flag.startswith(last)]
    if not space:
        return [n for n in NAMES if n.startswith(word.lower())] + [x for x in layouts if x.startswith(text)]
    pool = profiles if word == "use" else layouts if word in ("try", "plan", "sweep") else ()
    return [f"{word} {x}" for x in pool if x.startswith(rest)]


def _export_completions(rest: str) -> list[str]:
    """`export c` -> `export csv`; `export csv p` -> `export csv predicted`."""
    head, _, last = rest.rpartition(" ")
    said = head.split()
    if not said:
        pool: tuple[str, ...] = (*EXPORT_FORMATS, EXPORT_PREDICTED)
    elif len(said) == 1 and said[0] in EXPORT_FORMATS:
        pool = (EXPORT_PREDICTED,)
    else:
        pool = ()
    prefix = " ".join(["export", *said])
    return [f"{prefix} {x}" for x in pool if x.startswith(last)]
