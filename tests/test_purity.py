"""The pure core, imported alone, loads no I/O library: the whole chain of its imports, at run time
(tests/test_layers.py reads each module's own imports from the source)."""

from __future__ import annotations

import subprocess
import sys

from test_layers import IO_LIBRARIES, core_modules


def test_the_core_loads_no_io_library_even_indirectly():
    modules = core_modules()
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        + "".join(f"import {m}\n" for m in modules)
        + "loaded = set(sys.modules) - before\n"
        + f"print(sorted(m for m in loaded if m.split('.')[0] in {sorted(IO_LIBRARIES)!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
