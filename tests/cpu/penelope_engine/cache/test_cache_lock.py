"""Locking a match pins exactly the matched pages, not the rest of the last node."""

import numpy as np

from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier


def test_lock_match_leaves_pages_past_the_match_evictable() -> None:
    book = Sessions(lambda: 0.0)
    cache = PrefixCache(4, 12, policy="penelope", sessions=book)
    hasher = PageHasher(4, "t")
    history = np.arange(40)  # 10 pages in one node
    hashes = hasher.hashes(history)
    book.arrive("a")
    cache.insert(hashes, cache.allocate(10), "a")
    # A request that shares only the first 3 pages, then diverges.
    other = hasher.hashes(np.concatenate([history[:12], np.arange(500, 520)]))
    match = cache.match(other)
    assert match.num_pages == 3
    handle = cache.lock_match(match)
    assert cache.evictable() == 7  # the 7 pages past the match stay evictable
    fresh = cache.allocate(9)  # 2 free + 7 evicted
    cache.check_integrity(request_pages=9)
    assert [s.where for s in cache.match(other).segments(4)] == [Tier.DEVICE]
    cache.unlock(handle)
    cache.free(fresh)
    cache.check_integrity()


def test_lock_match_of_nothing_is_a_no_op() -> None:
    cache = PrefixCache(4, 4, sessions=Sessions(lambda: 0.0))
    handle = cache.lock_match(cache.match(PageHasher(4, "t").hashes(np.arange(8))))
    assert handle.node is None
    cache.unlock(handle)
    cache.check_integrity()
