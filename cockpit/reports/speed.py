"""Which source predicted each layout's speed, for `cockpit plan` and the exports
(docs/speed.md#speed-sources): the analytic model, or measured kernels with their data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cockpit.core.planner import Verdict
from cockpit.core.speed import KERNELS, SpeedSource


def layout_sources(verdicts: Sequence[Verdict]) -> dict[str, SpeedSource]:
    """Each layout that got a prediction (``perfmodel.with_prediction``), and the source of its
    numbers (a layout that cannot start gets none)."""
    return {str(v.layout): v.predicted_by for v in verdicts if v.predicted_by is not None}


def speed_lines(sources: Mapping[str, SpeedSource]) -> list[str]:
    """One line per source, naming the layouts when they differ: "speed: analytic model". The
    analytic model's reasons may differ by layout (a query the tables cannot answer names its
    own shape): one line says the first, `plan --json` says each."""
    labels = {source.label for source in sources.values()}
    if len(labels) == 1:
        return [f"speed: {label}" for label in labels]
    groups: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for layout, source in sources.items():
        head = source.label if source.backend == KERNELS else "analytic model"
        groups.setdefault(head, []).append(layout)
        notes.setdefault(head, []).append(source.note)
    lines = []
    for head, layouts in groups.items():
        text = head
        if head == "analytic model" and any(notes[head]):
            distinct = dict.fromkeys(n for n in notes[head] if n)
            first = next(iter(distinct))
            text += f"; {first}" if len(distinct) == 1 else f"; {first} (plan --json says why for each)"
        lines.append(f"speed of {', '.join(layouts)}: {text}")
    return lines
