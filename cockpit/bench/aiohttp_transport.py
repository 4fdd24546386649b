"""The aiohttp transport: any http:// or https:// URL, one request per call, never raising.

aiohttp rather than httpx: httpx costs ~3x the CPU per streamed token and saturates one core
at ~200 streams (guidellm, which streams with httpx, against this client in perf/bench_client.py;
encode/httpx#3215 measures the same gap). The stream is read with ``iter_any()`` and each read is
stamped before ``sse.SseReader`` parses it. For http:// the load generator prefers
``rawclient.RawTransport``, which stamps chunks without a task wake-up each.
"""

from __future__ import annotations

import asyncio
from time import perf_counter

import aiohttp

from cockpit.bench.sse import SseReader
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

# Above aiohttp's default: a small one throttled vLLM's bench at long contexts (vllm#39963).
READ_BUFSIZE = 1 << 20
# aiohttp >= 3.10 has an error of its own for a connect timeout (older ones raise ServerTimeoutError).
_CONNECT_TIMEOUT: type[Exception] | tuple[()] = getattr(aiohttp, "ConnectionTimeoutError", ())


def new_session() -> aiohttp.ClientSession:
    """One session for a whole sweep: unlimited keep-alive connections, one per stream in flight."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE)


class AiohttpTransport:
    """Sends streaming requests to one URL through an aiohttp session and records them."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        progress: Progress | None = None,
    ) -> None:
        self.session = session
        self.url = url
        self.headers = request_headers(api_key)
        self.timeouts = timeouts
        # sock_connect: a listen queue that never accepts; sock_read: no bytes for read_s (the
        # headers included); total bounds the whole of it.
        self.client_timeout = aiohttp.ClientTimeout(
            total=self.timeouts.request_s,
            sock_read=self.timeouts.read_s,
            sock_connect=self.timeouts.connect_s,
        )
        self.progress = progress if progress is not None else Progress()

    async def request(self, body: bytes, record: RequestRecord | None = None) -> RequestRecord:
        """Send ``body`` and read its stream into ``record`` (see ``transport.Transport``)."""
        record = record if record is not None else RequestRecord()
        record.start = sent = perf_counter()
        try:
            async with self.session.post(
                self.url, data=body, headers=self.headers, timeout=self.client_timeout
            ) as resp:
                record.status = resp.status
                if resp.status != 200:
                    raise RequestFailed(http_error(resp.status, await _error_message(resp)))
                check_event_stream(resp.headers.get("Content-Type", ""))
                await self._read_stream(resp, record, sent)
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        except RequestFailed as failure:
            record.error = str(failure)
        except Exception as exc:
            record.error = self._reason(exc, record)
        finally:
            record.end = perf_counter()
        return record

    async def _read_stream(self, resp: aiohttp.ClientResponse, record: RequestRecord, sent: float) -> None:
        """The stream into ``record``. aiohttp's own read timeout restarts with any byte, so
        after each read the request's own bounds are checked too (``Timeouts.silent``): a server
        that only pings fails at its first ping past them."""
        reader = SseReader(record, self.progress)
        feed = reader.feed
        timeouts = self.timeouts
        check_at = timeouts.next_check(sent, record)
        async for data in resp.content.iter_any():
            now = perf_counter()  # stamped before any parsing: every event of this read arrived now
            feed(data, now)
            if now >= check_at:
                why = timeouts.silent(sent, record, now, now)
                if why is not None:
                    raise RequestFailed(why)
                check_at = timeouts.next_check(sent, record)
        reader.finish()

    def _reason(self, exc: Exception, record: RequestRecord) -> str:
        """One line for a failure aiohttp raised."""
        if isinstance(exc, _CONNECT_TIMEOUT):
            return self.timeouts.connecting()
        if isinstance(exc, aiohttp.ServerTimeoutError):  # sock_read: no bytes for read_s
            return self.timeouts.no_bytes()
        if isinstance(exc, asyncio.TimeoutError):
            return self.timeouts.request_limit()
        if isinstance(exc, aiohttp.ClientSSLError):  # its errno is the TLS library's, not the OS's
            return f"cannot connect: TLS failed ({first_line(str(getattr(exc, 'os_error', '') or exc), 120)})"
        if isinstance(exc, aiohttp.ClientConnectorError):
            return cannot_connect(exc.os_error)
        if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionError)):
            return connection_dropped(record)
        if isinstance(exc, aiohttp.ClientError):
            return f"{type(exc).__name__}: {first_line(str(exc))}"
        return client_bug(exc)


async def _error_message(resp: aiohttp.ClientResponse) -> str:
    """The message of an error response's body (see ``transport.error_text``)."""
    try:
        raw = await resp.content.read(ERROR_BODY_LIMIT)
    except Exception:
        return resp.reason or "no body"
    return error_text(raw, resp.reason)
