"""Secrets typed as knobs (`try tp4 --api-key V`, `--hf-token=V`) as faults: every place cockpit
shows or stores a layout says *** where the value was, nothing else of the layout is lost, and
the server still launches, answers the probe with the key and serves the bench.

Each table row: the fault (where the secret went), the text expected there, and what must still
be there. One launch on the simulated box is shared by the rows that read its traces.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import free_port
from tuipilot import make_app, run, screen_text, submit, until

from cockpit.core.layout import parse_layout
from cockpit.core.secrets import MASK, Scrubber, redact_line, redact_text
from cockpit.faces.tui.history import PromptHistory
from cockpit.store.journal import Journal
from cockpit.store.profile import find_profile

API_KEY = "sk-abc123456789"
HF_TOKEN = "hf_abcdef123456"
SECRETS = (API_KEY, HF_TOKEN)
# both forms of both secrets, and a knob that is no secret: it must still be there
TYPED = f"tp4 --api-key {API_KEY} --hf-token={HF_TOKEN} --max-num-seqs 64"
SHOWN = "tp4 --api-key *** --hf-token=*** --max-num-seqs 64"
TYPED_EQ = f"tp4 --api-key={API_KEY} --hf-token {HF_TOKEN} --max-num-seqs 64"
SHOWN_EQ = "tp4 --api-key=*** --hf-token *** --max-num-seqs 64"
BENCH = "c=1 n=2 in=32 out=8"


def _profile(folder: Path, name: str) -> Path:
    """The demo profile on a free port, under its own name (the results are per profile)."""
    data = yaml.safe_load(find_profile("demo").read_text())
    data.setdefault("server", {})["port"] = free_port()
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env(root: Path) -> dict[str, str]:
    """A private simulated box, state folder and journal for the CLI runs of this module."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COCKPIT_", "XDG_"))}
    return {
        **env,
        "COCKPIT_STATE_DIR": str(root / "state"),
        "COCKPIT_JOURNAL": str(root / "journal.sqlite"),
        "COCKPIT_SIM_STATE": str(root / "simbox"),
        "COCKPIT_CALIBRATION": str(root / "calibration.json"),
        "COCKPIT_SIM_TIME_SCALE": "50",
        "XDG_STATE_HOME": str(root / "xdg-state"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "HF_HOME": str(root / "hf"),
        "PYTHONUNBUFFERED": "1",
    }


def _cockpit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.faces.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, str]:
    """Launch `TYPED` kept running with a short bench, read every trace it leaves (outputs,
    state files, file names, journal bytes, the re-attach), then stop it."""
    root = tmp_path_factory.mktemp("secrets")
    env = _env(root)
    profile = str(_profile(root, "keyed"))
    out: dict[str, str] = {}
    ran = _cockpit(env, "--sim", "--profile", profile, "run", f"try {TYPED}", "--keep", "--bench", BENCH)
    out["run"] = ran.stdout + ran.stderr
    try:
        out["servers"] = _cockpit(env, "servers").stdout
        pid = next(
            line.split()[1].rstrip(":") for line in out["servers"].splitlines() if line.startswith("pid")
        )
        out["attach"] = _cockpit(env, "--sim", "--profile", profile, "attach", pid).stdout
        for fmt in ("table", "markdown", "csv", "json"):
            out[f"results {fmt}"] = _cockpit(env, "results", "--profile", profile, "--format", fmt).stdout
        plan = _cockpit(env, "plan", "--profile", profile, "--layout", TYPED, "--layout", TYPED_EQ, "--json")
        out["plan --json"] = plan.stdout + plan.stderr
        files = [p for p in root.rglob("*") if p.is_file() and p.suffix != ".yaml"]
        out["file names"] = "\n".join(str(p) for p in files)
        out["state files"] = "\n".join(
            p.read_bytes().decode(errors="replace") for p in files if "sqlite" not in p.name
        )
        out["journal bytes"] = (root / "journal.sqlite").read_bytes().decode(errors="replace")
        [exp] = _experiments(env)
        out["journal layout"] = exp.layout
        out["journal argv"] = " ".join(exp.argv)
        out["log_path"] = exp.log_path or ""
    finally:
        out["stop"] = _cockpit(env, "stop", "all").stdout
    return out


