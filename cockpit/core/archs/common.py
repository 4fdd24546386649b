"""What the family readers share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cockpit.core.model import CommonDims, ConfigText, ModelArch

Reader = Callable[[ConfigText], ModelArch]


def family_arch(text: ConfigText, family: str, dims: CommonDims, **fields: Any) -> ModelArch:
    """A family reader's ModelArch: the config's identity and its common settings, then what the
    family read for itself (``fields``, which may replace any of them: MLA's one KV head, a
    pipeline's layer count, ...)."""
    common: dict[str, Any] = {
        "name": text.name,
        "source": text.source,
        "family": family,
        "architecture": text.architecture,
        "layers": dims.layers,
        "hidden": dims.hidden,
        "heads": dims.heads,
        "kv_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
        "vocab": dims.vocab,
        "tied_embeddings": dims.tied,
        "max_context": dims.max_context,
    }
    return ModelArch(**{**common, **fields})
