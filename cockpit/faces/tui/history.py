"""The prompt's history, one command a line in the user's state folder, kept across runs.

A typed line may carry a secret (`try tp4 --api-key V`): it is stored with the value blanked,
in a file only its user reads. The file is read back with bounds: its last part only, and a
file that is not text is skipped with one line, so a broken history never keeps the screen shut.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from cockpit.core.errors import CockpitError
from cockpit.core.secrets import redact_line
from cockpit.store.paths import private_dir, state_dir
from cockpit.store.textfile import NotReadable, read_bounded

log = logging.getLogger(__name__)

LIMIT = 500
MAX_READ = 1 << 20  # bytes read back from the end of the file: 500 long lines fit many times over
MAX_LINE = 4096  # a longer line is no command anyone typed: dropped on reading


def history_path() -> Path:
    return state_dir() / "history"


class PromptHistory:
    """Up/Down through earlier commands; the line being typed is kept as the draft."""

    def __init__(self, path: Path | None = None, limit: int = LIMIT) -> None:
        self.path = path if path is not None else history_path()
        self.limit = limit
        self.problem = ""  # one line saying why the stored history was skipped, if it was
        self.entries = self._read()
        self._redact_stored()
        self._cursor = len(self.entries)
        self._draft = ""

    def _read(self) -> list[str]:
        """The last ``limit`` lines of the file; nothing (and ``problem`` set) for one that
        is not a readable text file."""
        try:
            data = read_bounded(self.path, MAX_READ, tail=True)
        except FileNotFoundError:
            return []
        except NotReadable as err:
            return self._skip(f"it is {err}")
        except OSError as err:
            return self._skip(f"cannot read it ({err.strerror or err})")
        if b"\0" in data:
            return self._skip("it is not text")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return self._skip("it is not UTF-8 text")
        lines = text.splitlines()
        if len(data) == MAX_READ and lines:
            lines = lines[1:]  # the first line was cut by the bound
        kept = [line for line in lines if line.strip() and len(line) <= MAX_LINE]
        return kept[-self.limit :]

    def _redact_stored(self) -> None:
        """Lines an older cockpit stored as typed are blanked here and written back so."""
        redacted = [redact_line(line) for line in self.entries]
        if redacted == self.entries:
            return
        self.entries = redacted
        self._save()

    def _save(self) -> None:
        """The whole history written again (it reached its limit, or it held a secret)."""
        try:
            _write(self.path, "".join(f"{e}\n" for e in self.entries if len(e) <= MAX_LINE), append=False)
        except OSError:
            pass  # a read-only home: the history on screen is blanked all the same

    def _skip(self, why: str) -> list[str]:
        self.problem = f"prompt history {self.path} skipped: {why}; remove it to start a new one"
        log.warning("%s", self.problem)
        return []

    def add(self, text: str) -> None:
        text = redact_line(text.strip())
        self._cursor = len(self.entries)
        if not text or (self.entries and self.entries[-1] == text):
            return
        self.entries.append(text)
        self.entries = self.entries[-self.limit :]
        self._cursor = len(self.entries)
        if len(text) > MAX_LINE or self.problem:
            return  # kept for this run only: reading it back would drop it, or the file is not ours to write
        try:
            private_dir(self.path.parent)
        except CockpitError:
            return  # a read-only home must not break the prompt; history then lasts this run
        if len(self.entries) == self.limit:
            self._save()
            return
        try:
            _write(self.path, text + "\n", append=True)
        except OSError:
            pass

    def previous(self, current: str) -> str | None:
        if self._cursor == len(self.entries):
            self._draft = current
        if self._cursor == 0:
            return None
        self._cursor -= 1
        return self.entries[self._cursor]

    def next(self) -> str | None:
        if self._cursor >= len(self.entries):
            return None
        self._cursor += 1
        return self._draft if self._cursor == len(self.entries) else self.entries[self._cursor]


def _write(path: Path, text: str, *, append: bool) -> None:
    """Write the history 0600 whatever the umask; a file made wider by an older cockpit is
    narrowed. Only a regular file is written (a FIFO without a reader would block the screen)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(0, "not a regular file")
        os.fchmod(f.fileno(), 0o600)
        if not append:
            f.truncate()
        f.write(text)
