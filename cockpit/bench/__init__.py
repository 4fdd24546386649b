"""cockpit.bench: the load generator. A concurrency sweep against any OpenAI-compatible server.

``loadgen.run_sweep(BenchConfig(...), on_event)`` runs it, against a ``transport.Transport``:
``rawclient`` (raw asyncio, http://) or ``client`` (aiohttp, any URL), both reading the stream
with ``sse``. ``metrics`` holds the formulas, ``health`` the client's check on itself,
``workload`` the requests. Import the submodules directly: importing this package loads nothing
heavy.
"""
