"""What each box taught the planner, kept between sessions in one JSON file.

One entry per (GPU type, engine, engine version, simulated or not): a laptop's simulated runs
never calibrate a real box, and an engine upgrade starts from the defaults. The file is a cache
of what the journal teaches (``cockpit.calibrate`` fits it again after every measurement), so a
damaged one is a one-line warning and the defaults, and the next fit writes it afresh.

Where: ``COCKPIT_CALIBRATION``, else ``calibration.json`` next to the journal (the user's data
folder, or beside ``COCKPIT_JOURNAL``), private like the journal: 0600 in a 0700 folder.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit import journal as journal_file
from cockpit.calibrate import fit
from cockpit.errors import CockpitError
from cockpit.journal import BenchPoint, Experiment, Journal
from cockpit.paths import private_dir
from cockpit.planner import Learned, Setup

ENV = "COCKPIT_CALIBRATION"
FORMAT = 1  # the file's layout; another is read as damaged
MAX_BYTES = 4 * 2**20  # a few hundred entries take a few KB
# The newest launches of a layout that measured something: older ones of the same layout add
# little but time to every fit.
RUNS_PER_LAYOUT = 3


def default_path() -> Path:
    """COCKPIT_CALIBRATION, else calibration.json beside the journal."""
    if env := os.environ.get(ENV):
        return Path(env).expanduser()
    return journal_file.default_path().parent / "calibration.json"


def engine_version(text: str | None) -> str:
    """A version as the key holds it: `v0.33.0` and `0.33.0` are one."""
    return (text or "").strip().removeprefix("v")


@dataclass(frozen=True, order=True)
class Key:
    """The box a calibration belongs to."""

    gpu: str  # Hardware.gpu.key
    engine: str
    version: str
    simulated: bool

    @classmethod
    def of(cls, setup: Setup, simulated: bool) -> Key:
        return cls(setup.hardware.gpu.key, setup.engine.name, engine_version(setup.engine.version), simulated)

    def __str__(self) -> str:
        return f"{self.gpu} {self.engine} {self.version}" + (" (simulated)" if self.simulated else "")


@dataclass(frozen=True)
class Entry:
    key: Key
    learned: Learned
    model: str = ""  # the model whose launches fitted it last
    updated: float = 0.0  # when (seconds since the epoch)


class CalibrationStore:
    """The file, read whole and written whole (small; a write replaces it in one rename).

    ``warning`` holds one line when the file could not be read or written: the faces show it;
    nothing here raises for a damaged file."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.warning: str | None = None

    def entries(self) -> list[Entry]:
        try:
            if not self.path.exists():
                return []
            if self.path.stat().st_size > MAX_BYTES:
                raise ValueError(f"{self.path.stat().st_size / 2**20:,.1f} MiB, too big to be one")
            return _entries(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            why = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            )
            self.warning = (
                f"the calibration file {self.path} cannot be read ({_one_line(why)}): planning with the "
                "defaults; the next launch fits it again from the journal"
            )
            return []

    def learned(self, key: Key) -> Learned:
        """What the box of ``key`` taught; the defaults when nothing was learned."""
        return next((e.learned for e in self.entries() if e.key == key), Learned())

    def put(self, entry: Entry) -> None:
        """Keep ``entry`` in place of its key's; a file that cannot be written is a warning."""
        entries = [e for e in self.entries() if e.key != entry.key]
        self._write([*entries, entry])

    def remove(self, keys: Sequence[Key] | None = None) -> list[Entry]:
        """Forget these keys (None: all); the entries removed."""
        entries = self.entries()
        removed = [e for e in entries if keys is None or e.key in keys]
        if removed:
            self._write([e for e in entries if e not in removed])
        return removed

    def _write(self, entries: Sequence[Entry]) -> None:
        data = {"format": FORMAT, "boxes": [_entry_json(e) for e in sorted(entries, key=lambda e: e.key)]}
        try:
            private_dir(self.path.parent, fix=f"set {ENV} to a file in a writable folder")
            fd, temporary = tempfile.mkstemp(prefix=".calibration-", dir=self.path.parent)  # 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(data, out, indent=2)
                    out.write("\n")
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except (OSError, CockpitError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.warning = (
                f"cannot write the calibration file {self.path} ({_one_line(why)}): what was learned holds "
                f"for this session only; set {ENV} to a file in a writable folder"
            )


def learned_for(setup: Setup, simulated: bool, store: CalibrationStore | None = None) -> Learned:
    """What the box ``setup`` plans for taught, for a simulated box or the real one."""
    return (store or CalibrationStore()).learned(Key.of(setup, simulated))


def relearn(
    journal: Journal, setup: Setup, simulated: bool, store: CalibrationStore | None = None
) -> Learned:
    """Fit the box's constants again from the journal's launches of ``setup``'s model, keep them,
    and return them. A part without enough data keeps what was stored (perhaps from another
    model on the same box)."""
    store = store or CalibrationStore()
    key = Key.of(setup, simulated)
    prior = store.learned(key)
    learned = fit(setup, journal_runs(journal, setup, simulated), prior)
    if learned != prior:
        store.put(Entry(key, learned, setup.model_path, time.time()))
    return learned


def journal_runs(
    journal: Journal, setup: Setup, simulated: bool
) -> list[tuple[Experiment, list[BenchPoint]]]:
    """The journaled launches of ``setup``'s model on its box (GPU type, engine and version,
    simulated or not), with their benchmark levels. Launches journaled before cockpit kept the
    GPU type and engine version are left out: nothing says which box they ran on."""
    key = Key.of(setup, simulated)
    runs = []
    per_layout: Counter[str] = Counter()
    for experiment in journal.experiments():  # newest first
        if experiment.engine != key.engine or experiment.model != setup.model_path:
            continue
        if experiment.gpu_type != key.gpu or engine_version(experiment.engine_version) != key.version:
            continue
        if experiment.simulated != simulated or per_layout[experiment.layout] >= RUNS_PER_LAYOUT:
            continue
        points = journal.points(experiment.id)
        if experiment.facts or points:
            per_layout[experiment.layout] += 1
            runs.append((experiment, points))
    return runs


# -- the file's form ---------------------------------------------------------------------------


def _entry_json(entry: Entry) -> dict[str, Any]:
    key, learned = entry.key, entry.learned
    return {
        "gpu": key.gpu,
        "engine": key.engine,
        "version": key.version,
        "simulated": key.simulated,
        "runs": learned.runs,
        "calibration": dict(learned.calibration),
        "reserve_offset_gib": learned.reserve_offset_gib,
        "weights_factor": learned.weights_factor,
        "model": entry.model,
        "updated": round(entry.updated, 3),
    }


def _entries(data: Any) -> list[Entry]:
    """The file's entries; anything not of cockpit's form raises ValueError with what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("boxes"), list):
        raise ValueError(f'not a cockpit calibration file (format {FORMAT}, "boxes": [...])')
    return [_entry(item) for item in data["boxes"]]


def _entry(item: Any) -> Entry:
    if not isinstance(item, dict):
        raise ValueError("an entry is not an object")
    texts = [item.get(name) for name in ("gpu", "engine", "version")]
    simulated = item.get("simulated")
    calibration = item.get("calibration")
    if not all(isinstance(t, str) for t in texts) or not isinstance(simulated, bool):
        raise ValueError("an entry lacks its gpu, engine, version or simulated")
    if not isinstance(calibration, dict) or not all(_is_number(v) for v in calibration.values()):
        raise ValueError("an entry's calibration is not a mapping of numbers")
    numbers = [item.get(name) for name in ("runs", "reserve_offset_gib", "weights_factor")]
    if not all(_is_number(n) for n in numbers) or not float(item["weights_factor"]) > 0:
        raise ValueError("an entry's runs, reserve_offset_gib or weights_factor is not a number")
    key = Key(str(texts[0]), str(texts[1]), str(texts[2]), simulated)
    learned = Learned(
        runs=int(item["runs"]),
        calibration={str(k): float(v) for k, v in calibration.items()},
        reserve_offset_gib=float(item["reserve_offset_gib"]),
        weights_factor=float(item["weights_factor"]),
    )
    model = item.get("model")
    updated = item.get("updated")
    when = float(updated) if isinstance(updated, (int, float)) and _is_number(updated) else 0.0
    return Entry(key, learned, model if isinstance(model, str) else "", when)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
