"""Idle CPU of the cockpit screen: the installed `cockpit --sim` in a real pty, 8 GPU panes at 1 Hz.

Each size runs the installed script in its own tmux server (`tmux new-session -x W -y H`,
TERM=xterm-256color, COLORTERM=truecolor), on a simulated 8-GPU box and journal in a fresh
/tmp folder. Once the header shows up the script lets it settle, then reads the process's
user+sys CPU (all threads, plus any children) and the bytes it wrote to its terminal
(/proc/PID/io wchar) over the measuring window. 100 % = one core. "other" is the rest of the
machine's CPU in the same window (a busy machine makes the numbers noisier, not much higher).

    .venv/bin/python perf/tui_idle.py                      # 200x50 and 80x24, 15 s each (~45 s)
    .venv/bin/python perf/tui_idle.py --seconds 30 --size 120x40
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
TARGET_CPU = 3.0  # % of one core
READY_TEXT = "○ no server"  # the header's server state: the app has drawn its screen
HARD_LIMIT_S = 58


def _env(base: str) -> dict[str, str]:
    env = {
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
    """user+sys seconds of the process, its threads, and its live children."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _wchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def measure(size: tuple[int, int], settle: float, seconds: float) -> dict:
    base = tempfile.mkdtemp(prefix="cockpit-perf-idle-", dir="/tmp")
    sock = f"cockpit-perf-idle-{os.getpid()}-{size[0]}x{size[1]}"
    env = _env(base)

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=True).stdout

    settings = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    try:
        tmux("-f", "/dev/null", "new-session", "-d", "-s", "ck", "-x", str(size[0]), "-y", str(size[1]), *settings,
             f"exec {COCKPIT} --sim")
        pid = int(tmux("list-panes", "-t", "ck", "-F", "#{pane_pid}").split()[0])
        proc = psutil.Process(pid)
        deadline = time.monotonic() + 15
        while READY_TEXT not in tmux("capture-pane", "-p", "-t", "ck"):
            if time.monotonic() > deadline:
                raise SystemExit(f"{size}: no {READY_TEXT!r} on the screen after 15 s:\n" + tmux("capture-pane", "-p", "-t", "ck"))
            time.sleep(0.05)
        time.sleep(settle)
        screen0 = tmux("capture-pane", "-p", "-t", "ck")
        c0, w0, b0, t0 = _cpu(proc), _wchar(pid), _busy_cpus(), time.monotonic()
        time.sleep(seconds)
        c1, w1, b1, t1 = _cpu(proc), _wchar(pid), _busy_cpus(), time.monotonic()
        screen1 = tmux("capture-pane", "-p", "-t", "ck")
        threads = proc.num_threads()
        alive = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    wall = t1 - t0
    cpu = (c1 - c0) / wall * 100
    machine = (b1[0] - b0[0]) / max(1, b1[1] - b0[1]) * 100 * (os.cpu_count() or 1)
    return {
        "size": f"{size[0]}x{size[1]}",
        "cpu": cpu,
        "out_kib_s": (w1 - w0) / wall / 1024,
        "other": max(0.0, machine - cpu),
        "threads": threads,
        "alive": alive,
        "changed": screen0 != screen1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measuring window per size (default 15)")
    parser.add_argument("--settle", type=float, default=3.0, help="wait after the first frame (default 3)")
    parser.add_argument("--size", action="append", help="WxH, repeatable (default 200x50 and 80x24)")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True)
    if shutil.which("tmux") is None or not COCKPIT.exists():
        print(f"needs tmux and the installed {COCKPIT}")
        return 2
    sizes = [tuple(int(v) for v in s.split("x")) for s in (args.size or ["200x50", "80x24"])]
    results = [measure(size, args.settle, args.seconds) for size in sizes]
    print(f"idle CPU, installed `cockpit --sim` in tmux, demo profile (8 sim GPUs, monitor 1 Hz), {args.seconds:g} s window")
    print(f"{'size':>7} {'CPU % of a core':>16} {'out KiB/s':>10} {'threads':>8} {'other %':>8}  verdict")
    ok_all = True
    for r in results:
        ok = r["alive"] and r["cpu"] <= TARGET_CPU
        ok_all &= ok
        print(f"{r['size']:>7} {r['cpu']:>16.2f} {r['out_kib_s']:>10.1f} {r['threads']:>8} {r['other']:>8.0f}  {'PASS' if ok else 'FAIL'}")
    print(f"target: <= {TARGET_CPU:g} % of one core at every size -> {'PASS' if ok_all else 'FAIL'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
