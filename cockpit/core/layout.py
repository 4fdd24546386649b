"""Parallelism layouts as people type them: `tp4 ep2`, `tp8 ep`, `pp8`, `tp8 dp8 dpa ep8`.

A Layout records what was typed and nothing more. The same words mean different GPU
counts in vLLM and SGLang (docs/placement.md#side-by-side-8-gpus), so the engine modules
translate a Layout into flags; this module only parses, prints and lists candidates.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from cockpit.core.errors import CockpitError, cut
from cockpit.core.hardware import MAX_GPUS
from cockpit.core.knobs import Knobs

_NAMES = ("tp", "pp", "dp", "ep", "dpa")
_SIZED = ("tp", "pp", "dp")  # these need a number; ep may go without one, dpa never has one
_EXAMPLES = "Layouts look like `tp4 ep2`, `tp8 ep`, `pp8`, `tp2 dp4 ep`."

_DPA_ALIAS = re.compile(r"dp[-_ ]?attention")
_NAME_THEN_NUMBER = re.compile(r"([a-z])\s*(?:=\s*|\s+)(?=\d)")  # `tp = 4`, `tp 4` -> `tp4`
_SEPARATORS = re.compile(r"[\s+,/-]+")
_TOKEN = re.compile(r"([a-z]+)=?(\d*)")


@dataclass(frozen=True)
class Layout:
    """What the user typed, engine-neutral.

    `ep` is the explicit EP size of `ep8`; a bare `ep` leaves it None and only sets
    `expert_parallel`, because vLLM derives the EP size itself (tp x dp).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int | None = None
    expert_parallel: bool = False
    dpa: bool = False
    # Server arguments typed after the layout words (`tp8 ep --max-num-seqs 512`): added to the
    # profile's for this experiment only, and part of its name, so rows that differ by a knob
    # stay apart in the journal and the results. A secret among them (`--api-key V`) is kept
    # here only, for the engine's argv: every text form of the layout shows it as ***.
    knobs: Knobs = Knobs()

    def __post_init__(self) -> None:
        if not isinstance(self.knobs, Knobs):  # words from a tuple: typed once, here
            object.__setattr__(self, "knobs", Knobs(self.knobs))
        for name in ("tp", "pp", "dp", "ep"):
            size = getattr(self, name)
            if size is None and name == "ep":
                continue
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_GPUS:
                raise CockpitError(
                    f"{name} must be a whole number from 1 to {MAX_GPUS}, got {cut(repr(size))}: try `{name}4`."
                )
        if self.ep is not None and not self.expert_parallel:
            # An EP size implies expert parallelism; normalise so equal layouts compare equal.
            object.__setattr__(self, "expert_parallel", True)
        if self.dpa and self.dp < 2:
            raise CockpitError("dpa needs dp2 or more: try `tp8 dp8 dpa ep8`.")

    @property
    def gpus_product(self) -> int:
        """tp x pp x dp; how many GPUs an engine really uses is the engine module's call."""
        return self.tp * self.pp * self.dp

    def __str__(self) -> str:
        parts = []
        # Parsing defaults tp to the EP size (`ep8` means tp8 ep8), so print tp whenever it
        # differs from that default, and always when it is above 1, for readability.
        default_tp = self.ep if self.ep is not None else 1
        if self.tp != 1 or self.tp != default_tp:
            parts.append(f"tp{self.tp}")
        if self.pp != 1:
            parts.append(f"pp{self.pp}")
        if self.dp != 1:
            parts.append(f"dp{self.dp}")
        if self.dpa:
            parts.append("dpa")
        if self.expert_parallel:
            parts.append("ep" if self.ep is None else f"ep{self.ep}")
        return " ".join([" ".join(parts) or "tp1", *([str(self.knobs)] if self.knobs else [])])

    def __repr__(self) -> str:
        """As the dataclass says it, with the knobs' secret values blanked (a traceback, a log)."""
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in ("tp", "pp", "dp", "ep", "expert_parallel", "dpa")
        )
        return f"Layout({fields}, knobs={self.knobs!r})"

    def unredacted(self) -> str:
        """The layout's text with its secrets, only to be parsed again into a launch (a
        profile's layouts said in another engine's words); never shown or stored."""
        return " ".join([str(self.parallel), *([self.knobs.unredacted()] if self.knobs else [])])

    def refuse_blanked(self) -> None:
        """Text read back from the journal, the registry or the prompt history holds `***`
        where a secret was: launching it would hand the engine `***` as its key."""
        blanked = self.knobs.blanked()
        if blanked:
            raise CockpitError(f"the value of {cut(blanked[0])} was not stored; type it again")

    @property
    def parallel(self) -> Layout:
        """The layout without its knobs."""
        return replace(self, knobs=Knobs()) if self.knobs else self


def split_knobs(text: str) -> tuple[str, Knobs]:
    """`tp8 ep --max-num-seqs 512` -> ("tp8 ep", Knobs(["--max-num-seqs", "512"])): the knobs start
    at the first word that starts with a dash, and are split as a shell would (quotes kept together)."""
    match = re.search(r"(?:^|\s)(-\S)", text)
    if match is None:
        return text, Knobs()
    start = match.start(1)
    return text[:start].strip(), Knobs.parse(text[start:])


