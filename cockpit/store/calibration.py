"""What each box taught the planner, kept between sessions in one JSON file.

One entry per (GPU type, engine, engine version, simulated or not): a laptop's simulated runs
never calibrate a real box, and an engine upgrade starts from the defaults. Inside it the speed
constants are the box's (its cards, driver and kernels, whatever model measured them), the
memory corrections each model's own (its profile-run activations, its kernels' weight layouts):
a model the box never ran plans with the box's speed and the default memory terms.

The file is a cache of what the journal teaches (``cockpit.core.fitting`` fits it again after every
measurement), so a damaged one is a one-line warning and the defaults, a damaged entry the
defaults for its box, and the next fit writes it afresh. It also keeps when each box was last
reset (``cockpit calibration reset``): launches started before that teach nothing any more,
though the journal keeps them.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cockpit.core.errors import CockpitError, shown
from cockpit.core.fitting import RESERVE_OFFSET_RANGE_GIB, WEIGHTS_FACTOR_RANGE, Run, fit_parts, replanned
from cockpit.core.perfmodel import Calibration
from cockpit.core.planner import Learned, Setup, Verdict
from cockpit.store import journal as journal_file
from cockpit.store.journal import BenchPoint, Experiment, Journal
from cockpit.store.paths import private_dir
from cockpit.store.textfile import NotReadable, read_bounded

ENV = "COCKPIT_CALIBRATION"
FORMAT = 2  # the file's layout; another (1: memory per box, before it was per model) is read as damaged
MAX_BYTES = 4 * 2**20  # a few hundred entries take a few KB
# The newest launches of a layout that measured something: older ones of the same layout add
# little but time to every fit.
RUNS_PER_LAYOUT = 3
RESET_FIX = "run `cockpit calibration reset`"
LATEST = 4102444800.0  # 2100-01-01: a time the file holds beyond it is damage, not a date


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

    def holds(self, experiment: Experiment, *, any_version: bool = False) -> bool:
        """Whether a journaled launch ran on this box: its GPU type, engine, simulated or not, and
        engine version (any, with ``any_version``). A launch journaled before cockpit kept the GPU
        type and version is under no key: nothing says which box it ran on."""
        return (
            experiment.gpu_type == self.gpu
            and experiment.engine == self.engine
            and experiment.simulated == self.simulated
            and (any_version or engine_version(experiment.engine_version) == self.version)
        )

    def __str__(self) -> str:
        return f"{self.gpu} {self.engine} {self.version}" + (" (simulated)" if self.simulated else "")


@dataclass(frozen=True)
class Speed:
    """The performance model's constants a box taught: the box's own, whichever model measured them."""

    calibration: Mapping[str, float]
    runs: int  # the launches they were fitted from
    model: str = ""  # whose launches those were
    updated: float = 0.0  # when (seconds since the epoch)


@dataclass(frozen=True)
class ModelMemory:
    """What one model's launches taught about memory on a box (``planner.Learned``'s memory terms)."""

    reserve_offset_gib: float = 0.0
    weights_factor: float = 1.0
    runs: int = 0  # the launches that logged a memory number
    updated: float = 0.0


@dataclass(frozen=True)
class Entry:
    """One box: its speed constants, each model's memory corrections, when it was last reset."""

    key: Key
    speed: Speed | None = None  # None: the defaults
    memory: Mapping[str, ModelMemory] = field(default_factory=dict)  # by model_key(model)
    forgotten_before: float = 0.0  # launches started before it teach nothing (a reset)

    @classmethod
    def of(cls, key: Key, learned: Learned, model: str = "", updated: float = 0.0) -> Entry:
        """The entry holding ``learned`` for ``model``: its speed constants as the box's, its memory
        terms as the model's."""
        model = model_key(model)
        speed = (
            Speed(dict(learned.calibration), learned.runs, model, updated) if learned.calibration else None
        )
        memory: dict[str, ModelMemory] = {}
        if learned.runs or learned.reserve_offset_gib or learned.weights_factor != 1.0:
            memory[model] = ModelMemory(
                learned.reserve_offset_gib, learned.weights_factor, learned.runs, updated
            )
        return cls(key, speed, memory)

    @property
    def empty(self) -> bool:
        """Nothing learned (a reset box keeps only its reset time)."""
        return self.speed is None and not self.memory

    def learned(self, model: str) -> Learned:
        """What ``model`` plans with on this box: the box's speed constants and the model's own
        memory corrections (the defaults where it has none). ``runs`` counts the launches behind
        them: the larger of the two parts' when one model taught both (the same launches mostly),
        their sum when the speed came from another model's."""
        model = model_key(model)
        memory = self.memory.get(model, ModelMemory())
        return Learned(
            runs=self._runs(model),
            calibration=dict(self.speed.calibration) if self.speed else {},
            reserve_offset_gib=memory.reserve_offset_gib,
            weights_factor=memory.weights_factor,
        )

    @property
    def runs(self) -> int:
        """The launches behind the whole entry, counted as ``learned`` counts them."""
        counts = {model: memory.runs for model, memory in self.memory.items()}
        if self.speed is not None:
            counts[self.speed.model] = max(counts.get(self.speed.model, 0), self.speed.runs)
        return sum(counts.values())

    def _runs(self, model: str) -> int:
        own = self.memory[model].runs if model in self.memory else 0
        if self.speed is None:
            return own
        return max(own, self.speed.runs) if self.speed.model == model else own + self.speed.runs


