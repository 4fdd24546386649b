"""Why a server died, read from the tail of its log.

An engine that fails prints the real error once per rank and then a pile of wrappers ("EngineCore
failed to start.", "See root cause above."). People need the first real error, in one line, with
what to try next. The texts matched are the engines' own (docs/placement.md#startup-checks,
docs/memory.md#verdicts, docs/memory.md#when-memory-runs-out, docs/simulator.md#log-texts);
the simulated engine prints the same words.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cockpit.engines import surfaces
from cockpit.engines.surface import EngineSurface, any_of
from cockpit.runner.events import Diagnosis
from cockpit.runner.phases import DIST_INIT_ADDR, PhaseTracker, log_message, strip_ansi

# --- What to try next (the caller may replace these with layouts the planner says fit) -------

NEXT_MORE_GPUS = "the weights do not fit this layout: use more GPUs per replica (more TP/EP/PP)"
NEXT_LESS_MEMORY = "lower --gpu-memory-utilization / --mem-fraction-static or --max-num-batched-tokens / --chunked-prefill-size"
NEXT_OOM_UNKNOWN_PHASE = (
    "if the weights were still loading, use more GPUs per replica; otherwise lower "
    "--gpu-memory-utilization / --mem-fraction-static"
)
NEXT_WHOLE_EXPERTS = (
    "keep experts whole: add expert parallel (vLLM `ep`, SGLang ep = tp), "
    "or use a TP size that divides the width into whole blocks"
)
NEXT_WHOLE_TILES = (
    "use a TP size that leaves whole blocks per shard (expert parallel does not split these layers)"
)
NEXT_NCCL = "check the GPU links (nvidia-smi topo -m), try NCCL_P2P_DISABLE=1, rerun with NCCL_DEBUG=INFO"
NEXT_READ_LOG = "read the log above the traceback"
# After "raise --mem-fraction-static ...": the other way to leave SGLang room for its pool.
NEXT_MORE_SHARE = "or use more GPUs per replica so the weights take less of each"

# --- Wrappers: lines that say something failed elsewhere; never a root cause ---------------

WRAPPER = any_of(w for engine in surfaces() for w in engine.wrappers)
ERROR_LOOKING = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b|Error\b|Exception\b|\bfailed\b", re.IGNORECASE)

# --- Root causes -------------------------------------------------------------------------

SIZE = r"[\d.]+ [KMGT]i?B|0 bytes"
# torch >= 2.2 and 2.1 (which spells "capacty").
OOM_TORCH_NEW = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<requested>{SIZE})\. GPU (?P<gpu>\d+) has a total "
    rf"capac(?:i)?ty of (?P<total>{SIZE}) of which (?P<free>{SIZE}) is free"
)
# torch <= 2.0: "(GPU 2; 10.73 GiB total capacity; 9.59 GiB already allocated; 290.56 MiB free; ...)".
OOM_TORCH_OLD = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<requested>{SIZE}) \(GPU (?P<gpu>\d+); "
    rf"(?P<total>{SIZE}) total capacity; (?P<allocated>{SIZE}) already allocated; (?P<free>{SIZE}) free"
)
# Driver-level OOM (torch.AcceleratorError), NCCL's "Cuda failure 'out of memory'", or a torch
# OOM whose sizes were cut off.
OOM_OTHER = re.compile(
    r"CUDA error: out of memory|Cuda failure (?:\d+ )?'out of memory'|CUDA out of memory|OutOfMemoryError"
)

# Marlin/GPTQ/AWQ kernels: "... = 14784 is not divisible by min_thread_k = 128", "size_n = 5472 is
# not divisible by tile_n_size = 64".
KERNEL_TILE = re.compile(
    r"(?P<name>\w+) = (?P<size>\d+) is not divisible by (?P<tile>\w*(?:thread|tile)\w*) = (?P<block>\d+)"
)

BARE_ASSERTION = re.compile(r"^(?:\w+\.)*AssertionError:?\s*$")

INVALID_DEVICE = re.compile(r"CUDA error: invalid device ordinal")

NCCL_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?P<work>.*?)\) ran for (?P<ms>\d+) milliseconds"
)
NCCL_ERROR = re.compile(r"\bNCCL error(?: in: \S+,| \d+:|:)?\s*(?P<description>[^(]*)", re.IGNORECASE)
NCCL_ERROR_CODE = re.compile(r"\b(?P<code>nccl\w+Error)\b:?\s*(?P<description>[^(]*)")
NCCL_WARNING = re.compile(r"\bNCCL WARN\s+(?P<text>.+)")

# uvicorn's "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already
# in use", or the bare OSError of a socket bound before uvicorn starts: vLLM 0.32 binds its own
# (vllm/entrypoints/launchers/launcher.py: create_server_socket) before it builds the engine.
ADDRESS_IN_USE = re.compile(
    r"\[Errno 98\](?: error while attempting to bind on address \('(?P<host>[^']*)', (?P<port>\d+)\):)? "
    r"[Aa]ddress already in use"
)
UNRECOGNIZED_ARGS = re.compile(r"^(?:(?P<program>[^:]+): )?error: unrecognized arguments: (?P<flags>.+)$")
# argparse's usage error about one argument (exit code 2), under whatever name the parser has: vLLM's
# `vllm serve`, `vllm`, `api_server.py` (python -m vllm.entrypoints.openai.api_server), SGLang's
# `launch_server.py` or `sglang serve`. "error: argument --max-num-seqs: invalid int value: 'abc'",
# "error: argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', 'bfloat16', ...)",
# "expected one argument", or the words of the option's own type (vllm/utils/argparse_utils.py).
BAD_ARGUMENT = re.compile(
    r"^(?:(?P<program>[^:]+): )?error: (?:argument (?P<flags>[^:]+): (?P<problem>.+)"
    r"|the following arguments are required: (?P<missing>.+))$"
)
ARGPARSE_INVALID_VALUE = re.compile(r"^invalid (?P<type>\w+) value: (?P<value>.+)$")
ARGPARSE_INVALID_CHOICE = re.compile(r"^invalid choice: (?P<value>.+?) \(choose from (?P<choices>.*)\)$")
ARGPARSE_TYPES = {"int": "an integer", "float": "a number"}
# transformers/configuration_utils.py (_get_config_dict), raised as an OSError below json's own
# JSONDecodeError, which says where the file breaks: the model's config.json does not parse.
# The exception's line only: the traceback above it quotes the f-string that raised it.
CONFIG_NOT_JSON = re.compile(
    r"^(?:(?:\w+\.)*\w*Error: )?(?P<words>It looks like the config file at '(?P<path>[^']*)' is not a valid JSON file\.)"
)
JSON_DECODE_ERROR = re.compile(r"JSONDecodeError: (?P<detail>.+)$")
SENTENCE_END = re.compile(r"\.(?=\s|$)")

# vLLM's configs are pydantic dataclasses (vllm/config/utils.py): a ValueError raised while one is
# built comes wrapped, "pydantic_core._pydantic_core.ValidationError: 1 validation error for
# VllmConfig", then the engine's own words on the next line: "  Value error, <text> [type=value_error,
# input_value=..., input_type=...]" (an assert: "Assertion failed, <text> [type=assertion_error, ...]").
VALIDATION_ERROR = re.compile(r"ValidationError: \d+ validation errors? for \w+")
PYDANTIC_INNER = re.compile(
    r"^(?P<kind>Value error|Assertion failed), (?P<text>.*?)(?: \[type=\w+, input_value=.*)?$"
)
PYDANTIC_EXCEPTIONS = {"Value error": "ValueError", "Assertion failed": "AssertionError"}
EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*(?:Error|Exception))(?::\s*(?P<text>.*))?$"
)

# Traceback frames that tell what the engine was doing, innermost checked first; each phase's
# functions are every engine's (its surface's traceback_phases), the later phases tried first.
HINTED_PHASES = ("cuda_graphs", "profiling", "kv_cache", "loading")


def _phase_hints() -> tuple[tuple[re.Pattern[str], str], ...]:
    hints = {
        phase: dict.fromkeys(hint for engine in surfaces() for hint in engine.traceback_phases.get(phase, ()))
        for phase in HINTED_PHASES
    }
    return tuple((any_of(names), phase) for phase, names in hints.items() if names)


PHASE_HINTS = _phase_hints()
TRACEBACK_START = re.compile(
    r"Traceback \(most recent call last\)"
)  # SGLang: "Scheduler hit an exception: Traceback ..."
TRACEBACK_FRAME = re.compile(r'^File "(?:[^"]*/)?(?P<file>[^"/]+)", line \d+, in (?P<function>\S+)')
ATTENTION_CONTEXT = re.compile(r"kv_heads|num_heads|Attention|attn_tp_size")

PHASE_WORDS = {
    "starting": "during startup",
    "loading": "during weight loading",
    "loaded": "after weight loading",
    "profiling": "while profiling memory",
    "kv_cache": "while allocating the KV cache",
    "cuda_graphs": "while capturing CUDA graphs",
    "serving": "while serving",
}
AFTER_WEIGHTS = ("loaded", "profiling", "kv_cache", "cuda_graphs", "serving")


@dataclass(frozen=True)
class _Site:
    """Where a pattern matched: the whole tail, so an explanation can look around its line."""

    lines: Sequence[str]
    messages: list[str]
    index: int
    given_phase: str | None
    quoted: str | None = None  # the engine's words inside a wrapper (pydantic's), shown alone
    engine: EngineSurface | None = None  # whose words matched, when they are one engine's

    @property
    def evidence(self) -> str:
        return self.quoted if self.quoted is not None else strip_ansi(self.lines[self.index]).strip()

    def phase(self) -> str | None:
        return self.given_phase or _phase_from_log(self.lines, self.messages, self.index)

    def traceback(self) -> list[str]:
        return _traceback_above(self.messages, self.index)

    def after(self, count: int) -> list[str]:
        return self.messages[self.index + 1 : self.index + 1 + count]

    def diagnosis(self, kind: str, cause: str, next_step: str, gpu: int | None = None) -> Diagnosis:
        """The diagnosis of this match: the phase it happened in, its line as evidence."""
        return Diagnosis(kind, cause, next_step, phase=self.phase(), gpu=gpu, evidence=self.evidence)


Explain = Callable[[re.Match[str], _Site], Diagnosis]


def diagnose(lines: Sequence[str], *, phase: str | None = None) -> Diagnosis | None:
    """The root cause in a failed server's log tail: the first real error, never a wrapper.

    `phase` is what the tracker last saw; without it the phase is read from the log itself.
    None when the tail holds no error at all.
    """
    messages = [log_message(line) for line in lines]
    nccl_warning: Diagnosis | None = None
    unknown_error: Diagnosis | None = None
    wrapped = False  # unknown_error is pydantic's wrapper: the engine's words on the next line replace it
    wrapper_seen = False
    for index, message in enumerate(messages):
        if not message:
            continue
        if WRAPPER.search(message):
            wrapper_seen = True
            continue
        inner = PYDANTIC_INNER.match(message)
        text = inner["text"] if inner else message
        site = _Site(lines, messages, index, phase, text if inner else None)
        for pattern, explain, engine in ROOT_CAUSES:
            if match := pattern.search(text):
                return explain(match, replace(site, engine=engine) if engine else site)
        # Weak signals only count when no real error follows: NCCL warns about harmless things,
        # and an unknown exception may be a side effect of a known one further down.
        if nccl_warning is None and (match := NCCL_WARNING.search(message)):
            nccl_warning = _nccl_warning(match, site)
        if inner and (unknown_error is None or wrapped):
            unknown_error, wrapped = _wrapped_exception(inner, site), False
        elif unknown_error is None and (match := EXCEPTION_LINE.match(message)):
            unknown_error, wrapped = _unknown_exception(match, site), bool(VALIDATION_ERROR.search(message))
    if nccl_warning or unknown_error:
        return nccl_warning or unknown_error
    if wrapper_seen:
        evidence = next(
            (strip_ansi(line).strip() for line in reversed(lines) if ERROR_LOOKING.search(strip_ansi(line))),
            "",
        )
        return Diagnosis(
            "engine-died",
            "the engine failed to start; no root cause in the log tail",
            "read the full server log: the first error above the wrappers was cut off",
            phase=phase or _phase_from_log(lines, messages, len(lines)),
            evidence=evidence,
        )
    return None


def diagnose_exit(lines: Sequence[str], returncode: int, phase: str | None) -> Diagnosis:
    """Why the server exited: the log's root cause, or the exit itself when the log says nothing."""
    found = diagnose(lines, phase=phase)
    if found is not None:
        return found
    phase = phase or _phase_from_log(lines, [log_message(line) for line in lines], len(lines))
    when = f" {PHASE_WORDS[phase]}" if phase in PHASE_WORDS else ""
    killer = _signal_name(returncode)
    last_error = _last_error_line(lines, any_line=not killer)
    if last_error:
        how = (
            f"was killed by {killer} (exit code {returncode})" if killer else f"exited with code {returncode}"
        )
        cause = f"the server {how}{when}: {last_error}"
        next_step = "read the full server log for the lines above it"
    elif killer:
        cause = f"the server was killed by {killer} (exit code {returncode}){when} and printed no error"
        next_step = (
            "nothing in the log: if no one stopped it, the host may have run out of RAM (check dmesg for the OOM killer)"
            if killer == "SIGKILL"
            else "nothing in the log: check what sent the signal"
        )
    else:
        cause = f"the server exited with code {returncode}{when} and printed no error"
        next_step = "run the server command by hand to see its full output"
    return Diagnosis("exited", cause, next_step, phase=phase)


