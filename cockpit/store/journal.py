"""The experiment journal: every launch and benchmark point, kept in one SQLite file.

Each write commits at once, so a crash (of cockpit, the engine or the box) keeps what was done.
WAL mode and short transactions let a cockpit and its child `cockpit bench` write together.
This module stores and reads, nothing more: `cockpit.reports.comparison` reads the journal into
tok/s per layout and concurrency, and `cockpit.reports.results` prints that. A level whose
requests mostly failed is journaled as failed, with its reason.

A row is checked as it is read back (the file may have been edited by hand): a column of the
wrong type is made sound where it can be (an optional number that is not one reads as None), and
a row that cannot be (a tok/s that is not a number) is skipped with one warning naming the file
and the row, so the rest of the journal still reads.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import platformdirs

from cockpit.core.errors import CockpitError, shown
from cockpit.core.outcome import FAILED, LAUNCHING, OUTCOMES, STOPPED, Diagnosis, Outcome
from cockpit.core.records import LaunchFacts, LaunchPrediction
from cockpit.store.paths import private_dir, warn_on_stderr

# Each entry takes the file from version i to i + 1; append, never edit, to migrate.
_MIGRATIONS = [
    """
    CREATE TABLE experiments (
        id INTEGER PRIMARY KEY,
        started REAL NOT NULL,
        ended REAL,
        host TEXT NOT NULL,
        profile TEXT NOT NULL,
        model TEXT NOT NULL,
        engine TEXT NOT NULL,
        layout TEXT NOT NULL,
        argv TEXT NOT NULL DEFAULT '[]',
        gpus TEXT NOT NULL DEFAULT '[]',
        outcome TEXT NOT NULL DEFAULT 'launching',
        diagnosis_kind TEXT,
        diagnosis TEXT,
        next_step TEXT,
        load_seconds REAL,
        peak_memory TEXT NOT NULL DEFAULT '{}',
        log_path TEXT NOT NULL DEFAULT '',
        pid INTEGER,
        port INTEGER
    );
    CREATE INDEX experiments_profile ON experiments (profile, started);
    CREATE TABLE bench_points (
        id INTEGER PRIMARY KEY,
        experiment_id INTEGER NOT NULL REFERENCES experiments (id),
        created REAL NOT NULL,
        concurrency INTEGER NOT NULL,
        requests INTEGER NOT NULL DEFAULT 0,
        errors INTEGER NOT NULL DEFAULT 0,
        duration_s REAL,
        output_tok_s REAL NOT NULL,
        request_s REAL,
        ttft_ms_p50 REAL,
        ttft_ms_p90 REAL,
        ttft_ms_p99 REAL,
        tpot_ms_p50 REAL,
        itl_ms_p50 REAL,
        itl_ms_p90 REAL,
        itl_ms_p99 REAL,
        e2e_ms_p50 REAL,
        e2e_ms_p99 REAL,
        input_len INTEGER,
        output_len INTEGER,
        client_limited INTEGER NOT NULL DEFAULT 0,
        extra TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX bench_points_experiment ON bench_points (experiment_id, concurrency);
    """,
    # A level whose requests mostly failed is kept, marked, and never wins over a good one;
    # notes are what happened to a launch after the fact ("cockpit got SIGHUP; ...").
    """
    ALTER TABLE bench_points ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bench_points ADD COLUMN error TEXT;
    ALTER TABLE experiments ADD COLUMN note TEXT;
    UPDATE bench_points SET failed = 1, error = 'most requests failed (journaled before failed levels were marked)'
        WHERE output_tok_s <= 0 OR errors * 2 > requests + errors;
    """,
    # What the engine logged about the launch (facts) beside what the planner predicted for it,
    # and the box and engine they hold for: the journal is what calibration learns from.
    """
    ALTER TABLE experiments ADD COLUMN facts TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE experiments ADD COLUMN predicted TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE experiments ADD COLUMN gpu_type TEXT;
    ALTER TABLE experiments ADD COLUMN engine_version TEXT;
    ALTER TABLE experiments ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0;
    UPDATE experiments SET simulated = 1 WHERE argv LIKE '%cockpit.sim%';
    """,
    # A tune (cockpit.core.tuning): what it was asked, and each candidate as it ended, so that a tune cut
    # short is resumed without launching again what it finished.
    """
    CREATE TABLE tunes (
        id INTEGER PRIMARY KEY,
        started REAL NOT NULL,
        ended REAL,
        host TEXT NOT NULL,
        profile TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'running',
        result TEXT,
        pid INTEGER
    );
    CREATE INDEX tunes_profile ON tunes (profile, started);
    CREATE TABLE tune_steps (
        tune_id INTEGER NOT NULL REFERENCES tunes (id),
        candidate TEXT NOT NULL,
        experiment_id INTEGER,
        state TEXT NOT NULL,
        goal REAL,
        level REAL,
        detail TEXT NOT NULL DEFAULT '{}',
        updated REAL NOT NULL,
        PRIMARY KEY (tune_id, candidate)
    );
    """,
]
SCHEMA_VERSION = len(_MIGRATIONS)
ROWS_TOLD = 5  # damaged rows said one line each; the rest are skipped without a word


@dataclass(frozen=True)
class Experiment:
    """One launch of one layout, as the journal holds it."""

    id: int
    started: float
    ended: float | None
    host: str
    profile: str
    model: str
    engine: str
    layout: str
    argv: tuple[str, ...]
    gpus: tuple[int, ...]
    outcome: str
    diagnosis_kind: str | None
    diagnosis: str | None
    next_step: str | None
    load_seconds: float | None
    peak_memory: dict[int, int]
    log_path: str
    pid: int | None
    port: int | None
    note: str | None = None  # lines added later by add_note
    # What the engine logged about its launch, as journaled (``LaunchFacts.to_json``; read it
    # typed as ``launch_facts``). Empty before the launch ends.
    facts: dict[str, Any] = field(default_factory=dict)
    # What the planner predicted for it, as journaled (``LaunchPrediction.to_json`` at launch,
    # each bench's tok/s merged in; read it typed as ``prediction``).
    predicted: dict[str, Any] = field(default_factory=dict)
    gpu_type: str | None = None  # Hardware.gpu.key of the box it ran on
    engine_version: str | None = None  # the engine's version as cockpit knew it at launch
    simulated: bool = False  # ran on the simulated box: never calibrates a real one

    @property
    def launch_facts(self) -> LaunchFacts:
        """What the engine logged, typed; a value someone broke by hand reads as not logged."""
        return LaunchFacts.sound(self.facts)

    @property
    def prediction(self) -> LaunchPrediction:
        """What the planner predicted, typed; a value someone broke by hand reads as not predicted."""
        return LaunchPrediction.sound(self.predicted)


@dataclass(frozen=True)
class BenchPoint:
    """One benchmark run at one concurrency; metrics a client did not measure stay None."""

    concurrency: int
    output_tok_s: float
    requests: int = 0
    errors: int = 0
    duration_s: float | None = None
    request_s: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_p50: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p99: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p99: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    client_limited: bool = False  # the client, not the server, was the bottleneck
    failed: bool = False  # most requests failed or no token came back: not a measurement to compare
    error: str | None = None  # why it failed, one line
    extra: dict[str, Any] = field(default_factory=dict)
    id: int | None = None  # set by the journal
    experiment_id: int | None = None
    created: float | None = None

    @property
    def goodput_tok_s(self) -> float | None:
        """Output tok/s of the requests within the level's latency bounds (``extra["slo"]``), as
        ``bench.loadgen.LevelResult`` measured it; None when the level was run without bounds."""
        value = self.extra.get("goodput_tok_s")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TuneStepRecord:
    """One candidate of a tune: running (launched, not finished), measured or failed."""

    candidate: str
    experiment: int | None
    state: str
    goal: float | None
    level: float | None
    detail: dict[str, Any]
    updated: float = 0.0  # when it was last written (a running step: just before its launch)


@dataclass(frozen=True)
class TuneRecord:
    """A tune as journaled: its spec (``TuneSpec.to_json``), state (running, interrupted, done),
    its steps in the order they were made, and its result once it ended (``TuneResult.to_json``)."""

    id: int
    started: float
    ended: float | None
    host: str
    pid: int | None  # the cockpit that runs (or last ran) it
    profile: str
    spec: dict[str, Any]
    state: str
    steps: tuple[TuneStepRecord, ...]
    result: dict[str, Any] | None


_EXPERIMENT_COLUMNS = tuple(f.name for f in fields(Experiment))
_POINT_COLUMNS = tuple(f.name for f in fields(BenchPoint))
_POINT_READ = ("id", *(name for name in _POINT_COLUMNS if name != "id"))  # the row's id first, to name it
_Row = TypeVar("_Row")
_JSON_COLUMNS = ("argv", "gpus", "peak_memory", "extra")
_RECORD_COLUMNS: dict[str, type[LaunchFacts] | type[LaunchPrediction]] = {
    "facts": LaunchFacts,
    "predicted": LaunchPrediction,
}


def default_path() -> Path:
    """COCKPIT_JOURNAL, else the user's data folder (XDG_DATA_HOME on Linux)."""
    if env := os.environ.get("COCKPIT_JOURNAL"):
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("cockpit")) / "journal.sqlite"


