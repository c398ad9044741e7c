"""Holes across device and host: SGLang's real HiCache host pool and controller on CPU.

Stand-ins (`sglang_helpers.cpu_hicache_standins`): pinned host registration is
a no-op, sgl_kernel's `transfer_kv_direct` copy kernel is a torch index copy
(both CUDA-only), and the host pool's machine-memory budget check grants it.
Host pool, controller, `io_backend` "direct", index placement (`move_indices`),
tree and allocator are SGLang's.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import match_prefix
from sglang_helpers import (
    accounting_holds,
    build_penelope_hicache,
    cpu_hicache_standins,
    host_accounting_holds,
    insert,
    key,
)

from penelope_sglang.results import PenelopeMatch

KV = 128
CFG = CacheConfig(page_size=4, kv_size=KV)
SHARED = list(range(1, 9))


def session(base: int, pages: int) -> list[int]:
    return SHARED + list(range(base, base + 4 * pages))


@pytest.fixture(autouse=True)
def _standins() -> Iterator[None]:
    with cpu_hicache_standins():
        yield


def build(host_tokens: int):
    cache, allocator, _ = build_penelope_hicache(CFG, host_tokens)
    return cache, allocator


def fill_kv(allocator, slots: torch.Tensor, marker: float) -> None:
    pool = allocator.get_kvcache()
    for layer in range(pool.start_layer, pool.start_layer + pool.layer_num):
        pool.get_key_buffer(layer)[slots] = marker
        pool.get_value_buffer(layer)[slots] = marker + 0.5


def kv_of(allocator, slots: torch.Tensor) -> torch.Tensor:
    pool = allocator.get_kvcache()
    layer = pool.start_layer
    return torch.stack(
        [pool.get_key_buffer(layer)[slots].float(), pool.get_value_buffer(layer)[slots].float()]
    )


def fill_path(cache, allocator, tokens: list[int]) -> torch.Tensor:
    """Give every page of the path its own KV marker; return the markers per token."""
    slots = cache.path_device_indices(match_prefix(cache, tokens + [0]).last_device_node)
    for i in range(0, len(slots), 4):
        fill_kv(allocator, slots[i : i + 4], float(i // 4 + 1))
    return kv_of(allocator, slots)


def real_request(rid: str = "r") -> SimpleNamespace:
    return SimpleNamespace(rid=rid)


def test_the_front_goes_to_the_host_first_and_the_suffix_stays() -> None:
    cache, allocator = build(host_tokens=64)
    a, b = session(100, 6), session(200, 4)
    insert(cache, allocator, a)
    insert(cache, allocator, b)
    free_host = cache.host_tier.available()
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8
    # a is the coldest: its first private pages are on the host, nothing dropped
    assert cache.match_holes(key(a + [0])) == PenelopeMatch(8, (), (8, 32), host=(8, 16))
    assert cache.host_tier.available() == free_host - 8
    assert match_prefix(cache, b + [0]).device_prefix_len == len(b)
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def test_past_the_host_s_room_the_front_is_dropped() -> None:
    cache, allocator = build(host_tokens=8)  # the pool rounds up to 12 slots
    a = session(100, 6)
    insert(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    assert cache.host_tier.available() == 12
    cache.evict(EvictParams(num_tokens=12))  # fills the host exactly
    cache.evict(EvictParams(num_tokens=4))  # no room: the front is dropped, over the host span
    match = cache.match_holes(key(a + [0]))
    assert match.holes == ((8, 24),) and match.host is None and match.suffix == (24, 32)
    assert cache.counters.hole_tokens == 16 and cache.counters.host_tokens == 12
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def host_only_then_squeezed(cache, allocator):
    """a (colder) ends up all on the host; then b's front needs host room.

    Returns (a, b, markers of a's KV before any eviction)."""
    a, b = session(100, 3), session(200, 4)
    insert(cache, allocator, a)
    before = fill_path(cache, allocator, a)  # (a match: it refreshes a, so b comes after)
    insert(cache, allocator, b)
    room = cache.host_tier.available()
    assert room == 12
    cache.evict(EvictParams(num_tokens=12))  # all of a's private pages go to the host
    assert cache.match_holes(key(a + [0])) == PenelopeMatch(8, (), (8, 20), host=(8, 20))
    cache.evict(EvictParams(num_tokens=4))  # b now: a is colder and gives up a host page
    return a, b, before


def test_host_room_is_taken_from_a_colder_history_s_front() -> None:
    cache, allocator = build(host_tokens=8)  # the pool rounds up to 12 slots
    a, b, _ = host_only_then_squeezed(cache, allocator)
    assert cache.match_holes(key(a + [0])) == PenelopeMatch(8, ((8, 12),), (12, 20), host=(12, 20))
    assert cache.match_holes(key(b + [0])).host == (8, 12)
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def test_a_warmer_history_s_host_pages_are_not_dropped_for_a_colder_one() -> None:
    cache, allocator = build(host_tokens=8)
    a, b = session(100, 4), session(200, 5)
    insert(cache, allocator, b)
    insert(cache, allocator, a)  # a is warmer than b
    cache.evict(EvictParams(num_tokens=12))  # b's front fills the host
    cache.evict(EvictParams(num_tokens=4))  # b (still coldest) again: no colder host pages
    match = cache.match_holes(key(b + [0]))
    assert match.holes == ((8, 24),) and match.suffix == (24, 28)  # dropped, over its host span
    assert match_prefix(cache, a + [0]).device_prefix_len == len(a)
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def test_a_host_span_without_a_hole_loads_back_at_once_with_its_kv() -> None:
    cache, allocator = build(host_tokens=64)
    a = session(100, 6)
    insert(cache, allocator, a)
    before = fill_path(cache, allocator, a)
    insert(cache, allocator, session(200, 1))
    cache.evict(EvictParams(num_tokens=12))
    assert cache.match_holes(key(a + [0])).host == (8, 20)
    # the coordinator sees no hole: it reconnects now and plans no refill request
    assert cache.refills.plan(key(a + [0]), real_request()) is None
    result = match_prefix(cache, a + [0])
    assert result.device_prefix_len == len(a)
    after = kv_of(allocator, cache.path_device_indices(result.last_device_node))
    assert torch.equal(before, after)  # the host span came back with its own KV
    assert cache.counters.host_loaded_tokens == 12
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def test_a_hole_before_a_host_span_is_refilled_then_the_span_loads() -> None:
    cache, allocator = build(host_tokens=8)
    a, _, before = host_only_then_squeezed(cache, allocator)
    plan = cache.refills.plan(key(a + [0]), real_request())
    assert plan is not None and list(plan.token_ids) == a[:12]
    assert plan.hole == (8, 12) and plan.suffix == (12, 20)
    insert(cache, allocator, a[:12])  # the refill request's finish: [0, hole_end)
    cache.refills.release(plan.rid)
    result = match_prefix(cache, a + [0])
    assert result.device_prefix_len == len(a)
    after = kv_of(allocator, cache.path_device_indices(result.last_device_node))
    assert torch.equal(before[:, 12:], after[:, 12:])  # the host span, with its own KV
    assert cache.counters.host_loaded_tokens == 8
    accounting_holds(cache, allocator, KV)
    host_accounting_holds(cache)


def test_sglang_s_own_host_nodes_still_load_back_beside_penelope() -> None:
    """Shared pages go SGLang's way (write-back demotion) and its load_back still works."""
    cache, allocator, _ = build_penelope_hicache(CFG, 64, write_policy="write_back")
    insert(cache, allocator, SHARED)  # nothing private: a lone shared prefix
    cache.shared_ids.add(match_prefix(cache, SHARED + [0]).last_device_node)
    cache.evict(EvictParams(num_tokens=8))
    result = match_prefix(cache, SHARED + [0])
    assert result.device_prefix_len == 0
    assert cache.load_back(result.best_match_node)
    cache.ready_to_load_host_cache()
    for ack in list(cache.cache_controller.ack_load_queue):
        ack.finish_event.synchronize()
    cache.loading_check()
    assert match_prefix(cache, SHARED + [0]).device_prefix_len == 8


@pytest.mark.parametrize("seed", [0, 1])
def test_accounting_holds_on_both_tiers_through_a_random_agent_workload(seed: int) -> None:
    rng = random.Random(seed)
    cache, allocator = build(host_tokens=32)
    histories = {s: SHARED + list(range(1000 * s, 1000 * s + 4)) for s in range(1, 6)}
    for tokens in histories.values():
        insert(cache, allocator, tokens)
    for step in range(50):
        s = rng.choice(list(histories))
        tokens = histories[s]
        match = cache.match_holes(key(tokens + [0]))
        if match.record is not None:
            plan = cache.refills.plan(key(tokens + [0]), real_request(f"r{step}"))
            if plan is not None:
                if allocator.available_size() < len(plan.token_ids):
                    cache.evict(EvictParams(num_tokens=len(plan.token_ids)))
                if allocator.available_size() >= len(plan.token_ids):
                    insert(cache, allocator, list(plan.token_ids))
                cache.refills.release(plan.rid)
            accounting_holds(cache, allocator, KV)
            host_accounting_holds(cache)
        grown = tokens + list(range(tokens[-1] + 1, tokens[-1] + 1 + 4 * rng.randint(1, 3)))
        if allocator.available_size() < len(grown):
            cache.evict(EvictParams(num_tokens=len(grown) - allocator.available_size()))
        if allocator.available_size() >= len(grown):
            histories[s] = grown
            insert(cache, allocator, grown)
        accounting_holds(cache, allocator, KV)
        host_accounting_holds(cache)
    counters = cache.counters
    assert counters.host_tokens > 0 and counters.host_loaded_tokens > 0
    assert counters.hole_tokens > 0
