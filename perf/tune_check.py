"""Does `tune` find the best candidate, and how many launches does it save? Run by hand.

On the simulated box under a truth the planner does not share (COCKPIT_SIM_TRUTH,
docs/simulator.md#a-box-with-its-own-truth: the witness, bent), for one profile and one set of tune
words, it runs:

1. `cockpit tune` itself (a real `cockpit tune --sim` process), and reads its journaled result;
2. an exhaustive measurement: every fitting candidate launched and measured at every level of the
   spec, with the same goodput definition and the same bench;

then prints, per candidate, the truth's goodput (exhaustive), what the tune measured or why it did
not try it, and its optimistic bound when the tune stopped; the winner against the exhaustive best,
and the launches saved.

    python perf/tune_check.py --profile minimax-m2.5 \\
        --truth '{pace: witness, bend: {collective_floor_us: 20, collective_bw_scale: 0.5,
                  moe_efficiency: {1: 0.5, 256: 1.0}, layout_overhead_ms: {"tp8 ep": 3},
                  step_overhead_ms: 4}}' \\
        -- 'itl<50ms' in=32 out=8 c=4,16,64

Everything runs in a scratch folder (journal, calibration, simulated box), never the user's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="minimax-m2.5")
    parser.add_argument("--truth", default="", help="the box's truth, as YAML (docs/simulator.md)")
    parser.add_argument("--time-scale", default="50", help="COCKPIT_SIM_TIME_SCALE (loading only)")
    parser.add_argument("--skip-exhaustive", action="store_true")
    parser.add_argument("words", nargs="*", help="the tune words")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="tune-check-"))
    env = {
        **os.environ,
        "COCKPIT_SIM_TIME_SCALE": args.time_scale,
        "COCKPIT_JOURNAL": str(scratch / "tune.sqlite"),
        "COCKPIT_STATE_DIR": str(scratch / "state"),
        "COCKPIT_SIM_STATE": str(scratch / "simbox"),
        "XDG_DATA_HOME": str(scratch / "data"),
        "XDG_CONFIG_HOME": str(scratch / "config"),
    }
    if args.truth:
        truth = scratch / "truth.yaml"
        truth.write_text(yaml.safe_dump(yaml.safe_load(args.truth)))
        env["COCKPIT_SIM_TRUTH"] = str(truth)
        print(f"truth: {yaml.safe_load(args.truth)}")
    os.environ.update(env)
    args.profile = private_profile(args.profile, scratch)  # its own port: never another server's

    started = time.monotonic()
    tune = subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", "tune", "--sim", "--profile", args.profile, *args.words],
        env=env,
        capture_output=True,
        text=True,
    )
    tune_s = time.monotonic() - started
    decisions = ("ranked ", "candidate ", "measured ", "winner ")  # the tune's own lines, not the launches'
    print("\n".join(line for line in tune.stdout.splitlines() if line.startswith(decisions)))
    print(tune.stderr[-2000:])
    if tune.returncode != 0:
        print(f"cockpit tune exited {tune.returncode}")
        return 1

    from cockpit.store.journal import Journal

    with Journal() as journal:
        record = journal.tunes()[0]
    result = record.result or {}
    print(f"tune: {result.get('launches')} launches of {result.get('fitting')} fitting, {tune_s:.0f} s wall")
    if args.skip_exhaustive:
        return 0

    started = time.monotonic()
    exhaustive = measure_all(args.profile, " ".join(args.words))
    all_s = time.monotonic() - started
    print(f"\nexhaustive: {len(exhaustive)} launches, {all_s:.0f} s wall")
    print(report(result, exhaustive))
    return 0


def report(result: dict, exhaustive: dict[str, float]) -> str:
    """The table (the exhaustive goodput, the tune's measurement or why it did not try, the bound
    when it stopped), the winner against the exhaustive best and the launches saved."""
    rows = {row["name"]: row for row in result.get("rows", [])}
    best = max(exhaustive, key=exhaustive.__getitem__)
    lines = [
        "| candidate | exhaustive | tune measured | bound at stop | tune |",
        "|---|---:|---:|---:|---|",
    ]
    for name, goal in sorted(exhaustive.items(), key=lambda kv: -kv[1]):
        row = rows.get(name, {})
        measured = row.get("measured")
        shown = f"{measured:,.1f}" if measured is not None else "-"
        bound = f"{row['bound']:,.1f}" if "bound" in row else "-"
        state = row.get("state", "?")
        why = "" if state == "measured" else f": {row.get('note', '')}"
        lines.append(f"| {name} | {goal:,.1f} | {shown} | {bound} | {state}{why} |")
    lines.append("")
    lines.append(f"stopped: {result.get('reason')}")
    winner = result.get("winner")
    launches = int(result.get("launches") or 0)
    saved = f"launches {launches} of {len(exhaustive)} (saved {len(exhaustive) - launches})"
    if winner:
        ratio = exhaustive.get(winner, 0.0) / exhaustive[best] if exhaustive[best] else 0.0
        lines.append(
            f"winner {winner}: {exhaustive.get(winner, 0.0):,.1f} exhaustive, {ratio:.1%} of the "
            f"exhaustive best ({best} {exhaustive[best]:,.1f}); {saved}"
        )
    else:
        lines.append(f"no winner; exhaustive best {best} {exhaustive[best]:,.1f}; {saved}")
    return "\n".join(lines)


def private_profile(name: str, scratch: Path) -> str:
    """The profile copied into the scratch folder with a free port."""
    import socket

    from cockpit.store.profile import find_profile

    data = yaml.safe_load(find_profile(name).read_text())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data.setdefault("server", {})["port"] = port
    base = Path(name).name
    path = scratch / (base if base.endswith((".yaml", ".yml")) else f"{base}.yaml")
    path.write_text(yaml.safe_dump(data))
    return str(path)


def measure_all(profile: str, words: str) -> dict[str, float]:
    """Every fitting candidate at every level of the spec: its best goodput."""
    from dataclasses import replace

    from cockpit.core.tuning.candidates import plan_candidates
    from cockpit.core.tuning.spec import parse_tune
    from cockpit.lab.lab import Lab
    from cockpit.lab.tune_loop import Tuner, resolved
    from cockpit.runner.events import Ready

    out: dict[str, float] = {}
    with Lab.open(profile, sim=True, interval=0.5) as lab:
        spec = resolved(parse_tune(words), lab)
        usable = len(lab.profile.gpu_ids) if lab.profile.gpu_ids else lab.setup.hardware.count
        # Planned once, with the planner's defaults: the set of candidates does not depend on learning.
        candidates, _ = plan_candidates(replace(lab.setup, learned=type(lab.setup.learned)()), spec, usable)
        measurer = Tuner(lab, spec, lambda event: None)
        for candidate in candidates:
            events = list(lab.launcher.run(candidate.layout))
            if not isinstance(events[-1], Ready):
                out[candidate.name] = 0.0
                continue
            try:
                out[candidate.name] = max(measurer.measure_level(candidate, level) for level in spec.levels)
            finally:
                lab.launcher.stop("exhaustive: next")
            print(f"  {candidate.name}: {out[candidate.name]:,.1f}", flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