@dataclass(frozen=True)
class Ending:
    """How a server that served ended without cockpit stopping it: a line for the log and the
    status bar (``reason``), a few words for the header (``words``)."""

    reason: str
    words: str


_STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def describe_end(returncode: int | None, lines: Sequence[str] = ()) -> Ending:
    """How a ready server ended, from its exit status (None: not cockpit's child, a re-attached
    server, whose status only its parent learns) and the last lines it logged."""
    if returncode is None:
        return Ending("ended outside cockpit (a re-attached server: its exit code is unknown)", "ended")
    killer = _signal_name(returncode)
    if killer in _STOP_SIGNALS:
        return Ending(f"stopped from outside cockpit ({killer})", f"ended ({killer})")
    if killer == "SIGKILL":
        return Ending(
            "killed (SIGKILL): `kill -9` or the kernel's OOM killer (dmesg says which)",
            "killed (SIGKILL)",
        )
    if killer is not None:
        return Ending(f"crashed ({killer}){_why(lines)}", f"crashed ({killer})")
    if returncode == 0:
        return Ending("it exited cleanly, as on `cockpit stop` from another shell", "ended (exit code 0)")
    return Ending(
        f"ended on its own (exit code {returncode}){_why(lines)}", f"ended (exit code {returncode})"
    )


