"""The prompt's history, one command a line in the user's state folder, kept across runs."""

from __future__ import annotations

from pathlib import Path

from cockpit.paths import state_dir

LIMIT = 500


def history_path() -> Path:
    return state_dir() / "history"


class PromptHistory:
    """Up/Down through earlier commands; the line being typed is kept as the draft."""

    def __init__(self, path: Path | None = None, limit: int = LIMIT) -> None:
        self.path = path if path is not None else history_path()
        self.limit = limit
        try:
            self.entries = [line for line in self.path.read_text().splitlines() if line.strip()][-limit:]
        except (OSError, UnicodeDecodeError):
            self.entries = []
        self._cursor = len(self.entries)
        self._draft = ""

    def add(self, text: str) -> None:
        text = text.strip()
        self._cursor = len(self.entries)
        if not text or (self.entries and self.entries[-1] == text):
            self._cursor = len(self.entries)
            return
        self.entries.append(text)
        self.entries = self.entries[-self.limit :]
        self._cursor = len(self.entries)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if len(self.entries) == self.limit:
                self.path.write_text("\n".join(self.entries) + "\n")
            else:
                with open(self.path, "a") as f:
                    f.write(text + "\n")
        except OSError:
            pass  # a read-only home must not break the prompt; history then lasts this run

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
