"""`penelope bench faults`: faults of the store and of clients, under agent load.

Modules:
    bench    the baseline and each case against it: the checks and the summary
    cases    the faults, a registry of name -> `Case`
    cli      the command: options, the JSON, the table
    clients  misbehaving clients: idle sockets, slow bodies, unread streams, edge, burst
    config   `FaultsConfig` and its `--short` form
    load     timed multi-turn agent sessions, each turn's TTFT and how it ended
    proxy    `FaultProxy`: an HTTP proxy before the S3 server that delays, throttles, refuses
    ray_app  the other server: the Ray Serve application (one engine replica) per run
    s3       a moto S3 server stopped and started again on the same port and data
    server   `penelope serve` in a child process, its /metrics, /ready and RSS sampled
"""