class Journal:
    """The journal file. One connection, autocommit: every call is its own short transaction.

    A file cockpit creates is private (0600, in a 0700 folder if it made that too): benchmark
    argv can name hosts and paths. A journal that cannot be written is still opened for reading
    (``readonly``), so `cockpit results` works on a copy someone shared read-only.
    """

    def __init__(self, path: Path | str | None = None, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        self._lock = threading.Lock()  # the TUI may write from a worker thread
        self.readonly = False
        self.warn = warn or warn_on_stderr  # a row skipped as damaged, once each
        self._told: set[tuple[str, Any]] = set()
        _create_private(self.path)
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        """Open read-write; fall back to read-only where the file or its folder forbids writing."""
        with self._guard():
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        try:
            tables = self._tables(db)  # the first read: garbage fails here, before anything is written
            self._refuse_foreign(tables)
            with self._guard(passthrough_readonly=True):
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
            self._migrate(db, tables)
        except sqlite3.OperationalError as err:
            db.close()
            if not _cannot_write(err):
                self._raise(err)
            return self._open_readonly()
        except BaseException:
            db.close()
            raise
        return db

    def _open_readonly(self) -> sqlite3.Connection:
        """mode=ro sees a live WAL; immutable=1 is for a folder where even the WAL index cannot be made."""
        uri = "file:" + urllib.parse.quote(str(self.path.absolute())) + "?mode=ro"
        for suffix in ("", "&immutable=1"):
            with self._guard():
                db = sqlite3.connect(
                    uri + suffix, uri=True, timeout=10, isolation_level=None, check_same_thread=False
                )
            try:
                tables = self._tables(db)
            except sqlite3.OperationalError as err:
                db.close()
                if _cannot_write(err) and not suffix:
                    continue
                self._raise(err)
            except BaseException:
                db.close()
                raise
            self.readonly = True
            try:
                self._refuse_foreign(tables)
                self._check_version(db, tables)
            except BaseException:
                db.close()
                raise
            return db
        raise AssertionError("unreachable: the immutable open returns or raises")

    def _tables(self, db: sqlite3.Connection) -> set[str]:
        """The file's tables; raises sqlite3's own errors so the caller can tell read-only apart."""
        try:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as err:
            self._raise(err)

    def _refuse_foreign(self, tables: set[str]) -> None:
        """A database with tables but no schema_version is someone else's: never write into it."""
        if tables and "schema_version" not in tables:
            names = ", ".join(sorted(tables)[:5])
            raise CockpitError(
                f"{self.path} is an SQLite database but not a cockpit journal (it has tables {names}): "
                "set COCKPIT_JOURNAL to another file; cockpit left this one untouched."
            )

    def _check_version(self, db: sqlite3.Connection, tables: set[str]) -> None:
        """Read-only: usable only as it is, at this cockpit's schema."""
        version = self._version(db, tables)
        self._refuse_newer(version)
        if version < SCHEMA_VERSION:
            raise CockpitError(
                f"the journal {self.path} is read-only and from an older cockpit (schema {version}): "
                "make it writable once (chmod u+w on it and its folder) so cockpit can upgrade it."
            )

    def _version(self, db: sqlite3.Connection, tables: set[str]) -> int:
        if "schema_version" not in tables:
            return 0
        with self._guard():
            row = db.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise CockpitError(
                f"the journal {self.path} was written by a newer cockpit (schema {version}, "
                f"this one knows {SCHEMA_VERSION}): upgrade cockpit or set COCKPIT_JOURNAL "
                "to another file."
            )

    # -- experiments ---------------------------------------------------------------------------

    def start_experiment(
        self,
        *,
        profile: str,
        model: str,
        engine: str,
        layout: str,
        argv: Sequence[str],
        gpus: Sequence[int] = (),
        host: str | None = None,
        log_path: str = "",
        pid: int | None = None,
        port: int | None = None,
        predicted: LaunchPrediction | None = None,
        gpu_type: str | None = None,
        engine_version: str | None = None,
        simulated: bool = False,
    ) -> int:
        """Record a launch before it starts, so a launch that kills cockpit is still journaled."""
        row = {
            "started": time.time(),
            "host": host or socket.gethostname(),
            "profile": profile,
            "model": model,
            "engine": engine,
            "layout": layout,
            "argv": json.dumps(list(argv)),
            "gpus": json.dumps(list(gpus)),
            "outcome": LAUNCHING,
            "log_path": str(log_path),
            "pid": pid,
            "port": port,
            "predicted": json.dumps(predicted.to_json() if predicted is not None else {}),
            "gpu_type": gpu_type,
            "engine_version": engine_version,
            "simulated": int(simulated),
        }
        with self._guard():
            cur = self._db.execute(
                f"INSERT INTO experiments ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
        return _inserted_id(cur)

    def update_experiment(self, id: int, /, **changes: Any) -> None:
        """Set some columns of one experiment (pid and log path once known, ...)."""
        settable = _EXPERIMENT_COLUMNS[1:]  # all but id
        if unknown := sorted(set(changes) - set(settable)):
            raise ValueError(f"unknown experiment columns {unknown}: use {', '.join(settable)}")
        if not changes:
            return
        if "outcome" in changes and changes["outcome"] not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {changes['outcome']!r}")
        values = [_to_sql(name, value) for name, value in changes.items()]
        assignments = ", ".join(f"{name} = ?" for name in changes)
        with self._guard():
            cur = self._db.execute(f"UPDATE experiments SET {assignments} WHERE id = ?", (*values, id))
        if cur.rowcount == 0:
            raise ValueError(f"no experiment {id} in {self.path}")

    def set_outcome(
        self,
        id: int,
        outcome: Outcome,
        *,
        diagnosis: Diagnosis | None = None,
        load_seconds: float | None = None,
    ) -> None:
        """READY once it serves; FAILED or STOPPED also mark the end."""
        changes: dict[str, Any] = {"outcome": outcome}
        if outcome in (FAILED, STOPPED):
            changes["ended"] = time.time()
        if diagnosis is not None:
            changes |= {
                "diagnosis_kind": diagnosis.kind,
                "diagnosis": diagnosis.cause,
                "next_step": diagnosis.next_step,
            }
        if load_seconds is not None:
            changes["load_seconds"] = load_seconds
        self.update_experiment(id, **changes)

    def record_peak(self, id: int, peaks: Mapping[int, int]) -> None:
        """Merge memory samples, keeping each GPU's highest: telemetry calls this as it samples."""

        def merge(text: Any) -> str:
            merged = _peaks(text)
            for gpu, used in peaks.items():
                merged[int(gpu)] = max(int(used), merged.get(int(gpu), 0))
            return _dump_peaks(merged)

        self._merge_column(id, "peak_memory", merge)

    def _merge_column(self, id: int, column: str, merge: Callable[[Any], str]) -> None:
        """Read one experiment's ``column`` and write back ``merge`` of it, in one transaction:
        a cockpit and its `cockpit bench` child may merge into the same row at once."""
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(f"SELECT {column} FROM experiments WHERE id = ?", (id,)).fetchone()
                if row is None:
                    raise ValueError(f"no experiment {id} in {self.path}")
                self._db.execute(f"UPDATE experiments SET {column} = ? WHERE id = ?", (merge(row[0]), id))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def set_facts(self, id: int, facts: LaunchFacts) -> None:
        """What the engine logged about the launch; a later reading of the same log replaces it."""
        self.update_experiment(id, facts=facts)

    def merge_predicted(self, id: int, part: Mapping[str, Any]) -> None:
        """Add to what was predicted for an experiment, nested dicts merged key by key: a bench
        adds its levels' tok/s under "tok_s" beside the memory predicted at launch. The part is
        checked as a ``LaunchPrediction`` first (a value of the wrong type raises BadRecord)."""
        LaunchPrediction.from_json(part)
        self._merge_column(id, "predicted", lambda text: json.dumps(_merged(_json(text, dict), part)))

    def add_note(self, id: int, text: str) -> None:
        """Append one line to an experiment's note: what happened to it after the fact."""
        line = " ".join(str(text).split())  # one line, whatever it was given
        with self._guard():
            cur = self._db.execute(
                "UPDATE experiments SET note = CASE WHEN note IS NULL OR note = '' THEN ?"
                " ELSE note || char(10) || ? END WHERE id = ?",
                (line, line, id),
            )
        if cur.rowcount == 0:
            raise ValueError(f"no experiment {id} in {self.path}")

    def experiment(self, id: int) -> Experiment | None:
        with self._guard():
            row = self._db.execute(
                f"SELECT {', '.join(_EXPERIMENT_COLUMNS)} FROM experiments WHERE id = ?", (id,)
            ).fetchone()
        return self._sound(_experiment, row, "experiment") if row else None

    def experiments(self, profile: str | None = None, limit: int | None = None) -> list[Experiment]:
        """Newest first."""
        sql = f"SELECT {', '.join(_EXPERIMENT_COLUMNS)} FROM experiments"
        params: list[Any] = []
        if profile is not None:
            sql += " WHERE profile = ?"
            params.append(profile)
        sql += " ORDER BY started DESC, id DESC"
        found: list[Experiment] = []
        with self._guard():  # read until ``limit`` sound rows: a damaged newest row is not the end
            for row in self._db.execute(sql, params):
                if limit is not None and len(found) >= limit:
                    break
                experiment = self._sound(_experiment, row, "experiment")
                if experiment is not None:
                    found.append(experiment)
        return found

    # -- tunes ---------------------------------------------------------------------------------

    def start_tune(self, profile: str, spec: Mapping[str, Any]) -> int:
        with self._guard():
            cur = self._db.execute(
                "INSERT INTO tunes (started, host, profile, spec, pid) VALUES (?, ?, ?, ?, ?)",
                (time.time(), socket.gethostname(), profile, json.dumps(spec), os.getpid()),
            )
        return _inserted_id(cur)

    def tune_step(
        self,
        tune: int,
        candidate: str,
        *,
        experiment: int | None,
        state: str,
        goal: float | None = None,
        level: float | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Write (or rewrite) one candidate's step of a tune."""
        with self._guard():
            self._db.execute(
                "INSERT OR REPLACE INTO tune_steps"
                " (tune_id, candidate, experiment_id, state, goal, level, detail, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tune,
                    candidate,
                    experiment,
                    state,
                    goal,
                    level,
                    json.dumps(dict(detail or {})),
                    time.time(),
                ),
            )

    def resume_tune(self, tune: int) -> None:
        """This cockpit carries the tune on: it runs again, here."""
        with self._guard():
            self._db.execute(
                "UPDATE tunes SET state = 'running', ended = NULL, host = ?, pid = ? WHERE id = ?",
                (socket.gethostname(), os.getpid(), tune),
            )

    def finish_tune(self, tune: int, state: str, result: Mapping[str, Any]) -> None:
        """A tune ended (``done``) or was cut short (``interrupted``: `tune --resume` continues it)."""
        with self._guard():
            self._db.execute(
                "UPDATE tunes SET state = ?, ended = ?, result = ? WHERE id = ?",
                (state, time.time(), json.dumps(dict(result)), tune),
            )

    def tunes(self, profile: str | None = None) -> list[TuneRecord]:
        """Newest first."""
        where, params = (" WHERE profile = ?", [profile]) if profile is not None else ("", [])
        with self._guard():
            rows = self._db.execute(
                "SELECT id, started, ended, host, pid, profile, spec, state, result FROM tunes"
                + where
                + " ORDER BY started DESC, id DESC",
                params,
            ).fetchall()
            steps = self._db.execute(  # only those of the tunes read
                "SELECT tune_id, candidate, experiment_id, state, goal, level, detail, updated FROM tune_steps"
                " WHERE tune_id IN (SELECT id FROM tunes" + where + ") ORDER BY updated, rowid",
                params,
            ).fetchall()
        by_tune: dict[int, list[TuneStepRecord]] = {}
        for step in steps:
            record = self._sound(_tune_step, step, "tune step of tune")
            if record is not None:
                by_tune.setdefault(step[0], []).append(record)
        tunes = []
        for row in rows:
            tune = self._sound(_tune, row, "tune")
            if tune is not None:
                tunes.append(replace(tune, steps=tuple(by_tune.get(tune.id, ()))))
        return tunes

    def open_tune(self, profile: str) -> TuneRecord | None:
        """This profile's newest tune, if it did not finish (interrupted, or its cockpit died)."""
        newest = next(iter(self.tunes(profile)), None)
        return newest if newest is not None and newest.state != "done" else None

    # -- benchmark points ----------------------------------------------------------------------

    def add_point(self, experiment_id: int, point: BenchPoint) -> int:
        row = {name: _to_sql(name, getattr(point, name)) for name in _POINT_COLUMNS if name != "id"}
        row["experiment_id"] = experiment_id
        row["created"] = point.created if point.created is not None else time.time()
        with self._guard():
            cur = self._db.execute(
                f"INSERT INTO bench_points ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
        return _inserted_id(cur)

    def points(self, experiment_id: int) -> list[BenchPoint]:
        """By concurrency; a level measured twice comes in the order it was measured."""
        with self._guard():
            rows = self._db.execute(
                f"SELECT {', '.join(_POINT_READ)} FROM bench_points"
                " WHERE experiment_id = ? ORDER BY concurrency, id",
                (experiment_id,),
            ).fetchall()
        return [p for p in (self._sound(_point, row, "bench point") for row in rows) if p is not None]

    def _sound(self, read: Callable[[Sequence[Any]], _Row], row: Sequence[Any], what: str) -> _Row | None:
        """``read`` of the row; None, said once per row, for one that cannot be made sound."""
        try:
            return read(row)
        except BadRow as bad:
            self._skipped(what, row[0], str(bad))
            return None

    def _skipped(self, what: str, id: Any, why: str) -> None:
        """One line per damaged row, the first few only: a journal edited wholesale is not a
        screenful of warnings."""
        if (what, id) in self._told:
            return
        self._told.add((what, id))
        if len(self._told) > ROWS_TOLD:
            return
        self.warn(
            f"skipped {what} {shown(id)} of the journal {self.path}: {why}; fix or delete that row "
            f"(sqlite3 {self.path}) to keep it from being skipped"
            + ("; further damaged rows are skipped without a word" if len(self._told) == ROWS_TOLD else "")
        )

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self, db: sqlite3.Connection, tables: set[str]) -> None:
        """Bring the file to SCHEMA_VERSION; BEGIN IMMEDIATE so two first opens do not race.
        A journal already current is not written to at all (it may be read-only)."""
        version = self._version(db, tables)
        self._refuse_newer(version)
        if version == SCHEMA_VERSION:
            return
        with self._guard(passthrough_readonly=True):
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                row = db.execute("SELECT version FROM schema_version").fetchone()
                version = row[0] if row else 0  # another cockpit may have migrated meanwhile
                self._refuse_newer(version)
                for script in _MIGRATIONS[version:]:
                    for statement in filter(str.strip, script.split(";")):
                        db.execute(statement)
                if row is None:
                    db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                elif version < SCHEMA_VERSION:
                    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    @contextmanager
    def _guard(self, passthrough_readonly: bool = False) -> Iterator[None]:
        """One caller at a time; SQLite's errors become one line that says what to do."""
        with self._lock:
            try:
                yield
            except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
                raise  # our own mistakes: a missing experiment, a closed journal
            except sqlite3.DatabaseError as err:
                if passthrough_readonly and isinstance(err, sqlite3.OperationalError) and _cannot_write(err):
                    raise  # opening: the caller falls back to reading
                self._raise(err)

    def _raise(self, err: sqlite3.DatabaseError) -> NoReturn:
        """The one-line CockpitError for an SQLite error."""
        text = str(err)
        if isinstance(err, sqlite3.OperationalError):
            if "locked" in text or "busy" in text:
                raise CockpitError(
                    f"the journal {self.path} stayed locked by another cockpit for 10 s: "
                    "try again when it is done."
                ) from None
            if self.readonly or "readonly" in text:
                raise CockpitError(
                    f"the journal {self.path} is read-only (results can be read, nothing written): "
                    "make it and its folder writable, or set COCKPIT_JOURNAL to another file."
                ) from None
            raise CockpitError(
                f"cannot use the journal {self.path} ({text}): check the folder's permissions and "
                "free space, or set COCKPIT_JOURNAL to another file."
            ) from None
        raise CockpitError(
            f"the journal {self.path} is damaged or not a cockpit journal ({text}): move it aside "
            f"(mv {self.path} {self.path}.broken) and cockpit starts a new one."
        ) from None


def _inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just wrote (sqlite3 types it optional for other statements)."""
    if cur.lastrowid is None:
        raise AssertionError("an INSERT left no row id")
    return cur.lastrowid


def _cannot_write(err: sqlite3.OperationalError) -> bool:
    """The errors of a file or folder cockpit may read but not write."""
    text = str(err)
    return "readonly" in text or "unable to open" in text


def _create_private(path: Path) -> None:
    """Create the missing folders 0700 and the file 0600; leave what already exists alone."""
    private_dir(path.parent, fix="set COCKPIT_JOURNAL to a file in a writable folder.")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return  # it was there (or another cockpit made it just now): used as it is
    except OSError as err:
        raise CockpitError(
            f"cannot create the journal {path}: {err.strerror}; "
            "set COCKPIT_JOURNAL to a file in a writable folder."
        ) from None
    os.close(fd)


def _to_sql(name: str, value: Any) -> Any:
    if name == "peak_memory":
        return _dump_peaks(value)
    if name in _RECORD_COLUMNS:  # a record, or its JSON once the record's class has checked it
        record = _RECORD_COLUMNS[name]
        if isinstance(value, record):
            return json.dumps(value.to_json())
        record.from_json(value)
        return json.dumps(dict(value))
    if name in _JSON_COLUMNS:
        return json.dumps(list(value) if isinstance(value, (tuple, list)) else value)
    if isinstance(value, bool):
        return int(value)
    return value


def _dump_peaks(peaks: Mapping[int, int]) -> str:
    return json.dumps({str(gpu): int(used) for gpu, used in sorted(peaks.items(), key=lambda kv: int(kv[0]))})


class BadRow(ValueError):
    """A row that cannot be made sound: which column, and what it holds instead."""


def _experiment(row: Sequence[Any]) -> Experiment:
    """A row as written, checked: a JSON column someone broke reads as empty, an optional column
    of the wrong type as None, text columns as text; a wrong start time or outcome raises BadRow."""
    values = dict(zip(_EXPERIMENT_COLUMNS, row))
    return Experiment(
        id=_whole("id", values["id"]),
        started=_number("started", values["started"]),
        ended=_maybe_number(values["ended"]),
        host=_text(values["host"]),
        profile=_text(values["profile"]),
        model=_text(values["model"]),
        engine=_text(values["engine"]),
        layout=_text(values["layout"]),
        argv=tuple(str(a) for a in _json(values["argv"], list)),
        gpus=tuple(g for g in _json(values["gpus"], list) if isinstance(g, int) and not isinstance(g, bool)),
        outcome=_outcome(values["outcome"]),
        diagnosis_kind=_maybe_text(values["diagnosis_kind"]),
        diagnosis=_maybe_text(values["diagnosis"]),
        next_step=_maybe_text(values["next_step"]),
        load_seconds=_maybe_number(values["load_seconds"]),
        peak_memory=_peaks(values["peak_memory"]),
        log_path=_text(values["log_path"]),
        pid=_maybe_whole(values["pid"]),
        port=_maybe_whole(values["port"]),
        note=_maybe_text(values["note"]),
        facts=_json(values["facts"], dict),
        predicted=_json(values["predicted"], dict),
        gpu_type=_maybe_text(values["gpu_type"]),
        engine_version=_maybe_text(values["engine_version"]),
        simulated=_flag("simulated", values["simulated"]),
    )


# A point's metrics a client may not have measured: a value that is not a number reads as None.
_MAYBE_METRICS = (
    "duration_s",
    "request_s",
    "ttft_ms_p50",
    "ttft_ms_p90",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "itl_ms_p50",
    "itl_ms_p90",
    "itl_ms_p99",
    "e2e_ms_p50",
    "e2e_ms_p99",
)


def _point(row: Sequence[Any]) -> BenchPoint:
    """A row as written (``_POINT_READ``), checked: what a level is compared by (its concurrency,
    tok/s, request and error counts, whether it failed) must be sound or the row raises BadRow;
    a metric that is not a number reads as not measured."""
    values = dict(zip(_POINT_READ, row))
    return BenchPoint(
        concurrency=_whole("concurrency", values["concurrency"], low=1),
        output_tok_s=_number("output_tok_s", values["output_tok_s"]),
        requests=_whole("requests", values["requests"]),
        errors=_whole("errors", values["errors"]),
        **{name: _maybe_number(values[name]) for name in _MAYBE_METRICS},
        input_len=_maybe_whole(values["input_len"]),
        output_len=_maybe_whole(values["output_len"]),
        client_limited=_flag("client_limited", values["client_limited"]),
        failed=_flag("failed", values["failed"]),
        error=_maybe_text(values["error"]),
        extra=_json(values["extra"], dict),
        id=_whole("id", values["id"]),
        experiment_id=_whole("experiment_id", values["experiment_id"]),
        created=_maybe_number(values["created"]),
    )


def _tune(row: Sequence[Any]) -> TuneRecord:
    """A tune's row (its steps are added by the caller); a start time or state that is not one
    raises BadRow."""
    id, started, ended, host, pid, profile, spec, state, result = row
    if not isinstance(state, str):
        raise BadRow(f"its state is {shown(state)}, not a text")
    return TuneRecord(
        _whole("id", id),
        _number("started", started),
        _maybe_number(ended),
        _text(host),
        _maybe_whole(pid),
        _text(profile),
        _json_dict(spec),
        state,
        (),
        _json_dict(result) if result else None,
    )


def _tune_step(row: Sequence[Any]) -> TuneStepRecord:
    """One candidate's step; a candidate or state that is not a text raises BadRow."""
    _, candidate, experiment, state, goal, level, detail, updated = row
    for name, value in (("candidate", candidate), ("state", state)):
        if not isinstance(value, str):
            raise BadRow(f"its {name} is {shown(value)}, not a text")
    return TuneStepRecord(
        candidate,
        _maybe_whole(experiment),
        state,
        _maybe_number(goal),
        _maybe_number(level),
        _json_dict(detail),
        _maybe_number(updated) or 0.0,
    )


def _is_number(value: Any) -> bool:
    """A finite int or float that is not negative (bool is not a number here)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _number(name: str, value: Any) -> float:
    if not _is_number(value):
        raise BadRow(f"its {name} is {shown(value)}, not a number")
    return float(value)


def _maybe_number(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def _whole(name: str, value: Any, low: int = 0) -> int:
    if not _is_number(value) or value != int(value) or value < low:
        raise BadRow(f"its {name} is {shown(value)}, not a whole number of at least {low}")
    return int(value)


def _maybe_whole(value: Any) -> int | None:
    return int(value) if _is_number(value) and value == int(value) else None


def _flag(name: str, value: Any) -> bool:
    """0 or 1 as SQLite keeps a bool; anything else raises BadRow (a failed level read as good
    would replace a clean one)."""
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise BadRow(f"its {name} is {shown(value)}, not 0 or 1")


def _text(value: Any) -> str:
    """A text column: numbers as written, bytes decoded, nothing as empty."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def _maybe_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _outcome(value: Any) -> str:
    if value not in OUTCOMES:
        raise BadRow(f"its outcome is {shown(value)}, not one of {', '.join(OUTCOMES)}")
    return str(value)


def _json(text: Any, kind: type) -> Any:
    """``text`` parsed, if it is JSON of ``kind``; else an empty ``kind``."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return kind()
    return value if isinstance(value, kind) else kind()


def _merged(base: Mapping[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``part`` laid over it; where both hold a dict, theirs merge the same way."""
    merged = dict(base)
    for key, value in part.items():
        old = merged.get(key)
        merged[key] = (
            _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
        )
    return merged


def _peaks(text: Any) -> dict[int, int]:
    """peak_memory as {gpu: bytes}; entries that are not numbers are dropped."""
    peaks = {}
    for gpu, used in _json(text, dict).items():
        try:
            peaks[int(gpu)] = int(used)
        except (TypeError, ValueError):
            continue
    return peaks


def _json_dict(text: Any) -> dict[str, Any]:
    """A JSON object column; anything else (a hand-edited row) reads as empty."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
