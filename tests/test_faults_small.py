"""Fault table for the command's edges: Ctrl-C while it starts, and a bad dcgm-exporter address.

Each case: the input, the one line expected on stderr, and that nothing else is printed (no
traceback, no second line)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import free_port

from cockpit.core.errors import CockpitError
from cockpit.store.modelfiles import MAX_CONFIG_BYTES, read_config
from cockpit.store.textfile import NotReadable, read_bounded

ROOT = Path(__file__).resolve().parent.parent

# A finder that raises KeyboardInterrupt when the CLI is imported: Ctrl-C at that instant,
# every time, instead of a sleep that hits it on some machines only.
_INTERRUPT_ON_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
from cockpit.faces.entry import main
sys.exit(main())
"""


def test_the_console_script_starts_at_the_guarded_entry():
    assert 'cockpit = "cockpit.faces.entry:main"' in (ROOT / "pyproject.toml").read_text().splitlines()


@pytest.mark.parametrize("module", ["cockpit.faces.cli", "cockpit.store.profile_setup", "argparse"])
def test_ctrl_c_while_the_command_imports_is_one_line(module):
    run = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_ON_IMPORT.format(module=module), "plan"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 130
    assert run.stderr == "cockpit: interrupted\n"


def test_python_dash_m_cockpit_is_the_command():
    run = subprocess.run(
        [sys.executable, "-m", "cockpit", "--version"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("cockpit ")


class _Endless(http.server.BaseHTTPRequestHandler):
    """An 'exporter' whose page never ends."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"# x" * 65536 + b"\n")
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endless_exporter():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def _closed() -> str:
    return f"127.0.0.1:{free_port()}"


# (id, the --dcgm value, words the one line holds, words it must not hold)
DCGM_FAULTS = [
    ("refused", lambda: f"http://{_closed()}/metrics", ["no GPUs answered", "Connection refused"], []),
    ("not a url", lambda: "notaurl", ["is not an http(s) URL", "http://node1:9400/metrics"], []),
    ("other scheme", lambda: "ftp://node1/metrics", ["is not an http(s) URL"], []),
    ("unclosed bracket", lambda: "http://[::1", ["is not a URL"], []),
    (
        "password",
        lambda: f"http://user:hunter22@{_closed()}/m",
        ["user:***@", "no GPUs answered"],
        ["hunter22"],
    ),
]


@pytest.mark.parametrize("case", DCGM_FAULTS, ids=[c[0] for c in DCGM_FAULTS])
def test_a_bad_dcgm_address_is_one_line(case):
    _, url, expected, absent = case
    run = subprocess.run(
        [sys.executable, "-m", "cockpit", "gpus", "--dcgm", url()], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("cockpit: ")
    for words in expected:
        assert words in lines[0]
    for words in absent:
        assert words not in run.stderr


def test_an_exporter_page_without_end_is_cut_not_read_whole(endless_exporter):
    run = subprocess.run(
        [sys.executable, "-m", "cockpit", "gpus", "--dcgm", endless_exporter],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert "MiB: not a dcgm-exporter page" in run.stderr


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # never written: a symlink to the device, read only


def _grown(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: no disk spent


# (id, what stands where a config.json should be, the words of its one line)
CONFIG_FAULTS = [
    ("fifo", _fifo, "is a FIFO, not a file"),
    ("device", _device, "is a device, not a file"),
    ("too big", _grown, "MiB, more than the"),
]


@pytest.mark.parametrize("case", CONFIG_FAULTS, ids=[c[0] for c in CONFIG_FAULTS])
def test_a_file_read_as_text_is_read_bounded_never_waited_on(tmp_path, case):
    """``read_text`` (a config.json, a profile, a safetensors index) used to stat, then read
    whole: a FIFO hung the read, /dev/zero filled memory. The one bounded reader refuses both, and
    a file over its bound, in one line naming the file and what to do."""
    _, make, words = case
    config = tmp_path / "config.json"
    make(config)
    with pytest.raises(CockpitError) as err:
        read_config(config)
    line = str(err.value)
    assert "\n" not in line and words in line and str(config) in line
    assert line.endswith("point --model at the model's config.json")


def test_the_bounded_reader_gives_a_files_end_whatever_its_size(tmp_path):
    path = tmp_path / "history"
    path.write_bytes(b"a" * 100 + b"tail")
    assert read_bounded(path, 4, tail=True) == b"tail"
    with pytest.raises(NotReadable, match="more than the 0 KiB it can be"):
        read_bounded(path, 4)
