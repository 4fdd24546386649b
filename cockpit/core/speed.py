"""Which source predicts a layout's speed, and what it says of itself (docs/performance.md#speed-sources).

Two sources give step times: cockpit's analytic model (``cockpit.core.perfmodel``, everywhere)
and measured kernels (``cockpit.kernels``: AIConfigurator's tables of kernels timed on a GPU type
under an engine version, where the box is covered and the extra is installed). Both are
calibrated by the box's own runs. A prediction carries a ``SpeedSource`` so that the picker,
``plan --json`` and exports say which backend and which data made each number, and how far the
data's engine version is from the box's.

Pure: the measured source is handed in through ``Setup.speed`` by the edge that decided the box
(``cockpit.lab.box``); this module knows only its shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cockpit.core.hardware import Hardware
    from cockpit.core.model import ModelArch
    from cockpit.engines import Placement

ANALYTIC = "analytic"
KERNELS = "kernels"


@dataclass(frozen=True)
class SpeedSource:
    """What predicted a number: the backend, its data, and the engine versions involved."""

    backend: str  # ANALYTIC or KERNELS
    data: str = ""  # e.g. "AIConfigurator 0.12.0, h200_sxm, vllm 0.24.0"; "" for the analytic model
    data_version: str = ""  # the engine version the data describes ("" when it describes none)
    box_version: str = ""  # the engine version in force on the box
    note: str = ""  # why the analytic model stands in, or how far the versions are apart

    @property
    def label(self) -> str:
        """One short phrase for a screen or a table: 'measured kernels (h200_sxm, vllm 0.24.0)'."""
        if self.backend == KERNELS:
            text = f"measured kernels ({self.data})" if self.data else "measured kernels"
        else:
            text = "analytic model"
        return f"{text}; {self.note}" if self.note else text

    def to_json(self) -> dict[str, str]:
        return {
            "backend": self.backend,
            "data": self.data,
            "data_version": self.data_version,
            "box_version": self.box_version,
            "note": self.note,
            "label": self.label,
        }


ANALYTIC_SOURCE = SpeedSource(ANALYTIC)


class KernelTimes(Protocol):
    """Step times of one layout from measured kernels, before the box's calibration."""

    @property
    def source(self) -> SpeedSource: ...

    def decode_step_s(self, batch: int, context: float) -> float:
        """One decode step of one replica serving ``batch`` sequences at mean ``context`` tokens."""
        ...

    def prefill_s(self, tokens: int) -> float:
        """One prompt of ``tokens`` tokens, prefilled alone."""
        ...


class SpeedBackend(Protocol):
    """Where a setup's step times come from besides the analytic model (``Setup.speed``)."""

    def kernels(
        self, model: ModelArch, hardware: Hardware, engine: str, placement: Placement
    ) -> KernelTimes | SpeedSource:
        """The measured kernels for this layout, or (when they cannot predict it) the analytic
        source with a note that says why."""
        ...
