"""Turn what the user asked for (a profile plus command-line overrides) into a planner Setup."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cockpit.engines import get_engine
from cockpit.errors import CockpitError
from cockpit.hardware import hardware
from cockpit.model import load_model
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
        if overrides.gpus < 1:
            raise CockpitError(f"--gpus must be 1 or more, got {overrides.gpus}")
        changes["gpus"] = overrides.gpus
    if overrides.gpu:
        changes["gpu"] = overrides.gpu
    if overrides.gpu_mem is not None:
        if overrides.gpu_mem <= 0:
            raise CockpitError(f"--gpu-mem must be a positive number of GiB, got {overrides.gpu_mem}")
        changes["gpu_mem_gib"] = overrides.gpu_mem
    return replace(profile, **changes)


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
