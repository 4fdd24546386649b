"""What the screen's `sweep` and `cockpit sweep` say and check alike: the layouts refused before
anything launches, the opening line, the reason each step's server is stopped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout
from cockpit.core.planner import Verdict


def refuse_unrunnable(verdicts: Iterable[Verdict]) -> None:
    """A layout the engine cannot express, or whose server flags it would refuse, stops the sweep
    before anything launches; one the planner says fails is tried in its turn (and refused there
    unless forced)."""
    for verdict in verdicts:
        if verdict.placement is None:
            raise CockpitError(
                f"sweep: {verdict.layout}: {verdict.reasons[0]}; nothing was launched: fix it or leave it out"
            )


def opening(layouts: Sequence[Layout], levels: Sequence[int]) -> str:
    """`sweep tp8, tp4: each is launched, benched at C=1,32, stopped`."""
    names = ", ".join(map(str, layouts))
    return f"sweep {names}: each is launched, benched at C={','.join(map(str, levels))}, stopped"


def stop_reason(index: int, total: int) -> str:
    """Why step ``index`` (from 1) of ``total`` stops its server."""
    return "sweep done" if index >= total else "sweep: next layout"
