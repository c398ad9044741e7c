"""Penelope's victim order on SGLang's real tree nodes."""

from __future__ import annotations

from array import array

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import match_prefix
from sglang_helpers import build_penelope, insert

from penelope_sglang.policy import coldest_session, private_chain, private_chains
from penelope_sglang.shelf import ShelvedSuffix

CFG = CacheConfig(page_size=4, kv_size=128)
SHARED = list(range(1, 9))


def leaf_of(cache, tokens):
    return cache.tree_core.node_by_id(match_prefix(cache, tokens).last_device_node)


def test_a_chain_stops_below_the_branch_point() -> None:
    cache, allocator, _ = build_penelope(CFG)
    a = SHARED + list(range(100, 116))
    insert(cache, allocator, a)
    insert(cache, allocator, a[:16] + list(range(300, 304)))  # a turn branches off a
    insert(cache, allocator, SHARED + list(range(200, 204)))
    chain = private_chain(leaf_of(cache, a))
    assert chain is not None and chain.hole_start == 16 and chain.num_tokens == 8


def test_locked_nodes_and_anchors_end_a_chain() -> None:
    cache, allocator, _ = build_penelope(CFG)
    a = SHARED + list(range(100, 116))
    insert(cache, allocator, a)
    leaf = leaf_of(cache, a)
    assert private_chain(leaf).hole_start == 0  # a lone session is private from position 0
    assert private_chain(leaf, anchors={leaf.id}) is None
    lock = cache.lock(leaf.id)
    assert private_chains(cache.tree_core.evictable_device_leaves) == []
    cache.unlock(lock)


def test_the_coldest_session_wins_and_pinned_suffixes_are_skipped() -> None:
    cache, allocator, _ = build_penelope(CFG)
    insert(cache, allocator, SHARED + list(range(100, 108)))
    insert(cache, allocator, SHARED + list(range(200, 208)))
    chains = private_chains(cache.tree_core.evictable_device_leaves)
    older = min(chains, key=lambda c: c.last_access)
    shelved = ShelvedSuffix(
        (None, None),
        array("q", range(16)),
        0,
        4,
        torch.arange(12),
        last_access=older.last_access - 1,
        pins=1,
    )
    assert coldest_session(chains, [shelved]) is older
    shelved.pins = 0
    assert coldest_session(chains, [shelved]) is shelved


def test_holes_never_break_the_load_back_invariant() -> None:
    """Every device node's ancestors stay device-resident (what SGLang's load-back assumes)."""
    cache, allocator, _ = build_penelope(CFG)
    for base in (100, 200, 300):
        insert(cache, allocator, SHARED + list(range(base, base + 16)))
    cache.evict(EvictParams(num_tokens=12))
    nodes = [cache.tree_core.root_node]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children.values())
        cur = node
        while node.component_data[0].value is not None and cur.parent is not None:
            assert cur.parent.component_data[0].value is not None
            cur = cur.parent
    assert len(cache.shelf) >= 1
