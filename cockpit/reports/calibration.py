"""`cockpit calibration show`: what each box taught the planner, beside the defaults it replaces:
the box's speed constants, then each model's memory corrections."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.core.perfmodel import default_calibration
from cockpit.core.planner import Learned
from cockpit.core.secrets import redact_text
from cockpit.store.calibration import Entry, Key, ModelMemory


def default_constant(key: Key, name: str) -> float | None:
    """The performance model's default for this GPU type and engine (its calibration table's)."""
    value = getattr(default_calibration(key.gpu, key.engine), name, None)
    return float(value) if isinstance(value, (int, float)) else None


def memory_defaults() -> dict[str, float]:
    """What a model the box never ran plans with: ``planner.Learned``'s own defaults."""
    default = Learned()
    return {"reserve_offset_gib": default.reserve_offset_gib, "weights_factor": default.weights_factor}


def calibration_lines(entries: Sequence[Entry], path: Path) -> list[str]:
    """A block per box: its speed constants next to their defaults, then each model's memory."""
    if not entries:
        return [f"nothing learned yet: every prediction uses the defaults ({path})"]
    lines = [f"what launches taught the planner ({path}):"]
    defaults = memory_defaults()
    for entry in sorted(entries, key=lambda e: e.key):
        speed = entry.speed
        lines.append("")
        if speed is None:
            lines.append(f"{entry.key}: speed constants not learned (the defaults)")
        else:
            lines.append(
                f"{entry.key}: from {speed.runs} run(s){_of(speed.model)}, fitted {_when(speed.updated)}"
            )
            lines.append(f"  {'constant':<20} {'learned':>10} {'default':>10}")
            for name, value in sorted(speed.calibration.items()):
                default = default_constant(entry.key, name)
                lines.append(f"  {name:<20} {value:>10g} {'?' if default is None else f'{default:g}':>10}")
        for model, memory in sorted(entry.memory.items()):
            lines.append(
                f"  memory of {_shown(model)}: from {memory.runs} run(s), fitted {_when(memory.updated)}"
            )
            offset = memory.reserve_offset_gib
            lines.append(
                f"  {'reserve_offset_gib':<20} {offset:>+10.2f} {defaults['reserve_offset_gib']:>10g}"
            )
            factor = memory.weights_factor
            lines.append(f"  {'weights_factor':<20} {factor:>10.4g} {defaults['weights_factor']:>10g}")
    return lines


def calibration_json(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """A row per box: its speed constants (``learned``, ``defaults``), then ``models``, each with
    its memory corrections."""
    rows = []
    for entry in sorted(entries, key=lambda e: e.key):
        key, speed = entry.key, entry.speed
        calibration = dict(speed.calibration) if speed else {}
        rows.append(
            {
                "gpu": key.gpu,
                "engine": key.engine,
                "version": key.version,
                "simulated": key.simulated,
                "runs": speed.runs if speed else 0,
                "model": redact_text(speed.model) if speed else "",
                "updated": speed.updated if speed else None,
                "learned": calibration,
                "defaults": {name: default_constant(key, name) for name in calibration},
                "models": [_model_json(model, memory) for model, memory in sorted(entry.memory.items())],
            }
        )
    return rows


def _model_json(model: str, memory: ModelMemory) -> dict[str, Any]:
    return {
        "model": redact_text(model),
        "runs": memory.runs,
        "updated": memory.updated,
        "learned": {"reserve_offset_gib": memory.reserve_offset_gib, "weights_factor": memory.weights_factor},
        "defaults": memory_defaults(),
    }


def _of(model: str) -> str:
    return f" of {_shown(model)}" if model else ""


def _shown(model: str) -> str:
    """A model as journaled (a hub name or a path; a URL's password blanked)."""
    return redact_text(model) if model else "(no model recorded)"


def _when(updated: float) -> str:
    """A fit's time as a date; "?" where none is known or no clock could show it (a damaged file)."""
    if not updated:
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(updated))
    except (OverflowError, OSError, ValueError):
        return "?"
