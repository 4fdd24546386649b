"""Turn what the user asked for (a profile plus command-line overrides) into a planner Setup."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cockpit.engines import get_engine
from cockpit.errors import CockpitError, shown
from cockpit.hardware import MAX_GPU_MEM_GIB, MAX_GPUS, hardware
from cockpit.modelfiles import load_model
from cockpit.planner import Setup
from cockpit.profile import Profile, load_profile

DEFAULT_PROFILE = "demo"


@dataclass(frozen=True)
class SetupOverrides:
    profile: str | None = None
    model: str | None = None
    engine: str | None = None
    gpus: int | None = None
    gpu: str | None = None
    gpu_mem: float | None = None


def resolve_profile(overrides: SetupOverrides) -> Profile:
    profile = load_profile(overrides.profile or DEFAULT_PROFILE)
    changes: dict = {}
    if overrides.model:
        changes["model"] = overrides.model
    if overrides.engine:
        changes["engine"] = overrides.engine
    if overrides.gpus is not None:
        changes["gpus"] = _gpus_override(overrides.gpus)
    if overrides.gpu:
        changes["gpu"] = overrides.gpu
    if overrides.gpu_mem is not None:
        changes["gpu_mem_gib"] = _gpu_mem_override(overrides.gpu_mem)
    return replace(profile, **changes)


def _gpus_override(gpus: object) -> int:
    """--gpus: checked here rather than by argparse, so every face (CLI, screen) says the same."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise CockpitError(
            f"--gpus must be 1 or more and at most {MAX_GPUS}, the GPUs of one box (got {shown(gpus)}): give a count like --gpus 8"
        )
    return gpus


def _gpu_mem_override(gib: object) -> float:
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not 0 < gib <= MAX_GPU_MEM_GIB:
        raise CockpitError(
            f"--gpu-mem must be a positive number of GiB per GPU, at most {MAX_GPU_MEM_GIB:,.0f} (got {shown(gib)}): "
            "give it like --gpu-mem 94.97"
        )
    return float(gib)


def setup_for(profile: Profile) -> Setup:
    model = load_model(profile.model)
    return Setup(
        model=model,
        hardware=hardware(profile.gpu, profile.gpus, profile.gpu_mem_gib),
        engine=get_engine(profile.engine),
        server_args=profile.args,
        request_len=profile.request_len,
        model_path=profile.model,
        port=profile.port,
        command=profile.command,
        calibration=profile.calibration,
    )


def build_setup(overrides: SetupOverrides) -> tuple[Setup, Profile]:
    profile = resolve_profile(overrides)
    return setup_for(profile), profile
