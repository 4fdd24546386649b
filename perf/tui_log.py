"""Launch-log throughput of the cockpit screen: 20,000 lines/s for 5 s, none lost, lag under 250 ms.

Headless (`App.run_test`), on the simulated 8-GPU box with the GPU monitor polling at 1 Hz. A
producer thread feeds lines through the app's own log path (`app.log_buffer.append`, what the
Control threads call per line of server output) at a fixed rate; each line carries its sequence
number and the time it was due. The app's 10 Hz flush timer drains the buffer into the log widget.
The script wraps, on the instance only, the widget's `write_lines` (when a batch reached the
widget: lines counted, sequence checked) and `render_line` (the next time the widget was painted).

Lag = time a line reached the widget (or was painted) minus the time it was due, for the oldest
line of each batch; p50 / p99 / max over batches. CPU% = this process's user+sys over the wall
time of the feed (one core = 100 %; includes the producer thread, as a server-reading thread would).

    .venv/bin/python perf/tui_log.py                  # 200x50 and 80x24 (log view), 20k lines/s, 5 s
    .venv/bin/python perf/tui_log.py --rate 50000 --seconds 3 --size 200x50
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

TARGET_LAG_S = 0.25
HARD_LIMIT_S = 58
PAD = " (EngineCore_DP0 pid=4242) INFO 05-12 10:00:00 [default_loader.py:262] Loading safetensors checkpoint shards"


def _env() -> str:
    base = tempfile.mkdtemp(prefix="cockpit-perf-log-", dir="/tmp")
    for key, sub in {
        "COCKPIT_SIM_STATE": "sim",
        "COCKPIT_STATE_DIR": "state",
        "COCKPIT_JOURNAL": "journal.sqlite",
        "XDG_STATE_HOME": "xdg-state",
        "XDG_CONFIG_HOME": "xdg-config",
        "XDG_DATA_HOME": "xdg-data",
        "XDG_RUNTIME_DIR": "xdg-run",
    }.items():
        os.environ[key] = os.path.join(base, sub)
    os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    return base


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _busy_cpus() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, for the foreign-load note."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def measure(size: tuple[int, int], rate: int, seconds: float) -> dict:
    import psutil

    from cockpit.faces.tui.app import CockpitApp

    app = CockpitApp(
        sim=True, host="perf", look_for_servers=False, poll=True, cursor_blink=False, interval=1.0
    )
    stats = {
        "written": 0,
        "batches": 0,
        "gaps": 0,
        "next_seq": 0,
        "write_lags": [],
        "paint_lags": [],
        "pending_paint": None,
        "flush_ms": [],
    }
    done = threading.Event()
    produced = [0]
    t0_box = [0.0]

    def producer() -> None:
        buffer = app.log_buffer
        t0 = t0_box[0]
        total = int(rate * seconds)
        seq = 0
        while seq < total:
            now = time.perf_counter()
            due = min(total, int((now - t0) * rate) + 1)
            while seq < due:
                buffer.append(f"{seq:09d} {t0 + seq / rate:.6f}{PAD} {seq % 64}/64")
                seq += 1
            produced[0] = seq
            time.sleep(0.002)
        done.set()

    async with app.run_test(size=size) as pilot:
        await pilot.pause(1.5)  # first frame, first GPU samples
        if app.main.compact:
            app.main.show_view("log")
            await pilot.pause(0.2)
        log = app.main.log_pane.log_view
        inner_write, inner_render = log.write_lines, log.render_line

        def write_lines(lines, scroll_end=None):
            now = time.perf_counter()
            lines = list(lines)
            if lines and lines[0][:9].isdigit():
                first, last = int(lines[0][:9]), int(lines[-1][:9])
                if first != stats["next_seq"] or last - first + 1 != len(lines):
                    stats["gaps"] += 1
                stats["next_seq"] = last + 1
                oldest = float(lines[0].split(" ", 2)[1])
                stats["write_lags"].append(now - oldest)
                if stats["pending_paint"] is None:
                    stats["pending_paint"] = oldest
                stats["written"] += len(lines)
                stats["batches"] += 1
            result = inner_write(lines, scroll_end)
            stats["flush_ms"].append((time.perf_counter() - now) * 1000)
            return result

        def render_line(y):
            oldest = stats["pending_paint"]
            if oldest is not None:
                stats["paint_lags"].append(time.perf_counter() - oldest)
                stats["pending_paint"] = None
            return inner_render(y)

        log.write_lines = write_lines  # instance attributes: the app's class is left as it is
        log.render_line = render_line

        proc = psutil.Process()
        cpu0, busy0 = proc.cpu_times(), _busy_cpus()
        t0_box[0] = time.perf_counter()
        thread = threading.Thread(target=producer, daemon=True)
        thread.start()
        while not done.is_set():
            await asyncio.sleep(0.05)
        feed_end = time.perf_counter()
        deadline = feed_end + 3.0
        while stats["written"] < produced[0] and time.perf_counter() < deadline:
            await asyncio.sleep(0.02)
        await pilot.pause(0.2)  # one more paint
        wall = time.perf_counter() - t0_box[0]
        cpu1, busy1 = proc.cpu_times(), _busy_cpus()
        tail = log.lines[-1] if log.line_count else ""
        line_count = log.line_count
        max_lines = log.max_lines

    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall * 100
    machine = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) * 100 * (os.cpu_count() or 1)
    return {
        "size": f"{size[0]}x{size[1]}",
        "produced": produced[0],
        "feed_s": feed_end - t0_box[0],
        "written": stats["written"],
        "gaps": stats["gaps"],
        "tail_ok": tail[:9] == f"{produced[0] - 1:09d}",
        "widget_lines": line_count,
        "widget_expected": min(max_lines or 10**12, produced[0]),
        "batches": stats["batches"],
        "write_lags": stats["write_lags"],
        "paint_lags": stats["paint_lags"],
        "flush_ms": stats["flush_ms"],
        "cpu": cpu,
        "foreign": max(0.0, machine - cpu),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=20_000, help="lines per second (default 20000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="feed duration (default 5)")
    parser.add_argument("--size", action="append", help="WxH, repeatable (default 200x50 and 80x24)")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True)
    sizes = [tuple(int(v) for v in s.split("x")) for s in (args.size or ["200x50", "80x24"])]
    base = _env()
    results = []
    try:
        for size in sizes:
            results.append(asyncio.run(measure(size, args.rate, args.seconds)))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    ok_all = True
    print(
        f"launch log, {args.rate:,} lines/s for {args.seconds:g} s, headless, 8 sim GPU panes at 1 Hz, flush timer 0.1 s"
    )
    print(
        f"{'size':>7} {'produced':>9} {'written':>9} {'lost':>5} {'gaps':>4} {'widget':>13} "
        f"{'write lag p50/p99/max ms':>25} {'paint lag p50/p99/max ms':>25} {'flush ms p50/max':>17} {'CPU%':>6} {'other%':>6}  verdict"
    )
    for r in results:
        lost = r["produced"] - r["written"]
        w, p = r["write_lags"], r["paint_lags"]
        kept = r["feed_s"] <= args.seconds + 0.25  # the producer was never held back
        ok = (
            lost == 0
            and r["gaps"] == 0
            and r["tail_ok"]
            and r["widget_lines"] >= r["widget_expected"]
            and r["produced"] == int(args.rate * args.seconds)
            and kept
            and bool(p)
            and _pct(w, 0.99) < TARGET_LAG_S
            and _pct(p, 0.99) < TARGET_LAG_S
        )
        ok_all &= ok

        def ms(xs):
            return f"{_pct(xs, 0.5) * 1000:.0f}/{_pct(xs, 0.99) * 1000:.0f}/{max(xs) * 1000 if xs else float('nan'):.0f}"

        fl = r["flush_ms"]
        print(
            f"{r['size']:>7} {r['produced']:>9,} {r['written']:>9,} {lost:>5} {r['gaps']:>4} "
            f"{r['widget_lines']:>6,}/{r['widget_expected']:<6,} {ms(w):>25} {ms(p):>25} "
            f"{statistics.median(fl) if fl else 0:>8.1f}/{max(fl) if fl else 0:<8.1f} {r['cpu']:>6.1f} {r['foreign']:>6.0f}  "
            f"{'PASS' if ok else 'FAIL'}"
        )
    print(
        "widget = lines held by the Log (its max_lines caps it) / expected; other% = the rest of the machine's CPU"
    )
    print(
        f"target: 0 lost, p99 lag < {TARGET_LAG_S * 1000:.0f} ms at {args.rate:,} lines/s -> {'PASS' if ok_all else 'FAIL'}"
    )
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