# (id, the trace where the secret went, the text expected there, what must still be there)
SITES = [
    ("planned line", "run", f"planned   {SHOWN}: fits", "4 of 8 GPUs"),
    ("launching argv", "run", "--api-key '***' '--hf-token=***' --max-num-seqs 64", "vllm serve"),
    ("probe with the knob's key: ready", "run", "ready     http://127.0.0.1:", "phase     serving"),
    ("bench with the knob's key: tokens", "run", "level     C=1", "errors 0"),
    ("journal layout column", "journal layout", SHOWN, "--max-num-seqs 64"),
    ("journal argv", "journal argv", "--api-key *** --hf-token=*** --max-num-seqs 64", "vllm serve"),
    ("journal file bytes", "journal bytes", SHOWN, "--max-num-seqs"),
    ("registry entry (cockpit servers)", "servers", "pid ", SHOWN),
    ("log file name", "file names", "exp1-tp4_--api-key_--hf-token=_--max-num-seqs_64.log", "logs"),
    ("log_path", "log_path", "tp4_--api-key_--hf-token=_--max-num-seqs_64.log", "/logs/"),
    ("state folder files", "state files", SHOWN, "--max-num-seqs"),
    ("re-attach probes with the key", "attach", "is ready and still runs", "attached"),
    ("results table", "results table", SHOWN, "C=1"),
    ("results markdown", "results markdown", SHOWN, "C=1"),
    ("results csv", "results csv", SHOWN, "tok"),
    ("results json", "results json", SHOWN, "tok"),
    ("plan --json, --x V form", "plan --json", f'"layout": "{SHOWN}"', '"--max-num-seqs"'),
    ("plan --json, --x=V form", "plan --json", f'"layout": "{SHOWN_EQ}"', '"64"'),
    ("stop all", "stop", "stopped   pid ", SHOWN),
]


@pytest.mark.parametrize(("site", "trace", "expected", "kept"), SITES, ids=[row[0] for row in SITES])
def test_a_knob_secret_is_blanked_wherever_the_layout_goes(traces, site, trace, expected, kept):
    text = traces[trace]
    assert not [s for s in SECRETS if s in text], f"{site}: a secret in clear:\n{text}"
    assert expected in text, f"{site}: {expected!r} not in:\n{text}"
    assert kept in text, f"{site}: {kept!r} lost from:\n{text}"


# -- the other form, launched: the key given as `--api-key=V` is honoured too ----------------------


def test_the_eq_form_launches_ready_and_benches_with_its_key(tmp_path):
    env = _env(tmp_path)
    profile = str(_profile(tmp_path, "keyed_eq"))
    ran = _cockpit(env, "--sim", "--profile", profile, "run", f"try {TYPED_EQ}", "--bench", BENCH)
    text = ran.stdout + ran.stderr
    assert ran.returncode == 0, text
    assert not [s for s in SECRETS if s in text], text
    assert f"planned   {SHOWN_EQ}: fits" in text
    assert "ready     http://127.0.0.1:" in text and "level     C=1" in text and "errors 0" in text
    assert "401 Unauthorized" not in text  # the probe and the bench sent the key
    assert not [p for p in tmp_path.rglob("*") if any(s in p.name for s in SECRETS)]


# -- text read back must not launch with *** as the key ---------------------------------------------

BLANKED = [
    (
        "--api-key ***",
        "try tp4 --api-key *** --max-num-seqs 64",
        "the value of --api-key was not stored; type it again",
    ),
    (
        "--hf-token=***",
        "try tp4 --hf-token=*** --max-num-seqs 64",
        "the value of --hf-token was not stored; type it again",
    ),
    (
        "several keys",
        "try tp4 --api-key *** *** --max-num-seqs 64",
        "the value of --api-key was not stored; type it again",
    ),
]


@pytest.mark.parametrize(("case", "typed", "line"), BLANKED, ids=[row[0] for row in BLANKED])
def test_a_layout_read_back_with_a_blanked_secret_is_refused_in_one_line(tmp_path, case, typed, line):
    env = _env(tmp_path)
    profile = str(_profile(tmp_path, "blanked"))
    ran = _cockpit(env, "--sim", "--profile", profile, "run", typed)
    assert ran.returncode != 0
    assert ran.stderr.strip().splitlines() == [f"cockpit: {line}"], ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert not (tmp_path / "journal.sqlite").exists() or not _experiments(env)  # nothing launched
    # nothing lost: the same text is still read back to plan and show it
    stored = parse_layout(typed.removeprefix("try "), stored=True)
    assert stored.tp == 4 and "--max-num-seqs" in stored.knobs and str(stored) == typed.removeprefix("try ")


