"""The records a memory plan is made of, the same for every engine (docs/memory.md).

An engine's own rules (engines/<engine>/memory.py) fill them in; the planner adds them up for the
busiest GPU and reads a verdict off them. Nothing here knows which engine it describes.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True)
class StateArgs:
    """The server arguments that size a hybrid model's linear-attention state, by meaning
    (docs/placement.md#hybrid-attention-qwen3-next). Read only for models that keep such a state;
    the defaults are the engines' own."""

    # vLLM --enable-prefix-caching (on by default for hybrid models, is_prefix_caching_supported in
    # vllm/config/model.py); SGLang's radix cache (off with --disable-radix-cache)
    prefix_caching: bool = True
    block_size: int | None = None  # vLLM --block-size
    conv_dtype: str = "auto"  # vLLM --mamba-cache-dtype ("auto": the model's)
    ssm_dtype: str = "auto"  # vLLM --mamba-ssm-cache-dtype, SGLang --mamba-ssm-dtype ("auto": each default)
    gdn_prefill_backend: str = "auto"  # vLLM --gdn-prefill-backend
    max_state_slots: int | None = None  # SGLang --max-mamba-cache-size
    state_memory_ratio: float = 0.9  # SGLang --mamba-full-memory-ratio (its fallback, fields/schedule.py)
    radix_strategy: str = "auto"  # SGLang --mamba-radix-cache-strategy
    overlap_schedule: bool = True  # SGLang: off with --disable-overlap-schedule


@dataclass(frozen=True)
class StateMemory:
    """A hybrid model's cache on one GPU, laid out as its engine lays it out
    (docs/memory.md#kv-and-state-by-layer-kind): on vLLM one block pool shared by full attention,
    windowed attention and linear-attention state (the ``block`` and ``window`` fields); on SGLang
    a pool of state slots taken from the budget before the KV cache (the ``pool`` and ``slots``
    fields)."""

    bytes_per_request: float  # one request's state on one GPU, in the engine's dtypes
    replicas: int = 1  # attention replicas, each with a pool of its own
    # vLLM: full attention and state share one pool of equal-sized blocks
    block_tokens: int = 0  # attention tokens per block, raised until a block holds a state page
    block_bytes: int = 0  # one block over the layers of a group on one GPU
    blocks: int = 0  # blocks in one replica's pool
    attention_groups: int = 0  # full-attention groups, each holding ceil(tokens / block) blocks
    state_blocks: int = 0  # blocks one request's state holds: linear groups x state copies
    # SGLang: a pool of state slots
    pool_gib: float = 0.0
    pool_slots: int = 0  # --max-mamba-cache-size as resolved, one replica (plus one padding slot)
    slots_per_request: int = 0  # slots a running request may hold (SGLang's mamba ratio)

    window_groups: int = 0  # windowed-attention groups
    window_tokens: int = 0  # tokens a windowed layer holds at most for one request (in flight too)
    window_extra_blocks: int = 0  # 1 for a sliding window, which may start inside a block

    def blocks_per_request(self, tokens: int) -> int:
        """vLLM: blocks one request of ``tokens`` holds over all groups."""
        windowed = 0
        if self.window_groups:
            held = min(tokens, self.window_tokens)
            windowed = self.window_groups * (-(-held // self.block_tokens) + self.window_extra_blocks)
        return self.attention_groups * -(-tokens // self.block_tokens) + windowed + self.state_blocks

    def logged_tokens(self, max_len: int) -> int:
        """vLLM's "GPU KV cache size" of one replica: the requests of ``max_len`` that fit, times
        ``max_len`` (get_kv_cache_capacity, vllm/v1/core/kv_cache_utils.py)."""
        return int(self.blocks / self.blocks_per_request(max_len) * max_len)

    @property
    def running_cap(self) -> int:
        """Running requests the state pool admits over the whole server: SGLang caps
        max_running_requests at max_mamba_cache_size // ratio (resolve_max_num_reqs,
        sglang/srt/mem_cache/kv_cache_configurator.py). 0 on vLLM, whose state competes for blocks."""
        if not self.slots_per_request:
            return 0
        return max(0, self.pool_slots // self.slots_per_request) * self.replicas

    def requests_fitting(self, request_len: int, kv_tokens: int) -> float:
        """Requests of ``request_len`` tokens that fit at once over the whole server."""
        if self.block_tokens:
            return self.replicas * self.blocks / self.blocks_per_request(request_len)
        return min(kv_tokens / request_len, self.running_cap)

    def to_json(self) -> dict:
        layout: dict[str, float]
        if self.block_tokens:
            layout = {
                "block_tokens": self.block_tokens,
                "blocks": self.blocks,
                "state_blocks": self.state_blocks,
            }
        else:
            layout = {
                "pool_gib": round(self.pool_gib, 2),
                "pool_slots": self.pool_slots,
                "running_cap": self.running_cap,
            }
        return {"bytes_per_request": round(self.bytes_per_request), **layout}


@dataclass(frozen=True)
class MemoryBudget:
    """How an engine splits one GPU once the weights are known (GiB): the share it takes, the KV
    budget left in it and everything else it keeps, with the parts of that reserve the engine
    measures itself (docs/memory.md#what-the-engine-keeps-besides-weights)."""

    budget_gib: float  # what the engine takes for itself
    kv_budget_gib: float  # the KV cache pool before any state pool is taken from it
    reserve_gib: float  # what it keeps besides weights and the KV budget
    activation_gib: float = 0.0  # the profile run's peak
    graph_gib: float = 0.0  # CUDA graphs
    non_torch_gib: float = 0.0  # memory outside torch's allocator


@dataclass(frozen=True)
class CachePool:
    """The cache as the engine lays it out on one GPU: the bytes of one token in its KV pool, the
    pool's size once any state pool is taken from it, and a hybrid model's state (None without)."""

    kv_bytes_per_token: float
    kv_budget_gib: float
    state: StateMemory | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    """One GPU's memory, on the busiest GPU of the layout."""

    capacity_gib: float
    weights_by_group: dict[str, float]  # GiB: attention, experts, dense+shared, embeddings, other
    weights_gib: float
    reserve_gib: float
    budget_gib: float  # what the engine takes for itself (fraction x capacity)
    kv_budget_gib: float  # the KV cache pool (vLLM: with a hybrid model's state, which shares it)
    kv_bytes_per_token: float
    kv_tokens: int  # over the whole server (all attention replicas)
    max_concurrency: float  # requests of request_len that fit the KV cache (and any state) at once
    busiest_gpu: int
    expert_layer_bytes: float  # one MoE layer's experts on one GPU: the size of a load step
    # What the engine keeps besides weights and KV (docs/memory.md#what-the-engine-keeps-besides-weights),
    # each already inside reserve_gib where the engine takes it from the KV budget:
    activation_gib: float = 0.0  # vLLM's profile-run peak: MoE workspace + max(forward, sampler)
    graph_gib: float = 0.0  # CUDA graphs (vLLM >= 0.21 subtracts its estimate before sizing KV)
    non_torch_gib: float = 0.0  # memory outside torch's allocator that grows after vLLM's snapshot
    # A hybrid model's linear-attention state: inside kv_budget_gib on vLLM (one block pool), beside
    # it on SGLang (a pool of its own, taken first); None for a model without one
    state: StateMemory | None = None

    @property
    def state_bytes_per_request(self) -> float:
        """One request's linear-attention state on one GPU, in the engine's dtypes; 0: no state."""
        return self.state.bytes_per_request if self.state else 0.0

    @property
    def state_slots(self) -> int:
        """Running requests the engine admits for lack of state slots, over the whole server
        (SGLang); 0: no such cap."""
        return self.state.running_cap if self.state else 0

    @property
    def state_pool_gib(self) -> float:
        """SGLang's state pool on one GPU, beside the KV budget; 0 on vLLM and without state."""
        return self.state.pool_gib if self.state else 0.0

    def requests_fitting(self, request_len: int) -> float:
        """Requests of ``request_len`` tokens (input + output) the KV cache, and a hybrid model's
        state, hold at once over the whole server."""
        if not request_len:
            return 0.0
        if self.state is None:
            return self.kv_tokens / request_len
        return self.state.requests_fitting(request_len, self.kv_tokens)

    def to_json(self) -> dict:
        state = {"state": self.state.to_json()} if self.state else {}
        return {
            "capacity_gib": round(self.capacity_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "weights_by_group_gib": {k: round(v, 2) for k, v in self.weights_by_group.items()},
            "reserve_gib": round(self.reserve_gib, 2),
            "budget_gib": round(self.budget_gib, 2),
            "kv_budget_gib": round(self.kv_budget_gib, 2),
            "kv_bytes_per_token": round(self.kv_bytes_per_token),
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "busiest_gpu": self.busiest_gpu,
            "expert_layer_bytes": round(self.expert_layer_bytes),
            "activation_gib": round(self.activation_gib, 2),
            "graph_gib": round(self.graph_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
        } | state