class CalibrationStore:
    """The file, read whole and written whole (small; a write replaces it in one rename).

    ``warning`` holds one line when the file or an entry could not be read, or the file written:
    the faces show it; nothing here raises for a damaged file. ``read_problem`` (what the last
    read found wrong) and ``write_warning`` (the last write that failed) keep the two apart for
    `cockpit calibration reset`, which mends the one and fails on the other."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.warning: str | None = None
        self.read_problem: str | None = None
        self.write_warning: str | None = None

    def entries(self) -> list[Entry]:
        """The boxes that learned something."""
        return [e for e in self._read()[0] if not e.empty]

    def entry(self, key: Key) -> Entry:
        """The box of ``key``, empty when it learned nothing; its reset time holds a reset of all."""
        entries, forgotten_before = self._read()
        found = next((e for e in entries if e.key == key), Entry(key))
        return replace(found, forgotten_before=max(found.forgotten_before, forgotten_before))

    def learned(self, key: Key, model: str) -> Learned:
        """What the box of ``key`` taught, for ``model``; the defaults when nothing was learned."""
        return self.entry(key).learned(model)

    def put(self, entry: Entry, fitted_since: float | None = None) -> bool:
        """Keep ``entry`` in place of its key's, its reset time never moved back; a file that
        cannot be written is a warning. ``fitted_since``: the reset time the fit behind ``entry``
        read launches from. The file is read again first: a reset since then (of this box or of
        all, made while the fit ran) drops the write, so the next measurement fits from after it.
        False when dropped."""
        entries, forgotten_before = self._read()
        stored = next((e.forgotten_before for e in entries if e.key == entry.key), 0.0)
        if fitted_since is not None and max(stored, forgotten_before) > fitted_since:
            return False
        kept = replace(entry, forgotten_before=max(entry.forgotten_before, stored))
        self._write([*(e for e in entries if e.key != entry.key), kept], forgotten_before)
        return True

    def remove(self, keys: Sequence[Key] | None = None, now: float | None = None) -> list[Entry]:
        """Forget these keys (None: all) and the launches journaled for them until ``now``: each
        key keeps that reset time alone, whether it had learned something or not, so the next fit
        reads only later launches. The file is written in any case, afresh where it could not be
        read whole (a damaged box reads as empty: nothing else would clear it). The entries that
        had learned something."""
        now = time.time() if now is None else now
        entries, forgotten_before = self._read()
        if keys is None:
            self._write([], now)
            return [e for e in entries if not e.empty]
        removed = [e for e in entries if not e.empty and e.key in keys]
        kept = [e for e in entries if e.key not in keys]
        reset = [Entry(key, forgotten_before=now) for key in dict.fromkeys(keys)]
        self._write([*kept, *reset], forgotten_before)
        return removed

    def _read(self) -> tuple[list[Entry], float]:
        """Every entry (reset ones too) and the time of the last reset of all."""
        self.read_problem = None
        try:
            try:
                raw = read_bounded(self.path, MAX_BYTES)  # never a device, a FIFO or a huge file read whole
            except (
                FileNotFoundError,
                NotADirectoryError,
            ):  # none yet (a folder in its way: the write says so)
                return [], 0.0
            data = _file(json.loads(raw.decode("utf-8")))
        except RecursionError:  # JSON nested thousands deep
            return self._unreadable("nested too deep to be one")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            why = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            )
            if isinstance(exc, NotReadable):
                why = f"it is {why}"
            return self._unreadable(why)
        entries, problems = [], []
        for item in data["boxes"]:
            entry, problem = _entry(item)
            if entry is not None:
                entries.append(entry)
            if problem:
                problems.append(problem)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.read_problem = (
                f"the calibration file {self.path}: {problems[0].removesuffix(f'; {RESET_FIX}')}{more}"
            )
            self.warning = (
                f"{self.read_problem}: planning with the defaults for that box; the next launch fits it "
                f"again from the journal, or {RESET_FIX}"
            )
        return entries, data["forgotten_before"]

    def _unreadable(self, why: str) -> tuple[list[Entry], float]:
        """A file that cannot be read at all: no entries, and the warning that says what to do."""
        self.read_problem = f"the calibration file {self.path} cannot be read ({_one_line(why)})"
        self.warning = (
            f"{self.read_problem}: planning with the defaults; the next launch fits it again from the "
            f"journal, or {RESET_FIX}"
        )
        return [], 0.0

    def _write(self, entries: Sequence[Entry], forgotten_before: float) -> None:
        data = {
            "format": FORMAT,
            "forgotten_before": round(forgotten_before, 3),
            "boxes": [_entry_json(e) for e in sorted(entries, key=lambda e: e.key)],
        }
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
            self.write_warning = self.warning = (
                f"cannot write the calibration file {self.path} ({_one_line(why)}): what was learned holds "
                f"for this session only; set {ENV} to a file in a writable folder"
            )


def model_key(model: str) -> str:
    """The name a model's memory is kept and looked up under. A local path is one absolute
    folder: `~/models/X`, `/home/u/models/X`, `./models/X` typed in `~` and `.../X/config.json`
    are one model, `./models/x` typed in two folders two. A hub repo id stays as given. A path is
    a name written as one or one that exists here, as the engines tell them apart (vLLM's
    vllm/transformers_utils/repo_utils.py `get_model_path`: `os.path.exists(model)` first)."""
    text = model.strip()
    written_as_path = text.startswith(("/", "~", "./", "../")) or text in (".", "..")
    try:
        path = Path(text).expanduser()
        if not text or not (written_as_path or path.exists()):
            return model
        path = path.resolve()
    except (OSError, RuntimeError, ValueError):  # an unknown ~user, a symlink loop, a NUL: as typed
        return model
    return str(path.parent if path.name == "config.json" else path)


def fit_runs(journal: Journal, setup: Setup, simulated: bool, store: CalibrationStore) -> list[Run]:
    """The box's journaled launches of ``setup``'s model with their levels, as a fit reads them:
    since the box was last reset, each typed as the setup types the model."""
    since = store.entry(Key.of(setup, simulated)).forgotten_before
    return [
        (_spelled_as(setup, run), points) for run, points in journal_runs(journal, setup, simulated, since)
    ]


def relearn(journal: Journal, setup: Setup, simulated: bool, store: CalibrationStore) -> Learned:
    """Fit the box's constants again from the journal's launches of ``setup``'s model since the
    box was last reset, keep them, and return what the model plans with now. A part without
    enough data keeps what was stored (the speed perhaps from another model on the same box)."""
    model = model_key(setup.model_path)
    key = Key.of(setup, simulated)
    entry = store.entry(key)
    fitted = fit_parts(setup, fit_runs(journal, setup, simulated, store), entry.learned(model))
    now = time.time()
    taught = entry
    if fitted.speed is not None:
        speed = Speed(fitted.speed.calibration, len(fitted.speed.used), model, now)
        if entry.speed is None or replace(entry.speed, updated=now) != speed:
            taught = replace(taught, speed=speed)
    if fitted.memory is not None:
        memory = ModelMemory(fitted.reserve_offset_gib, fitted.weights_factor, len(fitted.memory.used), now)
        before = entry.memory.get(model)
        if before is None or replace(before, updated=now) != memory:
            taught = replace(taught, memory={**entry.memory, model: memory})
    if taught != entry and not store.put(taught, fitted_since=entry.forgotten_before):
        return store.learned(key, model)  # reset while it fitted: what the reset left
    return taught.learned(model)


def journal_runs(
    journal: Journal, setup: Setup, simulated: bool, since: float = 0.0
) -> list[tuple[Experiment, list[BenchPoint]]]:
    """The journaled launches of ``setup``'s model on its box (GPU type, engine and version,
    simulated or not) started at ``since`` or later, with their benchmark levels: of each layout
    the newest RUNS_PER_LAYOUT that ``setup`` would launch again as they were launched
    (``calibrate.replanned``; the others are no measurement of these constants) and that logged
    or measured something. Launches journaled before cockpit kept the GPU type and engine version
    are left out: nothing says which box they ran on. The model is compared as ``model_key``
    makes it (a launch of `~/models/X` is one of `/home/u/models/X`), and each launch replanned
    with the model as it was typed then (its argv holds that spelling)."""
    key = Key.of(setup, simulated)
    model = model_key(setup.model_path)
    canonical: dict[str, str] = {}  # each journaled spelling made canonical once
    runs = []
    per_layout: Counter[str] = Counter()
    verdicts: dict[str, dict[str, Verdict | None]] = {}  # each spelling's layouts planned once
    for experiment in journal.experiments():  # newest first
        if experiment.started < since or not key.holds(experiment):
            continue
        typed = experiment.model
        if typed not in canonical:
            canonical[typed] = model_key(typed)
        if canonical[typed] != model or per_layout[experiment.layout] >= RUNS_PER_LAYOUT:
            continue
        as_typed = setup if typed == setup.model_path else replace(setup, model_path=typed)
        if not replanned(as_typed, experiment, verdicts.setdefault(typed, {})):
            continue
        points = journal.points(experiment.id)
        if experiment.launch_facts or points:
            per_layout[experiment.layout] += 1
            runs.append((experiment, points))
    return runs


def _spelled_as(setup: Setup, run: Experiment) -> Experiment:
    """A launch of ``setup``'s model typed another way (``journal_runs`` found it launched as
    planned with that spelling), its argv holding the model as ``setup`` types it: the fit
    compares argv words as they are (``calibrate.launched_as_planned``)."""
    if run.model == setup.model_path:
        return run
    return replace(run, argv=tuple(setup.model_path if word == run.model else word for word in run.argv))


# -- the file's form ---------------------------------------------------------------------------


def _entry_json(entry: Entry) -> dict[str, Any]:
    key, speed = entry.key, entry.speed
    return {
        "gpu": key.gpu,
        "engine": key.engine,
        "version": key.version,
        "simulated": key.simulated,
        "forgotten_before": round(entry.forgotten_before, 3),
        "speed": None
        if speed is None
        else {
            "calibration": dict(speed.calibration),
            "runs": speed.runs,
            "model": speed.model,
            "updated": round(speed.updated, 3),
        },
        "models": [
            {
                "model": model,
                "reserve_offset_gib": memory.reserve_offset_gib,
                "weights_factor": memory.weights_factor,
                "runs": memory.runs,
                "updated": round(memory.updated, 3),
            }
            for model, memory in sorted(entry.memory.items())
        ],
    }


def _file(data: Any) -> dict[str, Any]:
    """The file's top level; anything not of cockpit's form raises ValueError with what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("boxes"), list):
        raise ValueError(f'not a cockpit calibration file (format {FORMAT}, "boxes": [...])')
    return {"boxes": data["boxes"], "forgotten_before": _time(data.get("forgotten_before"))}


