"""Server arguments checked against the engine's option table, and what a mistyped one meant.

``check_args`` reads an argument list the way the engine's parser would (options.read_args) and
names an unknown flag's likely meaning, the other engine's flag first (translate.unknown_flag_hint);
``corrected_args`` offers the line to type again. See docs/options.md#server-arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cockpit.core.errors import CockpitError
from cockpit.core.knobs import Knobs
from cockpit.core.layout import Layout
from cockpit.engines.options import (
    REMOVED,
    SET_BY_COCKPIT,
    CheckedArgs,
    Option,
    OptionTable,
    _choices,
    closest,
    expanded_args,
    find_option,
    is_flag,
    nearest_choice,
    prefix_matches,
    read_args,
)
from cockpit.engines.translate import counterpart, other_engine, unknown_flag_hint


def check_args(
    table: OptionTable, args: Sequence[str], where: str = "server argument", *, strict: bool = True
) -> CheckedArgs:
    """Walk ``args`` as the engine's parser would; the first bad one is a one-line CockpitError.

    ``args`` are what follows the model and the parallel flags: a profile's server args and the
    knobs typed after a layout. A bare word that belongs to no flag is refused too. Not
    ``strict`` (the table is another version's than the engine on the box): a flag the table
    lacks is a note, not an error, since that engine may have it."""
    return read_args(table, args, where, strict=strict, hint=unknown_flag_hint)


def refuse_owned(checked: CheckedArgs, where: str) -> None:
    """A flag the layout or cockpit says (tensor parallel size, port, model) is refused: given
    again among server arguments it would contradict the layout's own flags."""
    for group in checked.groups:
        owner = SET_BY_COCKPIT.get(group.option.dest)
        if owner:
            raise CockpitError(f"{where} {group.spelling} is {owner}'s to say, not a server argument's")


def nearest_flag(table: OptionTable, spelling: str) -> str | None:
    """The real flag a flag the engine would not take most likely means: the other engine's flag
    said in this one's words, the closest of the flags an ambiguous prefix could be, or the
    closest spelling; None when nothing is close."""
    return (
        counterpart(spelling, other_engine(table.engine), table.engine)
        or closest(spelling, prefix_matches(table, spelling))
        or closest(spelling, table.names)
    )


def corrected_args(table: OptionTable, args: Sequence[str]) -> tuple[str, ...] | None:
    """``args`` with every flag the engine would not take written as the flag it most likely means
    (``nearest_flag``) and every value outside its flag's choices as the nearest choice, when that
    list passes the check; None when there is no such correction. For the hint after a mistyped
    knob: the line to type again."""
    words = expanded_args(table, args)
    fixed: list[str] = []
    option: Option | None = None  # the flag the words that follow are values of
    for word in words:
        if not is_flag(word):
            fixed.append(_meant_choice(table, option, word))
            continue
        name, eq, value = word.partition("=")
        option = find_option(table, name)
        if option is None and name.startswith("--"):
            meant = None if name in REMOVED.get(table.engine, {}) else nearest_flag(table, name)
            if meant is None:  # gone from the engine, or nothing close: no line to offer
                return None
            name, option = meant, find_option(table, meant)
        fixed.append(name + eq + _meant_choice(table, option, value) if eq else name)
    if fixed == words:
        return None
    try:
        refuse_owned(check_args(table, fixed), "")
    except CockpitError:
        return None
    return tuple(fixed)


def _meant_choice(table: OptionTable, option: Option | None, value: str) -> str:
    """A value outside the flag's choices as the choice it most likely means (fp8 -> fp8_e4m3)."""
    choices = [str(c) for c in (_choices(table, option) or ())] if option else []
    if not choices or value in choices:
        return value
    return nearest_choice(value, choices) or value


def knob_next_step(table: OptionTable, layout: Layout) -> str:
    """What to do when the engine's option table refused a layout's knobs: the line again with the
    flag it most likely means, else where to find the flags. Another layout would carry the
    same mistyped flag, so it is never the hint."""
    fixed = corrected_args(table, layout.knobs)
    if fixed is not None:  # a token among the knobs is not repeated: the hint is shown and journaled
        return f"type `try {replace(layout, knobs=Knobs(fixed))}`"
    try:
        groups = check_args(table, layout.knobs).groups
    except CockpitError:
        groups = ()
    owned = [g for g in groups if g.option.dest in SET_BY_COCKPIT]
    if owned:
        return f"drop {owned[0].spelling}: {SET_BY_COCKPIT[owned[0].option.dest]} says it"
    return f"check the flag's spelling in {table.label}'s options (on the screen, Tab after `try {layout.parallel} --` completes them)"
