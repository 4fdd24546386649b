"""Secrets are blanked wherever cockpit writes or shows them: argv, env, free text, engine logs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from cockpit.core.secrets import Scrubber, redact_argv, redact_env, redact_text, secret_name, shell_line

# Every option of the real server parsers (vLLM 0.33.0 `vllm serve`, SGLang 0.5.23 launch_server).
REFERENCE = Path(__file__).resolve().parent / "fixtures" / "engines"
ENGINE_FILES = ("vllm-0.33.0-options.json", "sglang-0.5.23-options.json")
# The real engines' options that do carry a secret; every other option is shown as it is.
ENGINE_SECRETS = {"--api-key", "--hf-token", "--admin-api-key", "--ssl-keyfile-password"}


def test_secret_options_both_forms():
    argv = ["vllm", "serve", "m", "--hf-token=s3cret", "--api-key", "s3cret", "--port", "8000"]
    assert redact_argv(argv) == ("vllm", "serve", "m", "--hf-token=***", "--api-key", "***", "--port", "8000")
    assert redact_argv(["--hf-token", "s3cret"]) == ("--hf-token", "***")
    assert redact_argv(["--HF_TOKEN=s3cret", "--Authorization", "Bearer x"]) == (
        "--HF_TOKEN=***",
        "--Authorization",
        "***",
    )
    assert redact_argv(["-api-key", "s3cret"]) == ("-api-key", "***")


def test_vllm_api_key_takes_several_values():
    assert redact_argv(["--api-key", "k1", "k2", "--port", "1"]) == ("--api-key", "***", "***", "--port", "1")


def test_a_secret_looking_flag_never_swallows_the_next_argument():
    # --hf-token alone means "the token `hf auth login` saved"; the boolean flags take no value.
    assert redact_argv(["--hf-token", "--enforce-eager"]) == ("--hf-token", "--enforce-eager")
    assert redact_argv(["--return-tokens-as-token-ids", "m"]) == ("--return-tokens-as-token-ids", "m")
    assert redact_argv(["--skip-tokenizer-init", "m"]) == ("--skip-tokenizer-init", "m")
    assert redact_argv(["--api-key", "-1"]) == ("--api-key", "***")  # a negative number is a value


def test_options_that_count_tokens_or_name_a_tokenizer_are_shown():
    argv = [
        "--max-num-batched-tokens",
        "8192",
        "--tokenizer",
        "org/tok",
        "--long-prefill-token-threshold",
        "64",
    ]
    assert redact_argv(argv) == tuple(argv)


def test_url_passwords_in_argument_values():
    assert redact_argv(["--db", "postgres://u:s3cret@h/db"]) == ("--db", "postgres://u:***@h/db")
    assert redact_argv(["--db=postgres://u:s3cret@h/db"]) == ("--db=postgres://u:***@h/db",)
    assert redact_argv(["--url", "http://h:8000/v1"]) == ("--url", "http://h:8000/v1")


def test_env():
    env = {
        "HF_TOKEN": "s3cret",
        "DATABASE_URL": "postgres://u:s3cret@h/db",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "TOKENIZERS_PARALLELISM": "false",
        "SSH_AUTH_SOCK": "/tmp/agent",
    }
    assert redact_env(env) == {
        "HF_TOKEN": "***",
        "DATABASE_URL": "postgres://u:***@h/db",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "TOKENIZERS_PARALLELISM": "false",
        "SSH_AUTH_SOCK": "***",
    }


def test_free_text():
    assert (
        redact_text("connecting to redis://:s3cret@cache:6379/0") == "connecting to redis://:***@cache:6379/0"
    )
    assert redact_text("non-default args: {'api_key': 's3cret', 'port': 8000}") == (
        "non-default args: {'api_key': '***', 'port': 8000}"
    )
    assert redact_text("HF_TOKEN=s3cret vllm serve m") == "HF_TOKEN=*** vllm serve m"
    assert redact_text("GET /v1?token=s3cret&x=1") == "GET /v1?token=***&x=1"
    kept = "KV Cache is allocated. #tokens: 1000 max_num_batched_tokens=8192 api_key=None"
    assert redact_text(kept) == kept


def test_scrubber_blanks_the_launch_secrets_wherever_they_turn_up():
    scrub = Scrubber.from_launch(
        ["vllm", "serve", "m", "--hf-token=s3cret", "--api-key", "k3y-one", "--port", "8000"],
        {
            "DATABASE_URL": "postgres://u:pa55word@h/db",
            "HF_HUB_TOKEN": "hf_abcdef",
            "CUDA_VISIBLE_DEVICES": "0",
        },
    )
    assert set(scrub.secrets) == {"s3cret", "k3y-one", "pa55word", "hf_abcdef"}
    line = "INFO utils.py:233] non-default args: {'hf_token': 's3cret', 'model': 'm', 'extra': ['k3y-one']}"
    assert "s3cret" not in scrub.text(line) and "k3y-one" not in scrub.text(line)
    assert scrub.text("token read: hf_abcdef; db pa55word") == "token read: ***; db ***"
    assert scrub("port 8000") == "port 8000"


def test_scrubber_ignores_short_and_already_blanked_values():
    scrub = Scrubber.from_launch(["--api-key", "ab", "--hf-token=***"], {"X_TOKEN": ""})
    assert scrub.secrets == ()
    assert Scrubber().text("plain") == "plain"


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "my model", "--api-key", "it's", "--served-model-name", 'a "b"'],
        ["env", "A=1 2", "python", "-m", "sglang.launch_server", "--hf-token=$(rm -rf /)"],
    ],
)
def test_shell_line_is_pasteable(argv):
    assert shlex.split(shell_line(argv)) == list(redact_argv(argv))


def test_launching_prints_a_pasteable_redacted_line():
    from cockpit.runner.events import Launching

    event = Launching.redacted(
        1, ("vllm", "serve", "my model", "--hf-token=s3cret"), 42, "/log", {"HF_TOKEN": "s3cret", "A": "x y"}
    )
    assert "s3cret" not in repr(event)  # held redacted, not only printed so
    text = str(event)
    assert "s3cret" not in text
    assert text == "launching pid 42: HF_TOKEN='***' A='x y' vllm serve 'my model' '--hf-token=***'"


@pytest.mark.parametrize("name", ENGINE_FILES)
def test_every_real_engine_option_is_judged_right(name):
    """Of the real engines' options, only the secret-bearing ones are hidden, and no flag that
    takes no value swallows the argument after it."""
    for option in json.loads((REFERENCE / name).read_text())["options"]:
        for spelling in option.get("options") or ():
            if not spelling.startswith("-"):
                continue
            assert secret_name(spelling) == (spelling in ENGINE_SECRETS), spelling
            if option.get("nargs") == 0:
                assert redact_argv([spelling, "next"]) == (spelling, "next"), spelling


def test_a_launch_leaves_its_secrets_nowhere(profile_file, tmp_path, monkeypatch):
    """End to end on the simulated box: the secret is in no output (the engine's own log lines
    shown included), journal row, registry file or results export, and what cockpit writes is
    private (0600 files in 0700 folders). The log file is the engine's own output, as it wrote
    it (a real vLLM prints its non-default args, the token among them): it is kept whole, 0600."""
    import stat
    import subprocess
    import sys

    monkeypatch.setenv("COCKPIT_SIM_TIME_SCALE", "50")
    journal = tmp_path / "data" / "journal.sqlite"  # a folder cockpit creates itself
    monkeypatch.setenv("COCKPIT_JOURNAL", str(journal))
    state = tmp_path / "state"
    monkeypatch.setenv("COCKPIT_STATE_DIR", str(state))

    def cockpit(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cockpit.faces.cli", *args], capture_output=True, text=True, timeout=120
        )
        return done.stdout + done.stderr

    def files() -> dict[Path, bytes]:
        found = [p for folder in (journal.parent, state) for p in folder.rglob("*") if p.is_file()]
        return {p: p.read_bytes() for p in found}

    args = ["--max-model-len", "32768", "--trust-remote-code", "--hf-token=s3cret"]
    env = {"HF_TOKEN": "s3cret", "DATABASE_URL": "postgres://u:s3cret@h/db"}
    profile, _ = profile_file("minimax-m2.5", args=args, env=env)
    outputs = {"run": cockpit("run", "try tp4", "--sim", "--keep", "--profile", profile)}
    try:
        assert "ready" in outputs["run"], outputs["run"]
        written = files()  # the registry file exists while the server runs
        outputs["servers"] = cockpit("servers")
        for fmt in ("json", "markdown", "csv", "table"):
            outputs[f"results {fmt}"] = cockpit("results", "--profile", "minimax-m2.5", "--format", fmt)
    finally:
        outputs["stop"] = cockpit("stop", "all")
    written |= files()
    assert "--hf-token=***" in outputs["run"]
    assert "'hf_token': '***'" in outputs["run"]  # the engine printed it; the screen shows it blanked
    assert any(p.parent.name == "servers" and p.suffix == ".json" for p in written), sorted(written)
    assert any(p.parent.name == "logs" for p in written), sorted(written)
    leaks = [name for name, text in outputs.items() if "s3cret" in text]
    leaks += [str(p) for p, data in written.items() if b"s3cret" in data and p.parent.name != "logs"]
    assert not leaks, leaks

    def mode(path: Path) -> str:
        return f"{path} {stat.filemode(path.stat().st_mode)}"

    present = [p for p in written if p.exists()]
    loose = [mode(p) for p in present if stat.S_IMODE(p.stat().st_mode) != 0o600]
    loose += [
        mode(d)
        for d in {journal.parent, *(p.parent for p in present)}
        if stat.S_IMODE(d.stat().st_mode) != 0o700
    ]
    assert not loose, loose


def test_bearer_tokens_and_token_ids():
    assert redact_text("Authorization: Bearer sk-abc123 sent") == "Authorization: Bearer *** sent"
    assert redact_text("eos_token_id=2, pad_token_id=0") == "eos_token_id=2, pad_token_id=0"
    assert not secret_name("GIT_AUTHOR_NAME") and secret_name("--authorization")


def test_a_launch_scrubs_the_profile_env_and_inherited_credentials_only():
    from cockpit.core.secrets import Scrubber, launch_secrets_env

    inherited = {
        "HF_TOKEN": "hf-s3cret",
        "MY_API_KEY": "k-s3cret",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "GIT_AUTHOR_NAME": "model",
    }
    env = launch_secrets_env({"DATABASE_URL": "postgres://u:pw-s3cret@h/db"}, inherited)
    scrub = Scrubber.from_launch(["vllm", "serve", "m"], env).text
    line = "loading model from /tmp/agent with hf-s3cret k-s3cret pw-s3cret"
    assert scrub(line) == "loading model from /tmp/agent with *** *** ***"
