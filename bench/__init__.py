"""Benchmarks: trace replay, the discrete-event simulator, micro-benchmarks, reports.

traces      Claude Code and Mooncake traces -> `Session` / `Turn` (scaled)
tokens      deterministic token ids per trace block (shared prefix identical)
workload    seeded session sampling and staggered session starts; clipping for small replays
costmodel   Qwen3 8B/14B/32B on H100/H200 (roofline), and a CPU model fit from timings
simcache    one simulated replica's cache: the real PrefixCache, policies and planner
simreplica  continuous batching with chunked prefill, decode steps, PCIe copies
sim         the event loop: sessions, tool gaps, routing by the real router core
metrics     per-request and per-session records, one run's summary
report      rows over seeds (mean, spread, per-seed ratios), JSON, table, PNG plots
simulate    `penelope bench simulate`
ablation    each lever alone and together, seed by seed, from simulate JSON (Markdown, PNG)
replayloop  sessions through the real engine in wall-clock time, tool gaps scaled
steptimer   each real engine step's load (as the simulator counts it) and its time
calibrate   fit the CPU cost model from engine steps; simulator vs replay TTFT error
replay      `penelope bench replay` (and `--calibrate`)
recompute   `penelope bench recompute`: rebuilding a front vs a tail
cache_ops   `penelope bench cache-ops`: the cache's bookkeeping per request
store_bench `penelope bench store`: the Arrow store
"""
