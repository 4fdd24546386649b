"""`cockpit web`'s server: textual-serve, with its websocket closed to other sites' pages, and
its page (templates/app_index.html) self-contained and ready for the keyboard.

The websocket drives a full cockpit (launch, stop, a shell's worth of power over the GPUs), and a
browser lets any page open a websocket to 127.0.0.1. So an upgrade whose Origin header is not the
page cockpit itself served is refused with 403 before it becomes a websocket.

textual-serve's own page fetches its font from a font host (a box is often offline, and a page
should not tell anyone where it was opened) and leaves the terminal unfocused until clicked (keys
typed first are lost). Cockpit's copy of that page takes the font from textual-serve's static
folder and focuses the terminal once it is connected; textual-serve's script is used as it is.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.server import Server

log = logging.getLogger("cockpit.web")

TEMPLATES = Path(__file__).with_name("templates")

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
_WILDCARD = {"", "0.0.0.0", "::"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _authority(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s) origin, the default port filled in; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.hostname.lower(), port or _DEFAULT_PORTS[parts.scheme]


def _host_header(value: str, scheme: str = "http") -> tuple[str, int] | None:
    return _authority(f"{scheme}://{value}") if value else None


def origin_allowed(origin: str | None, host: str, port: int, host_header: str = "") -> bool:
    """Whether a websocket upgrade from a page at `origin` may drive the cockpit served on host:port.

    No Origin at all is allowed: browsers always send one on a websocket upgrade, so its absence
    means a non-browser client (a script, a test), which no web page can forge. Loopback names
    stand for each other (a page at http://localhost:PORT talks to 127.0.0.1:PORT). On a wildcard
    bind (0.0.0.0) the served name is unknown, so the origin must be the address the request came
    in on (its Host header) and that must be an IP address or this machine's name: a DNS name
    pointed at this box by someone else's page (DNS rebinding) is refused.
    """
    if origin is None:
        return True
    seen = _authority(origin)
    if seen is None or seen[1] != port:
        return False
    name, served = seen[0], host.strip("[]").lower()
    if served in _WILDCARD:
        arrived = _host_header(host_header)
        local_names = _LOOPBACK_NAMES | {socket.gethostname().lower()}
        return arrived == seen and (_ip_literal(name) or name in local_names)
    if _loopback(served):
        return _loopback(name)
    return name == served


class OriginCheckedServer(Server):
    """textual-serve's Server with cockpit's page (TEMPLATES), whose websocket refuses other sites'
    pages (see `origin_allowed`)."""

    def __init__(self, command: str, **options: Any) -> None:
        super().__init__(command, templates_path=TEMPLATES, **options)
        self._sockets: set[asyncio.Task] = set()  # the open tabs' handlers, ended on shutdown

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, self.host, self.port, request.headers.get("Host", "")):
            log.warning("refused a websocket from origin %s", origin)
            raise web.HTTPForbidden(text=f"origin {origin} may not drive this cockpit\n")
        task = asyncio.current_task()
        if task is not None:
            self._sockets.add(task)
        try:
            return await super().handle_websocket(request)
        finally:
            self._sockets.discard(task)

    async def on_shutdown(self, app: web.Application) -> None:
        """Ctrl-C with a tab open: aiohttp would wait out its shutdown timeout on the open
        websocket; its handler closes the socket and stops the tab's cockpit when cancelled."""
        for task in list(self._sockets):
            task.cancel()
