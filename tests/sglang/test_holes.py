"""Penelope's holes in SGLang's real tree (CPU pools): order, matches, refill, accounting."""

from __future__ import annotations

import random

import pytest
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.events import BlockRemoved, BlockStored
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import match_prefix
from sglang_helpers import accounting_holds, build_penelope, insert, key

from penelope_sglang.results import PenelopeMatch

KV = 128
CFG = CacheConfig(page_size=4, kv_size=KV)
SHARED = list(range(1, 9))  # two pages every session starts with


def session(base: int, pages: int) -> list[int]:
    return SHARED + list(range(base, base + 4 * pages))


@pytest.fixture
def built():
    cache, allocator, _ = build_penelope(CFG, enable_kv_cache_events=True)
    return cache, allocator


def test_coldest_session_loses_its_front_first(built) -> None:
    cache, allocator = built
    a, b, c = session(100, 6), session(200, 4), session(300, 4)
    for tokens in (a, b, c):  # a is the coldest, c the hottest
        insert(cache, allocator, tokens)
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8
    assert cache.match_holes(key(a + [0])) == PenelopeMatch(8, ((8, 16),), (16, 32))
    assert cache.match_holes(key(b + [0])).prefix_len == len(b)
    assert cache.match_holes(key(c + [0])).prefix_len == len(c)
    accounting_holds(cache, allocator, KV)


def test_within_a_session_the_lowest_positions_go_first(built) -> None:
    cache, allocator = built
    a = session(100, 6)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 2))
    for hole_end in (12, 16, 20):
        cache.evict(EvictParams(num_tokens=4))
        assert cache.match_holes(key(a + [0])).holes == ((8, hole_end),)
        accounting_holds(cache, allocator, KV)


def test_shared_pages_go_last(built) -> None:
    cache, allocator = built
    a, b = session(100, 2), session(200, 2)
    insert(cache, allocator, a)
    insert(cache, allocator, b)
    cache.evict(EvictParams(num_tokens=16))  # exactly the private pages
    assert match_prefix(cache, SHARED + [0]).device_prefix_len == 8
    cache.evict(EvictParams(num_tokens=4))  # nothing private left: SGLang's LRU takes the prefix
    assert match_prefix(cache, SHARED + [0]).device_prefix_len == 0
    accounting_holds(cache, allocator, KV)


def test_a_lone_session_is_all_private_from_position_zero(built) -> None:
    cache, allocator = built
    tokens = list(range(1, 25))
    insert(cache, allocator, tokens)
    cache.evict(EvictParams(num_tokens=4))
    assert cache.match_holes(key(tokens + [0])) == PenelopeMatch(0, ((0, 4),), (4, 24))


def test_match_needs_the_same_history_through_the_hole(built) -> None:
    cache, allocator = built
    a = session(100, 6)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    cache.evict(EvictParams(num_tokens=4))
    other = a[:9] + [7] + a[10:]
    assert cache.match_holes(key(other)).holes == ()
    shorter = a[:22]  # reuses the suffix's whole pages only
    assert cache.match_holes(key(shorter)).suffix == (12, 20)


def test_refill_reconnects_the_suffix_and_sglang_counts_it(built) -> None:
    cache, allocator = built
    a = session(100, 6)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    cache.evict(EvictParams(num_tokens=8))
    assert match_prefix(cache, a + [0]).device_prefix_len == 8  # SGLang alone sees the hole
    insert(cache, allocator, a[:16])  # what the refill request's finish inserts
    assert len(cache.shelf) == 0
    assert match_prefix(cache, a + [0]).device_prefix_len == len(a)
    assert cache.counters.reconnected_tokens == 16
    accounting_holds(cache, allocator, KV)


