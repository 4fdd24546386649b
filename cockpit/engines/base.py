"""What every engine adapter answers: flags, placement, startup rules, memory budget.

The same layout words mean different things on vLLM and SGLang (SGLang's ``--ep-size`` adds no
GPUs; vLLM has no EP size at all), so each adapter turns a typed ``Layout`` into a
``Placement`` that says plainly how many GPUs run and how every tensor is split.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cockpit.errors import CockpitError
from cockpit.layout import Layout
from cockpit.model import ModelArch


@dataclass(frozen=True)
class Rule:
    """A startup check the engine would fail, in the engine's own words."""

    rule: str  # short id: "attention-heads", "fp8-block-gate-up", ...
    message: str  # what the engine prints (verbatim where the engine has a message)
    detail: str = ""  # the same in plain words, with the numbers

    def to_json(self) -> dict:
        return {"rule": self.rule, "message": self.message, "detail": self.detail}


class Inexpressible(CockpitError):
    """The layout cannot be said in this engine's flags; ``alternatives`` can."""

    def __init__(self, message: str, alternatives: Sequence[Layout] = ()):
        super().__init__(message)
        self.alternatives = tuple(alternatives)


@dataclass(frozen=True)
class ServerArgs:
    """The server arguments that move memory, read from the profile's argument list."""

    gpu_memory_utilization: float = 0.9  # vLLM
    mem_fraction_static: float | None = None  # SGLang (None: the engine picks)
    max_model_len: int | None = None  # vLLM --max-model-len / SGLang --context-length
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None  # vLLM --max-num-seqs / SGLang --max-running-requests
    max_num_batched_tokens: int = 8192
    enable_eplb: bool = False

    def kv_bytes(self, model_dtype_bytes: float = 2.0) -> float:
        return 1.0 if self.kv_cache_dtype.startswith("fp8") else model_dtype_bytes


_FLOAT_FLAGS = {
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--mem-fraction-static": "mem_fraction_static",
}
_INT_FLAGS = {
    "--max-model-len": "max_model_len",
    "--context-length": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--max-running-requests": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--chunked-prefill-size": "max_num_batched_tokens",
}
_OFF = {"--chunked-prefill-size": -1}  # SGLang: -1 turns chunked prefill off; the default then stands
MAX_TOKENS_ARG = 1_000_000_000  # token counts above this are typos, not settings


def parse_server_args(args: Sequence[str]) -> ServerArgs:
    """Pick the memory-moving flags out of an argument list (``--flag value`` or ``--flag=value``).

    Values the engine would refuse at startup (a memory share above 1, a zero length) are refused
    here, before anything is launched."""
    values: dict = {}
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, inline = arg.partition("=")
        nxt = inline if eq else (items[i + 1] if i + 1 < len(items) else None)
        step = 1 if eq else 2
        if name in _FLOAT_FLAGS:
            values[_FLOAT_FLAGS[name]] = _fraction(name, nxt)
        elif name in _INT_FLAGS:
            count = _token_count(name, nxt)
            if count != _OFF.get(name):
                values[_INT_FLAGS[name]] = count
        elif name == "--kv-cache-dtype":
            values["kv_cache_dtype"] = str(nxt)
        elif name == "--enable-eplb":
            values["enable_eplb"] = True
            step = 1
        else:
            step = 1
        i += step
    return ServerArgs(**values)


