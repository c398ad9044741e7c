"""Benchmarks: the simulator, trace replay, micro-benchmarks, the load test.

sim/          the discrete-event simulator and its benches (`bench.sim`)
replay/       agent traces through the real engine; the simulator's CPU calibration
micro/        one component at a time: recompute, cache bookkeeping, store, tiers
load/         `penelope bench load`: many sessions against the standalone server
sessions      `Session` / `Turn` / `Trace` / `Scale`: one typed, scaled form of any trace
traces        Claude Code and Mooncake traces -> `bench.sessions` (scaled)
tokens        deterministic token ids per trace block (shared prefix identical)
workload      seeded session sampling and staggered session starts; clipping for small replays
child         a spawned child process that returns one result or fails within a deadline
"""
