"""The engines' option tables, and an argument list read through one the way the engine's parser reads it.

The tables (cockpit/engines/tables/) are the engines' argparse actions, read from the installed
engines by tools/engine_options.py. ``read_args`` walks an argument list the way the engine's
parser would, so a typo, a bad choice, a missing value or a removed flag costs a second here
instead of a ten-minute weight load there; what an unknown flag most likely means is its
caller's ``hint`` (``cockpit.engines.arguments.check_args`` names the other engine's flags).
See docs/options.md#server-arguments.

Both parsers keep argparse's abbreviations: a unique prefix of a flag is that flag (vLLM reads
``--max-num-seq 512`` as --max-num-seqs, and so does cockpit, with a note to write it out); an
ambiguous one is refused. Beyond plain argparse, read from their source:
- vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py): underscores for dashes in names,
  ``-O3`` for ``--optimization-level 3``, dotted JSON keys (``--compilation-config.mode 3``),
  sizes with suffixes (``32k`` = 32,000, ``32K`` = 32,768).
- SGLang (sglang/srt/server_args.py): plain argparse; its ``human_readable_int`` sizes (on the
  few flags that take them) read ``k``/``M`` as powers of ten and ``Ki``/``Mi`` as powers of two.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from types import ModuleType

from cockpit.core.errors import CockpitError, shown

# Actions that take no value: a flag alone switches them.
_FLAG_ACTIONS = {
    "_StoreTrueAction",
    "_StoreFalseAction",
    "_StoreConstAction",
    "_CountAction",
    "EnableDisableAction",
    "BooleanOptionalAction",
    "DeprecatedStoreTrueAction",
}
# Size suffixes, per engine: vLLM reads case as decimal (k) or binary (K); SGLang reads SI
# (k, M, G, T) and IEC (Ki, Mi, Gi, Ti), case-sensitive.
_SIZE = {
    "vllm": re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])"),
    "sglang": re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)"),
}
_DECIMAL = {
    "vllm": {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12},
    "sglang": {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12},
}
_BINARY = {
    "vllm": {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40},
    "sglang": {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40},
}

# Values the parser passes as strings and the engine's config then validates: vLLM's cache
# dtype is a Literal checked by pydantic (vllm/config/cache.py, CacheDType), not an argparse choice.
_LATE_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm", "kv_cache_dtype"): (
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "nvfp4_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "octave_k3v4",
        "octave_k3v3",
        "octave_k3v3_compact",
        "ultraquant_4bit",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
    ),
}

# Flags people still pass that the engine no longer has, and what replaced them.
REMOVED: dict[str, dict[str, str]] = {
    "vllm": {
        "--swap-space": "vLLM no longer swaps KV cache to CPU memory (the V1 engine dropped it): remove the flag",
        "--num-scheduler-steps": "multi-step scheduling is gone from vLLM: remove the flag",
        "--use-v2-block-manager": "the V1 engine has one block manager: remove the flag",
        "--worker-use-ray": "choose Ray with --distributed-executor-backend ray, on a Ray cluster you start "
        "yourself (docs/clusters.md#not-supported)",
    },
    "sglang": {
        "--seed": "use --random-seed",
        "--enable-deepep-moe": "use --moe-a2a-backend deepep",
        "--cuda-graph-max-bs": "it was split in two: use --cuda-graph-max-bs-decode (and --cuda-graph-max-bs-prefill)",
        "--cuda-graph-bs": "it was split in two: use --cuda-graph-bs-decode (and --cuda-graph-bs-prefill)",
    },
}


# Said by the layout words or by cockpit itself (the engine option's dest -> who says it): a
# knob may not say them again, and the simulator reads them as the layout, not as server args.
SET_BY_COCKPIT = {
    "tensor_parallel_size": "the layout's tpN",
    "pipeline_parallel_size": "the layout's ppN",
    "data_parallel_size": "the layout's dpN",
    "enable_expert_parallel": "the layout's ep",
    "tp_size": "the layout's tpN",
    "pp_size": "the layout's ppN",
    "dp_size": "the layout's dpN",
    "ep_size": "the layout's epN",
    "attn_dp_size": "the layout's dpN dpa",
    "enable_dp_attention": "the layout's dpa",
    "host": "cockpit (127.0.0.1)",
    # across nodes (docs/clusters.md): where the nodes meet and which node is which
    "nnodes": "the cluster launch",
    "node_rank": "the cluster launch",
    "master_addr": "the cluster launch",
    "master_port": "the cluster launch",
    "headless": "the cluster launch",
    "data_parallel_size_local": "the cluster launch",
    "data_parallel_start_rank": "the cluster launch",
    "data_parallel_address": "the cluster launch",
    "data_parallel_rpc_port": "the cluster launch",
    "data_parallel_rank": "the cluster launch",
    "data_parallel_hybrid_lb": "the cluster launch",
    "data_parallel_external_lb": "the cluster launch",
    "dist_init_addr": "the cluster launch",
    "port": "the profile's server port",
    "model": "the profile's model",
    "model_path": "the profile's model",
}


@dataclass(frozen=True)
class Option:
    """One argparse action of the engine's server parser."""

    spellings: tuple[str, ...]
    dest: str
    action: str  # the argparse action class, as the engine names it
    nargs: int | str | None
    choices: tuple | None
    type: str | None  # the type function's name: int, float, str, human_readable_int, ...
    default: object
    help: str

    @property
    def name(self) -> str:
        """The long spelling people write."""
        return next((s for s in self.spellings if s.startswith("--")), self.spellings[0])

    @property
    def hidden(self) -> tuple[str, ...]:
        """Spellings the parser accepts but its help hides: vLLM's EnableDisableAction keeps
        BooleanOptionalAction's ``--no-enable-x`` (vllm/utils/argparse_utils.py)."""
        first = self.spellings[0]
        if self.action == "EnableDisableAction" and first.startswith("--"):
            return ("--no-" + first[2:],)
        return ()

    @property
    def takes_value(self) -> bool:
        return self.action not in _FLAG_ACTIONS and self.nargs != 0

    @property
    def deprecated(self) -> bool:
        text = self.help.lower()
        return self.action.startswith("Deprecated") or text.startswith(("deprecated", "(deprecated"))

    def negative(self, spelling: str) -> bool:
        """Whether this spelling turns the switch off: ``--no-x``; and for vLLM's
        EnableDisableAction the inverse of the spelling it was declared with, either way round
        (``--disable-x`` of ``--enable-x``, ``--enable-x`` of ``--disable-x``:
        vllm/utils/argparse_utils.py)."""
        if self.action == "_StoreFalseAction" or spelling.startswith("--no-"):
            return True
        if self.action != "EnableDisableAction":
            return False
        first = self.spellings[0]
        return (first.startswith("--enable-") and spelling.startswith("--disable-")) or (
            first.startswith("--disable-") and spelling.startswith("--enable-")
        )