def test_a_full_recompute_frees_the_shelved_duplicates(built) -> None:
    cache, allocator = built
    a = session(100, 6)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    cache.evict(EvictParams(num_tokens=4))
    free_before = allocator.available_size()
    insert(cache, allocator, a + list(range(900, 904)))  # the request recomputed everything
    assert len(cache.shelf) == 0 and cache.counters.duplicate_tokens == 20
    assert allocator.available_size() == free_before - 4 - 4  # the hole page + the new page
    accounting_holds(cache, allocator, KV)


def test_kv_events_follow_the_suffix_out_and_back(built) -> None:
    cache, allocator = built
    a = session(100, 4)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    cache.take_events()
    cache.evict(EvictParams(num_tokens=4))
    removed = [e for e in cache.take_events() if isinstance(e, BlockRemoved)]
    assert sum(len(e.block_hashes) for e in removed) == 4  # the whole private chain
    insert(cache, allocator, a[:12])
    stored = [e for e in cache.take_events() if isinstance(e, BlockStored)]
    assert [t for e in stored for t in e.token_ids] == a[8:]  # hole, then reconnected suffix


def test_locked_paths_and_pinned_suffixes_are_not_taken(built) -> None:
    cache, allocator = built
    a, b = session(100, 4), session(200, 4)
    insert(cache, allocator, a)
    insert(cache, allocator, b)
    lock = cache.lock(match_prefix(cache, a + [0]).last_device_node)  # a is running
    cache.evict(EvictParams(num_tokens=4))
    record = cache.match_holes(key(b + [0])).record
    assert record is not None
    cache.pin(record)
    assert cache.protected_size() >= record.suffix_len
    cache.evict(EvictParams(num_tokens=64))
    assert match_prefix(cache, a + [0]).device_prefix_len == len(a)
    assert record.suffix_len == 12
    accounting_holds(cache, allocator, KV)
    cache.unpin(record)
    cache.unlock(lock)
    accounting_holds(cache, allocator, KV)


def test_reset_clears_the_shelf(built) -> None:
    cache, allocator = built
    insert(cache, allocator, session(100, 4))
    insert(cache, allocator, session(200, 1))
    cache.evict(EvictParams(num_tokens=4))
    assert len(cache.shelf) == 1
    cache.reset()
    assert len(cache.shelf) == 0 and cache.evictable_size() == 0


def room(cache, allocator, n: int) -> bool:
    """Evict until n tokens fit, as SGLang's allocator does; False when they cannot."""
    if allocator.available_size() < n:
        cache.evict(EvictParams(num_tokens=n - allocator.available_size()))
    return allocator.available_size() >= n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accounting_holds_after_every_step_of_a_random_agent_workload(seed: int) -> None:
    """Sessions grow turn by turn, get evicted, return, and are refilled."""
    rng = random.Random(seed)
    cache, allocator, _ = build_penelope(CFG)
    histories = {s: SHARED + list(range(1000 * s, 1000 * s + 4)) for s in range(1, 6)}
    for tokens in histories.values():
        insert(cache, allocator, tokens)
    for _ in range(60):
        s = rng.choice(list(histories))
        tokens = histories[s]
        match = cache.match_holes(key(tokens + [0]))
        if match.holes and rng.random() < 0.7:
            cache.pin(match.record)  # as the refill coordinator does
            if room(cache, allocator, match.holes[-1][1]):
                insert(cache, allocator, tokens[: match.holes[-1][1]])  # the refill
            cache.unpin(match.record)
            accounting_holds(cache, allocator, KV)
        grown = tokens + list(range(tokens[-1] + 1, tokens[-1] + 1 + 4 * rng.randint(1, 3)))
        if room(cache, allocator, len(grown)):
            histories[s] = grown
            insert(cache, allocator, grown)
        accounting_holds(cache, allocator, KV)
    assert cache.counters.hole_tokens > 0 and cache.counters.reconnected_tokens > 0


def test_models_with_sliding_window_layers_are_refused() -> None:
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    swa = CacheConfig(
        page_size=4, components=(ComponentType.FULL, ComponentType.SWA), sliding_window_size=4
    )
    with pytest.raises(ValueError, match="full-attention models only"):
        build_penelope(swa)
