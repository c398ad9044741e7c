"""SGLang's own unified-radix-cache test kit, run against the penelope backend.

The kit (`sglang/test/kits/unified_radix_cache/`, shipped in SGLang's wheel)
builds real pools on CPU tensors and drives the cache through SGLang's
contract: the lock protocol under a random insert/match/lock/evict fuzz with
`sanity_check` after every step, the request insert walk
(`checkpoint_into_tree`), and KV events. Here `build_fixture` builds a
`PenelopeRadixCache`, so Penelope's eviction (holes, shelving) runs inside.
"""

from __future__ import annotations

import unittest
from array import array
from typing import Any
from unittest import mock

import pytest
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.test.kits.unified_radix_cache import insert_walk, mixins
from sglang.test.kits.unified_radix_cache.config import CONFIGS, CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import match_prefix, node_device_lock_ref
from sglang.test.kits.unified_radix_cache.kv_events import UnifiedRadixCacheKVEventsFixtures
from sglang_helpers import accounting_holds, build_penelope

FULL_ONLY = [c for c in CONFIGS if c.components == (ComponentType.FULL,) and c.page_size <= 16]


def _kit_case(base: type, cfg: CacheConfig) -> Any:
    """An instance of a kit fixture mixin bound to `cfg`, with unittest's assertions."""
    case_type = type(f"Penelope{base.__name__}", (base, unittest.TestCase), {"cfg": cfg})
    return case_type(methodName="run")


BUILT: list[Any] = []  # caches the kit built in the current test


def build_for_kit(cfg: CacheConfig, **kwargs: Any) -> tuple[Any, Any, Any]:
    """`build_penelope` for kit steps written for SWA stacks too.

    The lock fuzz releases a request's SWA peers (`free_swa`) before inserting
    and reads the SWA entry of each lock receipt; a full-attention-only cache
    has neither, so that step frees nothing and the entry reads "no SWA lock".
    """
    cache, allocator, pool = build_penelope(cfg, **kwargs)
    if not hasattr(allocator, "free_swa"):
        allocator.free_swa = lambda indices: None
    inc_lock_ref = cache.inc_lock_ref

    def inc_lock_ref_with_swa_entry(node_id: int, skip_lock_components: Any = ()) -> Any:
        receipt = inc_lock_ref(node_id, skip_lock_components)
        receipt.component_lock_uuids.setdefault(ComponentType.SWA, None)
        return receipt

    cache.inc_lock_ref = inc_lock_ref_with_swa_entry
    BUILT.append(cache)
    return cache, allocator, pool


@pytest.fixture(autouse=True)
def _kit_builds_penelope():
    BUILT.clear()
    with (
        mock.patch.object(insert_walk, "build_fixture", build_for_kit),
        mock.patch.object(mixins, "build_fixture", build_for_kit),
    ):
        yield


@pytest.mark.parametrize("cfg", FULL_ONLY, ids=lambda c: c.label)
@pytest.mark.parametrize("seed", [0, 1])
def test_kit_lock_fuzz_keeps_sanity_after_every_step(cfg: CacheConfig, seed: int) -> None:
    _kit_case(insert_walk.SegmentLockFuzzFixtures, cfg)._run_seed(seed, steps=120)
    (cache,) = BUILT
    assert cache.counters.hole_tokens > 0  # Penelope's holes formed under the kit's locks