@dataclass(frozen=True)
class OptionTable:
    """Every option of one engine version's server command."""

    engine: str
    version: str
    command: str
    options: tuple[Option, ...]

    @property
    def label(self) -> str:
        return f"{engine_label(self.engine)} {self.version}"

    def find(self, spelling: str) -> Option | None:
        return self._by_spelling.get(spelling)

    def by_dest(self, dest: str) -> Option | None:
        return next((o for o in self.options if o.dest == dest), None)

    def default(self, dest: str) -> object:
        option = self.by_dest(dest)
        return option.default if option else None

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Every long spelling, for completion and suggestions."""
        return tuple(sorted({s for o in self.options for s in o.spellings if s.startswith("--")}))

    @cached_property
    def _by_spelling(self) -> dict[str, Option]:
        return {s: o for o in self.options for s in (*o.spellings, *o.hidden)}


_LABELS = {"vllm": "vLLM", "sglang": "SGLang"}


def engine_label(engine: str) -> str:
    """The engine's name as people write it: vLLM, SGLang."""
    return _LABELS.get(engine, engine)


# ---------------------------------------------------------------------------------------------
# Tables


def _vllm_0_32_0() -> ModuleType:
    from cockpit.engines.tables import vllm_0_32_0

    return vllm_0_32_0


def _vllm_0_33_0() -> ModuleType:
    from cockpit.engines.tables import vllm_0_33_0

    return vllm_0_33_0


def _sglang_0_5_23() -> ModuleType:
    from cockpit.engines.tables import sglang_0_5_23

    return sglang_0_5_23


# Newest last. A table is imported the first time it is asked for.
TABLES = {
    "vllm": {"0.32.0": _vllm_0_32_0, "0.33.0": _vllm_0_33_0},
    "sglang": {"0.5.23": _sglang_0_5_23},
}
_LOADED: dict[tuple[str, str], OptionTable] = {}