def parse_layout(text: str, *, stored: bool = False) -> Layout:
    """Read `tp4 ep2`, `TP8+EP`, `tp=4 ep=2`, `tp8,ep`, `tp4-ep2` ... into a Layout; server
    arguments after the layout words are its knobs (`tp8 ep --max-num-seqs 512`).

    A layout's text is stored with its secrets blanked (`--api-key ***`): typed again, it is
    refused, since the engine would get `***` as its key. ``stored``: the text was read back
    from the journal or the registry to be planned or shown, never launched; it is accepted."""
    text, knobs = split_knobs(text)
    if knobs:
        layout = replace(parse_layout(text), knobs=knobs)
        if not stored:
            layout.refuse_blanked()
        return layout
    shown = cut(text.strip())
    lowered = _DPA_ALIAS.sub("dpa", text.strip().lower())
    tokens = [t for t in _SEPARATORS.split(_NAME_THEN_NUMBER.sub(r"\1", lowered)) if t]
    if not tokens:
        raise CockpitError("empty layout: type one like `tp4 ep2`, `tp8 ep`, `pp8` or `tp2 dp4 ep`.")

    sizes: dict[str, int | None] = {}
    for token in tokens:
        match = _TOKEN.fullmatch(token)
        if match is None or match[1] not in _NAMES:
            raise CockpitError(_unknown_token(token, shown))
        name, digits = match[1], match[2]
        if name in sizes:
            raise CockpitError(
                f"'{name}' is given twice in '{shown}': give each of tp, pp, dp, ep and dpa "
                "at most once, like `tp4 ep2`."
            )
        if name == "dpa" and digits:
            raise CockpitError(
                f"'{cut(token)}' in '{shown}': dpa takes no size; put it next to a dp size, "
                "like `tp8 dp8 dpa ep8`."
            )
        if name in _SIZED and not digits:
            raise CockpitError(f"'{name}' needs a size in '{shown}': write it like `{name}4`.")
        sizes[name] = _size(name, digits, token, shown) if digits else None

    ep = sizes.get("ep")
    tp = sizes.get("tp") or ep or 1  # `ep8` alone: EP lives inside the TP group
    return Layout(
        tp=tp,
        pp=sizes.get("pp") or 1,
        dp=sizes.get("dp") or 1,
        ep=ep,
        expert_parallel="ep" in sizes,
        dpa="dpa" in sizes,
    )


def _size(name: str, digits: str, token: str, shown: str) -> int:
    """The size in `tp8`: 1 to MAX_GPUS. Length is checked first: int() of thousands of digits fails."""
    significant = digits.lstrip("0")
    if len(significant) > 6 or int(significant or "0") > MAX_GPUS:
        raise CockpitError(
            f"'{cut(token)}' in '{shown}' is too big: sizes are at most {MAX_GPUS}, "
            f"since no box holds more GPUs; write it like `{name}8`."
        )
    if int(significant or "0") < 1:
        raise CockpitError(f"'{cut(token)}' in '{shown}' is not a size: sizes are 1 or more, like `{name}4`.")
    return int(significant)


def _unknown_token(token: str, shown: str) -> str:
    token = cut(token)
    if any(not (c.isalnum() or c == "=") for c in token):  # `tp10**9`, `tp4.5`: no guess helps
        return f"unknown token '{token}' in '{shown}': sizes are plain whole numbers up to {MAX_GPUS}, like `tp8`. {_EXAMPLES}"
    letters = "".join(c for c in token if c.isalpha())
    digits = "".join(c for c in token if c.isdigit())
    close = difflib.get_close_matches(letters, _NAMES, n=1, cutoff=0.5) if letters else []
    if close:
        guess = close[0] if close[0] == "dpa" else cut(close[0] + digits)
        return f"unknown token '{token}' in '{shown}': did you mean '{guess}'? {_EXAMPLES}"
    return f"unknown token '{token}' in '{shown}'. {_EXAMPLES}"


def gpu_totals(n_gpus: int) -> list[int]:
    """The GPU counts worth listing layouts for on a box of n_gpus: powers of two and the whole
    box, so the list stays short enough to read (each engine adds every `tpK`, so odd sizes like
    tp6 can be shown failing). Whether a layout fits or starts is decided elsewhere."""
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise CockpitError(f"the box needs 1 GPU or more, got {n_gpus!r}: give a GPU count like 8.")
    return [p for p in range(1, n_gpus + 1) if p == n_gpus or p & (p - 1) == 0]


def in_listing_order(layouts: list[Layout], gpus_used: Callable[[Layout], int]) -> list[Layout]:
    """Once each, most GPUs first (as the engine counts them), then widest TP."""
    unique = dict.fromkeys(layouts)
    return sorted(
        unique, key=lambda x: (-gpus_used(x), -x.tp, x.pp, x.dp, x.dpa, x.expert_parallel, x.ep or 0)
    )


def splits(total: int, parts: int) -> list[tuple[int, ...]]:
    """Every ordered way to write total as a product of `parts` whole numbers."""
    if parts == 1:
        return [(total,)]
    return [(d, *rest) for d in divisors(total) for rest in splits(total // d, parts - 1)]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
