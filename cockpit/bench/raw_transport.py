"""The streaming hot path on a bare ``asyncio.Protocol``: HTTP/1.1, plain http:// only.

Why not aiohttp here: at C=256 an engine step hands the client 256 SSE chunks at the same
instant, and aiohttp wakes one task and runs one ``iter_any`` read per chunk (20-40 us each),
so a step blocks the loop for 5-10 ms and the later chunks are stamped late. Here every chunk
is stamped (``perf_counter()``, first thing) and parsed inside ``data_received``, the loop's own
callback: no task wake-up, no queue; the request's task is woken once, when the stream ends.

Inside ``data_received``, whole chunk frames that each hold one plain token event are counted in
place (``_token_frames``: no chunk decoding, no event splitting, no bytes copied); anything
else takes the general path. In-process, at one event a read, that is ~2.7 instead of ~5 us of
Python per token (at ten a read ~1.4 instead of ~4.7), which matters most at C=1024, where a
server's step is long and each read carries one token.

A ``transport.Transport``, like ``client.AiohttpTransport``: the same records, failure texts
and timeouts. Keep-alive connections, one per request in flight, are reused across requests;
chunked transfer coding is decoded by hand; the SSE split and the template fast path for plain
token events are the shared ``sse.SseReader``.
"""

from __future__ import annotations

import asyncio
import socket
from time import perf_counter
from typing import cast
from urllib.parse import urlsplit

from cockpit.bench.sse import NOT_PLAIN_ASCII, SseReader
from cockpit.bench.transport import (
    DEFAULT_TIMEOUTS,
    ERROR_BODY_LIMIT,
    Progress,
    RequestFailed,
    RequestRecord,
    Timeouts,
    cannot_connect,
    check_event_stream,
    client_bug,
    connection_dropped,
    error_text,
    first_line,
    http_error,
    request_headers,
)

_HEADERS, _BODY, _DONE = 0, 1, 2  # response phases
_SIZE, _DATA, _CRLF, _TRAILER = 0, 1, 2, 3  # chunked decoding states