def _why(lines: Sequence[str]) -> str:
    """': cause' from the log's last lines, or nothing when they say nothing."""
    found = diagnose(lines, phase="serving")
    cause = found.cause if found is not None else _last_error_line(lines, any_line=False)
    return f": {cause}" if cause else ""


def _last_error_line(lines: Sequence[str], any_line: bool) -> str:
    """The engine's last word: its last error-looking line, or (for an exit of its own, such as
    argparse's usage error, exit 2) its last non-blank line."""
    cleaned = [strip_ansi(line).strip() for line in lines]
    for line in reversed(cleaned):
        if line and ERROR_LOOKING.search(line):
            return line
    if any_line:
        return next((line for line in reversed(cleaned) if line), "")
    return ""


def _traceback_above(messages: list[str], index: int, reach: int = 80) -> list[str]:
    """The messages of the traceback that ends just above line `index`, outermost first."""
    for start in range(min(index, len(messages)) - 1, max(-1, index - reach), -1):
        if TRACEBACK_START.search(messages[start]):
            return messages[start:index]
    return []


def _signal_name(returncode: int) -> str | None:
    """-9 from subprocess, or 137 = 128 + 9 from a shell that ran it."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode <= 128 + 64 else 0
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _phase_from_log(lines: Sequence[str], messages: list[str], index: int) -> str | None:
    """What the engine was doing at line `index`: the traceback's frames say it best, the
    milestones above it otherwise."""
    for message in reversed(_traceback_above(messages, index)):
        for pattern, phase in PHASE_HINTS:
            if pattern.search(message):
                return phase
    tracker = PhaseTracker(experiment=0)
    for line in lines[:index]:
        tracker.feed(line)
    return tracker.phase


# --- Explanations, one per kind ----------------------------------------------------------


def _oom(match: re.Match[str], site: _Site) -> Diagnosis:
    phase = site.phase()
    when = f" {PHASE_WORDS[phase]}" if phase in PHASE_WORDS else ""
    groups = match.groupdict()
    gpu = int(groups["gpu"]) if groups.get("gpu") else None
    on_gpu = f" on GPU {gpu}" if gpu is not None else ""
    if groups.get("requested"):
        cause = (
            f"CUDA OOM{on_gpu}{when}: tried to allocate {groups['requested']} "
            f"with {groups['free']} free of {groups['total']}"
        )
    elif "Cuda failure" in match.group(0) or "NCCL" in site.messages[site.index]:
        cause = f"CUDA OOM inside NCCL{when}: NCCL could not allocate its buffers"
    else:
        cause = f"CUDA OOM{on_gpu}{when} ({match.group(0)}, no sizes reported)"
    if phase == "loading":
        next_step = NEXT_MORE_GPUS
    elif phase in AFTER_WEIGHTS:
        next_step = NEXT_LESS_MEMORY
    else:
        next_step = NEXT_OOM_UNKNOWN_PHASE
    return Diagnosis("oom", cause, next_step, phase=phase, gpu=gpu, evidence=site.evidence)


def _fp8_block(what: str, unit: str) -> Explain:
    def explain(match: re.Match[str], site: _Site) -> Diagnosis:
        size, block = match["size"], match["block"]
        next_step = NEXT_WHOLE_EXPERTS if what.startswith(("gate", "down")) else NEXT_WHOLE_TILES
        return site.diagnosis(
            "fp8-block",
            f"FP8 block quantization: {what} width {size} is not a multiple of {unit} {block}",
            next_step,
        )

    return explain


def _kernel_tile(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "fp8-block",
        f"quantized kernel tiling: {match['name']} {match['size']} is not a multiple of {match['tile']} {match['block']}",
        "use a smaller TP size so each shard holds whole tiles, or expert parallel for MoE weights",
    )


def _attention_heads(match: re.Match[str], site: _Site) -> Diagnosis:
    heads, tp = int(match["heads"]), int(match["tp"])
    return site.diagnosis(
        "attention-heads",
        f"{heads} attention heads do not split over tensor parallel size {tp}",
        f"use a TP size that divides {heads}: {_divisors(heads)}",
    )


def _not_divisible(match: re.Match[str], site: _Site) -> Diagnosis:
    numerator, denominator = int(match["numerator"]), int(match["denominator"])
    return site.diagnosis(
        "kv-heads",
        f"{numerator} (heads or KV heads) do not split over {denominator} tensor parallel ranks",
        f"use a TP size that divides {numerator}: {_divisors(numerator)}",
    )


def _bare_assertion(match: re.Match[str], site: _Site) -> Diagnosis:
    """A message-less assert: the traceback's source line and frames say which one."""
    traceback = site.traceback()
    statement = next((m for m in reversed(traceback) if m.startswith("assert ")), "")
    frame = next((f for m in reversed(traceback) if (f := TRACEBACK_FRAME.match(m))), None)
    where = f" in {frame['file']}" if frame else ""
    if "kv_heads" in statement:
        kind, cause = "kv-heads", f"the KV heads do not split over this TP size: `{statement}` failed{where}"
        next_step = (
            "use a TP size that divides the KV heads, or a multiple of them (KV heads are then replicated)"
        )
    elif "num_heads" in statement:
        kind, cause = (
            "attention-heads",
            f"the attention heads do not split over this TP size: `{statement}` failed{where}",
        )
        next_step = "use a TP size that divides the attention heads"
    elif any(ATTENTION_CONTEXT.search(m) for m in traceback):
        kind, cause = (
            "kv-heads",
            f"a bare assert failed in the attention layer{where}: the TP size does not divide the (KV) heads",
        )
        next_step = (
            "use a TP size that divides the KV heads, or a multiple of them (KV heads are then replicated)"
        )
    else:
        detail = f": `{statement}`" if statement else " (no message)"
        kind, cause = "assertion", f"the engine hit a bare AssertionError{where}{detail}"
        next_step = "often a TP size that does not divide the heads, KV heads or expert width: try the planner's layouts"
    return site.diagnosis(kind, cause, next_step)


