"""The project's own docs: every `docs/page.md#section` the code names exists, and no comment points
at notes outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# A link into this repository's docs/ (not a path inside another repository named in a citation).
LINK = re.compile(r"(?<![\w/])docs/([\w-]+\.md)(?:#([\w-]+))?")
# Research notes that lived beside the project once; the repository must stand without them.
OUTSIDE = re.compile(
    r"/work/shared|\.\./shared|reference/[\w/]*\.md|\b(?:engines|perfmodel|bench|tui|DESIGN)\.md\b"
)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *DOCS.glob("*.md"), *ROOT.glob("layouts/*.yaml")]
    for tree in ("cockpit", "tests", "perf"):
        files += (ROOT / tree).rglob("*.py")
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def test_the_docs_cover_placement_memory_performance_and_the_simulator():
    for page in ("README.md", "placement.md", "memory.md", "performance.md", "simulator.md"):
        assert (DOCS / page).is_file(), page


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_docs_link_points_at_a_page_and_section_that_exist(path):
    wrong = []
    for page, section in LINK.findall(path.read_text()):
        target = DOCS / page
        if not target.is_file():
            wrong.append(f"docs/{page} does not exist")
        elif section and section not in _anchors(target):
            wrong.append(f"docs/{page} has no section #{section}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_cites_notes_outside_the_repository(path):
    hits = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "\n".join(hits)


# A file or folder of this package named in prose: `cockpit/runner/diagnose.py`, `cockpit/faces/tui/`.
OWN_PATH = re.compile(r"(?<![\w/.-])cockpit/((?:[\w]+/)*[\w]+(?:\.py|/))")


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_of_the_package_it_names_exists(path):
    """After a module moves, a comment or a page that still names its old place is a dead end."""
    wrong = sorted(
        {
            f"cockpit/{name}"
            for name in OWN_PATH.findall(path.read_text())
            if not (ROOT / "cockpit" / name).exists()
        }
    )
    assert not wrong, "\n".join(wrong)
