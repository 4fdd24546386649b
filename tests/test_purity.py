"""The pure core imports neither the screen (textual) nor the network (httpx)."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "cockpit.model",
    "cockpit.hardware",
    "cockpit.layout",
    "cockpit.engines",
    "cockpit.planner",
    "cockpit.perfmodel",
]


def test_core_imports_no_textual_and_no_httpx():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'httpx', 'aiohttp'))\n"
        + "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
