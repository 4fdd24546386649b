"""`cockpit tune` end to end on a real vLLM (CPU build): two candidates (one layout, two values
of a knob), launched, measured, journaled, and a winner with its command."""

from __future__ import annotations

from realengine import READY_S, cockpit, engines_of, experiments

from cockpit.store.journal import Journal


def test_a_tune_of_two_candidates_runs_end_to_end_on_the_real_engine(cpu_profile, tmp_path):
    profile, _ = cpu_profile()
    words = ["in=32", "out=8", "c=1,4", "itl<2000ms", "n=2", "--max-num-seqs", "4,8"]
    done = cockpit("tune", "--profile", profile, *words, timeout=2 * READY_S + 300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    with Journal() as journal:
        [record] = journal.tunes()
    result = record.result
    assert record.state == "done" and result is not None, done.stdout[-3000:]
    assert result["fitting"] == 2
    assert 1 <= result["launches"] <= 2
    # Every launch the tune made is a real experiment that got ready and was measured.
    launched = experiments()
    assert len(launched) == result["launches"]
    assert all(e.engine_version == "0.32.0" and not e.simulated for e in launched)
    assert {e.layout for e in launched} <= {"tp1 --max-num-seqs 4", "tp1 --max-num-seqs 8"}
    assert f"winner    {result['winner']}:" in done.stdout
    command = done.stdout.split("command   ", 1)[1].splitlines()[0]
    assert "vllm.entrypoints.openai.api_server" in command and "--max-num-seqs" in command
    assert not engines_of(tmp_path)