def version_key(version: str) -> tuple[int, ...]:
    """``0.5.23`` -> (0, 5, 23); ``0.33.0rc1+cu129`` -> (0, 33, 0)."""
    parts = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def table_version(engine: str, version: str | None) -> tuple[str, str]:
    """The table to check ``version`` with, and a note when it is not that version's own.

    The newest table at or below the version, else the oldest; with no version, the newest."""
    versions = list(TABLES[engine])
    if not version:
        return versions[-1], ""
    if version in TABLES[engine]:
        return version, ""
    key = version_key(version)
    below = [v for v in versions if version_key(v) <= key]
    chosen = below[-1] if below else versions[0]
    label = engine_label(engine)
    return chosen, f"no option table for {label} {version}: checking its flags with {label} {chosen}'s"


def option_table(engine: str, version: str | None = None) -> OptionTable:
    chosen, _ = table_version(engine, version)
    key = (engine, chosen)
    if key not in _LOADED:
        module = TABLES[engine][chosen]()
        options = tuple(
            Option(tuple(row[0]), row[1], row[2], row[3], tuple(row[4]) if row[4] else None, *row[5:])
            for row in module.OPTIONS
        )
        _LOADED[key] = OptionTable(engine, module.VERSION, module.COMMAND, options)
    return _LOADED[key]


# ---------------------------------------------------------------------------------------------
# Checking


@dataclass(frozen=True)
class Given:
    """One flag of a checked list with the words that are its values, as the parser grouped them."""

    option: Option
    spelling: str  # the flag as the engine reads it (SGLang's prefix expanded; vLLM's dotted key kept)
    values: tuple[str, ...] = ()
    inline: bool = False  # written --flag=value

    @property
    def on(self) -> bool:
        """For a switch: whether this spelling turns it on."""
        return not self.option.negative(self.spelling)

    @property
    def words(self) -> tuple[str, ...]:
        """The flag and its values as argv words, written as they were given."""
        if self.inline:
            return (f"{self.spelling}={self.values[0]}",)
        return (self.spelling, *self.values)