def _experiments(env: dict[str, str]) -> list:
    saved = dict(os.environ)
    os.environ["COCKPIT_JOURNAL"] = env["COCKPIT_JOURNAL"]
    try:
        with Journal() as journal:
            return journal.experiments()
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- redaction by value: the engine's own words -------------------------------------------------------

# What an engine prints of its arguments (older vLLM: a list for --api-key), and what is shown.
ENGINE_LINES = [
    (
        "vLLM non-default args, a list",
        f"non-default args: {{'api_key': ['{API_KEY}'], 'max_num_seqs': 64}}",
        "non-default args: {'api_key': ['***'], 'max_num_seqs': 64}",
    ),
    (
        "Namespace, two keys",
        f"Namespace(api_key=['{API_KEY}', 'sk-second-key'], port=8000)",
        "Namespace(api_key=['***', '***'], port=8000)",
    ),
    ("JSON list", f'{{"hf_token": ["{HF_TOKEN}"], "tp": 4}}', '{"hf_token": ["***"], "tp": 4}'),
    ("unquoted list", f"api_key=[{API_KEY}] ok", "api_key=[***] ok"),
    ("a list of numbers stays", "cuda_graph_sizes: [1, 2, 4]", "cuda_graph_sizes: [1, 2, 4]"),
    ("an empty key list stays", "api_key: [] None", "api_key: [] None"),
]


@pytest.mark.parametrize(("case", "line", "shown"), ENGINE_LINES, ids=[row[0] for row in ENGINE_LINES])
def test_secret_lists_are_blanked_by_name(case, line, shown):
    assert redact_text(line) == shown


def test_the_scrubber_knows_the_knobs_and_blanks_them_by_value():
    """Built from the whole argv the engine gets: a key typed as a knob is blanked even in words
    that name nothing (an error quoting it)."""
    argv = ["vllm", "serve", "m", "--max-model-len", "8192", *parse_layout(TYPED).knobs]
    scrub = Scrubber.from_launch(argv, {}).text
    assert scrub(f"ERROR cannot use {API_KEY} with {HF_TOKEN}") == "ERROR cannot use *** with ***"
    assert scrub("max_num_seqs=64 max_model_len=8192") == "max_num_seqs=64 max_model_len=8192"


OLD_VLLM = """\
import sys
argv = sys.argv[1:]
keys = argv[argv.index("--api-key") + 1:][:1]
print(f"INFO non-default args: {{'api_key': {keys!r}, 'max_num_seqs': 64}}", flush=True)
print(f"ERROR cannot use {keys[0]} here", flush=True)
sys.exit(1)
"""


def test_an_engine_printing_the_knobs_key_is_blanked_on_screen_in_the_journal_and_diagnosis(
    profile_file, tmp_path
):
    """An engine that prints its arguments whole (older vLLM) and fails quoting the key: a real
    process launched as the profile's launcher, as on a real box."""
    from cockpit.core.hardware import parse_box
    from cockpit.runner.events import Failed, LogLine
    from cockpit.runner.experiment import Launcher
    from cockpit.runner.supervisor import Supervisor
    from cockpit.sim.box import SimBox
    from cockpit.store.profile import load_profile
    from cockpit.store.profile_setup import setup_for
    from cockpit.telemetry.monitor import Monitor
    from cockpit.telemetry.simbox import SimBoxSource

    script = tmp_path / "old_vllm.py"
    script.write_text(OLD_VLLM)
    path, _ = profile_file("demo", command=[sys.executable, str(script)])
    profile = load_profile(path)
    source = SimBoxSource(SimBox(parse_box("8xrtx-pro-6000"), root=tmp_path / "simbox").create())
    with Journal() as journal:
        launcher = Launcher(
            profile, setup_for(profile), journal, Supervisor(source=source), Monitor(source), sim=False
        )
        events = list(launcher.run(parse_layout(TYPED)))
        shown = "\n".join(map(str, events))
        [exp] = journal.experiments()
    lines = [e.text for e in events if isinstance(e, LogLine)]
    assert "INFO non-default args: {'api_key': ['***'], 'max_num_seqs': 64}" in lines, shown
    assert "ERROR cannot use *** here" in lines, shown
    assert isinstance(events[-1], Failed) and "ERROR cannot use *** here" in events[-1].diagnosis.cause
    journaled = f"{exp.layout} {exp.diagnosis} {exp.next_step} {exp.argv}"
    assert not [s for s in SECRETS if s in shown + journaled], shown + journaled
    assert exp.layout == SHOWN and exp.outcome == "failed"  # nothing lost: the row and its end


