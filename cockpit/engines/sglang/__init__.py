"""SGLang: its adapter, memory rules, log and metric vocabulary and option tables."""

from __future__ import annotations

from cockpit.engines.sglang.adapter import SGLang, stage_layers
from cockpit.engines.sglang.memory import (
    decode_graph_max_bs,
    derived_mem_fraction,
    gpu_defaults,
    prefill_graph_sizes,
)

__all__ = [
    "SGLang",
    "decode_graph_max_bs",
    "derived_mem_fraction",
    "gpu_defaults",
    "prefill_graph_sizes",
    "stage_layers",
]
