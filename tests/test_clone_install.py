"""The README flow from inside a clone: a non-editable install, then `cockpit run` from the clone
folder, whose own `cockpit/` (without `cockpit.layouts`) must not shadow the installed one in
the processes cockpit starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in out.decode().split("\0") if name]


def make_clone(into: Path) -> Path:
    """The checkout as a fresh clone of it would hold it once committed: tracked and new files, as they are now."""
    for name in tracked_files():
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def install(clone: Path, site: Path) -> None:
    """`pip install .` without the dependencies (this environment has them) into a folder of its own."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(clone)]
    if can_build_wheels_here():
        argv.insert(4, "--no-build-isolation")  # no download of the build backend
    result = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]


def can_build_wheels_here() -> bool:
    """setuptools builds wheels itself from 70.1 on; before that it needs the `wheel` package."""
    import importlib.util

    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


def plain_python(venv: Path) -> Path:
    """A Python that sees this environment's dependencies but not its editable install of cockpit.

    The editable install maps `cockpit.layouts` onto this checkout whatever `cockpit` is imported,
    which would hide the very mistake this test is for. A path line in a `.pth` file adds the
    dependencies' folder; the `.pth` files inside it (the editable finder's) are not run."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


def test_cockpit_run_from_inside_a_clone_uses_the_installed_package(tmp_path, profile_file):
    clone = make_clone(tmp_path / "clone")
    site = tmp_path / "site"
    install(clone, site)
    python = plain_python(tmp_path / "venv")
    assert (site / "cockpit" / "layouts" / "demo.yaml").exists()
    assert not (clone / "cockpit" / "layouts").exists()  # the source tree alone cannot find the models
    profile, _ = profile_file("demo")
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "COCKPIT_SIM_TIME_SCALE": "50",
        "COCKPIT_SIM_STATE": str(tmp_path / "simbox"),
        "COCKPIT_STATE_DIR": str(tmp_path / "state"),
        "COCKPIT_JOURNAL": str(tmp_path / "journal.sqlite"),
    }
    result = subprocess.run(
        # The console script, run as its shebang would run it (sys.path[0] is its folder).
        [
            str(python),
            str(site / "bin" / "cockpit"),
            "run",
            "try tp4",
            "--sim",
            "--quiet",
            "--profile",
            profile,
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\nready " in result.stdout and "failed" not in result.stdout