# -- the prompt history -----------------------------------------------------------------------------

HISTORY = [
    (
        "--api-key V",
        f"try tp4 --api-key {API_KEY} --max-num-seqs 64",
        "try tp4 --api-key *** --max-num-seqs 64",
    ),
    ("--hf-token=V", f"try tp4 --hf-token={HF_TOKEN}", "try tp4 --hf-token=***"),
    ("--api-key=V", f"try tp4 --api-key={API_KEY}", "try tp4 --api-key=***"),
    (
        "--hf-token V",
        f"plan tp4 --hf-token {HF_TOKEN} --max-num-seqs 64",
        "plan tp4 --hf-token *** --max-num-seqs 64",
    ),
    ("sweep", f"sweep tp4 --api-key {API_KEY}, tp8 c=1", "sweep tp4 --api-key ***, tp8 c=1"),
    ("no secret: as typed", "try tp8 --hf-overrides '{\"a\": 1}'", "try tp8 --hf-overrides '{\"a\": 1}'"),
    ("unclosed quote", f"try tp4 --api-key {API_KEY} 'x", "try tp4 --api-key *** ***"),
]


@pytest.mark.parametrize(("case", "typed", "stored"), HISTORY, ids=[row[0] for row in HISTORY])
def test_the_history_stores_a_typed_line_blanked_and_private(tmp_path, case, typed, stored):
    path = tmp_path / "state" / "history"
    old = os.umask(0)
    try:
        history = PromptHistory(path)
        history.add("bench c=1")
        history.add(typed)
    finally:
        os.umask(old)
    assert path.read_text() == f"bench c=1\n{stored}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = PromptHistory(path)
    assert again.entries == ["bench c=1", stored] and not again.problem  # nothing lost


def test_a_history_an_older_cockpit_stored_in_clear_is_blanked_on_reading(tmp_path):
    path = tmp_path / "history"
    path.write_text(f"bench c=1\ntry tp4 --api-key {API_KEY}\n")
    path.chmod(0o644)
    history = PromptHistory(path)
    assert history.entries == ["bench c=1", "try tp4 --api-key ***"]
    assert API_KEY not in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600


def _huge(path: Path) -> None:
    with open(path, "w") as f:
        for i in range(200_000):  # ~3.4 MB: only its last MiB is read
            f.write(f"try tp{i % 8 + 1} --max-num-seqs {i}\n")


def _binary(path: Path) -> None:
    path.write_bytes(b"try tp4\n\0\0\xff\xfe" * 1000)


def _fifo(path: Path) -> None:
    os.mkfifo(path)  # no writer: a plain read would block forever


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # endless: a plain read would never end


def _folder(path: Path) -> None:
    path.mkdir()


def _long_line(path: Path) -> None:
    path.write_text("try tp4\n" + "x" * 100_000 + "\nbench c=1\n")


# (id, the fault, the expected problem line (or ""), the entries still read back)
READ_BACK = [
    (
        "huge file: its last lines",
        _huge,
        "",
        lambda e: len(e) == 500 and e[-1] == "try tp8 --max-num-seqs 199999",
    ),
    ("binary", _binary, "skipped: it is not text", lambda e: e == []),
    ("fifo", _fifo, "skipped: it is a FIFO, not a file", lambda e: e == []),
    ("/dev/zero", _device, "skipped: it is a device, not a file", lambda e: e == []),
    ("a folder", _folder, "skipped: it is a folder, not a file", lambda e: e == []),
    ("a 100 kB line", _long_line, "", lambda e: e == ["try tp4", "bench c=1"]),
]


@pytest.mark.parametrize(
    ("case", "fault", "problem", "entries"), READ_BACK, ids=[row[0] for row in READ_BACK]
)
def test_the_history_is_read_back_with_bounds(tmp_path, case, fault, problem, entries):
    path = tmp_path / "history"
    fault(path)
    signal.alarm(10)  # a read that blocks fails the test instead of hanging the suite
    try:
        history = PromptHistory(path)
    finally:
        signal.alarm(0)
    assert entries(history.entries), history.entries[-3:]
    assert (problem in history.problem) if problem else not history.problem, history.problem
    if problem:
        assert "\n" not in history.problem and str(path) in history.problem
    history.add("try tp2")  # the prompt still works
    assert history.entries[-1] == "try tp2"


def test_redact_line_keeps_a_line_without_secrets_as_typed():
    for line in ("try tp8 ep --max-num-seqs 512", "bench c=1,32 in=512", "sweep tp4, tp8 c=1"):
        assert redact_line(line) == line
    assert MASK in redact_line(f"try tp4 HF_TOKEN={HF_TOKEN}")


