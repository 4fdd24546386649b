"""`cockpit web`: textual-serve on 127.0.0.1 serving the same app."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx

from simproc import free_port


async def _first_frames(port: int, seconds: float = 20) -> bytes:
    """What the app sends a browser over the websocket in its first seconds (drawn screen bytes)."""
    import aiohttp

    received = b""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"http://127.0.0.1:{port}/ws?width=120&height=40") as ws:
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


def test_web_serves_the_app_on_localhost():
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", "web", "--port", str(port), "--sim"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        page = None
        while time.monotonic() < deadline:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert page is not None and page.status_code == 200
        assert "cockpit" in page.text
        assert b"cockpit" in asyncio.run(_first_frames(port))  # the app itself draws into the socket
    finally:
        server.terminate()
        server.wait(timeout=10)
        server.stdout.close()


def test_web_refuses_a_busy_port(capsys):
    import socket

    from cockpit.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["web", "--port", str(port)]) == 2
    assert f"port {port} is already in use" in capsys.readouterr().err
