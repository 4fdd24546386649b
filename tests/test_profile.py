"""Profiles: the bundled ones load and plan; bad files give one line that says what to fix."""

from __future__ import annotations

import pytest
import yaml

from cockpit.core.errors import CockpitError
from cockpit.store.profile import load_profile, parse_profile, profile_names
from cockpit.store.profile_setup import SetupOverrides, build_setup


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
    (folder / "mine.yaml").write_text(
        "model: qwen3-30b-a3b-fp8\nengine: sglang\nhardware: {gpu: h100, count: 2}\n"
    )
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


_BASE = "model: qwen3-30b-a3b-fp8\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("server: {port: 0}\n", "server.port must be 1-65535 (got 0)"),
        ("server: {port: 65536}\n", "server.port must be 1-65535"),
        ("server: {port: true}\n", "server.port must be 1-65535 (got True)"),
        ("server: {command: vllm serve}\n", "server.command must be a list"),
        ("server: {command: [yes, serve]}\n", "server.command[0] must be a string (got True)"),
        ("server: {command: [12, serve]}\n", "server.command[0]"),
        ("server: {args: {a: 1}}\n", "server.args must be a list"),
        ("server: {args: [--enforce-eager, no]}\n", "server.args[1]"),
        (
            "server: {args: [--gpu-memory-utilization, 1.5]}\n",
            "--gpu-memory-utilization must be above 0 and at most 1",
        ),
        ("server: {args: [--gpu-memory-utilization=0]}\n", "--gpu-memory-utilization must be above 0"),
        ("server: {args: [--mem-fraction-static, '1.2']}\n", "--mem-fraction-static"),
        ("server: {env: [A=1]}\n", "server.env must be a mapping"),
        ("server: {env: {A: [1]}}\n", "server.env A must be a string"),
        ("server: {env: {A: on}}\n", 'quote it in the YAML, like A: "1"'),
        ("server: {gpus: '0,1'}\n", "server.gpus must be a list"),
        ("server: {gpus: [0, -1]}\n", "server.gpus[1]"),
        ("layouts: tp4\n", "layouts must be a list"),
        ("layouts: [tp4, 8]\n", "layouts[1] must be a layout"),
        ("layouts: [tp4, tp99999]\n", "layouts[1]: 'tp99999'"),
        ("hardware: {count: 0}\n", "hardware.count"),
        ("hardware: {count: 4096}\n", "at most 512"),
        ("hardware: {memory_gib: -1}\n", "hardware.memory_gib"),
        ("hardware: {memory_gib: .nan}\n", "hardware.memory_gib"),
        ("calibration: {eta_bw: 0}\n", "calibration 'eta_bw' must be above 0"),
        ("calibration: {t_sched_ms: fast}\n", "calibration 't_sched_ms' needs a number"),
        ("calibration: [1]\n", "'calibration' must be a mapping"),
        ("bench: {concurrency: [1, 0]}\n", "bench.concurrency"),
        ("bench:\n  concurrency: 1,32\n", "bench.concurrency"),
        ("bench: {input_len: 0}\n", "bench.input_len"),
        ("bench: {output_len: 1.5}\n", "bench.output_len"),
        ("bench: {requests: -1}\n", "bench.requests"),
        ("bench: {duration_s: .inf}\n", "bench.duration_s"),
        ("bench: {duration_s: 1e9}\n", "bench.duration_s"),
        ("engine: [vllm]\n", "engine must be a non-empty string"),
        ("name: {a: 1}\n", "name must be a non-empty string"),
        ("description: [a, b]\n", "description must be text"),
        ("hardware: [gpu]\n", "'hardware' must be a mapping"),
    ],
)
def test_mistyped_and_absurd_values_say_what_to_fix(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(_BASE + text)
    with pytest.raises(CockpitError) as err:
        load_profile(str(path))
    assert message in str(err.value) and str(err.value).startswith(str(path))
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00\x80\xff" * 10, "not UTF-8 text"),
        ((_BASE + "engine: vllm\n").encode("utf-16"), "UTF-16"),
        (b"a: " + b"[" * 20_000 + b"]" * 20_000, "too deeply"),
        (b"a: " + b"9" * 5000, "thousands of digits"),
        (  # an alias bomb: a billion x's if anything printed it whole
            b"model: x\ndescription: [&a [x, x, x, x, x, x, x, x], &b [*a, *a, *a, *a, *a, *a, *a, *a], "
            b"&c [*b, *b, *b, *b, *b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c], "
            b"&e [*d, *d, *d, *d, *d, *d, *d, *d], &f [*e, *e, *e, *e, *e, *e, *e, *e], *f]\n",
            "description must be text",
        ),
    ],
)
def test_unreadable_profiles_are_one_line(tmp_path, data, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(CockpitError, match=message) as err:
        load_profile(str(path))
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_values_at_their_limits_load(tmp_path):
    path = tmp_path / "edge.yaml"
    path.write_text(
        _BASE + "hardware: {gpu: h200, count: 512, memory_gib: 16384}\n"
        "server: {port: 65535, args: [--max-model-len, 4096, --gpu-memory-utilization, 1], env: {A: '1'}, gpus: [0, 511]}\n"
        "bench: {concurrency: 100000, requests: 1, duration_s: 0.5}\ncalibration: {max_running: 0, eta_bw: 1}\n"
    )
    profile = load_profile(str(path))
    assert profile.port == 65535 and profile.args[1] == "4096" and profile.gpus == 512
    assert profile.bench.concurrency == (100000,) and profile.bench.duration_s == 0.5
    assert profile.calibration == {"max_running": 0, "eta_bw": 1.0}


def test_absurd_overrides_name_the_option():
    import math

    for gpus in (-1, 513, 10**12):
        with pytest.raises(CockpitError, match=r"--gpus must be 1 or more and at most 512"):
            build_setup(SetupOverrides(gpus=gpus))
    for mem in (math.inf, math.nan, 0.0, 1e9):
        with pytest.raises(CockpitError, match="--gpu-mem must be a positive"):
            build_setup(SetupOverrides(gpu_mem=mem))


def test_numbers_yaml_reads_where_text_is_meant_are_taken_as_text():
    """`OMP_NUM_THREADS: 8` and `port: "8000"` mean what they say; only booleans are a trap."""
    profile = parse_profile(
        {
            "model": "qwen3-30b-a3b-fp8",
            "server": {"port": "8000", "env": {"OMP_NUM_THREADS": 8, "NCCL_P2P_LEVEL": 1.5}},
        }
    )
    assert profile.port == 8000 and profile.env == {"OMP_NUM_THREADS": "8", "NCCL_P2P_LEVEL": "1.5"}


# ---------------------------------------------------------------------------------------------
# Server arguments per engine (docs/placement.md#per-engine-arguments)

_MINIMAX_ON_SGLANG = (
    "model: minimax-m2.5\nengine: vllm\n"
    "server:\n  command: [vllm, serve]\n  args: [--max-model-len, '32768', --gpu-memory-utilization, '0.90']\n"
)


@pytest.mark.parametrize(
    "engine, args, message",
    [
        (
            "vllm",
            "[--max-num-sqs, '512']",
            "server.args --max-num-sqs is not a vLLM 0.33.0 server flag: did you mean --max-num-seqs?",
        ),
        (
            "vllm",
            "[--context-length, '32768']",
            "server.args --context-length is not a vLLM 0.33.0 server flag",
        ),
        (
            "sglang",
            "[--max-model-len, '32768']",
            "server.args --max-model-len is not a SGLang 0.5.23 server flag",
        ),
        ("sglang", "[--kv-cache-dtype, fp8]", "(did you mean fp8_e4m3?)"),
        ("sglang", "[--seed, '1']", "--seed is gone from SGLang 0.5.23: use --random-seed"),
        ("vllm", "[-tp, '4']", "server.args -tp is the layout's tpN's to say, not a server argument's"),
        ("sglang", "[--port, '1234']", "--port is the profile's server port's to say"),
    ],
)
def test_server_args_are_checked_against_the_profiles_engine(tmp_path, engine, args, message):
    path = tmp_path / "p.yaml"
    path.write_text(f"{_BASE}engine: {engine}\nserver: {{args: {args}}}\n")
    with pytest.raises(CockpitError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_profile_holds_another_engines_launcher_and_args(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        _MINIMAX_ON_SGLANG + "  sglang:\n    command: [/opt/sgl/bin/python, -m, sglang.launch_server]\n"
        "    args: [--context-length, '32768', --mem-fraction-static, '0.85']\n"
    )
    profile = load_profile(str(path))
    sglang = profile.other_engines["sglang"]
    assert sglang.command[0] == "/opt/sgl/bin/python" and sglang.args == (
        "--context-length",
        "32768",
        "--mem-fraction-static",
        "0.85",
    )


@pytest.mark.parametrize(
    "section, message",
    [
        (
            "  sglang:\n    args: [--max-model-len, '1']\n",
            "server.sglang.args --max-model-len is not a SGLang",
        ),
        ("  sglang:\n    argz: []\n", "unknown key 'argz' in server.sglang"),
        ("  sglang: [a]\n", "'server.sglang' must be a mapping"),
        ("  sglang:\n    command: python\n", "server.sglang.command must be a list"),
        ("  vllm:\n    args: []\n", "server.vllm repeats the profile's own engine"),
    ],
)
def test_bad_per_engine_sections_say_what_to_fix(tmp_path, section, message):
    path = tmp_path / "p.yaml"
    path.write_text(_MINIMAX_ON_SGLANG + section)
    with pytest.raises(CockpitError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(str(path)) and message in str(err.value)


@pytest.mark.parametrize("name", ["demo", "minimax-m2.5", "kimi-k2.6"])
def test_the_bundled_profiles_commented_engine_sections_load_when_uncommented(name):
    """The example in each bundled profile's comments is a working section, not prose."""
    import re

    from cockpit.store.profile import find_profile

    text = find_profile(name).read_text()
    uncommented = re.sub(
        r"^  # ((?:vllm|sglang):\n(?:  #   .*\n)+)", lambda m: "  " + m.group(1), text, flags=re.M
    )
    uncommented = re.sub(r"^  #   ", "    ", uncommented, flags=re.M)
    assert uncommented != text
    profile = parse_profile(yaml.safe_load(uncommented), name=name, source=name)
    (other,) = profile.other_engines
    assert other != profile.engine and profile.other_engines[other].args


def test_the_engine_override_uses_the_profiles_section_for_that_engine(tmp_path):
    from cockpit.store.profile_setup import profile_for_engine

    path = tmp_path / "p.yaml"
    path.write_text(_MINIMAX_ON_SGLANG + "  sglang:\n    args: [--context-length, '16384']\n")
    profile = load_profile(str(path))
    on_sglang, notes = profile_for_engine(profile, "sglang")
    assert on_sglang.engine == "sglang" and on_sglang.args == ("--context-length", "16384")
    assert on_sglang.command == ()  # SGLang's default launcher, not the profile's `vllm serve`
    assert any("`vllm serve` is vLLM's" in note for note in notes)
    back, _ = profile_for_engine(on_sglang, "vllm")  # switching back gives the profile's own again
    assert (back.engine, back.command, back.args) == (profile.engine, profile.command, profile.args)


def test_the_engine_override_translates_without_a_section():
    from cockpit.engines.arguments import check_args
    from cockpit.engines.options import option_table
    from cockpit.store.profile_setup import profile_for_engine

    on_sglang, notes = profile_for_engine(load_profile("minimax-m2.5"), "sglang")
    assert on_sglang.args == (
        "--context-length",
        "32768",
        "--max-running-requests",
        "256",
        "--trust-remote-code",
    )
    check_args(option_table("sglang"), on_sglang.args)
    assert any(note.startswith("--gpu-memory-utilization 0.90 dropped") for note in notes)
    assert profile_for_engine(on_sglang, "sglang") == (on_sglang, ())


def test_a_model_without_a_profile_starts_from_the_engines_defaults():
    from cockpit.store.profile_setup import resolve

    profile, notes = resolve(SetupOverrides(model="qwen3-30b-a3b-fp8"))
    assert (profile.engine, profile.args, profile.command, notes) == ("vllm", (), (), ())
    assert (profile.gpu, profile.gpus) == (load_profile("demo").gpu, 8)  # the demo's box
    profile, _ = resolve(SetupOverrides(model="qwen3-30b-a3b-fp8", engine="sglang", gpus=2))
    assert (profile.engine, profile.args, profile.port, profile.gpus) == ("sglang", (), 30000, 2)


@pytest.mark.parametrize(
    "name",
    ["gpt-oss-120b", "kimi-k2.6", "llama-3.1-70b", "minimax-m2.5", "mixtral-8x7b-v0.1", "qwen3-30b-a3b-fp8"],
)
def test_a_bundled_name_is_launched_by_its_repository_id(name):
    from cockpit.store.modelfiles import BUNDLED_REPO_IDS, bundled_names, find_config, model_argv_path

    assert set(BUNDLED_REPO_IDS) == set(bundled_names())
    repo = model_argv_path(name)
    assert "/" in repo and find_config(repo, env={"HOME": "/nonexistent"}) == find_config(name)
    setup, _ = build_setup(SetupOverrides(model=name))
    assert setup.model_path == repo and model_argv_path(repo) == repo


def test_gpt_oss_is_openais_repository():
    from cockpit.store.modelfiles import model_argv_path

    assert model_argv_path("gpt-oss-120b") == "openai/gpt-oss-120b"
    assert model_argv_path("./some/folder") == "./some/folder"


def test_a_profile_says_where_its_speeds_come_from():
    data = {"model": "minimax-m2.5", "engine": "vllm"}
    assert parse_profile(data).speed == ""  # the default: measured kernels where they cover
    assert parse_profile({**data, "speed": "analytic"}).speed == "analytic"
    with pytest.raises(CockpitError) as exc:
        parse_profile({**data, "speed": "fast"}, source="p.yaml")
    message = str(exc.value)
    assert "\n" not in message and "p.yaml: speed must be kernels or analytic (got 'fast')" in message
