"""`cockpit calibration show`: what each box taught the planner, beside the defaults it replaces."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.learning import Entry, Key
from cockpit.perfmodel import CALIBRATION_TABLE, Calibration

MEMORY_DEFAULTS = {"reserve_offset_gib": 0.0, "weights_factor": 1.0}


def default_constant(key: Key, name: str) -> float | None:
    """The performance model's default for this GPU type and engine (its calibration table's)."""
    base = Calibration().overridden(CALIBRATION_TABLE.get((key.gpu, key.engine), {}))
    value = getattr(base, name, None)
    return float(value) if isinstance(value, (int, float)) else None


def calibration_lines(entries: Sequence[Entry], path: Path) -> list[str]:
    """A block per box: its runs, then each learned constant next to its default."""
    if not entries:
        return [f"nothing learned yet: every prediction uses the defaults ({path})"]
    lines = [f"what launches taught the planner ({path}):"]
    for entry in sorted(entries, key=lambda e: e.key):
        learned = entry.learned
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.updated)) if entry.updated else "?"
        source = f" of {entry.model}" if entry.model else ""
        lines += ["", f"{entry.key}: from {learned.runs} run(s){source}, fitted {when}"]
        lines.append(f"  {'constant':<20} {'learned':>10} {'default':>10}")
        for name, value in sorted(learned.calibration.items()):
            default = default_constant(entry.key, name)
            lines.append(f"  {name:<20} {value:>10g} {'?' if default is None else f'{default:g}':>10}")
        lines.append(f"  {'reserve_offset_gib':<20} {learned.reserve_offset_gib:>+10.2f} {0:>10g}")
        lines.append(f"  {'weights_factor':<20} {learned.weights_factor:>10.4g} {1:>10g}")
    return lines


def calibration_json(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    rows = []
    for entry in sorted(entries, key=lambda e: e.key):
        key, learned = entry.key, entry.learned
        rows.append(
            {
                "gpu": key.gpu,
                "engine": key.engine,
                "version": key.version,
                "simulated": key.simulated,
                "runs": learned.runs,
                "model": entry.model,
                "updated": entry.updated,
                "learned": {
                    **dict(learned.calibration),
                    "reserve_offset_gib": learned.reserve_offset_gib,
                    "weights_factor": learned.weights_factor,
                },
                "defaults": {
                    **{name: default_constant(key, name) for name in learned.calibration},
                    **MEMORY_DEFAULTS,
                },
            }
        )
    return rows
