"""Which source predicts a layout's speed, and what it says of itself (docs/speed.md#speed-sources).

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cockpit.core.hardware import Hardware
    from cockpit.core.model import ModelArch
    from cockpit.engines import Placement

ANALYTIC = "analytic"
KERNELS = "kernels"
SPEEDS = (KERNELS, ANALYTIC)  # what --speed and a profile's speed: take; kernels is the default


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

    @property
    def short(self) -> str:
        """A few words for the picker: 'measured kernels h200_sxm vllm 0.24.0' or 'analytic model'."""
        if self.backend == KERNELS:
            where = self.data.split(", ", 1)[-1].replace(",", "") if self.data else ""
            return f"measured kernels {where}".strip()
        return "analytic model"

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


def version_numbers(version: str) -> tuple[int, ...]:
    """A version's leading numbers: "0.5.23" -> (0, 5, 23), "v1.3.0rc20" -> (1, 3, 0); () when
    it starts with none."""
    numbers: list[int] = []
    for part in version.strip().removeprefix("v").split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) < len(part):  # "0rc20": the numbers end here
            break
    return tuple(numbers)


def nearest_version(versions: Sequence[str], wanted: str) -> str | None:
    """The version of ``versions`` nearest ``wanted``: the same major and minor first, then the
    nearest minor, then the nearest patch; the newest on a tie. None when there are none."""
    if not versions:
        return None
    target = version_numbers(wanted)

    def distance(version: str) -> tuple[int, ...]:
        numbers = version_numbers(version)
        gaps = tuple(abs(a - b) for a, b in zip((*numbers, 0, 0, 0)[:3], (*target, 0, 0, 0)[:3], strict=True))
        return (*gaps, *(-n for n in numbers))

    return min(versions, key=distance)


def versions_far_apart(data_version: str, box_version: str) -> bool:
    """Whether the data describes another release line than the box runs: they differ in the
    major or minor number (vLLM 0.24 against 0.33, SGLang 0.5.16 against 0.5.23 is near)."""
    data, box = version_numbers(data_version), version_numbers(box_version)
    return bool(data and box) and data[:2] != box[:2]


def version_note(engine: str, data_version: str, box_version: str) -> str:
    """What a label says when the data's engine version is far from the box's; "" when near."""
    if not versions_far_apart(data_version, box_version):
        return ""
    return f"data from {engine} {data_version}, the box runs {box_version}"


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
