"""Step times from measured kernels: AIConfigurator's tables of GEMM, attention, MoE and
collective kernels, timed on a GPU type under an engine version (docs/speed.md#speed-sources).

``measured_kernels`` answers for one layout with the kernel times, or with the analytic source
and one line saying why it cannot (the extra not installed, a GPU type or engine it has no data
for, a model family it does not know, data missing for a quant mode, any failure of the
library): it never raises, so a planner asking it always gets a number from somewhere. Compiled
layouts are kept for the life of the process; each answer is remembered, as the simulated
engine asks every step.
"""

from __future__ import annotations

import threading
from typing import Any

from cockpit.core.hardware import Hardware
from cockpit.core.model import ModelArch
from cockpit.core.speed import (
    ANALYTIC,
    KERNELS,
    KernelTimes,
    SpeedSource,
    nearest_version,
    version_note,
    version_numbers,
)
from cockpit.engines import Placement
from cockpit.kernels import library
from cockpit.kernels.coverage import BACKENDS, SYSTEMS, ParallelSizes, parallel_sizes
from cockpit.kernels.modeldir import model_folder

INSTALL = "pip install 'cockpit[kernels]' (Python 3.11 or newer)"
CONTEXT_STEP = 16  # decode contexts are timed to the nearest 16 tokens (KV reads of ~0.1% apart)
MAX_BATCH = 1 << 16
MAX_REMEMBERED = 1 << 16  # answers kept per layout before they are forgotten all at once
# Where a probe times a freshly compiled layout, to find data missing before a planner asks.
PROBE_CONTEXT = 1024


class AicKernelTimes:
    """One compiled layout's step times (``cockpit.core.speed.KernelTimes``), in seconds."""

    def __init__(self, handle: Any, sizes: ParallelSizes, source: SpeedSource) -> None:
        self._handle = handle
        self._sizes = sizes
        self._source = source
        self._lock = threading.Lock()
        self._decode: dict[tuple[int, int], float] = {}
        self._prefill: dict[int, float] = {}
        self._probe_s = self._decode_ms(1, PROBE_CONTEXT) / 1e3  # raises where data is missing
        self._prefill_ms(PROBE_CONTEXT)

    @property
    def source(self) -> SpeedSource:
        return self._source

    def _decode_ms(self, ranks_batch: int, context: int) -> float:
        # AIConfigurator times a decode step at s = isl + osl // 2 + 1 tokens of context
        # (aiconfigurator_core/sdk/rust_engine_step.py, estimate_decode_step_latency_with_rust):
        # osl 2 and isl = context - 2 read exactly ``context`` tokens of KV per sequence.
        return float(self._handle.decode_step_latency(ranks_batch, max(1, context - 2), 2))

    def _prefill_ms(self, tokens: int) -> float:
        return float(self._handle.predict_prefill_latency(1, tokens))

    def decode_step_s(self, batch: int, context: float) -> float:
        """One decode step of one replica serving ``batch`` sequences at mean ``context`` tokens."""
        ranks_batch = min(MAX_BATCH, self._sizes.ranks_batch(max(1, batch)))
        rounded = max(1, round(context / CONTEXT_STEP) * CONTEXT_STEP)
        key = (ranks_batch, rounded)
        with self._lock:
            seconds = self._decode.get(key)
            if seconds is None:
                try:
                    seconds = self._decode_ms(ranks_batch, rounded) / 1e3
                except Exception:  # a point the tables cannot answer: the probe's step, never a crash
                    seconds = self._probe_s
                _remember(self._decode, key, seconds)
            return seconds

    def prefill_s(self, tokens: int) -> float:
        """One prompt of ``tokens`` tokens, prefilled alone."""
        tokens = max(1, int(tokens))
        with self._lock:
            seconds = self._prefill.get(tokens)
            if seconds is None:
                try:
                    seconds = self._prefill_ms(tokens) / 1e3
                except Exception:  # as above: scaled from the probe rather than a crash
                    seconds = self._prefill[PROBE_CONTEXT] * tokens / PROBE_CONTEXT
                _remember(self._prefill, tokens, seconds)
            return seconds


def _remember(memo: dict[Any, float], key: Any, seconds: float) -> None:
    if len(memo) >= MAX_REMEMBERED:
        memo.clear()
    memo[key] = seconds


# Compiled layouts (or why one could not be), per (model folder, system, backend, version, KV
# cache dtype, parallel sizes, the box's version), for the life of the process.
_compiled: dict[tuple[Any, ...], AicKernelTimes | str] = {}
_compiling = threading.Lock()


