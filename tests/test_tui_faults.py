"""The screen beside damaged records: a registry entry that cannot be read is said on the status
line (the screen owns the terminal, so a warning on stderr would be lost) and set aside; the
screen opens and launches all the same."""

from __future__ import annotations

import os

from tuipilot import fast_sim, make_app, minimax, run, status_text, until  # noqa: F401  (fixtures)


def test_a_damaged_server_entry_is_said_on_the_status_line_and_set_aside(minimax):
    servers = os.path.join(os.environ["COCKPIT_STATE_DIR"], "servers")
    os.makedirs(servers, mode=0o700)
    damaged = os.path.join(servers, "4242.json")
    with open(damaged, "w") as f:
        f.write('{"pid": 4242, "pgid": 0, "owner": "abc", "started": "x"}')

    async def go():
        app = make_app(minimax)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: "4242.json" in status_text(app), what="the damaged entry said")
            said = status_text(app)
            assert "\n" not in said.strip()
            assert os.path.exists(damaged + ".bad") and not os.path.exists(damaged)
            assert app.session.problems == []  # each said once

    run(go())