def _entry(item: Any) -> tuple[Entry | None, str]:
    """One box of the file, and what is wrong with it: a box whose values cannot be used keeps
    only its key and reset time (the defaults); one without a key is dropped."""
    if not isinstance(item, dict):
        return None, "an entry is not an object"
    texts = [item.get(name) for name in ("gpu", "engine", "version")]
    simulated = item.get("simulated")
    if not all(isinstance(t, str) for t in texts) or not isinstance(simulated, bool):
        return None, "an entry lacks its gpu, engine, version or simulated"
    key = Key(str(texts[0]), str(texts[1]), str(texts[2]), simulated)
    forgotten_before = _time(item.get("forgotten_before"))
    try:
        speed = _speed(item.get("speed"), key)
        memory = _models(item.get("models"))
    except (ValueError, CockpitError) as exc:
        return Entry(key, forgotten_before=forgotten_before), f"{key}: {exc}"
    return Entry(key, speed, memory, forgotten_before), ""


def _speed(data: Any, key: Key) -> Speed | None:
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(calibration := data.get("calibration"), dict):
        raise ValueError("its speed constants are not a mapping of numbers")
    if not all(_is_number(v) for v in calibration.values()):
        raise ValueError("its speed constants are not a mapping of numbers")
    # Names and ranges as a profile's (a file of another cockpit version may hold others).
    Calibration().overridden(calibration, "its speed constants", fix=RESET_FIX)
    model = data.get("model")
    return Speed(
        {str(k): float(v) for k, v in calibration.items()},
        _count(data.get("runs"), "speed runs"),
        model if isinstance(model, str) else "",
        _time(data.get("updated")),
    )


def _models(data: Any) -> dict[str, ModelMemory]:
    if not isinstance(data, list):
        raise ValueError("its models are not a list")
    memory = {}
    for item in data:
        if not isinstance(item, dict) or not isinstance(model := item.get("model"), str):
            raise ValueError("a model's memory lacks its model")
        memory[model] = ModelMemory(
            _bounded(item.get("reserve_offset_gib"), "reserve_offset_gib", RESERVE_OFFSET_RANGE_GIB),
            _bounded(item.get("weights_factor"), "weights_factor", WEIGHTS_FACTOR_RANGE),
            _count(item.get("runs"), "runs"),
            _time(item.get("updated")),
        )
    return memory


def _bounded(value: Any, name: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    if not _is_number(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {shown(value)}; {RESET_FIX}")
    return float(value)


def _count(value: Any, name: str) -> int:
    if not _is_number(value) or value < 0 or value != int(value):
        raise ValueError(f"{name} must be a whole number, got {shown(value)}; {RESET_FIX}")
    return int(value)


def _time(value: Any) -> float:
    """A time the file holds; anything else (a time past LATEST too: no clock shows it) is the
    epoch (never, for a reset)."""
    return float(value) if _is_number(value) and 0 < value < LATEST else 0.0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
