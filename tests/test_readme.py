"""README's two commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -q"
    )
    assert test_command in readme and test_command in ci
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/cockpit\n" in readme


def test_every_package_is_installed():
    """A non-editable install ships every subpackage (the README's run command uses one)."""
    import re

    block = re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M).group(1)
    listed = set(re.findall(r'"([\w.]+)"', block))
    found = {
        ".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "cockpit").rglob("__init__.py")
    }
    assert found <= listed, found - listed