# -- the screen: header, picker, failure banner, history --------------------------------------------


@pytest.fixture
def screen_env(tmp_path, monkeypatch):
    from tuipilot import fast_sim_env

    fast_sim_env(tmp_path, monkeypatch)
    yield
    from cockpit.faces.headless import stop_servers

    stop_servers("all", out=lambda _: None)


def test_the_screen_shows_a_knobs_secret_nowhere(screen_env, profile_file, tmp_path):
    """Header, picker (its row and its argv), log and failure banner; the server launched with
    the knob's key is ready; the history file holds the line blanked."""
    path, _ = profile_file("demo")

    async def scenario():
        app = make_app(path)
        async with app.run_test(size=(160, 50)) as pilot:
            await submit(pilot, f"try {TYPED}")
            await until(pilot, lambda: app.server.state in ("ready", "failed"), what="ready")
            assert app.server.state == "ready", app.main.log_pane.banner_text
            seen = {"ready screen": screen_text(app)}
            seen["header"] = seen["ready screen"].splitlines()[0]
            seen["picker rows"] = " | ".join(app.main.picker.verdicts)
            assert SHOWN in app.main.picker.verdicts  # nothing lost: the knobs' own row
            await submit(pilot, f"plan {TYPED}")
            await pilot.pause(0.2)
            seen["picker detail"] = screen_text(app)
            seen["log"] = "\n".join(str(line) for line in app.main.log_pane.log_view.lines)
            await submit(pilot, f"try tp2 --api-key={API_KEY} --max-num-seqs 64")  # the planner says it fails
            await pilot.press("y")
            await until(pilot, lambda: app.server.state == "failed", what="tp2 failed")
            seen["failure banner"] = app.main.log_pane.banner_text
            seen["failed screen"] = screen_text(app)
            await submit(pilot, "try tp4 --api-key *** --max-num-seqs 64")  # read back from the history
            seen["refusal"] = str(app.main.status.content)
        seen["history file"] = (tmp_path / "state" / "history").read_text()
        leaks = {name: text for name, text in seen.items() if any(s in text for s in SECRETS)}
        assert not leaks, leaks
        assert f"{SHOWN} ready" in seen["header"]  # nothing lost: the knobs are all named
        assert "--api-key '***'" in seen["picker detail"]  # the argv in the picker's detail
        assert "'--hf-token=***' --max-num-seqs 64" in seen["log"]
        assert "tp2 --api-key=*** --max-num-seqs 64: CUDA OOM" in seen["failure banner"]
        assert "the value of --api-key was not stored; type it again" in seen["refusal"]
        assert f"try {SHOWN}" in seen["history file"].splitlines()

    run(scenario())


def test_a_history_that_is_not_text_is_said_in_one_line_and_the_screen_opens(
    screen_env, profile_file, tmp_path
):
    path, _ = profile_file("demo")
    history = tmp_path / "state" / "history"
    history.parent.mkdir(parents=True)
    _binary(history)

    async def scenario():
        app = make_app(path)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.2)
            assert (
                "prompt history" in app.history.problem and "skipped: it is not text" in app.history.problem
            )
            await submit(pilot, "plan")  # the prompt works
            assert app.server.state == "none"

    run(scenario())


# -- the key the probe and the bench send ------------------------------------------------------------

# (id, engine, the whole argv (profile's args, then the knobs), the key clients must send)
KEYS = [
    (
        "a knob's key",
        "vllm",
        ["--max-model-len", "8192", "--api-key", API_KEY, "--max-num-seqs", "64"],
        API_KEY,
    ),
    ("a knob's key, = form", "vllm", ["--max-model-len", "8192", f"--api-key={API_KEY}"], API_KEY),
    ("the knob overrides the profile's", "vllm", ["--api-key", "profile-key", "--api-key", API_KEY], API_KEY),
    ("= form overrides too", "sglang", ["--api-key=profile-key", "--api-key", API_KEY, "x"], API_KEY),
    ("the profile's key alone", "vllm", ["--api-key", "profile-key", "--max-num-seqs", "64"], "profile-key"),
]


@pytest.mark.parametrize(("case", "engine", "argv", "key"), KEYS, ids=[row[0] for row in KEYS])
def test_the_key_sent_is_the_one_the_engine_reads_last(case, engine, argv, key):
    from cockpit.engines import api_keys

    assert api_keys(engine, argv, {})[0] == key
