"""Predicted tok/s (the workload model, 1024 prompt tokens included) against the reference
measurements, printed side by side.

The measurements (8 x RTX PRO 6000, PCIe) and this script's expected table are in
docs/performance.md#reference-measurements; the table changes only when the model or its
calibration is meant to.

Run: .venv/bin/python perf/calibration_check.py
"""

from __future__ import annotations

from cockpit.core.perfmodel import predict_tok_s
from cockpit.core.planner import plan_layout
from cockpit.store.profile_setup import SetupOverrides, build_setup

MEASURED = {
    ("kimi-k2.6", "tp8"): {1: 26.3, 32: 577.8, 64: 693.1, "peak": 808},
    ("kimi-k2.6", "pp8"): {1: 36.9, 32: 250.9, 64: 396.0, "peak": 396},
    ("kimi-k2.6", "tp8 ep8"): {1: 65.3, 32: 546.0, 64: 795.0, "peak": 961},
    ("minimax-m2.5", "tp4"): {1: 84, 256: 2586},
    ("minimax-m2.5", "tp8 ep"): {1: 71, 256: 3982, 1024: 3997},
}
LEVELS = (1, 32, 64, 128, 256, 1024)


def predictions(profile_name: str, layout: str) -> dict:
    setup, profile = build_setup(SetupOverrides(profile=profile_name))
    verdict = plan_layout(setup, layout)
    out = predict_tok_s(setup, verdict, LEVELS, profile.bench.input_len, profile.bench.output_len)
    out["peak"] = max(out[c] for c in LEVELS if c <= max(profile.bench.concurrency))
    return out


def main() -> None:
    print(f"{'case':28} " + " ".join(f"{str(c):>16}" for c in (*LEVELS, "peak")))
    for (profile, layout), measured in MEASURED.items():
        pred = predictions(profile, layout)
        cells = []
        for c in (*LEVELS, "peak"):
            if c in measured:
                cells.append(f"{pred[c]:7.1f}/{measured[c]:<6} {pred[c] / measured[c] - 1:+4.0%}")
            else:
                cells.append(f"{pred[c]:7.1f}         ")
        print(f"{profile + ' ' + layout:28} " + " ".join(f"{x:>16}" for x in cells))


if __name__ == "__main__":
    main()
