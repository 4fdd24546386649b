"""cockpit.bench: the load generator. A concurrency sweep against any OpenAI-compatible server.

``loadgen.run_sweep(BenchConfig(...), on_event)`` runs it; ``client`` is the streaming hot path,
``metrics`` the formulas, ``health`` the client's check on itself, ``workload`` the requests.
Import the submodules directly: importing this package loads nothing heavy.
"""
