"""A tune's result as markdown for `export md` and `cockpit results --format markdown`: what was
asked, why it stopped, the winner's command to paste, everything tried, and why the rest were not.
"""

from __future__ import annotations

from cockpit.core.tuning.events import Row, TuneResult, goal_text, table_rows
from cockpit.store.journal import Journal

TRIED = ("measured", "failed")


def newest_tune(journal: Journal, profile: str) -> TuneResult | None:
    """The profile's newest tune that ended (done or interrupted), as it was journaled."""
    for record in journal.tunes(profile):
        if record.result is None:
            continue
        try:
            return TuneResult.from_json(record.result)
        except (KeyError, TypeError, ValueError):  # a result an older cockpit wrote differently
            continue
    return None


def level_text(level: float | None, rates: bool) -> str:
    if level is None:
        return "-"
    return f"{level:g} req/s" if rates else f"C={level:g}"


def tune_markdown(result: TuneResult) -> str:
    """The ``### Tune`` section (module docstring); the winner's command in a fenced block."""
    rates = bool(result.spec.rates)
    per_gpu = result.per_gpu
    lines = ["### Tune", "", f"- Asked: `{result.spec.describe()}`"]
    if result.interrupted:
        lines.append(
            f"- Stopped: interrupted after {result.launches} launch(es); `tune --resume` continues it"
        )
    else:
        lines.append(f"- Stopped: {result.reason}")
    lines.append(
        f"- Launches: {result.launches} of {result.fitting} fitting candidates"
        f" ({result.saved} saved against trying every one)"
    )
    if result.winner is None:
        lines += ["- Winner: none", ""]
    else:
        lines += [
            f"- Winner: **{result.winner}**, {goal_text(result.winner_goal, per_gpu)}"
            f" at {level_text(result.winner_level, rates)}",
            "",
        ]
        if result.argv:
            lines += ["```sh", result.command, "```", ""]
    ordered = table_rows(result.rows)
    tried = [r for r in ordered if r.state in TRIED]
    rest = [r for r in ordered if r.state not in TRIED]
    lines += ["#### Tried", ""]
    lines += _tried_table(tried, result, rates) if tried else ["Nothing was launched."]
    if rest:
        lines += ["", "#### Not tried", "", *_rest_table(rest, per_gpu)]
    return "\n".join(lines)


def _tried_table(rows: list[Row], result: TuneResult, rates: bool) -> list[str]:
    lines = [
        "| Candidate | GPUs | Predicted | Measured | Level | Experiment |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        name = row.name + (" ★" if row.name == result.winner else "")
        measured = (
            goal_text(row.measured, result.per_gpu)
            if row.state == "measured"
            else "✗ failed" + (f": {row.note}" if row.note else "")
        )
        cells = [
            name,
            str(row.gpus),
            goal_text(row.predicted, result.per_gpu),
            measured,
            level_text(row.level, rates),
            "-" if row.experiment is None else str(row.experiment),
        ]
        lines.append(_cells(cells))
    return lines


def _rest_table(rows: list[Row], per_gpu: bool) -> list[str]:
    lines = ["| Candidate | GPUs | Predicted | Best case | Why not tried |", "|---|---:|---:|---:|---|"]
    for row in rows:
        why = row.note or ("stopped before it was measured" if row.state == "running" else "not reached")
        cells = [
            row.name,
            str(row.gpus),
            goal_text(row.predicted, per_gpu),
            goal_text(row.bound, per_gpu),
            why,
        ]
        lines.append(_cells(cells))
    return lines


def _cells(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