@pytest.mark.parametrize("cfg", FULL_ONLY[:2], ids=lambda c: c.label)
def test_kit_insert_walk_of_a_running_request(cfg: CacheConfig) -> None:
    """A request's own KV goes into the tree through checkpoint_into_tree, even after a hole."""
    kit = _kit_case(mixins.UnifiedRadixCacheFixtures, cfg)
    cache, allocator, pool = build_penelope(cfg)
    ps = cfg.page_size
    shared, first = kit._make_seq(1, 2), kit._make_seq(500, 4)
    kit._insert(cache, allocator, pool, shared + first)
    kit._insert(cache, allocator, pool, shared + kit._make_seq(900, 1))
    cache.evict(EvictParams(num_tokens=ps))  # a hole at the front of `first`
    assert cache.match_holes(_key(shared + first + [0])).holes == ((2 * ps, 3 * ps),)
    turn = shared + first + kit._make_seq(700, 2)
    req, _ = kit._make_inflight_req(cache, allocator, pool, turn)
    cache.checkpoint(req, up_to=len(turn))
    assert match_prefix(cache, turn).device_prefix_len == len(turn)
    assert len(cache.shelf) == 0  # the request recomputed the hole: suffix copies freed
    cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, len(turn))])
    cache.unlock(req.lock)
    accounting_holds(cache, allocator, cfg.kv_size)


def test_kit_lock_protocol_rejects_a_receipt_on_the_wrong_node() -> None:
    cfg = FULL_ONLY[1]
    kit = _kit_case(insert_walk.SegmentLockProtocolFixtures, cfg)
    cache, allocator, pool = build_penelope(cfg)
    seq = kit._make_seq(1, 4)
    kit._insert(cache, allocator, pool, seq)
    leaf = kit._match_leaf(cache, seq)
    parent = cache.tree_core.get_parent_node_id(leaf)
    receipt = cache.inc_lock_ref(leaf)
    kit._assert_protocol_violation(
        lambda: cache.dec_lock_ref(parent, receipt.to_dec_params()), "lock receipt anchored on node"
    )
    assert node_device_lock_ref(cache, leaf, ComponentType.FULL) == 1
    cache.evict(EvictParams(num_tokens=cfg.kv_size))  # a locked path is never shelved
    assert match_prefix(cache, seq).device_prefix_len == len(seq)
    cache.dec_lock_ref(leaf, receipt.to_dec_params())
    accounting_holds(cache, allocator, cfg.kv_size)


class TestKitKVEvents(UnifiedRadixCacheKVEventsFixtures, unittest.TestCase):
    """The kit's KV-event helpers: a shelved chain is removed, a reconnected one stored."""

    cfg = CacheConfig(page_size=4, kv_size=128)

    def test_events_for_hole_and_reconnection(self) -> None:
        cache, allocator, _ = build_penelope(self.cfg, enable_kv_cache_events=True)
        shared, private = list(range(1, 9)), list(range(100, 116))
        self._insert(cache, allocator, shared + private, session_id="a")
        self._insert(cache, allocator, shared + list(range(200, 204)), session_id="b")
        stored = self._stored_events(cache)
        self.assertEqual(len(self._event_hashes(stored)), 7)
        cache.evict(EvictParams(num_tokens=4))
        removed = self._removed_events(cache)
        self.assertEqual(len(self._event_hashes(removed)), 4)
        self._insert(cache, allocator, shared + private[:4])
        hashes = self._event_hashes(self._stored_events(cache))
        self.assertEqual(hashes, self._event_hashes(stored)[2:6])  # same page identities

    def test_a_reconnected_suffix_keeps_its_tenant_namespace(self) -> None:
        cache, allocator, _ = build_penelope(self.cfg, enable_kv_cache_events=True)
        shared, private = list(range(1, 9)), list(range(100, 116))
        self._insert(cache, allocator, shared + private, cache_salt="acme")
        self._insert(cache, allocator, shared + [200, 201, 202, 203], cache_salt="acme")
        cache.evict(EvictParams(num_tokens=4))
        self.assertEqual(cache.match_holes(_key(shared + private, "acme")).suffix, (12, 24))
        self.assertEqual(cache.match_holes(_key(shared + private)).suffix, None)
        cache.take_events()
        self._insert(cache, allocator, shared + private[:4], cache_salt="acme")
        stored = self._stored_events(cache)
        self.assertEqual(sum(len(e.token_ids) for e in stored), 16)
        self.assertTrue(all(e.cache_salt == "acme" for e in stored))


def _key(tokens: list[int], cache_salt: str | None = None) -> Any:
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return RadixKey(array("q", tokens), cache_salt=cache_salt)
