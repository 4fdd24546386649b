"""Lint, format and types, run by the same command as the tests (configured in pyproject.toml)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ["cockpit", "tests", "perf"]


def _tool(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: install the test extras, pip install -e '.[test]'")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_finds_nothing_to_lint():
    result = _tool("ruff", "check", "--no-cache", *TREES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted():
    result = _tool("ruff", "format", "--check", "--no-cache", *TREES)
    assert result.returncode == 0, result.stdout + result.stderr + "\nrun `ruff format cockpit tests perf`"


def test_mypy_passes_on_the_package():
    result = _tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
