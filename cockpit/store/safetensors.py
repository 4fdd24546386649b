"""Reading a checkpoint's safetensors headers: the name, dtype and shape of every tensor, never its data.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(``{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``), then the
tensors' bytes (the format: huggingface/safetensors, safetensors/src/tensor.rs). Cockpit reads the
N bytes of each shard, a few KB to a few MB whatever the checkpoint's size, and checks them as the
safetensors library does, so a damaged or half-downloaded shard is one line that names it.
`cockpit.core.checkpoint.arch_from_checkpoint` turns the tensors into an architecture.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cockpit.core.checkpoint import CheckpointTensor
from cockpit.core.errors import CockpitError, shown
from cockpit.store.textfile import read_text

# The safetensors library refuses longer headers (MAX_HEADER_SIZE, safetensors/src/tensor.rs), so
# a garbage file whose first 8 bytes claim gigabytes is refused before anything else is read.
MAX_HEADER_BYTES = 100_000_000
INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 * 2**20  # real index files are a few hundred KB
# Bits of one element per dtype (safetensors' Dtype, safetensors/src/tensor.rs). A dtype not listed
# here is taken at what its offsets span: bytes are what the header says.
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
_FIX = "download it again (or remove it from the folder)"


def read_header(path: Path) -> list[CheckpointTensor]:
    """The tensors one safetensors file holds, from its header alone."""
    try:
        with path.open("rb") as file:
            size = path.stat().st_size
            if size < 8:
                raise CockpitError(f"{path} is {size} bytes, too short to be a safetensors file: {_FIX}")
            length = int.from_bytes(file.read(8), "little")
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise CockpitError(
                    f"{path} is not a safetensors file or is cut short: its first 8 bytes announce a "
                    f"{length:,}-byte header in a {size:,}-byte file: {_FIX}"
                )
            header = file.read(length)
    except OSError as exc:
        raise CockpitError(f"cannot read {path}: {exc.strerror}: {_FIX}") from exc
    return parse_header(header, data_bytes=size - 8 - length, where=str(path))


def parse_header(header: bytes, data_bytes: int, where: str) -> list[CheckpointTensor]:
    """Tensors from a header's bytes; ``data_bytes`` is what the file holds after the header."""
    if not header.startswith(b"{"):
        raise CockpitError(f"{where}: its header is not a JSON object, so not a safetensors file: {_FIX}")
    try:
        entries = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CockpitError(
            f"{where}: its header is not valid JSON ({type(exc).__name__}), so the file is damaged: {_FIX}"
        ) from None
    if not isinstance(entries, dict):
        raise CockpitError(f"{where}: its header is not a JSON object, so not a safetensors file: {_FIX}")
    tensors, needed = [], 0
    for name, entry in entries.items():
        if name != "__metadata__":
            tensor, end = _tensor(name, entry, where)
            tensors.append(tensor)
            needed = max(needed, end)
    if needed > data_bytes:
        raise CockpitError(
            f"{where} is cut short: its tensors need {needed:,} bytes of data and it holds {data_bytes:,}: "
            "finish the download (or download it again)"
        )
    return tensors


def _tensor(name: str, entry: Any, where: str) -> tuple[CheckpointTensor, int]:
    """One header entry, checked as safetensors checks it, and where its data ends."""
    if not isinstance(entry, dict):
        raise CockpitError(f"{where}: tensor {shown(name)} has no dtype/shape/offsets entry: {_FIX}")
    dtype, shape = entry.get("dtype"), entry.get("shape")
    if not isinstance(dtype, str) or not isinstance(shape, list):
        raise CockpitError(f"{where}: tensor {shown(name)} has no dtype or shape: {_FIX}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63 for d in shape):
        raise CockpitError(f"{where}: tensor {shown(name)} has shape {shown(shape)}, not whole sizes: {_FIX}")
    begin, end = _offsets(entry, name, where)
    nbytes = end - begin
    bits = DTYPE_BITS.get(dtype)
    if bits is not None and math.prod(shape) * bits != nbytes * 8:
        raise CockpitError(
            f"{where}: tensor {shown(name)} is {dtype} {shape} but its offsets span {nbytes:,} bytes, "
            f"so the file is damaged: {_FIX}"
        )
    return CheckpointTensor(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes), end


def _offsets(entry: Mapping[str, Any], name: str, where: str) -> tuple[int, int]:
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise CockpitError(f"{where}: tensor {shown(name)} has data_offsets {shown(offsets)}: {_FIX}")
    return offsets[0], offsets[1]


def checkpoint_files(folder: Path) -> list[Path]:
    """The shards of the checkpoint in ``folder``: those its index names, or every *.safetensors
    (none: an empty list). A shard the index names but the folder lacks is a download to finish."""
    index = folder / INDEX_NAME
    if index.is_file():
        names = _index_shards(index)
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CockpitError(
                f"{folder} lacks {len(missing)} of the {len(names)} shards its {INDEX_NAME} lists "
                f"(first: {shown(missing[0])}): finish downloading the checkpoint"
            )
        return [folder / n for n in names]
    return sorted(p for p in folder.glob("*.safetensors") if p.is_file())


def _index_shards(index: Path) -> list[str]:
    fix = "download it again, or remove it to read every *.safetensors in the folder"
    text = read_text(index, limit=MAX_INDEX_BYTES, what=str(index), fix=fix)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise CockpitError(f"{index} is not valid JSON: {fix}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CockpitError(f"{index} has no weight_map of tensor names to shard files: {fix}")
    shards = sorted(set(weight_map.values()))
    if any(Path(s).name != s or not s.endswith(".safetensors") for s in shards):
        raise CockpitError(f"{index} names a shard that is not a *.safetensors file beside it: {fix}")
    return shards


def read_checkpoint(folder: Path) -> list[CheckpointTensor] | None:
    """Every tensor of the checkpoint in ``folder``, or None when it holds none."""
    files = checkpoint_files(folder)
    if not files:
        return None
    return [tensor for path in files for tensor in read_header(path)]
