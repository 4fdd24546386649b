"""cockpit.bench: the load generator. A concurrency sweep against any OpenAI-compatible server.

``loadgen.run_sweep(config.BenchConfig(...), on_event)`` runs it, against a
``transport.Transport``: ``rawclient`` (raw asyncio, http://) or ``client`` (aiohttp, any URL),
both reading the stream with ``sse``, opened by ``sending`` (in this process or in the worker
processes of ``workers``). ``metrics`` holds the formulas, ``result`` what one level measured
(``LevelSummary``, to JSON and back), ``health`` the client's check on itself, ``workload`` the
requests. Import the submodules directly: importing this package loads nothing heavy.
"""
