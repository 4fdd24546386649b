"""Start the simulated engine as a real process on 127.0.0.1, the way cockpit launches it.

Each start says which truth paces the engine (docs/simulator.md#a-box-with-its-own-truth):
``truth=PLANNER`` (the default here) for tests of plumbing, which compare the engine with the
planner's own numbers; a witness or measured kernels, bent or not, for tests of prediction. A
``COCKPIT_SIM_TRUTH`` in ``env`` wins over ``truth``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from cockpit.system.children import simulated_engine

PLANNER: Mapping[str, Any] = {"pace": "planner"}  # the planner's own model paces the engine
WITNESS: Mapping[str, Any] = {"pace": "witness"}  # the simulator's own step model, unbent


class SimProcess:
    def __init__(
        self,
        engine: str,
        argv: list[str],
        state: Path,
        *,
        scale: float = 50,
        env: dict | None = None,
        truth: Mapping[str, Any] = PLANNER,
    ):
        state.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.log_path = state / f"sim-{engine}-{stamp}.log"
        truth_path = state / f"truth-{stamp}.yaml"
        truth_path.write_text(yaml.safe_dump(dict(truth)))
        full_env = {
            **os.environ,
            "COCKPIT_SIM_STATE": str(state),
            "COCKPIT_SIM_TIME_SCALE": str(scale),
            "PYTHONUNBUFFERED": "1",
            "COCKPIT_SIM_TRUTH": str(truth_path),
            **(env or {}),
        }
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*simulated_engine(engine, ()), *argv],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def wait_ready(self, url: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"engine exited {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"engine not ready after {timeout}s:\n{self.output()}")

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=10)
        finally:
            self.log.close()
