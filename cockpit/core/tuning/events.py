"""A tune's progress as plain events, each printing itself in one line (`cockpit tune` prints them;
the screen's tune view draws them). The launches' own events (ready, failed, levels) come between.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.core.tuning.spec import TuneSpec


def goal_text(value: float | None, per_gpu: bool) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f} tok/s/GPU" if per_gpu else f"{value:,.0f} tok/s"


@dataclass(frozen=True)
class Row:
    """One candidate as the tune sees it now: predicted, bound, measured (if tried)."""

    name: str
    gpus: int
    predicted: float
    bound: float
    measured: float | None = None
    level: float | None = None
    experiment: int | None = None
    # untried, running, measured, failed; or why it was not tried: dropped (after a similar
    # failure), outranked (its best case is below the best measured), out-of-bounds (predicted to
    # miss the latency bounds at every level), not-reached (the budget ran out first)
    state: str = "untried"
    note: str = ""  # why it failed, or why it was not tried, in full

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "predicted": round(self.predicted, 2),
            "bound": round(self.bound, 2),
            "measured": None if self.measured is None else round(self.measured, 2),
            "level": self.level,
            "experiment": self.experiment,
            "state": self.state,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict) -> Row:
        return cls(
            name=str(data["name"]),
            gpus=int(data["gpus"]),
            predicted=float(data["predicted"]),
            bound=float(data["bound"]),
            measured=None if data.get("measured") is None else float(data["measured"]),
            level=data.get("level"),
            experiment=data.get("experiment"),
            state=str(data.get("state", "untried")),
            note=str(data.get("note", "")),
        )


@dataclass(frozen=True)
class Point:
    """One measured level: the goal there and its p99 latencies, for the goal-latency chart.

    The latency bounds are checked per request (``slo.Slo.is_good``): its TTFT, and its mean
    inter-token latency (TPOT). So the chart places a level by those two at p99 over its requests,
    where a bound line means what the goodput counted; ``itl_p99_ms`` (over every token gap, stalls
    behind other requests' prefills included) is kept for the record, not for the bound."""

    name: str
    level: float
    goal: float
    tok_s: float
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    tpot_p99_ms: float | None = None  # each request's mean ITL, p99 over the level's requests


@dataclass(frozen=True)
class Margin:
    """The error a best case allows the model, and where the figure comes from
    (``cockpit.core.tuning.margin``): the largest leave-one-out error of the calibrated model, or,
    with too few measured to leave one out, the stated default (or the uncalibrated model's
    error, where that is larger)."""

    value: float
    held_out: bool


def margin_text(margin: Margin) -> str:
    """What a best case allows for, in a few words: `leave-one-out error 23%`."""
    if margin.held_out:
        return f"leave-one-out error {margin.value:.0%}"
    return f"model ±{margin.value:.0%}, too few measured to leave one out"


@dataclass(frozen=True)
class TuneStarted:
    tune: int
    spec: TuneSpec
    fitting: int  # candidates that can start
    left_out: int  # layouts x knobs that cannot (or leave GPUs idle for the tok/s goal)
    resumed: int = 0  # candidates already finished by the tune this one resumes
    points: tuple[Point, ...] = ()  # the levels those candidates measured

    def __str__(self) -> str:
        again = f"; resumed with {self.resumed} candidate(s) done" if self.resumed else ""
        return (
            f"tune      {self.tune}: {self.spec.describe()}: {self.fitting} candidates fit, "
            f"{self.left_out} left out{again}"
        )


@dataclass(frozen=True)
class TuneRanked:
    """The candidates re-ranked (after a measurement taught the planner), and the stopping bound."""

    tune: int
    rows: tuple[Row, ...]
    best: str | None
    best_goal: float | None
    margin: Margin
    bound: float  # the highest optimistic bound among those left
    per_gpu: bool

    def __str__(self) -> str:
        best = (
            f"best {self.best} {goal_text(self.best_goal, self.per_gpu)}" if self.best else "nothing measured"
        )
        return f"ranked    {best}; best case left {goal_text(self.bound, self.per_gpu)} ({margin_text(self.margin)})"


@dataclass(frozen=True)
class TuneStep:
    """A candidate is launched."""

    tune: int
    number: int  # 1, 2, ...: launches of this tune
    name: str
    predicted: float
    bound: float
    per_gpu: bool

    def __str__(self) -> str:
        return (
            f"candidate {self.number}: {self.name}: predicted {goal_text(self.predicted, self.per_gpu)}, "
            f"best case {goal_text(self.bound, self.per_gpu)}"
        )


@dataclass(frozen=True)
class TuneLevel:
    tune: int
    point: Point
    per_gpu: bool

    def __str__(self) -> str:
        p = self.point
        lat = ", ".join(
            f"{name} p99 {value:,.0f} ms"
            for name, value in (("TTFT", p.ttft_p99_ms), ("per-request mean ITL", p.tpot_p99_ms))
            if value is not None
        )
        return f"goodput   {p.name} at {p.level:g}: {goal_text(p.goal, self.per_gpu)} ({p.tok_s:,.0f} tok/s; {lat})"


@dataclass(frozen=True)
class TuneMeasured:
    tune: int
    name: str
    goal: float | None  # None: it failed
    level: float | None
    per_gpu: bool
    failure: str = ""

    def __str__(self) -> str:
        if self.goal is None:
            return f"measured  {self.name}: failed to start: {self.failure}"
        return f"measured  {self.name}: {goal_text(self.goal, self.per_gpu)} at {self.level:g}"


@dataclass(frozen=True)
class TuneNotice:
    """Something the tune did on its own that a person should know (a level measured again)."""

    tune: int
    text: str

    def __str__(self) -> str:
        return f"note      {self.text}"


@dataclass(frozen=True)
class TuneResult:
    """What the tune found: the winner's argv, everything tried, and why the rest were not."""

    tune: int
    spec: TuneSpec  # what was asked
    reason: str  # why it stopped
    winner: str | None
    winner_goal: float | None
    winner_level: float | None
    argv: tuple[str, ...]  # the winner's launch, redacted
    env: dict[str, str]
    rows: tuple[Row, ...]  # every candidate: tried ones first
    points: tuple[Point, ...]
    per_gpu: bool
    launches: int
    fitting: int
    interrupted: bool = False

    @property
    def command(self) -> str:
        """The winner's launch, shell-quoted: pasting it runs it."""
        pinned = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (pinned + " " if pinned else "") + shlex.join(self.argv)

    @property
    def saved(self) -> int:
        """Launches not made against trying every fitting candidate."""
        return max(0, self.fitting - self.launches)

    @property
    def ending(self) -> str:
        """How the tune ended, in one sentence (the screen's status line says it too)."""
        if self.interrupted:
            why = "" if self.reason == "interrupted" else f": {self.reason}"
            again = "" if "tune --resume" in self.reason else "; `tune --resume` continues it"
            return f"tune {self.tune}: interrupted after launching {self.launches} of {self.fitting} candidates{why}{again}"
        if self.winner is None:
            return f"tune {self.tune}: done, no winner: {self.reason}"
        return f"tune {self.tune}: done, {self.winner} wins after launching {self.launches} of {self.fitting} candidates"

    def __str__(self) -> str:
        if self.interrupted or self.winner is None:
            return self.ending
        return (
            f"winner    {self.winner}: {goal_text(self.winner_goal, self.per_gpu)} at {self.winner_level:g} "
            f"after {self.launches} of {self.fitting} candidates ({self.reason})\n"
            f"command   {self.command}"
        )

    def to_json(self) -> dict:
        return {
            "tune": self.tune,
            "spec": self.spec.to_json(),
            "reason": self.reason,
            "winner": self.winner,
            "winner_goal": self.winner_goal,
            "winner_level": self.winner_level,
            "argv": list(self.argv),
            "env": dict(self.env),
            "rows": [r.to_json() for r in self.rows],
            "points": [p.__dict__ for p in self.points],
            "per_gpu": self.per_gpu,
            "launches": self.launches,
            "fitting": self.fitting,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_json(cls, data: dict) -> TuneResult:
        return cls(
            tune=int(data["tune"]),
            spec=TuneSpec.from_json(data["spec"]),
            reason=str(data["reason"]),
            winner=data.get("winner"),
            winner_goal=data.get("winner_goal"),
            winner_level=data.get("winner_level"),
            argv=tuple(data.get("argv", ())),
            env=dict(data.get("env", {})),
            rows=tuple(Row.from_json(r) for r in data.get("rows", ())),
            points=tuple(Point(**p) for p in data.get("points", ())),
            per_gpu=bool(data.get("per_gpu")),
            launches=int(data.get("launches", 0)),
            fitting=int(data.get("fitting", 0)),
            interrupted=bool(data.get("interrupted")),
        )


TuneEvent = TuneStarted | TuneRanked | TuneStep | TuneLevel | TuneMeasured | TuneNotice | TuneResult


def table_rows(rows: Sequence[Row]) -> list[Row]:
    """Tried first (best measured first), then the rest by prediction."""
    tried = sorted((r for r in rows if r.state in ("measured", "failed")), key=lambda r: -(r.measured or -1))
    rest = sorted((r for r in rows if r.state not in ("measured", "failed")), key=lambda r: -r.predicted)
    return [*tried, *rest]