def _no_cache_blocks(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "kv-cache",
        "no GPU memory is left for the KV cache after the weights and activations",
        "raise --gpu-memory-utilization, or use more GPUs per replica so the weights take less of each",
    )


def _context_too_long(match: re.Match[str], site: _Site) -> Diagnosis:
    flag = site.engine.context_flag if site.engine else "the context length"
    return site.diagnosis(
        "max-model-len",
        f"the context length asked is above the model's own: {_sentence(match)}",
        f"set {flag} {match['derived']} or less",
    )


def _sentence(match: re.Match[str], most: int = 240) -> str:
    """The engine's own sentence from where `match` starts: up to its full stop (the one in
    "config.json)." ends nothing), at most `most` characters."""
    end = SENTENCE_END.search(match.string, match.end())
    return _shortened(match.string[match.start() : end.end() if end else len(match.string)], most)


def _kv_max_len(match: re.Match[str], site: _Site) -> Diagnosis:
    max_len, estimate = int(match["max_len"]), match["estimate"]
    fits = f" (room for {int(estimate):,} tokens)" if estimate else ""
    next_step = (
        f"set --max-model-len {estimate} or less, or raise --gpu-memory-utilization"
        if estimate
        else "lower --max-model-len or raise --gpu-memory-utilization"
    )
    return site.diagnosis(
        "kv-cache",
        f"the KV cache cannot hold one {max_len:,}-token request: it needs {match['needed']} GiB, "
        f"{match['available']} GiB is available{fits}",
        next_step,
    )