@dataclass(frozen=True)
class CheckedArgs:
    """What an argument list sets, by the engine's own names (``dest``), values typed."""

    table: OptionTable
    values: dict[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the engine would warn about, in plain words
    groups: tuple[Given, ...] = ()  # every flag with its value words, in order

    @property
    def deprecated(self) -> tuple[str, ...]:
        """The spellings used that the engine deprecates."""
        return tuple(g.spelling for g in self.groups if g.option.deprecated)

    def get(self, dest: str, default: object = None) -> object:
        if dest in self.values:
            return self.values[dest]
        value = self.table.default(dest)
        return default if value is None else value


# What an unknown flag most likely means, said after "is not a <engine> server flag: ".
Hint = Callable[["OptionTable", str], str]


def read_args(
    table: OptionTable, args: Sequence[str], where: str, *, strict: bool, hint: Hint
) -> CheckedArgs:
    """Walk ``args`` as the engine's parser would; the first bad one is a one-line CockpitError.

    ``args`` are what follows the model and the parallel flags: a profile's server args and the
    knobs typed after a layout. A bare word that belongs to no flag is refused too. Not
    ``strict`` (the table is another version's than the engine on the box): a flag the table
    lacks is a note, not an error, since that engine may have it. ``hint`` says what a flag the
    table lacks most likely means."""
    values: dict[str, object] = {}
    notes: list[str] = []
    groups: list[Given] = []
    items = expanded_args(table, list(args))
    i = 0
    while i < len(items):
        token = items[i]
        if not is_flag(token):
            raise CockpitError(
                f"{where} {shown(token)} belongs to no flag: {table.label} flags start with --, "
                f"e.g. --max-num-seqs 256"
            )
        written, eq, inline = token.partition("=")
        try:
            option, spelling = _resolve(table, written, where, hint)
        except UnknownFlag as exc:
            if strict:
                raise
            notes.append(f"{exc} (not refused: the engine on the box is another version)")
            i += 1 + len(list(_until_next_flag(items[i + 1 :]))) * (not eq)
            continue
        if spelling != written and "." not in written:
            notes.append(f"{written} is read by {table.label} as {spelling} (a unique prefix): write it out")
        dest = option.dest
        if "." in spelling and table.find(spelling) is None:  # vLLM's --compilation-config.mode 3
            dest += spelling[spelling.index(".") :]
        if option.deprecated:
            advice = option.help.removeprefix("Deprecated.").strip()
            notes.append(f"{spelling} is deprecated in {table.label}" + (f": {advice}" if advice else ""))
        if not option.takes_value:
            if eq:
                raise CockpitError(
                    f"{where} {spelling} takes no value (got {shown(token)}): write {spelling} alone"
                )
            values[dest] = _flag_value(option, spelling)
            groups.append(Given(option, spelling))
            i += 1
            continue
        if eq:
            raw = [inline]
            i += 1
        else:
            raw = _take_values(table, option, items[i + 1 :], spelling, where)
            i += 1 + len(raw)
        if dest != option.dest:  # a dotted key's value is the key's, not the option's type
            typed: list[object] = list(raw)
        else:
            typed = [_typed(table, option, spelling, text, where) for text in raw]
        values[dest] = typed if option.nargs in ("+", "*") else (typed[0] if typed else option.default)
        groups.append(Given(option, spelling, tuple(raw), bool(eq)))
    return CheckedArgs(table, values, tuple(notes), tuple(groups))


def expanded_args(table: OptionTable, args: Sequence[str]) -> list[str]:
    """vLLM's rewrites before argparse sees the list: ``-O3`` and ``--a_b``; SGLang has none."""
    return expand_vllm_args(args) if table.engine == "vllm" else list(args)


def expand_vllm_args(args: Sequence[str]) -> list[str]:
    """FlexibleArgumentParser's rewrites: dashes for underscores in names (before any dot),
    ``-O3`` / ``-O 3`` for ``--optimization-level 3``."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            head, dot, tail = key.partition(".")
            out.append(head.replace("_", "-") + dot + tail + eq + value)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _resolve(table: OptionTable, spelling: str, where: str, hint: Hint) -> tuple[Option, str]:
    """The option a spelling names: exact, vLLM's dotted JSON key, or a unique prefix (both
    parsers keep argparse's allow_abbrev, so `--max-num-seq` is vLLM's --max-num-seqs)."""
    option = table.find(spelling)
    if option:
        return option, spelling
    head = spelling.partition(".")[0]
    if table.engine == "vllm" and head != spelling:
        dotted = table.find(head)
        if dotted and dotted.takes_value:
            return dotted, spelling
    if spelling.startswith("--") and len(spelling) > 2:
        matches = prefix_matches(table, spelling)
        if len(matches) == 1:
            found = table.find(matches[0])
            assert found is not None
            return found, matches[0]
        if len(matches) > 1:
            removed = REMOVED.get(table.engine, {}).get(spelling)
            said = f": {removed}" if removed else ""
            raise CockpitError(
                f"{where} {spelling} is ambiguous in {table.label} (could be {', '.join(matches[:8])}){said}"
            )
    removed = REMOVED.get(table.engine, {}).get(spelling)
    if removed:
        raise UnknownFlag(f"{where} {spelling} is gone from {table.label}: {removed}")
    raise UnknownFlag(f"{where} {spelling} is not a {table.label} server flag: {hint(table, spelling)}")


def closest(spelling: str, names: Sequence[str]) -> str | None:
    """The name most like ``spelling``, if any is close."""
    guess = difflib.get_close_matches(spelling, names, n=1, cutoff=0.6)
    return guess[0] if guess else None


class UnknownFlag(CockpitError):
    """A flag the table does not have (or no longer has)."""


def help_command(table: OptionTable) -> str:
    """The command that lists every flag of the engine."""
    return "vllm serve --help=all" if table.engine == "vllm" else "python -m sglang.launch_server --help"


def _take_values(table: OptionTable, option: Option, rest: list[str], spelling: str, where: str) -> list[str]:
    """The words after a flag that are its values, as argparse counts them."""
    free = [w for w in _until_next_flag(rest)]
    if option.nargs in (None, 1):
        if not free:
            raise CockpitError(f"{where} {spelling} needs a value{_example(table, option)}")
        return free[:1]
    if option.nargs == "?":
        return free[:1]
    if option.nargs == "*":
        return free
    if option.nargs == "+":
        if not free:
            raise CockpitError(f"{where} {spelling} needs one or more values{_example(table, option)}")
        return free
    count = int(option.nargs) if isinstance(option.nargs, int) else 1
    if len(free) < count:
        raise CockpitError(f"{where} {spelling} needs {count} values")
    return free[:count]


def _until_next_flag(rest: Iterable[str]) -> Iterable[str]:
    for word in rest:
        if is_flag(word):
            return
        yield word


def prefix_matches(table: OptionTable, prefix: str) -> list[str]:
    """The spellings a long option's prefix could mean, in the parser's order (argparse counts
    each spelling, hidden ones too)."""
    return [s for o in table.options for s in (*o.spellings, *o.hidden) if s.startswith(prefix)]


def is_flag(word: str) -> bool:
    """A word argparse reads as an option: a dash, and not a negative number."""
    if not word.startswith("-"):
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False


def find_option(table: OptionTable, spelling: str) -> Option | None:
    """The option a spelling names: exact, a dotted JSON key's option, or a unique prefix."""
    option = table.find(spelling) or table.find(spelling.partition(".")[0])
    if option is None and spelling.startswith("--"):
        matches = prefix_matches(table, spelling)
        option = table.find(matches[0]) if len(matches) == 1 else None
    return option