def measured_kernels(
    model: ModelArch,
    hardware: Hardware,
    engine: str,
    placement: Placement,
    box_version: str = "",
    *,
    kv_cache_dtype: str = "auto",
) -> KernelTimes | SpeedSource:
    """The measured kernels of this layout, or the analytic source with a note saying why not.

    ``box_version``: the engine version the box runs; the data nearest it is used, and the label
    says when they are far apart. ``kv_cache_dtype``: the setup's ``--kv-cache-dtype`` (``auto``
    keeps the model's dtype, as the engines do)."""

    def analytic(note: str) -> SpeedSource:
        return SpeedSource(ANALYTIC, box_version=box_version, note=note)

    backend = BACKENDS.get(engine)
    if backend is None:
        return analytic(f"AIConfigurator has no data for {engine}")
    system = SYSTEMS.get(hardware.gpu.key)
    if system is None:
        return analytic(f"AIConfigurator has no measured kernels for {hardware.gpu.label}")
    sizes = parallel_sizes(model, placement)
    if isinstance(sizes, str):
        return analytic(sizes)
    try:
        lib = library.load()
    except ImportError:
        return analytic(f"measured kernels not installed: {INSTALL}")
    try:
        versions = _held_versions(lib, system, backend)
        if not versions:
            return analytic(f"AIConfigurator holds no {engine} data for {system}")
        data_version = (nearest_version(versions, box_version) if box_version else None) or versions[-1]
        folder = model_folder(model)
        if isinstance(folder, str):
            return analytic(folder)
        kv = "fp8" if kv_cache_dtype.lower().startswith("fp8") else "bfloat16"
        box = (str(folder), system, backend, data_version, kv)
        key = (*box, sizes, box_version)  # the label names the box's version
        with _compiling:
            times = _compiled.get(key)
            if times is None:
                times = _given_up.get(box) or _compile(
                    lib, str(folder), system, backend, data_version, sizes, kv, box_version, engine
                )
                _compiled[key] = times
                _count(box, times)
    except Exception as err:  # the library's own failure is a note, never the planner's crash
        return analytic(f"AIConfigurator failed: {_one_line(err)}")
    if isinstance(times, str):
        return analytic(
            f"AIConfigurator cannot time {model.name} on {system} with {engine} {data_version}: {times}"
        )
    return times


_held: dict[tuple[str, str], list[str]] = {}

# A model the tables cannot time in its first layouts on a box (a shape or family they lack) is
# given up there after this many: a failed compile costs the library most of a second, and a
# plan asks for dozens of layouts. Its first reason then stands for every layout.
GIVE_UP_AFTER = 2
_failures: dict[tuple[Any, ...], list[str]] = {}
_timed: set[tuple[Any, ...]] = set()  # (model, system, backend, version, KV) that timed a layout
_given_up: dict[tuple[Any, ...], str] = {}


def _count(box: tuple[Any, ...], times: AicKernelTimes | str) -> None:
    if not isinstance(times, str):
        _timed.add(box)
        return
    failed = _failures.setdefault(box, [])
    failed.append(times)
    if len(failed) >= GIVE_UP_AFTER and box not in _timed:
        _given_up[box] = failed[0]


def _held_versions(lib: library.Library, system: str, backend: str) -> list[str]:
    """The engine versions AIConfigurator answers for on ``system`` with data measured there,
    oldest first. Its queryable slots (``get_version_slots``: current, previous, next) may name a
    ``next`` version this GPU has no tables of, served from older ones (``dirless_next_load``):
    such a version describes nothing new here and is left out, so a label never claims it."""
    if (system, backend) not in _held:
        slots = lib.perf_database.get_version_slots(system, backend) or {}
        held = []
        for version in set(slots.values()):
            database = lib.perf_database.get_database(system, backend, version)
            if database is not None and not getattr(database, "dirless_next_load", False):
                held.append(version)
        _held[(system, backend)] = sorted(held, key=version_numbers)
    return _held[(system, backend)]


def _compile(
    lib: library.Library,
    folder: str,
    system: str,
    backend: str,
    data_version: str,
    sizes: ParallelSizes,
    kv: str,
    box_version: str,
    engine: str,
) -> AicKernelTimes | str:
    """Compile the layout and time a probe step; where the data lacks the KV cache dtype asked
    for, once more with the other (attention computed in bf16, as the engines default to)."""
    other = "fp8" if kv == "bfloat16" else "bfloat16"
    first_error = ""
    for kv_mode in (kv, other):
        try:
            handle = lib.engine_handle.compile(
                folder,
                system,
                backend,
                backend_version=data_version,
                kvcache_quant_mode=kv_mode,
                fmha_quant_mode="bfloat16",
                **sizes.to_kwargs(),
            )
            notes = [version_note(engine, data_version, box_version)]
            if kv_mode != kv:
                notes.append(f"KV cache timed as {kv_mode}: no {kv} data")
            source = SpeedSource(
                KERNELS,
                data=f"AIConfigurator {lib.version}, {system}, {engine} {data_version}",
                data_version=data_version,
                box_version=box_version,
                note="; ".join(n for n in notes if n),
            )
            return AicKernelTimes(handle, sizes, source)
        except Exception as err:
            first_error = first_error or _one_line(err)
            if "kv" not in first_error.lower():  # a shape or family it lacks: no KV dtype helps
                break
    return first_error


def _one_line(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MeasuredKernels:
    """The setup's speed backend (``cockpit.core.speed.SpeedBackend``) on one box: measured
    kernels for the engine version it runs, where they cover a layout."""

    def __init__(self, box_version: str = "", kv_cache_dtype: str = "auto") -> None:
        self.box_version = box_version
        self.kv_cache_dtype = kv_cache_dtype

    def kernels(
        self, model: ModelArch, hardware: Hardware, engine: str, placement: Placement
    ) -> KernelTimes | SpeedSource:
        return measured_kernels(
            model, hardware, engine, placement, self.box_version, kv_cache_dtype=self.kv_cache_dtype
        )

    def __repr__(self) -> str:
        return f"MeasuredKernels({self.box_version!r}, {self.kv_cache_dtype!r})"
