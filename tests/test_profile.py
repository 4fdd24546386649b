"""Profiles: the bundled ones load and plan; bad files give one line that says what to fix."""

from __future__ import annotations

import pytest

from cockpit.errors import CockpitError
from cockpit.profile import load_profile, profile_names
from cockpit.resolve import SetupOverrides, build_setup


@pytest.mark.parametrize("name", ["demo", "minimax-m2.5", "kimi-k2.6"])
def test_bundled_profiles_load_and_resolve(name):
    setup, profile = build_setup(SetupOverrides(profile=name))
    assert profile.name == name and setup.hardware.count == 8
    assert setup.model.is_moe


def test_bundled_profiles_are_listed():
    assert {"demo", "minimax-m2.5", "kimi-k2.6"} <= set(profile_names())


def test_kimi_profile_is_sglang_on_the_seed_box():
    profile = load_profile("kimi-k2.6")
    assert profile.engine == "sglang" and profile.gpu == "rtx-pro-6000" and profile.gpus == 8


def test_user_profiles_come_from_the_config_folder(tmp_path):
    folder = tmp_path / "config" / "cockpit" / "profiles"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text("model: qwen3-30b-a3b-fp8\nengine: sglang\nhardware: {gpu: h100, count: 2}\n")
    setup, profile = build_setup(SetupOverrides(profile="mine"))
    assert profile.engine == "sglang" and setup.hardware.count == 2 and "mine" in profile_names()


def test_overrides_change_the_box_and_engine():
    setup, _ = build_setup(SetupOverrides(profile="demo", engine="sglang", gpus=4, gpu="h200", gpu_mem=100))
    assert setup.engine.name == "sglang" and setup.hardware.count == 4 and setup.hardware.memory_gib == 100


@pytest.mark.parametrize(
    "text, message",
    [
        ("model: x\nengnie: vllm\n", "unknown key 'engnie'"),
        ("engine: vllm\n", "needs 'model:'"),
        ("model: x\nengine: trtllm\n", "engine 'trtllm' is not one of vllm, sglang"),
        ("model: x\nhardware: {count: many}\n", "wrong type"),
        ("model: x\nserver: {prot: 1}\n", "unknown key 'prot' in server"),
        ("model: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "must be a YAML mapping"),
    ],
)
def test_bad_profiles_say_what_to_fix(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CockpitError, match=message) as err:
        load_profile(str(path))
    assert "\n" not in str(err.value)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(CockpitError, match="no profile named 'nope': known profiles are .*demo"):
        load_profile("nope")
    with pytest.raises(CockpitError, match="does not exist"):
        load_profile("/no/such/file.yaml")


def test_bad_overrides():
    with pytest.raises(CockpitError, match="--gpus must be 1 or more"):
        build_setup(SetupOverrides(gpus=0))
    with pytest.raises(CockpitError, match="--gpu-mem must be a positive"):
        build_setup(SetupOverrides(gpu_mem=-1))