class RawSession:
    """Idle keep-alive connections, by (host, port); one per request in flight, never shared."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[_Conn]] = {}
        self.open: set[_Conn] = set()

    async def __aenter__(self) -> RawSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in list(self.open):
            conn.close()
        self.open.clear()
        self.idle.clear()
        await asyncio.sleep(0)  # let the transports close

    def take(self, key: tuple[str, int]) -> _Conn | None:
        pool = self.idle.get(key)
        while pool:
            conn = pool.pop()
            if conn.usable():
                return conn
        return None

    def give(self, key: tuple[str, int], conn: _Conn) -> None:
        if conn.usable():
            self.idle.setdefault(key, []).append(conn)
        else:
            conn.close()


def new_session() -> RawSession:
    return RawSession()


class _Dropped(Exception):
    """The connection closed before the response was complete."""

    def __init__(self, got_bytes: bool) -> None:
        super().__init__("dropped")
        self.got_bytes = got_bytes


class _Conn(asyncio.Protocol):
    """One keep-alive connection, and the response it is reading now (at most one)."""

    def __init__(self, session: RawSession) -> None:
        self.session = session
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    # -- connection ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection makes a stream transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.session.open.add(self)

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        self.session.open.discard(self)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.session.open.discard(self)
        if self.waiter is None or self.waiter.done():
            return
        if self.phase == _BODY and self.until_eof:
            self._end_body()  # a body without a length ends with the connection
            return
        self._fail(_Dropped(self.got_bytes))

    def eof_received(self) -> bool:
        return False  # close our side too

    # -- one request -----------------------------------------------------------------------------

    def start(
        self, request: bytes, record: RequestRecord, reader: SseReader, timeouts: Timeouts, deadline: float
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.record = record
        self.reader = reader
        self.phase = _HEADERS
        self.head = b""
        self.got_bytes = False
        self.status = 0
        self.reason = ""
        self.keep_alive = True
        self.chunked = False
        self.until_eof = False
        self.left = 0  # content-length bytes still to come
        self.cstate = _SIZE
        self.cbuf = b""
        self.error_body: bytes | None = None  # collecting an error response's body
        self.timeouts = timeouts
        self.deadline = deadline
        self.sent = perf_counter()
        self.body_at = 0.0  # when bytes of the response's body last came: tokens, pings, anything
        self.loop = loop
        self._arm(min(timeouts.next_check(self.sent, record), deadline))
        assert self.transport is not None
        self.transport.write(request)
        return self.waiter

    def _arm(self, at: float) -> None:
        # perf_counter and loop.time() are both monotonic but may differ in origin: convert.
        self.timer = self.loop.call_later(max(0.0, at - perf_counter()), self._on_timer)

    def _on_timer(self) -> None:
        """The request's bounds, checked when one may have run out: never on the hot path, as
        tokens only move the next check later (``Timeouts.silent``)."""
        self.timer = None
        if self.waiter is None or self.waiter.done():
            return
        now = perf_counter()
        timeouts = self.timeouts
        if now >= self.deadline:
            self._fail(RequestFailed(timeouts.request_limit()))
            return
        why = timeouts.silent(self.sent, self.record, self.body_at, now)
        if why is not None:
            self._fail(RequestFailed(why))
        else:
            self._arm(min(timeouts.next_check(self.sent, self.record), self.deadline))

    def _fail(self, exc: BaseException) -> None:
        self.close()
        self._settle(exc)

    def _settle(self, exc: BaseException | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def abandon(self) -> None:
        """The request was cancelled (or timed out): close, so the server aborts it."""
        self.close()
        self._settle(None)

    # -- reading ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        now = perf_counter()  # before any parsing: every event in these bytes arrived now
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes with no request: the connection is out of step
            return
        self.got_bytes = True
        try:
            if self.phase == _HEADERS:
                data = self._headers(data)
                if self.phase != _BODY:
                    return
                if not data and not (self.left == 0 and not self.chunked and not self.until_eof):
                    return
            if self.chunked:
                if self.cstate == _SIZE and not self.cbuf and self.error_body is None:
                    frame = self.reader.token_frame()
                    if frame is not None:
                        count, at = _token_frames(data, *frame)
                        if count:
                            self.reader.add_tokens(count, now, whole_read=at == len(data))
                            if at == len(data):
                                return
                            data = data[at:]
                self._chunked(data, now)
            elif self.until_eof:
                self._body(data, now)
            else:
                take = data[: self.left]
                self.left -= len(take)
                if take:
                    self._body(take, now)
                if self.left == 0 and self.phase == _BODY:
                    self._end_body()
        except RequestFailed as failure:
            self._fail(failure)
        except Exception as exc:
            self._fail(exc)

    def _headers(self, data: bytes) -> bytes:
        head = self.head + data if self.head else data
        while True:
            end = head.find(b"\r\n\r\n")
            if end < 0:
                if len(head) > 65536:
                    raise RequestFailed("response headers over 64 KiB")
                self.head = head
                return b""
            lines = head[:end].decode("latin-1").split("\r\n")
            rest = head[end + 4 :]
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise RequestFailed(f"not an HTTP response: {first_line(lines[0])}")
            status = int(parts[1])
            if 100 <= status < 200:
                head = rest  # 100 Continue and friends: the real response follows
                continue
            break
        self.head = b""
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.record.status = status
        self.keep_alive = parts[0] != "HTTP/1.0" and "close" not in headers.get("connection", "").lower()
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if self.chunked:
            pass
        elif length is not None and length.isdigit():
            self.left = int(length)
        else:
            self.until_eof = True
            self.keep_alive = False
        if status != 200:
            self.error_body = b""
            self.keep_alive = False
        else:
            check_event_stream(headers.get("content-type", ""))
        self.phase = _BODY
        return rest

    def _chunked(self, data: bytes, now: float) -> None:
        """Decode chunked transfer coding. A server sends one chunk per SSE event (uvicorn does),
        so the common case, a whole chunk and its CRLF in this read, is taken in one step: one
        find, one int, one slice (three state changes a chunk cost ~1 us of a ~5 us token)."""
        buf = self.cbuf + data if self.cbuf else data
        out: list[bytes] = []
        at, size = 0, len(buf)
        find = buf.find
        while at < size and self.phase == _BODY:
            state = self.cstate
            if state == _SIZE:
                end = find(b"\r\n", at)
                if end < 0:
                    if size - at > 1024:
                        raise RequestFailed("broken chunked encoding")
                    break
                try:
                    length = int(buf[at:end], 16)
                except ValueError:
                    length = _chunk_size(buf[at:end])
                if length < 0:
                    raise RequestFailed("broken chunked encoding")
                start = end + 2
                stop = start + length
                if length and stop + 2 <= size:  # the whole chunk is here: the hot path
                    if buf[stop : stop + 2] != b"\r\n":
                        raise RequestFailed("broken chunked encoding")
                    out.append(buf[start:stop])
                    at = stop + 2
                    continue
                at = start
                self.left = length
                self.cstate = _DATA if length else _TRAILER
            elif state == _DATA:
                take = min(self.left, size - at)
                out.append(buf[at : at + take])
                at += take
                self.left -= take
                if self.left == 0:
                    self.cstate = _CRLF
            elif state == _CRLF:
                if size - at < 2:
                    break
                if buf[at : at + 2] != b"\r\n":
                    raise RequestFailed("broken chunked encoding")
                at += 2
                self.cstate = _SIZE
            else:  # _TRAILER: optional trailer lines, then an empty line
                end = find(b"\r\n", at)
                if end < 0:
                    break
                empty = end == at
                at = end + 2
                if empty:
                    if out:
                        self._body(b"".join(out), now)
                        out = []
                    self._end_body()
        self.cbuf = buf[at:] if at < size else b""
        if out and self.phase == _BODY:
            self._body(out[0] if len(out) == 1 else b"".join(out), now)

    def _body(self, data: bytes, now: float) -> None:
        self.body_at = now
        if self.error_body is not None:
            self.error_body += data
            if len(self.error_body) >= ERROR_BODY_LIMIT:
                self._end_body()
            return
        self.reader.feed(data, now)

    def _end_body(self) -> None:
        if self.phase != _BODY:
            return
        self.phase = _DONE
        if self.error_body is not None:
            message = error_text(self.error_body[:ERROR_BODY_LIMIT], self.reason)
            self._fail(RequestFailed(http_error(self.status, message)))
            return
        try:
            self.reader.finish()
        except RequestFailed as failure:
            self._fail(failure)
            return
        if not self.keep_alive:
            self.close()
        self._settle(None)


class RawTransport:
    """Sends streaming requests to one http:// URL over pooled raw connections and records them."""

    def __init__(
        self,
        session: RawSession,
        url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        progress: Progress | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the raw transport speaks http:// only, got {url}")
        self.session = session
        self.url = url
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 80
        self.key = (self.host, self.port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = self.host if parts.port is None else f"{self.host}:{self.port}"
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {host}",
            "User-Agent: cockpit-bench",
            *(f"{name}: {value}" for name, value in request_headers(api_key).items()),
        ]
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self.timeouts = timeouts
        self.progress = progress if progress is not None else Progress()

    async def request(self, body: bytes, record: RequestRecord | None = None) -> RequestRecord:
        """Send ``body`` and read its stream into ``record`` (see ``transport.Transport``)."""
        record = record if record is not None else RequestRecord()
        record.start = perf_counter()
        deadline = record.start + self.timeouts.request_s
        conn: _Conn | None = None
        try:
            message = self.head + str(len(body)).encode() + b"\r\n\r\n" + body
            for attempt in (0, 1):
                conn = self.session.take(self.key)
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(deadline)
                reader = SseReader(record, self.progress)
                try:
                    await conn.start(message, record, reader, self.timeouts, deadline)
                except _Dropped as dropped:
                    if reused and not dropped.got_bytes and attempt == 0:
                        continue  # the server had closed that idle connection: once more, on a new one
                    raise
                self.session.give(self.key, conn)
                break
        except asyncio.CancelledError:
            record.cancelled = True
            if conn is not None:
                conn.abandon()
            raise
        except RequestFailed as failure:
            record.error = str(failure)
        except Exception as exc:
            if conn is not None:
                conn.abandon()
            record.error = self._reason(exc, record)
        finally:
            record.end = perf_counter()
        return record

    async def _connect(self, deadline: float) -> _Conn:
        """A new connection within the connect timeout (a listen queue that never accepts hangs
        here). Not asyncio.wait_for: on 3.11 it can swallow a cancellation that lands as the
        connect fails, and a closed-loop worker against a dead server then never stops."""
        loop = asyncio.get_running_loop()
        limit = min(deadline, perf_counter() + self.timeouts.connect_s)
        task = asyncio.ensure_future(
            loop.create_connection(lambda: _Conn(self.session), self.host, self.port)
        )
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, limit - perf_counter()))
        except asyncio.CancelledError:
            task.cancel()
            task.add_done_callback(_close_if_connected)
            raise
        if not done:
            task.cancel()
            task.add_done_callback(_close_if_connected)
            if perf_counter() >= deadline:
                raise RequestFailed(self.timeouts.request_limit())
            raise RequestFailed(self.timeouts.connecting())
        try:
            _, conn = task.result()
        except OSError as exc:
            raise RequestFailed(cannot_connect(exc)) from None
        return conn

    def _reason(self, exc: Exception, record: RequestRecord) -> str:
        """One line for a failure raised on the way (the connection's own are ``RequestFailed``)."""
        if isinstance(exc, asyncio.TimeoutError):
            return self.timeouts.request_limit()
        if isinstance(exc, (_Dropped, ConnectionError)):
            return connection_dropped(record)
        return client_bug(exc)