def _example(table: OptionTable, option: Option) -> str:
    choices = _choices(table, option)
    if choices:
        return f": one of {', '.join(map(str, choices))}"
    if option.default not in (None, "", [], {}) and isinstance(option.default, (int, float, str)):
        return f", e.g. {option.name} {option.default}"
    return ""


def _choices(table: OptionTable, option: Option) -> tuple | None:
    return option.choices or _LATE_CHOICES.get((table.engine, option.dest))


def _flag_value(option: Option, spelling: str) -> object:
    if option.action == "_StoreFalseAction":
        return False
    if option.action == "_StoreConstAction":
        return True
    return not option.negative(spelling)


def _typed(table: OptionTable, option: Option, spelling: str, text: str, where: str) -> object:
    """The value as the engine's type function would return it, or a one-line error."""
    kind = option.type or "str"
    value: object = text
    try:
        if kind == "int":
            value = int(text)
        elif kind == "float":
            value = float(text)  # nan and inf parse, as in argparse; ServerArgs bounds them
        elif kind in ("human_readable_int", "human_readable_int_or_auto"):
            value = size_value(text, table.engine, allow_auto=kind.endswith("auto"))
        elif kind in ("loads", "parse_dataclass", "json_list_type") and text[:1] in "[{":
            value = json.loads(text)
    except (ValueError, OverflowError):
        what = {"int": "a whole number", "float": "a number"}.get(kind, "a size like 32k or 32768")
        if kind in ("loads", "parse_dataclass", "json_list_type"):
            what = "valid JSON"
        said = (
            f": {table.label} stops at once with {_argparse_error(option, kind, text)}"
            if kind
            in (
                "int",
                "float",
            )
            else ""
        )
        raise CockpitError(f"{where} {spelling} needs {what} (got {shown(text)}){said}") from None
    choices = _choices(table, option)
    if choices and str(value) not in {str(c) for c in choices}:
        late = not option.choices  # checked by the engine's config after parsing, not by argparse
        guess = nearest_choice(str(value), [str(c) for c in choices])
        hint = f" (did you mean {guess}?)" if guess else ""
        listed = ", ".join(map(str, choices[:10])) + (
            f" and {len(choices) - 10} more" if len(choices) > 10 else ""
        )
        said = (
            ""
            if late
            else f" ({table.label}: argument {'/'.join(option.spellings)}: invalid choice: {text!r})"
        )
        raise CockpitError(
            f"{where} {spelling} {shown(text)} is not one of {table.label}'s choices{hint}: {listed}{said}"
        )
    return value


def _argparse_error(option: Option, kind: str, text: str) -> str:
    """The line the engine's argparse prints for a value its type function refuses
    (``argparse.ArgumentParser._get_value``): the words a person then finds in the engine's log."""
    return f'"argument {"/".join(option.spellings)}: invalid {kind} value: {text!r}"'


# What people mean by a short value where the engine wants the long one: vLLM's "fp8" KV cache
# is fp8_e4m3 (vllm/config/cache.py), which SGLang spells out.
_MEANT = {"fp8": "fp8_e4m3", "fp16": "float16", "bf16": "bfloat16"}


def nearest_choice(value: str, choices: list[str]) -> str | None:
    """The choice a value outside the list most likely means (fp8 -> fp8_e4m3)."""
    meant = _MEANT.get(value.lower())
    if meant in choices:
        return meant
    guess = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
    return guess[0] if guess else None


def size_value(text: str, engine: str = "vllm", allow_auto: bool = False) -> int:
    """A token count as the engine reads it. vLLM (vllm/utils/argparse_utils.py
    human_readable_int): ``32k`` = 32,000, ``32K`` = 32,768, ``1M`` = 1,048,576. SGLang
    (sglang/srt/utils/common.py human_readable_int): ``32k`` = 32,000, ``1M`` = 1,000,000,
    ``32Ki`` = 32,768. Decimals only with decimal suffixes; ``auto`` or -1 where allowed."""
    text = text.strip()
    if allow_auto and (text == "-1" or text.lower() == "auto"):
        return -1
    match = _SIZE[engine].fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL[engine]:  # SGLang multiplies a Decimal, vLLM a float
            exact = Decimal(number) if engine == "sglang" else float(number)
            return int(exact * _DECIMAL[engine][suffix])
        return int(number) * _BINARY[engine][suffix]  # ValueError for "1.5K", as the engine refuses it
    return int(text)