def api_keys(engine: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys a server will require of its clients, read as the engines read them:
    `--api-key K [K ...]` or `--api-key=K` (vLLM takes several, SGLang one); else, for vLLM,
    VLLM_API_KEY (vllm/entrypoints/openai/api_server.py: `args.api_key or envs.VLLM_API_KEY`).
    Empty: the server is open."""
    args = list(args)
    keys: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--api-key="):
            keys.append(arg.split("=", 1)[1])
        elif arg == "--api-key":
            values = args[i + 1 :]
            end = next((j for j, value in enumerate(values) if value.startswith("-")), len(values))
            keys.extend(values[: end if engine == "vllm" else min(end, 1)])
    if engine == "vllm" and not keys:
        keys = [env.get("VLLM_API_KEY", "")]
    return tuple(k for k in keys if k)


def _number(name: str, text: str | None, kind: type) -> float:
    try:
        if text is None or len(text) > 40:
            raise ValueError
        return kind(text)
    except ValueError:
        shown = repr(text if text is None or len(text) <= 40 else text[:37] + "...")
        raise CockpitError(
            f"server argument {name} needs a number, got {shown}: fix the profile's server args"
        ) from None


def _fraction(name: str, text: str | None) -> float:
    """--gpu-memory-utilization / --mem-fraction-static: a share of each GPU, above 0 and at most 1."""
    value = _number(name, text, float)
    if not 0 < value <= 1:  # also refuses nan and inf
        raise CockpitError(
            f"server argument {name} must be above 0 and at most 1, a share of each GPU's memory "
            f"(got {text}): fix the profile's server args, e.g. {name} 0.9"
        )
    return value


def _token_count(name: str, text: str | None) -> int:
    value = int(_number(name, text, int))
    if value == _OFF.get(name):
        return value
    if not 1 <= value <= MAX_TOKENS_ARG:
        raise CockpitError(
            f"server argument {name} must be a whole number from 1 to {MAX_TOKENS_ARG:,} (got {text}): "
            "fix the profile's server args"
        )
    return value


@dataclass(frozen=True)
class Placement:
    """What a layout means on one engine and one box."""

    engine: str
    layout: Layout
    gpus_total: int
    gpus_used: int
    attn_tp: int  # attention heads split this many ways
    attn_replicas: int  # independent attention groups (DP ranks), each with its own KV cache
    dense_tp: int  # dense MLP and shared experts split this many ways
    vocab_tp: int
    pp: int
    stage_layers: tuple[int, ...]  # layers per pipeline stage
    moe_ep: int = 1  # expert-parallel group size (1: EP off)
    moe_tp: int = 1  # each expert's width split this many ways
    experts_per_gpu: int = 0  # on the busiest GPU
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpus_idle(self) -> int:
        return max(0, self.gpus_total - self.gpus_used)

    def __str__(self) -> str:
        parts = [f"{self.gpus_used} of {self.gpus_total} GPUs"]
        attn = f"attention TP{self.attn_tp}"
        if self.attn_replicas > 1:
            attn += f" x {self.attn_replicas} replicas"
        parts.append(attn)
        if self.experts_per_gpu and self.moe_ep > 1:
            parts.append(f"MoE EP{self.moe_ep} x TP{self.moe_tp} ({self.experts_per_gpu} experts/GPU)")
        elif self.experts_per_gpu:
            parts.append(
                f"MoE TP{self.moe_tp} (all {self.experts_per_gpu} experts, each sliced {self.moe_tp} ways)"
            )
        if self.pp > 1:
            parts.append(f"PP{self.pp} ({max(self.stage_layers)} layers/stage)")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return {
            "gpus_used": self.gpus_used,
            "gpus_idle": self.gpus_idle,
            "attn_tp": self.attn_tp,
            "attn_replicas": self.attn_replicas,
            "dense_tp": self.dense_tp,
            "moe_ep": self.moe_ep,
            "moe_tp": self.moe_tp,
            "experts_per_gpu": self.experts_per_gpu,
            "pp": self.pp,
            "stage_layers": list(self.stage_layers),
            "notes": list(self.notes),
        }


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, split as vLLM's get_pp_indices does (extras before the last)."""
    base = layers // pp
    parts = [base] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def experts_per_gpu(model: ModelArch, moe_ep: int) -> int:
    return math.ceil(model.moe.experts / moe_ep) if model.moe else 0


class Engine(ABC):
    """One inference engine: how to say a layout in its flags, and what it checks at startup."""

    name: str
    label: str
    default_command: tuple[str, ...]
    ready_paths: tuple[str, ...]

    @abstractmethod
    def placement(self, layout: Layout, gpus_total: int, model: ModelArch) -> Placement:
        """Raise ``Inexpressible`` when the flags cannot say this layout."""

    @abstractmethod
    def startup_rules(self, model: ModelArch, placement: Placement, server: ServerArgs) -> list[Rule]:
        """Every startup check this placement fails, in order the engine meets them."""

    @abstractmethod
    def model_args(self, model_path: str) -> list[str]:
        """The arguments that name the model (``serve M`` or ``--model-path M``)."""

    @abstractmethod
    def memory_fraction(self, server: ServerArgs, capacity_gib: float) -> float:
        """The share of each GPU the engine takes for weights, activations and KV cache."""

    def argv(
        self,
        placement: Placement,
        model_path: str,
        port: int,
        extra_args: Sequence[str] = (),
        command: Sequence[str] = (),
    ) -> list[str]:
        """The one argv of a layout, the same shown, journaled and launched: the launcher words
        (``command``: the profile's, the simulator's wrapper, or else the engine's default), the
        model, the parallel flags, the port, the profile's own args."""
        return [
            *(command or self.default_command),
            *self.model_args(model_path),
            *placement.flags,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra_args,
        ]
