"""Eviction by a policy whose keys move with time works under a live clock."""

import itertools

import numpy as np

from penelope_engine.cache import PrefixCache
from penelope_engine.pages import PageHasher


def test_return_aware_evicts_under_a_clock_that_moves_on_every_read() -> None:
    ticks = itertools.count()
    cache = PrefixCache(4, 8, policy="return_aware", time_fn=lambda: 100.0 * next(ticks))
    hasher = PageHasher(4, "t")
    for sid in ("a", "b"):
        hashes = hasher.hashes(np.arange(16) + (0 if sid == "a" else 1000))
        cache.on_arrival(sid)
        cache.on_start(sid)
        cache.insert(hashes, cache.allocate(4), sid)
        cache.on_turn_end(sid, "end_turn")  # overdue soon: keys move with the clock
    pages = cache.allocate(6)  # must evict 6 of the 8 cached pages
    assert len(pages) == 6
    cache.check_integrity(request_pages=6)
