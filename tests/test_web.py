"""`cockpit web`: textual-serve on 127.0.0.1 serving the same app."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
from helpers import free_port, listening_socket

SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # the logo's namespace: a name, never fetched


async def _first_frames(port: int, seconds: float = 20) -> bytes:
    """What the app sends a browser over the websocket in its first seconds (drawn screen bytes)."""
    import aiohttp

    received = b""
    url = f"http://127.0.0.1:{port}/ws?width=120&height=40"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and b"cockpit" not in received:
            try:
                message = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
            if message.type == aiohttp.WSMsgType.BINARY:
                received += message.data
            elif message.type == aiohttp.WSMsgType.TEXT:
                received += message.data.encode()
            else:
                break
    return received


def start_web(port: int) -> tuple[subprocess.Popen, httpx.Response | None]:
    """`cockpit web --sim` as a real process, and its index page once it answers."""
    server = subprocess.Popen(
        [sys.executable, "-m", "cockpit.faces.cli", "web", "--port", str(port), "--sim"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            return server, httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
        except httpx.HTTPError:
            time.sleep(0.1)
    return server, None


def stop_web(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(timeout=10)
    if server.stdout is not None:
        server.stdout.close()


def test_web_serves_the_app_on_localhost():
    port = free_port()
    server, page = start_web(port)
    try:
        assert page is not None and page.status_code == 200
        assert "cockpit" in page.text
        assert b"cockpit" in asyncio.run(_first_frames(port))  # the app itself draws into the socket
    finally:
        stop_web(server)


def test_web_page_asks_no_other_host():
    """The box may be offline: the page's styles, script and font all come from cockpit itself
    (textual-serve's own page asks a font host). tests/test_web_browser.py watches a real browser."""
    port = free_port()
    server, page = start_web(port)
    try:
        assert page is not None and page.status_code == 200
        addresses = re.findall(r"[a-z]+://[^\"'\s)]+", page.text)
        own = f"127.0.0.1:{port}"
        assert [url for url in addresses if urlsplit(url).netloc != own] == [SVG_NAMESPACE]
        assert f"http://{own}/static/fonts/RobotoMono-VariableFont_wght.ttf" in addresses
        font = httpx.get(f"http://{own}/static/fonts/RobotoMono-VariableFont_wght.ttf", timeout=10)
        assert font.status_code == 200 and len(font.content) > 10_000
    finally:
        stop_web(server)


async def _upgrade_status(port: int, origin: str) -> int:
    """The HTTP status of a websocket upgrade sent with this Origin: 101 when it became one."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Origin": origin})
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status
        await ws.close()
        return 101


def test_web_refuses_websockets_from_other_origins():
    """Any page a browser opens may try ws://127.0.0.1:PORT; only cockpit's own page may drive it."""
    port = free_port()
    server, page = start_web(port)
    try:
        assert page is not None and page.status_code == 200
        for foreign in (
            "http://evil.example",
            f"http://evil.example:{port}",
            f"http://127.0.0.1:{port + 1}",
            "null",
        ):
            assert asyncio.run(_upgrade_status(port, foreign)) == 403, foreign
        for own in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            assert asyncio.run(_upgrade_status(port, own)) == 101, own
    finally:
        stop_web(server)


def test_origin_rules():
    from cockpit.faces.webserve import origin_allowed

    assert origin_allowed(None, "127.0.0.1", 8765)  # not a browser: browsers always send one
    assert origin_allowed("https://localhost:8765", "127.0.0.1", 8765)
    assert origin_allowed("http://[::1]:8765", "127.0.0.1", 8765)
    assert not origin_allowed("http://localhost:8766", "127.0.0.1", 8765)
    assert not origin_allowed("file://", "127.0.0.1", 8765)
    assert not origin_allowed("http://localhost:notaport", "127.0.0.1", 8765)
    assert origin_allowed("http://gpu-box:80", "gpu-box", 80) and origin_allowed(
        "http://GPU-box", "gpu-box", 80
    )
    assert not origin_allowed("http://localhost:8765", "gpu-box", 8765)
    # A wildcard bind: only the address the request came in on, and never a DNS name (rebinding).
    assert origin_allowed("http://10.0.0.5:8765", "0.0.0.0", 8765, host_header="10.0.0.5:8765")
    assert not origin_allowed("http://6.6.6.6:8765", "0.0.0.0", 8765, host_header="10.0.0.5:8765")
    assert not origin_allowed(
        "http://rebound.example:8765", "0.0.0.0", 8765, host_header="rebound.example:8765"
    )


def test_web_refuses_a_busy_port(capsys):

    from cockpit.faces.cli import main

    with listening_socket() as taken:
        port = taken.getsockname()[1]
        assert main(["web", "--port", str(port)]) == 2
    assert f"port {port} is already in use" in capsys.readouterr().err


def test_ctrl_c_with_a_tab_open_ends_the_web_server_at_once():
    """SIGINT to `cockpit web` alone (a `kill -INT`, or a terminal that signals only it) while a
    tab is connected: its websocket handler is ended on shutdown, not waited on. Without that,
    aiohttp waited out its shutdown timeout (~20 s) before exiting."""
    import signal

    import aiohttp

    port = free_port()
    server, page = start_web(port)

    async def tab_open_through_ctrl_c() -> int | None:
        url = f"http://127.0.0.1:{port}/ws?width=120&height=40"
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            received, deadline = b"", time.monotonic() + 20
            while b"cockpit" not in received and time.monotonic() < deadline:  # the tab's cockpit draws
                message = await ws.receive(timeout=20)
                if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    break
                received += message.data if isinstance(message.data, bytes) else message.data.encode()
            assert b"cockpit" in received
            server.send_signal(signal.SIGINT)

            async def read_to_the_end() -> None:  # the browser's side: read until the server closes
                async for _ in ws:
                    pass

            await asyncio.wait_for(read_to_the_end(), 12)  # before: ~20 s
        return await asyncio.to_thread(server.wait, 12)

    try:
        assert page is not None
        assert asyncio.run(tab_open_through_ctrl_c()) is not None
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
