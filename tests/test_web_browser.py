"""`cockpit web` in a real browser: Debian's Chromium, driven by Playwright, loads the page, types a
command without clicking first, and reads the terminal's screen; no request leaves 127.0.0.1.

Needs /usr/bin/chromium (`apt-get install chromium`; COCKPIT_TEST_CHROMIUM names another) and
playwright (the `test` extra); it never downloads a browser of its own. Without them it skips,
unless COCKPIT_BROWSER_REQUIRED=1 (CI) makes that a failure.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import free_port
from test_web import start_web, stop_web

CHROMIUM = Path(os.environ.get("COCKPIT_TEST_CHROMIUM", "/usr/bin/chromium"))
REQUIRED = os.environ.get("COCKPIT_BROWSER_REQUIRED") == "1"

# textual.js keeps its xterm Terminal to itself, but hands it to each addon's activate(), which
# stores it as `this._terminal`: a setter on Object.prototype sees that first assignment (and
# makes it an ordinary property), so the test reads the page's own terminal buffer.
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "_terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "_terminal", { value, writable: true, configurable: true, enumerable: true });
    if (!window.pageTerminal && value && value.buffer && value.buffer.active) window.pageTerminal = value;
  },
});
"""
SCREEN_TEXT = """() => {
  const terminal = window.pageTerminal;
  if (!terminal) return null;
  const buffer = terminal.buffer.active;
  const rows = [];
  for (let y = 0; y < terminal.rows; y++) rows.push(buffer.getLine(buffer.viewportY + y).translateToString(true));
  return rows.join("\\n");
}"""
FOCUSED = "() => document.activeElement ? document.activeElement.tagName + '.' + document.activeElement.className : ''"


def _browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return f"Debian's Chromium is not at {CHROMIUM}: `apt-get install chromium`"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: `pip install -e '.[test]'`"
    return None


MISSING = _browser_missing()
pytestmark = pytest.mark.skipif(MISSING is not None and not REQUIRED, reason=MISSING or "")


@pytest.fixture
def web_port():
    """`cockpit web --sim` as a real process on a free port."""
    port = free_port()
    server, index = start_web(port)
    try:
        assert index is not None and index.status_code == 200, "cockpit web did not answer"
        yield port
    finally:
        stop_web(server)


@pytest.fixture
def page(web_port):
    """A page of Debian's Chromium, headless, through Playwright's API; closed before the server
    stops (an open tab holds its shutdown up)."""
    if MISSING:  # only with COCKPIT_BROWSER_REQUIRED=1: otherwise the module skips
        pytest.fail(MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 900})
        finally:
            browser.close()


def _screen_until(page, text: str, timeout: float = 60) -> str:
    """The terminal's screen once it shows `text` (the app starts in a process of its own)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = page.evaluate(SCREEN_TEXT)
        if shown and text in shown:
            return shown
        if time.monotonic() > deadline:
            if shown is None:
                raise AssertionError("the page's xterm terminal was never caught: see CATCH_TERMINAL")
            raise AssertionError(
                f"no {text!r} on the page's screen (focus on {page.evaluate(FOCUSED)}):\n{shown}"
            )
        time.sleep(0.1)


def _keep_on_this_box(page, requested: list[str]) -> None:
    """Note every URL the page asks for; let through only those to 127.0.0.1 (nothing leaves)."""

    def route(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            route.abort()

    page.on("request", lambda request: requested.append(request.url))
    page.on("websocket", lambda socket: requested.append(socket.url))
    page.route("**/*", route)


def test_a_browser_types_a_command_without_clicking_and_asks_no_other_host(page, web_port):
    page.add_init_script(CATCH_TERMINAL)
    requested: list[str] = []
    _keep_on_this_box(page, requested)

    page.goto(f"http://127.0.0.1:{web_port}/")
    _screen_until(page, "nothing runs on real GPUs")  # the app is up, its prompt has the keys
    page.keyboard.type("help")  # no click first: the page hands the terminal the keyboard
    page.keyboard.press("Enter")
    _screen_until(page, "try <layout> [--server-flag value ...]")  # the help, open

    outside = sorted({url for url in requested if urlsplit(url).hostname != "127.0.0.1"})
    assert outside == [], f"the page asked other hosts: {outside}"
    assert any(url.startswith("ws://127.0.0.1") for url in requested), requested
    assert page.evaluate(
        "() => [...document.fonts].some((f) => f.family.includes('Roboto Mono') && f.status === 'loaded')"
    ), "the terminal's font did not load from cockpit's own static folder"
