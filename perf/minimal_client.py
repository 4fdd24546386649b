"""The minimal aiohttp client: the baseline, the floor any load generator should beat.

Closed loop: C tasks, each doing request -> read the stream to ``[DONE]`` -> repeat, on one
``aiohttp.ClientSession(TCPConnector(limit=0))``. JSON body pre-encoded; the stream is read with
``resp.content.iter_any()`` and split on ``b"\\n\\n"`` by hand (as vLLM's bench does); per content
event: ``json.loads``, a ``perf_counter`` stamp, a count. TTFT = first content event - request
start; ITL = gap between consecutive content events of one request (vLLM-style, per gap). Tokens
counted from events are checked against ``usage.completion_tokens``. Throughput = content events
received inside the measured window / window; client CPU = ``os.times()`` user+sys over the window.

Run: python perf/minimal_client.py --url http://127.0.0.1:8011 --conc 256 [--warmup 2 --duration 8
     --max-tokens 256 --uvloop --chat --json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import aiohttp

perf = time.perf_counter


def pct(sorted_vals: list, q: float):
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


async def run(args) -> dict:
    chat = args.chat
    path = "/v1/chat/completions" if chat else "/v1/completions"
    url = args.url.rstrip("/") + path
    req = {
        "model": args.model,
        "max_tokens": args.max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        req["messages"] = [{"role": "user", "content": "hello " * 16}]
    else:
        req["prompt"] = "hello " * 16
    body = json.dumps(req).encode()
    headers = {"Content-Type": "application/json"}

    state = {"w0": float("inf"), "w1": float("inf")}
    itl: list[float] = []
    ttft: list[float] = []
    counts = {"tokens": 0, "requests": 0, "errors": 0, "usage_mismatch": 0, "tokens_total": 0}
    loads = json.loads

    async def worker(session: aiohttp.ClientSession):
        while True:
            t0 = perf()
            last = 0.0
            n = 0
            usage_n = None
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    if resp.status != 200:
                        counts["errors"] += 1
                        await resp.read()
                        continue
                    buf = b""
                    done = False
                    async for data in resp.content.iter_any():
                        buf += data
                        if b"\n\n" not in buf:
                            continue
                        *events, buf = buf.split(b"\n\n")
                        for ev in events:
                            if not ev.startswith(b"data: "):
                                continue
                            payload = ev[6:]
                            if payload == b"[DONE]":
                                done = True
                                break
                            obj = loads(payload)
                            now = perf()
                            choices = obj.get("choices")
                            if choices:
                                c0 = choices[0]
                                text = c0["delta"].get("content") if chat else c0.get("text")
                                if text:
                                    n += 1
                                    w0, w1 = state["w0"], state["w1"]
                                    if w0 <= now < w1:
                                        counts["tokens"] += 1
                                        if n == 1:
                                            ttft.append(now - t0)
                                        else:
                                            itl.append(now - last)
                                    last = now
                            usage = obj.get("usage")
                            if usage:
                                usage_n = usage.get("completion_tokens")
                        if done:
                            break
            except (aiohttp.ClientError, asyncio.TimeoutError):
                counts["errors"] += 1
                continue
            counts["tokens_total"] += n
            counts["requests"] += 1
            if usage_n is not None and usage_n != n:
                counts["usage_mismatch"] += 1

    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        tasks = [asyncio.ensure_future(worker(session)) for _ in range(args.conc)]
        await asyncio.sleep(args.warmup)
        cpu0 = sum(os.times()[:2])
        state["w0"] = perf()
        t0_epoch = time.time()
        state["w1"] = state["w0"] + args.duration
        await asyncio.sleep(args.duration)
        window = perf() - state["w0"]
        cpu = sum(os.times()[:2]) - cpu0
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    itl.sort()
    ttft.sort()
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    tokens = counts["tokens"]
    return {
        "client": "minimal-aiohttp" + ("+uvloop" if args.uvloop else ""),
        "url": args.url,
        "concurrency": args.conc,
        "window_s": window,
        "t0_epoch": t0_epoch,
        "t1_epoch": t0_epoch + window,
        "output_tok_s": tokens / window,
        "tokens": tokens,
        "client_cpu": cpu / window,
        "cpu_us_per_token": cpu / tokens * 1e6 if tokens else None,
        "itl_ms": {
            "mean": ms(sum(itl) / len(itl)) if itl else None,
            "p50": ms(pct(itl, 0.5)),
            "p99": ms(pct(itl, 0.99)),
            "n": len(itl),
        },
        "ttft_ms": {
            "mean": ms(sum(ttft) / len(ttft)) if ttft else None,
            "p50": ms(pct(ttft, 0.5)),
            "p99": ms(pct(ttft, 0.99)),
            "n": len(ttft),
        },
        "requests_done": counts["requests"],
        "errors": counts["errors"],
        "usage_mismatch": counts["usage_mismatch"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8011")
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="mock")
    ap.add_argument("--chat", action="store_true", help="/v1/chat/completions instead of /v1/completions")
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop (must be importable)")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of a summary")
    args = ap.parse_args(argv)
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    res = asyncio.run(run(args))
    if args.json:
        print(json.dumps(res))
    else:
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(
            f"C={res['concurrency']} {res['output_tok_s']:,.0f} tok/s  CPU {res['client_cpu']:.0%} "
            f"({f(res['cpu_us_per_token'])} us/token)  ITL mean/p50/p99 {f(res['itl_ms']['mean'])}/"
            f"{f(res['itl_ms']['p50'])}/{f(res['itl_ms']['p99'])} ms  TTFT mean/p50/p99 "
            f"{f(res['ttft_ms']['mean'])}/{f(res['ttft_ms']['p50'])}/{f(res['ttft_ms']['p99'])} ms  "
            f"errors {res['errors']} usage mismatches {res['usage_mismatch']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
