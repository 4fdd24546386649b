"""Start the simulated engine as a real process on 127.0.0.1, the way cockpit launches it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from cockpit.system.children import simulated_engine


class SimProcess:
    def __init__(
        self, engine: str, argv: list[str], state: Path, *, scale: float = 50, env: dict | None = None
    ):
        state.mkdir(parents=True, exist_ok=True)
        self.log_path = state / f"sim-{engine}-{time.monotonic_ns()}.log"
        full_env = {
            **os.environ,
            "COCKPIT_SIM_STATE": str(state),
            "COCKPIT_SIM_TIME_SCALE": str(scale),
            "PYTHONUNBUFFERED": "1",
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