def _label(site: _Site) -> str:
    return site.engine.label if site.engine else "the engine"


def _not_enough_memory(match: re.Match[str], site: _Site) -> Diagnosis:
    share = f" at --mem-fraction-static={match['share']}" if match["share"] else ""
    return site.diagnosis(
        "kv-cache",
        f"{_label(site)} has no room for its KV cache pool after the weights{share}",
        f"raise --mem-fraction-static, {NEXT_MORE_SHARE}",
    )


def _no_kv_for_weights(match: re.Match[str], site: _Site) -> Diagnosis:
    took = f": loading took {match['minimum']} of the memory free before it" if match["minimum"] else ""
    return site.diagnosis(
        "kv-cache",
        f"{_label(site)} has no room for its KV cache pool after the weights at "
        f"--mem-fraction-static={match['share']}"
        f"{took}",
        f"raise --mem-fraction-static above {match['suggested']}, {NEXT_MORE_SHARE}",
    )


def _unbalanced_memory(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "kv-cache",
        "GPU memory is unbalanced: another process holds memory on some of the GPUs",
        "stop what else runs on these GPUs (nvidia-smi), or give the server other GPUs",
    )


def _gpu_of(device: str | None) -> int | None:
    """torch's device name ("cuda:3") to the GPU's number."""
    number = (device or "").rpartition(":")[2]
    return int(number) if number.isdigit() else None


def _free_memory_at_start(match: re.Match[str], site: _Site) -> Diagnosis:
    gpu = _gpu_of(match["device"])
    on_gpu = f" on GPU {gpu}" if gpu is not None else ""
    wants = (
        f"the engine's own budget is {match['requested']} GiB ({match['utilization']} of it, less weights held outside)"
        if match["budget"]
        else f"the server wants {match['requested']} GiB ({match['utilization']} of it)"
    )
    return site.diagnosis(
        "kv-cache",
        f"another process holds GPU memory{on_gpu}: {match['free']} of {match['total']} GiB free at startup, {wants}",
        "stop what else runs on these GPUs (nvidia-smi), or lower --gpu-memory-utilization",
        gpu,
    )


def _external_weights(match: re.Match[str], site: _Site) -> Diagnosis:
    gpu = _gpu_of(match["device"])
    on_gpu = f" on GPU {gpu}" if gpu is not None else ""
    return site.diagnosis(
        "kv-cache",
        f"weights held outside the engine take {match['held']} of {match['total']} GiB{on_gpu}, more than "
        f"the {match['requested']} GiB the server may use ({match['utilization']} of it)",
        "raise --gpu-memory-utilization above the weights' share, or give the server a GPU of its own",
        gpu,
    )


def _world_size(match: re.Match[str], site: _Site) -> Diagnosis:
    gpus = match["gpus"]
    return site.diagnosis(
        "world-size",
        f"the layout needs {match['world']} GPUs but only {gpus} are available",
        f"use a layout on at most {gpus} GPUs (TP x PP x DP), or check CUDA_VISIBLE_DEVICES",
    )


