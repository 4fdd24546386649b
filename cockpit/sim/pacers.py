"""What every pacer of the simulated engine shares: how many requests and KV tokens the engine
holds (the planner's memory, which the engine allocates by), and the planner's own step times as a
pacer (``pace: planner``, docs/simulator.md#a-box-with-its-own-truth)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cockpit.core.perfmodel import PerfModel


@dataclass(frozen=True)
class PaceChoice:
    """Which truth paces the engine (kernels, witness or planner) and what it says of itself: shown
    in /cockpit/truth and in one line of the engine's log."""

    truth: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"truth": self.truth, "detail": self.detail}

    @property
    def line(self) -> str:
        return f"paced by the {self.truth} truth: {self.detail}"


PLANNER_PACE = PaceChoice("planner", "the planner's own model (cockpit.core.perfmodel)")


class PoolCapacity:
    """The batcher's capacity from the planned layout: the running cap and the KV pool. The same
    whichever truth sets the pace, since the engine allocates by the plan's memory."""

    def __init__(self, perf: PerfModel, pace: PaceChoice) -> None:
        self.pace = pace
        self.max_running = perf.max_running  # SGLang's state slots cap it for a hybrid model
        self.kv_tokens = max(1, perf.kv_limit)
        # Replicas (DP, DP attention) each schedule their own requests with their own budget and
        # compute their prompts side by side: one batcher stands for them all, with their budgets
        # together, and a step's prompt tokens spread over them (``replica_share``).
        self.replicas = max(1, perf.placement.attn_replicas)
        # The most tokens one step computes; None: whole prompts (no chunked prefill).
        self.token_budget: int | None = perf.step_tokens * self.replicas or None
        # vLLM keeps a hybrid model's state in the KV cache's block pool: a request holds whole
        # blocks for its tokens and its state's blocks besides (docs/placement.md#hybrid-attention-qwen3-next)
        state = perf.memory.state
        self._blocks = state if state is not None and state.block_tokens else None
        if self._blocks is not None:
            self.kv_tokens = self._blocks.replicas * self._blocks.blocks * self._blocks.block_tokens

    def replica_share(self, tokens: int) -> int:
        """The prompt tokens of a step one replica computes: the step's, spread over the replicas."""
        return math.ceil(tokens / self.replicas)

    def kv_cost(self, tokens: int) -> int:
        if self._blocks is None:
            return tokens
        return self._blocks.blocks_per_request(tokens) * self._blocks.block_tokens


class PerfPacer(PoolCapacity):
    """The planner's performance model seen as the batcher's clock: a box that is exactly what
    cockpit predicts (for tests of plumbing, not of prediction)."""

    def __init__(self, perf: PerfModel) -> None:
        super().__init__(perf, PLANNER_PACE)
        self.perf = perf

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        return self.perf.step_time_s(batch, context_tokens)

    def prefill_time_s(self, tokens: int) -> float:
        return self.perf.prefill_time_s(self.replica_share(tokens))
