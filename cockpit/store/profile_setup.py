"""Turn what the user asked for (a profile plus command-line overrides) into a planner Setup."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cockpit.core.errors import CockpitError, shown
from cockpit.core.hardware import MAX_GPU_MEM_GIB, MAX_GPUS
from cockpit.core.knobs import Knobs
from cockpit.core.layout import parse_layout
from cockpit.core.planner import Setup
from cockpit.engines import DEFAULT_ENGINE, get_engine
from cockpit.engines.options import option_table
from cockpit.engines.translate import translate_args
from cockpit.store.modelfiles import load_model, model_argv_path
from cockpit.store.profile import EngineServer, Profile, load_profile

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
    return resolve(overrides)[0]


def resolve(overrides: SetupOverrides) -> tuple[Profile, tuple[str, ...]]:
    """The profile the overrides make, and what was translated or dropped on the way (for the user)."""
    if overrides.model and not overrides.profile:
        profile = model_profile(overrides.model, overrides.engine or DEFAULT_ENGINE)
    else:
        profile = load_profile(overrides.profile or DEFAULT_PROFILE)
    notes: tuple[str, ...] = ()
    if overrides.engine:
        profile, notes = profile_for_engine(profile, overrides.engine)
    changes: dict = {}
    if overrides.model:
        changes["model"] = overrides.model
    if overrides.gpus is not None:
        changes["gpus"] = _gpus_override(overrides.gpus)
    if overrides.gpu:
        changes["gpu"] = overrides.gpu
    if overrides.gpu_mem is not None:
        changes["gpu_mem_gib"] = _gpu_mem_override(overrides.gpu_mem)
    return replace(profile, **changes), notes


def model_profile(model: str, engine: str) -> Profile:
    """``plan --model X`` without a profile: the model on ``engine`` with the engine's own defaults
    (no server args, the engine's own port). The box is the demo profile's (8 x RTX PRO 6000)
    unless --gpus/--gpu/--gpu-mem say otherwise, which ``resolve`` applies on top."""
    engine = get_engine(engine).name
    box = load_profile(DEFAULT_PROFILE)
    port = option_table(engine).default("port")
    return Profile(
        name=_model_name(model),
        model=model,
        engine=engine,
        gpu=box.gpu,
        gpus=box.gpus,
        gpu_mem_gib=box.gpu_mem_gib,
        port=port if isinstance(port, int) else Profile.port,
        description=f"{model} on {engine} with the engine's defaults",
    )


def _model_name(spec: str) -> str:
    """A name for the profile of a bare model: the folder of a config.json, else the last part."""
    path = Path(spec)
    if path.name == "config.json":
        return path.parent.name or spec
    return (path.stem if path.suffix == ".json" else path.name) or spec


def profile_for_engine(profile: Profile, engine_name: str) -> tuple[Profile, tuple[str, ...]]:
    """The profile run on another engine: that engine's launcher and arguments, and notes saying what
    was translated or dropped (docs/placement.md#per-engine-arguments).

    The arguments are the profile's own for that engine (``server.sglang.args``) when it has them,
    else its args translated. The launcher is the profile's for that engine, else the engine's
    default: a ``server.command`` written for the profile's engine never launches another. The
    profile's own launcher and args are kept as its section for its engine, so switching back
    gives them again."""
    engine = get_engine(engine_name)
    if engine.name == profile.engine:
        return profile, ()
    own = get_engine(profile.engine)
    given = profile.other_engines.get(engine.name, EngineServer())
    notes: list[str] = []
    if given.args is not None:
        args = given.args
    else:
        args, translated = translate_args(profile.args, own.name, engine.name)
        if profile.args:
            notes.append(
                f"profile {profile.name} is for {own.label}: its server args said for {engine.label}"
            )
        notes += translated
    if profile.command and not given.command:
        notes.append(
            f"the profile's launcher `{' '.join(profile.command)}` is {own.label}'s: "
            f"{engine.label} runs with `{' '.join(engine.default_command)}`"
        )
    layouts = []
    for text in profile.layouts:  # a layout's knobs are in the profile's engine's words too
        layout = parse_layout(text)
        if layout.knobs:
            knobs, translated = translate_args(layout.knobs, own.name, engine.name)
            notes += [f"layout `{layout}`: {note}" for note in translated]  # secrets blanked
            text = replace(layout, knobs=Knobs(knobs)).unredacted()  # parsed again into the launch
        layouts.append(text)
    others = {name: server for name, server in profile.other_engines.items() if name != engine.name}
    others[own.name] = EngineServer(command=profile.command, args=profile.args)
    switched = replace(
        profile,
        engine=engine.name,
        command=given.command,
        args=tuple(args),
        layouts=tuple(layouts),
        other_engines=others,
    )
    return switched, tuple(notes)


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
        hardware=profile.box,
        engine=get_engine(profile.engine),
        server_args=profile.args,
        request_len=profile.request_len,
        model_path=model_argv_path(profile.model),
        port=profile.port,
        command=profile.command,
        calibration=profile.calibration,
    )


def build_setup(overrides: SetupOverrides) -> tuple[Setup, Profile]:
    profile = resolve_profile(overrides)
    return setup_for(profile), profile