def _invalid_device(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "world-size",
        "a rank asked for a GPU that is not visible (CUDA error: invalid device ordinal)",
        "use a layout on fewer GPUs (SGLang uses tp x pp of them), or check CUDA_VISIBLE_DEVICES",
    )


def _nccl_error(match: re.Match[str], site: _Site) -> Diagnosis:
    """NCCL reports a CUDA failure a few lines below its own; an OOM there is the real cause."""
    following = site.after(5)
    oom = next((m for line in following if (m := OOM_OTHER.search(line))), None)
    if oom is not None:
        return _oom(oom, site)
    description = match["description"].strip(" ,.") or match.groupdict().get("code") or "NCCL failed"
    detail = _nccl_last_error(following)
    cause = f"NCCL error: {description}" + (f" ({detail})" if detail else "")
    return site.diagnosis("nccl", cause, NEXT_NCCL)


def _nccl_last_error(following: list[str]) -> str:
    for position, message in enumerate(following):
        if message.startswith("Last error:"):
            rest = message.removeprefix("Last error:").strip()
            return rest or (following[position + 1] if position + 1 < len(following) else "")
    return ""


def _nccl_timeout(match: re.Match[str], site: _Site) -> Diagnosis:
    operation = re.search(r"OpType=(\w+)", match["work"])
    what = f"collective {operation[1]}" if operation else "collective"
    return site.diagnosis(
        "nccl",
        f"a NCCL {what} timed out after {int(match['ms']) / 1000:.0f} s: a rank hung or died first",
        "look for an earlier error on another rank; " + NEXT_NCCL,
    )


