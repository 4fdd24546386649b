"""A mock OpenAI-compatible streaming server that knows the truth about its own timing.

Raw asyncio.Protocol HTTP/1.1 (uvloop when importable), keep-alive, ``Transfer-Encoding:
chunked`` with one chunk frame per SSE event, as uvicorn/vLLM send them. ``POST
/v1/completions`` and ``/v1/chat/completions`` stream ``max_tokens`` events (chat: a role chunk
first), then a ``usage`` chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``.
``GET /v1/models``, ``/health``; ``GET /stats`` returns the server-side truth since the last
``/stats?reset=1``: the real gap between consecutive tokens of each stream, the time from a request
parsed to its first token written (server TTFT), tokens written, server CPU. ``GET
/stats?since=T0&until=T1`` (epoch seconds) gives the same over a past wall-clock window instead
(quarter-second buckets, last 120 s kept), so a tool's own measured window can be matched.

One global decode-step loop writes one token to every active stream per step, like a
continuous-batching engine: ``--delay-ms 0`` steps as fast as possible, yielding to the event
loop between steps; ``--delay-ms N`` steps on an absolute N ms grid (sleep, then spin the last
stretch, so no drift and sub-millisecond accuracy). Streams whose socket is paused by
back-pressure skip that step. Binds 127.0.0.1 only and exits by itself after ``--max-seconds``.

Run: python perf/mockserver.py --port 8011 [--delay-ms 10] [--max-seconds 600]
(see perf/bench_client.py, which starts it pinned to CPU 0)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from array import array
from collections import deque
from urllib.parse import parse_qs, urlsplit

perf = time.perf_counter

MAX_SAMPLES = 40_000_000  # gaps kept at most (~320 MB); beyond, the oldest go (reported as dropped)
BUCKETS_PER_S = 4  # wall-clock history, for /stats?since=&until= (a client's own measured window)
HISTORY_S = 120  # kept for /stats?since=; everything since the last reset is kept too


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


DONE_FRAME = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)


def _response(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: keep-alive\r\n\r\n"
        % (status.encode(), ctype, len(body))
    ) + body


def _pcts(values: array) -> dict:
    n = len(values)
    if not n:
        return {"n": 0}
    s = sorted(values)
    pick = lambda q: s[min(n - 1, int(q * n))] * 1e3  # noqa: E731
    return {
        "n": n,
        "mean": sum(s) / n * 1e3,
        "p50": pick(0.50),
        "p90": pick(0.90),
        "p99": pick(0.99),
        "p999": pick(0.999),
        "min": s[0] * 1e3,
        "max": s[-1] * 1e3,
    }


class Stream:
    __slots__ = ("proto", "write", "left", "n", "t_parsed", "t_last", "token", "last", "first_extra", "tail")

    def __init__(self, proto, n, token, last, first_extra, tail):
        self.proto = proto
        self.write = proto.transport.write
        self.left = n
        self.n = n
        self.t_parsed = perf()
        self.t_last = 0.0
        self.token = token  # chunk frame of one ordinary token event
        self.last = last  # chunk frame of the final token (finish_reason)
        self.first_extra = first_extra  # chat role chunk, written just before the first token
        self.tail = tail  # usage chunk (optional) + [DONE] + terminating chunk


class Bucket:
    """The truth of one quarter second (or less: a reset starts a new bucket)."""

    __slots__ = ("wall", "t", "cpu", "gaps", "ttfts", "tokens", "late")

    def __init__(self):
        self.wall = time.time()
        self.t = perf()
        self.cpu = sum(os.times()[:2])
        self.gaps = array("d")
        self.ttfts = array("d")
        self.tokens = 0
        self.late = 0


class Server:
    def __init__(self, delay_ms: float, model: str, spin_ms: float):
        self.delay = delay_ms / 1e3
        self.model = model
        self.spin = spin_ms / 1e3
        self.active: list[Stream] = []
        self.wake = asyncio.Event()
        self.seq = 0
        self.templates: dict[tuple, tuple] = {}
        self.history: list[Bucket] = []
        self.bucket: Bucket | None = None
        self.bucket_end = 0.0
        self.reset()

    def reset(self) -> None:
        self.started = 0
        self.finished = 0
        self.steps = 0
        self.skipped_paused = 0
        self.dropped = 0
        self.t_reset = perf()
        self.cpu_reset = sum(os.times()[:2])
        self.bucket_end = 0.0  # the next step opens a new bucket: exactly the tokens after the reset

    def _bucket(self) -> Bucket:
        now = time.time()
        if now >= self.bucket_end:
            self.bucket = Bucket()
            self.bucket_end = (int(now * BUCKETS_PER_S) + 1) / BUCKETS_PER_S
            self.history.append(self.bucket)
            self._prune(now)
        return self.bucket

    def _prune(self, now: float) -> None:
        """Keep the last HISTORY_S seconds and everything since the reset, at most MAX_SAMPLES gaps."""
        h = self.history
        old = 0
        while old < len(h) - 1 and h[old].wall < now - HISTORY_S and h[old].t < self.t_reset:
            old += 1
        total = sum(len(b.gaps) for b in h[old:])
        while total > MAX_SAMPLES and old < len(h) - 1:
            total -= len(h[old].gaps)
            if h[old].t >= self.t_reset:
                self.dropped += len(h[old].gaps)
            old += 1
        if old:
            del h[:old]

    def _summary(self, buckets: list[Bucket], wall: float, cpu: float | None) -> dict:
        gaps, ttfts = array("d"), array("d")
        tokens = late = 0
        for b in buckets:
            gaps.extend(b.gaps)
            ttfts.extend(b.ttfts)
            tokens += b.tokens
            late += b.late
        return {
            "window_s": wall,
            "tokens": tokens,
            "tok_s": tokens / wall if wall else 0.0,
            "server_cpu": cpu,
            "late_steps": late,
            "delay_ms": self.delay * 1e3,
            "gap_ms": _pcts(gaps),
            "ttft_ms": _pcts(ttfts),
        }

    def stats(self) -> dict:
        """Since the last reset."""
        wall = perf() - self.t_reset
        cpu = (sum(os.times()[:2]) - self.cpu_reset) / wall if wall else 0.0
        out = self._summary([b for b in self.history if b.t >= self.t_reset], wall, cpu)
        out.update(
            requests_started=self.started,
            requests_finished=self.finished,
            active=len(self.active),
            steps=self.steps,
            skipped_paused=self.skipped_paused,
            dropped_samples=self.dropped,
        )
        return out

    def range_stats(self, since: float, until: float) -> dict:
        """Over a wall-clock window [since, until): the buckets wholly inside it."""
        inside = [
            b
            for b in self.history
            if b.wall >= since and (int(b.wall * BUCKETS_PER_S) + 1) / BUCKETS_PER_S <= until
        ]
        wall = len({int(b.wall * BUCKETS_PER_S) for b in inside}) / BUCKETS_PER_S
        cpu = None
        if len(inside) > 1 and inside[-1].t > inside[0].t:  # between the first and the last bucket's start
            cpu = (inside[-1].cpu - inside[0].cpu) / (inside[-1].t - inside[0].t)
        out = self._summary(inside, wall, cpu)
        out.update(since=since, until=until)
        return out

    # -- requests ----------------------------------------------------------------------------
    def start_stream(self, proto, path: str, body: dict) -> None:
        self.seq += 1
        chat = path.endswith("/chat/completions")
        n = body.get("max_completion_tokens") if chat else None
        n = int(n or body.get("max_tokens") or 16)
        model = str(body.get("model") or self.model)
        if chat:
            prompt = body.get("messages") or []
            ptoks = sum(len(str(m.get("content", "")).split()) for m in prompt if isinstance(m, dict))
        else:
            prompt = body.get("prompt", "")
            ptoks = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid = (b"chatcmpl-%d" if chat else b"cmpl-%d") % self.seq
        if not body.get("stream"):
            text = " tok" * n
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            resp = {
                "id": rid.decode(),
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n},
            }
            proto.transport.write(_response("200 OK", json.dumps(resp).encode()))
            proto.next_request()
            return
        token, last, first_extra, tail = (
            _chunk(t.replace(b"@@ID@@", rid)) if t else b""
            for t in self._templates(chat, model, n, ptoks, usage)
        )
        self.started += 1
        st = Stream(proto, n, token, last, first_extra, tail + DONE_FRAME)
        proto.stream = st
        proto.transport.write(STREAM_HEAD)
        if n <= 0:
            self.finish(st, st.tail)
            return
        self.active.append(st)
        self.wake.set()

    def _templates(self, chat: bool, model: str, n: int, ptoks: int, usage: bool) -> tuple:
        """SSE payloads of one stream with @@ID@@ for its id (built once per shape and second)."""
        created = int(time.time())
        key = (chat, model, n, ptoks, usage, created)
        found = self.templates.get(key)
        if found:
            return found
        if len(self.templates) > 256:
            self.templates.clear()
        base = {
            "id": "@@ID@@",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        if chat:

            def mk(fin):
                return {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": " tok"},
                            "logprobs": None,
                            "finish_reason": fin,
                        }
                    ],
                }

            first_extra = _sse(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
            )
        else:

            def mk(fin):
                return {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "text": " tok",
                            "logprobs": None,
                            "finish_reason": fin,
                            "stop_reason": None,
                        }
                    ],
                }

            first_extra = b""
        tail = b""
        if usage:
            tail = _sse(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n},
                }
            )
        found = self.templates[key] = (_sse(mk(None)), _sse(mk("length")), first_extra, tail)
        return found

    def finish(self, st: Stream, data: bytes) -> None:
        st.proto.transport.write(data)
        st.proto.stream = None
        self.finished += 1
        st.proto.next_request()

    # -- the decode loop ---------------------------------------------------------------------
    def step(self) -> None:
        self.steps += 1
        current = self.active
        self.active = keep = []  # streams started during this step (pipelined requests) land here too
        bucket = self._bucket()
        gap_append, ttft_append, keep_append = bucket.gaps.append, bucket.ttfts.append, keep.append
        clock = perf
        written = 0
        for st in current:
            proto = st.proto
            if proto.closed:
                continue
            if proto.paused:
                self.skipped_paused += 1
                keep_append(st)
                continue
            now = clock()
            if st.t_last:
                gap_append(now - st.t_last)
            else:
                ttft_append(now - st.t_parsed)
            st.t_last = now
            written += 1
            st.left -= 1
            if st.left > 0:
                if st.first_extra:
                    st.write(st.first_extra + st.token)
                    st.first_extra = b""
                else:
                    st.write(st.token)
                keep_append(st)
            else:
                self.finish(st, st.first_extra + st.last + st.tail)
        bucket.tokens += written

    async def run(self) -> None:
        loop_sleep = asyncio.sleep
        if self.delay <= 0:
            while True:
                if not self.active:
                    self.wake.clear()
                    await self.wake.wait()
                self.step()
                await loop_sleep(0)
        delay, spin = self.delay, self.spin
        t_next = perf()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                # A request arriving at an idle server waits for the next step of the grid.
                now = perf()
                if now > t_next:
                    t_next += ((now - t_next) // delay + 1) * delay
            now = perf()
            if t_next - now > spin:
                await loop_sleep(t_next - now - spin)
            while perf() < t_next:
                pass
            self.step()
            t_next += delay
            now = perf()
            if now > t_next:  # fell behind by a whole step: count it and stay on the grid
                self.bucket.late += 1
                t_next += ((now - t_next) // delay + 1) * delay
            await loop_sleep(0)


class HTTP(asyncio.Protocol):
    server: Server

    def __init__(self):
        self.buf = b""
        self.transport = None
        self.stream = None
        self.closed = False
        self.paused = False
        self.pending: deque = deque()

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc):
        self.closed = True
        if self.stream is not None:
            try:
                self.server.active.remove(self.stream)
            except ValueError:
                pass
            self.stream = None

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self._bad("400 Bad Request")
                return
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._bad("411 Length Required")
                return
            length = int(headers.get("content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.pending.append((method, target, body))
            if self.stream is None and len(self.pending) == 1:
                self.next_request()

    def _bad(self, status):
        self.transport.write(_response(status, b'{"error":"bad request"}'))
        self.transport.close()

    def next_request(self):
        while self.pending and self.stream is None and not self.closed:
            method, target, body = self.pending.popleft()
            self.handle(method, target, body)

    def handle(self, method, target, body):
        url = urlsplit(target)
        path = url.path.rstrip("/") or "/"
        srv = self.server
        w = self.transport.write
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                w(_response("400 Bad Request", b'{"error":"invalid json"}'))
                return
            srv.start_stream(self, path, req)
        elif method == "GET" and path == "/v1/models":
            w(
                _response(
                    "200 OK",
                    json.dumps(
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": srv.model,
                                    "object": "model",
                                    "created": 0,
                                    "owned_by": "mock",
                                    "root": srv.model,
                                    "max_model_len": 1 << 20,
                                }
                            ],
                        }
                    ).encode(),
                )
            )
        elif method == "GET" and path in ("/health", "/ping"):
            w(_response("200 OK", b""))
        elif method == "GET" and path == "/stats":
            q = parse_qs(url.query)
            if "since" in q:
                data = srv.range_stats(float(q["since"][0]), float(q.get("until", [time.time()])[0]))
            else:
                data = srv.stats()
            if q.get("reset", ["0"])[0] not in ("0", ""):
                srv.reset()
            w(_response("200 OK", json.dumps(data).encode()))
        else:
            w(_response("404 Not Found", b'{"error":"not found"}'))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="decode step (0 = as fast as possible)")
    ap.add_argument("--model", default="mock")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long (default 600)")
    ap.add_argument("--spin-ms", type=float, default=3.0, help="busy-wait the last stretch before a step")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)
    if not args.no_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass

    async def serve():
        loop = asyncio.get_running_loop()
        srv = Server(args.delay_ms, args.model, args.spin_ms)
        HTTP.server = srv
        server = await loop.create_server(HTTP, "127.0.0.1", args.port, backlog=4096, reuse_address=True)
        print(
            f"mockserver: 127.0.0.1:{args.port} delay {args.delay_ms} ms loop "
            f"{type(loop).__module__} (exits after {args.max_seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        decode = asyncio.ensure_future(srv.run())
        try:
            await asyncio.sleep(args.max_seconds)
        finally:
            decode.cancel()
            server.close()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
