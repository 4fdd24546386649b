"""Idle CPU of the cockpit screen: the installed `cockpit --sim` in a real pty, 8 GPU panes at 1 Hz.

Each row runs the installed script in its own tmux server (`tmux new-session -x W -y H`,
TERM=xterm-256color, COLORTERM=truecolor) with the demo profile (copied with a free port), a
simulated 8-GPU box and a journal in a fresh /tmp folder. Once the header shows up the script
lets it settle, then reads the app process's user+sys CPU (all its threads; not the engine
child) and the bytes it wrote to its terminal (/proc/PID/io wchar) over the window.
100 % = one core. "other" is the rest of the machine's CPU in the same window.
Rows: idle at 200x50 and 80x24 (no server: the panes still redraw every sample), and, with
`--server` (on by default), 200x50 after `try tp4` reached ready (4 GPUs held, the header's
"ready 2m13s" ticking each second); that engine is stopped with `cockpit stop all` after.

    .venv/bin/python perf/tui_idle.py                      # three rows, 10 s windows (~45 s)
    .venv/bin/python perf/tui_idle.py --seconds 30 --size 120x40 --no-server
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

COCKPIT = Path(sys.executable).parent / "cockpit"
READY_SERVER = "● tp4 ready"
TARGET_CPU = 3.0  # % of one core
READY_TEXT = "○ no server"  # the header's server state: the app has drawn its screen
HARD_LIMIT_S = 58


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _profile(base: str) -> str:
    import yaml

    from cockpit.store.profile import find_profile

    data = yaml.safe_load(find_profile("demo").read_text())
    data.setdefault("server", {})["port"] = _free_port()
    path = Path(base) / "demo-perf.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _env(base: str) -> dict[str, str]:
    env = {
        "COCKPIT_SIM_TIME_SCALE": "50",
        "COCKPIT_SIM_STATE": f"{base}/sim",
        "COCKPIT_STATE_DIR": f"{base}/state",
        "COCKPIT_JOURNAL": f"{base}/journal.sqlite",
        "XDG_STATE_HOME": f"{base}/xdg-state",
        "XDG_CONFIG_HOME": f"{base}/xdg-config",
        "XDG_DATA_HOME": f"{base}/xdg-data",
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }
    return env


def _busy_cpus() -> tuple[float, float]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _cpu(proc: psutil.Process) -> float:
    """user+sys seconds of the app process (all its threads), not of the engine it started."""
    t = proc.cpu_times()
    return t.user + t.system


def _wchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def measure(size: tuple[int, int], settle: float, seconds: float, server: bool = False) -> dict:
    base = tempfile.mkdtemp(prefix="cockpit-perf-idle-", dir="/tmp")
    sock = f"cockpit-perf-idle-{os.getpid()}-{size[0]}x{size[1]}-{int(server)}"
    env = _env(base)
    profile = _profile(base)

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=True).stdout

    settings = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    try:
        tmux(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "ck",
            "-x",
            str(size[0]),
            "-y",
            str(size[1]),
            *settings,
            f"exec {COCKPIT} --sim --profile {profile}",
        )
        pid = int(tmux("list-panes", "-t", "ck", "-F", "#{pane_pid}").split()[0])
        proc = psutil.Process(pid)

        def screen_until(text: str, timeout: float, start: bool = False) -> None:
            deadline = time.monotonic() + timeout
            while True:
                shown = tmux("capture-pane", "-p", "-t", "ck")
                if (
                    any(line.strip().startswith(text) for line in shown.splitlines())
                    if start
                    else text in shown
                ):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{size}: no {text!r} on the screen after {timeout:g} s:\n{shown}")
                time.sleep(0.05)

        screen_until(READY_TEXT, 15)
        if server:
            for _ in range(10):  # keys sent before the app reads the terminal can be dropped
                tmux("send-keys", "-t", "ck", ":")
                tmux("send-keys", "-t", "ck", "-l", "try tp4")
                try:
                    screen_until("try tp4", 1, start=True)
                    break
                except TimeoutError:
                    tmux("send-keys", "-t", "ck", "C-u")
            tmux("send-keys", "-t", "ck", "Enter")
            screen_until(READY_SERVER, 25)
        time.sleep(settle)
        screen0 = tmux("capture-pane", "-p", "-t", "ck")
        c0, w0, b0, t0 = _cpu(proc), _wchar(pid), _busy_cpus(), time.monotonic()
        time.sleep(seconds)
        c1, w1, b1, t1 = _cpu(proc), _wchar(pid), _busy_cpus(), time.monotonic()
        screen1 = tmux("capture-pane", "-p", "-t", "ck")
        threads = proc.num_threads()
        alive = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    finally:
        if server:
            subprocess.run(
                [str(COCKPIT), "stop", "all"], env={**os.environ, **env}, capture_output=True, timeout=30
            )
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        Path(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}", sock).unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)
    wall = t1 - t0
    cpu = (c1 - c0) / wall * 100
    machine = (b1[0] - b0[0]) / max(1, b1[1] - b0[1]) * 100 * (os.cpu_count() or 1)
    return {
        "size": f"{size[0]}x{size[1]}",
        "state": "tp4 ready" if server else "no server",
        "cpu": cpu,
        "out_kib_s": (w1 - w0) / wall / 1024,
        "other": max(0.0, machine - cpu),
        "threads": threads,
        "alive": alive,
        "changed": screen0 != screen1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring window per row (default 10)")
    parser.add_argument("--no-server", dest="server", action="store_false", help="skip the tp4-ready row")
    parser.add_argument("--settle", type=float, default=3.0, help="wait after the first frame (default 3)")
    parser.add_argument("--size", action="append", help="WxH, repeatable (default 200x50 and 80x24)")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True)
    if shutil.which("tmux") is None or not COCKPIT.exists():
        print(f"needs tmux and the installed {COCKPIT}")
        return 2
    sizes = [tuple(int(v) for v in s.split("x")) for s in (args.size or ["200x50", "80x24"])]
    results = [measure(size, args.settle, args.seconds) for size in sizes]
    if args.server:
        results.append(measure(sizes[0], args.settle, args.seconds, server=True))
    print(
        f"idle CPU, installed `cockpit --sim` in tmux, demo profile (8 sim GPUs, monitor 1 Hz), {args.seconds:g} s window"
    )
    print(
        f"{'size':>7} {'state':>10} {'CPU % of a core':>16} {'out KiB/s':>10} {'threads':>8} {'other %':>8} {'screen moved':>12}  verdict"
    )
    ok_all = True
    for r in results:
        ok = r["alive"] and r["cpu"] <= TARGET_CPU
        ok_all &= ok
        print(
            f"{r['size']:>7} {r['state']:>10} {r['cpu']:>16.2f} {r['out_kib_s']:>10.1f} {r['threads']:>8} {r['other']:>8.0f} {'yes' if r['changed'] else 'no':>12}  {'PASS' if ok else 'FAIL'}"
        )
    print(f"target: <= {TARGET_CPU:g} % of one core at every size -> {'PASS' if ok_all else 'FAIL'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