def _nccl_warning(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis("nccl", f"NCCL warned: {match['text'].strip()}", NEXT_NCCL)


def _address_in_use(match: re.Match[str], site: _Site) -> Diagnosis:
    port, host = match["port"], match["host"]
    if port:  # uvicorn names the address
        return site.diagnosis(
            "port-in-use",
            f"port {port} on {host} is already in use",
            f"stop whatever listens on port {port} or pick another --port",
        )
    # A bare OSError (vLLM 0.32 binds before uvicorn): the port is in the arguments vLLM logged.
    port = _non_default(site, "port")
    host = _non_default(site, "host")
    if port is None:
        where, listener = "the server's port", "that port"
    else:
        where = listener = f"port {port}"
        where += f" on {host}" if host else ""
    return site.diagnosis(
        "port-in-use",
        f"{where} is already in use ({match.group(0)})",
        f"stop whatever listens on {listener} or pick another --port",
    )


def _non_default(site: _Site, name: str) -> str | None:
    """A server argument the engine logged among its non-default args above the error, if any."""
    patterns = [p for engine in surfaces() if (p := engine.failures.get(f"non-default-{name}"))]
    for message in reversed(site.messages[: site.index]):
        for pattern in patterns:
            if match := pattern.search(message):
                return match[name]
    return None


# A node's lines in a cluster's log, as cockpit prefixes them ("[node 2 127.0.0.3] ...").
NODE_PREFIX = re.compile(r"^\s*\[node (?P<node>\d+) (?P<host>[^\]\s]+)\]")
NEXT_RENDEZVOUS = (
    "check that every node started and reaches {address} (firewall, wrong interface: set ifname in the "
    "cluster profile), and that every node runs the same arguments"
)
NEXT_PEER_LOST = (
    "read that node's log for its own error (OOM, killed, crashed); the nodes of one engine live and die "
    "together: start them all again"
)


def _node_of(site: _Site) -> str:
    """ "node 2 (127.0.0.3): " when the matched line is a cluster node's, else nothing."""
    found = NODE_PREFIX.match(strip_ansi(site.lines[site.index]))
    return f"node {found['node']} ({found['host']}): " if found else ""


def _rendezvous_address(site: _Site) -> str | None:
    """Where the ranks meet, as a line above the error said (the engines' join lines)."""
    patterns = [p for engine in surfaces() for p in (*engine.rank_joined, *engine.join_waiting)]
    patterns.append(DIST_INIT_ADDR)
    for line in reversed(site.lines[: site.index]):
        plain = strip_ansi(line)
        for pattern in patterns:
            if (match := pattern.search(plain)) and (
                found := match.groupdict().get("address") or match.groupdict().get("old")
            ):
                return found.removeprefix("tcp://")
    return None


def _rank_timeout(match: re.Match[str], site: _Site) -> Diagnosis:
    """The head's store gave up on ranks that never came, or a node never reached the head."""
    node = _node_of(site)
    if match["joined"]:
        joined, world = int(match["joined"]), int(match["world"])
        address = _rendezvous_address(site)
        at = f" at {address}" if address else ""
        cause = (
            f"{node}{world - joined} of {world} ranks never joined the rendezvous{at} within "
            f"{int(match['seconds']) - 1} s: a node did not start, or cannot reach the head"
        )
    else:
        address = f"{match['host']}:{match['port']}"
        cause = (
            f"{node}this node never reached the head at {address} within {int(match['ms']) // 1000} s: "
            "the head did not start, or this node cannot reach it"
        )
    return site.diagnosis(
        "rank-timeout", cause, NEXT_RENDEZVOUS.format(address=address or "the head's address")
    )


def _peer_lost(match: re.Match[str], site: _Site) -> Diagnosis:
    """Another node's engine went away under this one."""
    node = _node_of(site)
    phase = site.phase()
    when = f" {PHASE_WORDS[phase]}" if phase in PHASE_WORDS else ""
    if match["store"]:
        who = "the head went away (its store closed the connection)"
    elif match["peer"]:
        who = f"the node at {match['peer']} went away (Connection closed by peer)"
    elif match["nccl"]:
        who = "a peer went away (NCCL: remote process exited or there was a network error)"
    else:
        who = "a peer went away (Connection reset by peer)"
    return site.diagnosis("peer-lost", f"{node}{who}{when}", NEXT_PEER_LOST)


def _pp_unsupported(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "pp-unsupported",
        "this model does not support pipeline parallelism in this engine",
        "drop pp: use TP, EP or DP instead",
    )


def _eplb_uneven(match: re.Match[str], site: _Site) -> Diagnosis:
    experts, ranks = match["experts"], match["ranks"]
    counts = f": {experts} experts over {ranks} EP ranks" if experts else ""
    return site.diagnosis(
        "eplb",
        f"EPLB needs the experts to split evenly over the EP ranks{counts}",
        f"use an EP size that divides {experts}, or drop --enable-eplb" if experts else "drop --enable-eplb",
    )


def _eplb_needs_ep(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "eplb",
        "EPLB needs expert parallel",
        "add `ep` (--enable-expert-parallel) or drop --enable-eplb",
    )


def _eplb_needs_parallelism(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "eplb",
        f"EPLB needs an expert group of more than one GPU: the EP group spans TP x PCP x DP ranks and "
        f"got TP={match['tp']}, PCP={match['pcp']}, DP={match['dp']}",
        "use TP or DP above 1 together with `ep`, or drop --enable-eplb",
    )


def _ep_needs_experts(match: re.Match[str], site: _Site) -> Diagnosis:
    return site.diagnosis(
        "ep-needs-experts",
        "expert parallelism is on but the model has no experts (a dense model)",
        "drop `ep` (--enable-expert-parallel): split a dense model with TP, PP or DP",
    )


def _ep_divides_tp(match: re.Match[str], site: _Site) -> Diagnosis:
    tp, ep = int(match["tp"]), int(match["ep"])
    return site.diagnosis(
        "moe-split",
        f"{_label(site)} carves the EP group out of the TP group: EP {ep} does not divide TP {tp}",
        f"use an --ep-size that divides --tp-size {tp}: {_divisors(tp)}",
    )


def _moe_tp(match: re.Match[str], site: _Site) -> Diagnosis:
    width, moe_tp, tp = int(match["width"]), int(match["moe_tp"]), int(match["tp"])
    return site.diagnosis(
        "moe-split",
        f"expert width {width} does not split over MoE-TP {moe_tp} (TP {tp} / EP {match['ep']})",
        f"raise --ep-size so each expert stays whole (--ep-size {tp} leaves MoE-TP 1), "
        f"or pick TP and EP whose quotient divides {width}",
    )


def _moe_block(match: re.Match[str], site: _Site) -> Diagnosis:
    width, moe_tp, block = int(match["width"]), int(match["moe_tp"]), match["block"]
    return site.diagnosis(
        "fp8-block",
        f"block-quantized MoE: expert width {width} / MoE-TP {moe_tp} = {width // moe_tp} is not a multiple "
        f"of the weight block {block}",
        NEXT_WHOLE_EXPERTS,
    )


def _unrecognized_args(match: re.Match[str], site: _Site) -> Diagnosis:
    program = (match["program"] or "the engine").strip()
    flags = match["flags"].strip()
    return site.diagnosis(
        "unrecognized-args",
        f"{program} does not know {flags}",
        "drop the flag: this engine or version spells it differently or does not have it",
    )


def _bad_argument(match: re.Match[str], site: _Site) -> Diagnosis:
    """argparse refused an argument's value (or missed a required one): its own words, and what
    the flag wants."""
    program = (match["program"] or "the engine").strip()
    if match["missing"]:
        missing = match["missing"].strip()
        return site.diagnosis(
            "bad-argument",
            f"{program} refused to start: the following arguments are required: {missing}",
            f"add {missing} to the server arguments",
        )
    flags, problem = match["flags"].strip(), match["problem"].strip()
    flag = next((f for f in flags.split("/") if f.startswith("--")), flags)
    if value := ARGPARSE_INVALID_VALUE.match(problem):
        wants = ARGPARSE_TYPES.get(value["type"], f"a valid {value['type']} value")
        next_step = f"give {flag} {wants} (it got {value['value']}), or drop it"
    elif choice := ARGPARSE_INVALID_CHOICE.match(problem):
        next_step = f"set {flag} to one of {_first_choices(choice['choices'])} (it got {choice['value']})"
        problem = f"invalid choice: {choice['value']}"  # the choices are the next step's
    elif problem.startswith("expected"):
        next_step = f"give {flag} its value ({problem}), or drop it"
    else:
        next_step = f"fix the value of {flag} as the engine says, or drop it"
    return site.diagnosis(
        "bad-argument", _shortened(f"{program} refused argument {flags}: {problem}", 200), next_step
    )


def _config_not_json(match: re.Match[str], site: _Site) -> Diagnosis:
    """transformers could not parse the model's config.json; json's error, raised first (the
    traceback above the one that ends here), says where."""
    above = site.messages[max(0, site.index - 80) : site.index]
    detail = next(
        (found["detail"] for line in reversed(above) if (found := JSON_DECODE_ERROR.search(line))), None
    )
    where = f" (json: {detail})" if detail else ""
    return site.diagnosis(
        "model-config",
        f"the model's config.json does not parse: {match['words']}{where}",
        f"fix the JSON of {match['path']} or download the model's config.json again",
    )


def _first_choices(choices: str, most: int = 160) -> str:
    """argparse's list of choices, whole ones up to `most` characters."""
    shown: list[str] = []
    for choice in choices.split(", "):
        if shown and len(", ".join([*shown, choice])) > most:
            return ", ".join(shown) + ", ..."
        shown.append(choice)
    return ", ".join(shown)


def _shortened(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def _unknown_exception(match: re.Match[str], site: _Site) -> Diagnosis:
    text = site.messages[site.index]
    return site.diagnosis(
        "error",
        f"the engine raised {text if len(text) <= 200 else text[:197] + '...'}",
        NEXT_READ_LOG,
    )


def _wrapped_exception(inner: re.Match[str], site: _Site) -> Diagnosis:
    """An error pydantic wrapped that no pattern knows: the engine's own words, not the wrapper."""
    text = f"{PYDANTIC_EXCEPTIONS[inner['kind']]}: {inner['text']}"
    return site.diagnosis(
        "error",
        f"the engine raised {text if len(text) <= 200 else text[:197] + '...'}",
        NEXT_READ_LOG,
    )


def _divisors(number: int, most: int = 16) -> str:
    return ", ".join(str(d) for d in range(1, min(number, most) + 1) if number % d == 0)


# In this order within one line; across lines the first line that matches wins. A name stands
# for each engine's words for that failure (cockpit/engines/<engine>/surface.py), in the order
# cockpit lists engines.
_CAUSES: tuple[tuple[re.Pattern[str] | str, Explain], ...] = (
    (OOM_TORCH_NEW, _oom),
    (OOM_TORCH_OLD, _oom),
    (OOM_OTHER, _oom),
    ("fp8-gate-up", _fp8_block("gate/up shard", "block_n")),
    ("fp8-down", _fp8_block("down shard", "block_k")),
    ("fp8-linear-out", _fp8_block("linear output shard", "block_n")),
    ("fp8-linear-in", _fp8_block("linear input shard", "block_k")),
    (KERNEL_TILE, _kernel_tile),
    ("attention-heads", _attention_heads),
    ("not-divisible", _not_divisible),
    (BARE_ASSERTION, _bare_assertion),
    ("kv-max-len", _kv_max_len),
    ("context-too-long", _context_too_long),
    ("no-cache-blocks", _no_cache_blocks),
    ("not-enough-memory", _not_enough_memory),
    ("no-kv-for-weights", _no_kv_for_weights),
    ("unbalanced-memory", _unbalanced_memory),
    ("free-memory-at-start", _free_memory_at_start),
    ("external-weights", _external_weights),
    ("world-size", _world_size),
    (INVALID_DEVICE, _invalid_device),
    # Before NCCL's own words: a lost node is the cause of the NCCL error that reports it.
    ("rank-timeout", _rank_timeout),
    ("peer-lost", _peer_lost),
    (NCCL_WATCHDOG, _nccl_timeout),
    (NCCL_ERROR, _nccl_error),
    (NCCL_ERROR_CODE, _nccl_error),
    (ADDRESS_IN_USE, _address_in_use),
    ("pp-unsupported", _pp_unsupported),
    ("eplb-uneven", _eplb_uneven),
    ("eplb-needs-ep", _eplb_needs_ep),
    ("eplb-needs-parallelism", _eplb_needs_parallelism),
    ("ep-needs-experts", _ep_needs_experts),
    ("ep-divides-tp", _ep_divides_tp),
    ("moe-tp", _moe_tp),
    ("moe-block", _moe_block),
    (UNRECOGNIZED_ARGS, _unrecognized_args),
    (BAD_ARGUMENT, _bad_argument),
    (CONFIG_NOT_JSON, _config_not_json),
)
ROOT_CAUSES: tuple[tuple[re.Pattern[str], Explain, EngineSurface | None], ...] = tuple(
    entry
    for cause, explain in _CAUSES
    for entry in (
        [(cause, explain, None)]
        if isinstance(cause, re.Pattern)
        else [(engine.failures[cause], explain, engine) for engine in surfaces() if cause in engine.failures]
    )
)