def _token_frames(buf: bytes, head: bytes, tail: bytes) -> tuple[int, int]:
    """The hot path of a token stream: how many whole chunk frames at the start of ``buf`` each
    hold one plain token event (``head``, printable ASCII text, ``tail``: see
    ``SseReader.token_frame``), and where they end. One find, one int and three bounded
    comparisons a token, with no bytes copied; the first frame that is anything else, or not
    whole, stops it and the general path takes the rest."""
    at, size, count = 0, len(buf), 0
    find, startswith, endswith, not_plain = buf.find, buf.startswith, buf.endswith, NOT_PLAIN_ASCII.search
    shortest = len(head) + len(tail)
    while at < size:
        end = find(b"\r\n", at)
        if end < 0:
            break
        try:
            length = int(buf[at:end], 16)
        except ValueError:
            break
        start = end + 2
        stop = start + length
        if (
            length <= shortest
            or stop + 2 > size
            or not startswith(b"\r\n", stop)
            or not startswith(head, start)
            or not endswith(tail, start, stop)
            or not_plain(buf, start + len(head), stop - len(tail)) is not None
        ):
            break
        count += 1
        at = stop + 2
    return count, at


def _chunk_size(line: bytes) -> int:
    """A chunk-size line with ``;extensions`` (plain hex digits are read in place)."""
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise RequestFailed("broken chunked encoding") from None


def _close_if_connected(task: asyncio.Future[tuple[asyncio.Transport, _Conn]]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result()[0].close()
