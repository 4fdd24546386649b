"""Readers of the families whose config.json says more than the common names: each module
turns one family's settings into a ``ModelArch`` (parameters by tensor class, KV and state by
layer kind), reading only the config, and cites the engine model files it follows.

``parse_config`` is where every config.json is read: ``cockpit.core.model`` reads the families it
knows itself, and sends here every model_type it does not. A model_type no reader
knows goes to the generic reader, which plans from the common names and marks the plan
approximate (docs/memory.md#a-family-cockpit-has-not-met).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cockpit.core.archs import dsa, generic, hybrid, llama4
from cockpit.core.archs.common import Reader
from cockpit.core.model import ConfigText, ModelArch, one_line_errors, read_config_text, read_own_family

# model_type -> the reader of its family. A multimodal wrapper's text_config names its own
# model_type (qwen3_5_moe_text, llama4_text), read alike.
READERS: dict[str, Reader] = {
    **dsa.READERS,
    **hybrid.READERS,
    **llama4.READERS,
}


def read_family(text: ConfigText) -> ModelArch:
    """The family's own reader, else the generic one (approximate, or NeedsCheckpoint with the
    keys it lacked)."""
    reader = READERS.get(text.model_type, generic.read)
    return reader(text)


def known_model_types() -> list[str]:
    return sorted(READERS)


def parse_config(raw: Mapping[str, Any], source: str = "<config>", name: str = "model") -> ModelArch:
    """The planner's view of a config.json; every absurd or mistyped value is one CockpitError line."""
    with one_line_errors(source):
        text = read_config_text(raw, source, name)
        return read_own_family(text) or read_family(text)
