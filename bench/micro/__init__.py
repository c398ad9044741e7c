"""Micro-benchmarks: one component at a time.

Modules:
    cache_ops    `penelope bench cache-ops`: the cache's bookkeeping per request
    recompute    `penelope bench recompute`: rebuilding a front vs a tail
    store_bench  `penelope bench store`: the Arrow store against raw file copies
    tiers        `penelope bench tiers`: agent sessions through device, host and store,
                 exactly
"""
