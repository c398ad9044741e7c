"""The refill path with SGLang's real request objects and release code (CPU pools).

A returning request matches a hole; the hook parks it and queues a refill
request; the refill runs like any request (its KV written to its row, then
`release_kv_cache`, SGLang's own release path) and its insert reconnects the
suffix; the real request is queued and SGLang's own match reaches through the
suffix, so its `prefix_len` (which becomes `cached_tokens`) counts it.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace
from typing import Any

import pytest
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.common import match_kv_cache, release_kv_cache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang_helpers import accounting_holds, build_penelope, insert

from penelope_sglang import hooks
from penelope_sglang.refill import REFILL_RID_PREFIX, is_refill_rid

KV = 128
CFG = CacheConfig(page_size=4, kv_size=KV)
SHARED = list(range(1, 9))
HISTORY = SHARED + list(range(100, 124))  # 8 shared + 24 private tokens
TURN = HISTORY + [500, 501, 502, 503, 504]  # the session returns with a new turn


def new_req(rid: str, tokens: list[int]) -> Req:
    return Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", tokens),
        sampling_params=SamplingParams(temperature=0, max_new_tokens=4),
    )


def run_prefill(cache: Any, allocator: Any, pool: Any, req: Req) -> None:
    """What the scheduler does for a request that runs to completion: match, compute, release."""
    pool.alloc([req])
    match_kv_cache(req, cache, req.origin_input_ids)
    cache_lock = cache.lock(req.last_node)
    prefix = cache.prefix_device_indices(req)
    total = len(req.origin_input_ids)
    fresh = allocator.alloc(total - req.prefix_len)
    pool.write((req.kv.req_pool_idx, slice(0, req.prefix_len)), prefix)
    pool.write((req.kv.req_pool_idx, slice(req.prefix_len, total)), fresh)
    req.full_untruncated_fill_ids = array("q", req.origin_input_ids)
    req.extend_end = total
    req.kv.kv_committed_len = total
    req.kv.kv_allocated_len = total
    req.kv.cache_protected_len = req.prefix_len
    req.lock = cache_lock
    req.extra_key = None
    release_kv_cache(req, cache, checkpoint=True)


@pytest.fixture
def holed():
    """A cache where HISTORY has a hole at [8, 16) and a shelved suffix [16, 32)."""
    cache, allocator, pool = build_penelope(CFG)
    insert(cache, allocator, HISTORY)
    insert(cache, allocator, SHARED + list(range(200, 208)))
    cache.evict(EvictParams(num_tokens=8))
    return cache, allocator, pool


def fake_scheduler(cache: Any) -> SimpleNamespace:
    queued: list[Any] = []
    scheduler = SimpleNamespace(tree_cache=cache, waiting_queue=queued)
    scheduler._add_request_to_queue = lambda req, is_retracted=False: hooks.add_request_to_queue(
        lambda s, r, retracted=False: queued.append(r), scheduler, req, is_retracted
    )
    return scheduler


def test_a_returning_request_is_parked_behind_its_refill(holed) -> None:
    cache, _, _ = holed
    scheduler = fake_scheduler(cache)
    real = new_req("turn-2", TURN)
    scheduler._add_request_to_queue(real)
    (refill,) = scheduler.waiting_queue
    assert is_refill_rid(refill.rid) and refill.rid.startswith(REFILL_RID_PREFIX)
    assert list(refill.origin_input_ids) == HISTORY[:16]  # prefix + hole
    assert refill.sampling_params.max_new_tokens == 1
    assert cache.refills.pending == 1 and cache.shelf.pinned_tokens() == 16


def test_the_refill_reconnects_and_the_request_counts_the_suffix(holed) -> None:
    cache, allocator, pool = holed
    scheduler = fake_scheduler(cache)
    real = new_req("turn-2", TURN)
    scheduler._add_request_to_queue(real)
    refill = scheduler.waiting_queue.pop()
    run_prefill(cache, allocator, pool, refill)  # SGLang computes [8, 16) and releases
    assert len(cache.shelf) == 0 and cache.refills.pending == 0
    ran = []
    hooks.get_next_batch_to_run(lambda s: ran.append(list(s.waiting_queue)), scheduler)
    assert ran == [[real]]
    match_kv_cache(real, cache, real.origin_input_ids)
    assert real.prefix_len == len(HISTORY)  # prefix + recomputed hole + reused suffix
    assert cache.counters.reconnected_tokens == 16
    accounting_holds(cache, allocator, KV)


def test_an_aborted_refill_still_releases_its_request(holed) -> None:
    cache, _, _ = holed
    scheduler = fake_scheduler(cache)
    real = new_req("turn-2", TURN)
    scheduler._add_request_to_queue(real)
    refill = scheduler.waiting_queue.pop()
    hooks.release_aborted_request(lambda s, r: None, scheduler, refill)
    assert cache.shelf.pinned_tokens() == 0
    hooks.get_next_batch_to_run(lambda s: None, scheduler)
    assert scheduler.waiting_queue == [real]  # queued as is: no second refill


def test_requests_without_a_hole_and_retracted_ones_pass_through(holed) -> None:
    cache, _, _ = holed
    scheduler = fake_scheduler(cache)
    fresh = new_req("new", list(range(700, 720)))
    retracted = new_req("retracted", TURN)
    scheduler._add_request_to_queue(fresh)
    scheduler._add_request_to_queue(retracted, True)
    assert scheduler.waiting_queue == [fresh, retracted] and cache.refills.pending == 0


def test_refill_outputs_are_never_streamed() -> None:
    streamed: list[list[str]] = []
    reqs = [SimpleNamespace(rid=f"{REFILL_RID_PREFIX}0"), SimpleNamespace(rid="user")]
    hooks.stream_output(lambda s, rs, *a: streamed.append([r.rid for r in rs]), None, reqs, False)
    hooks.stream_output(
        lambda s, rs, *a: streamed.append([r.rid for r in rs]), None, reqs[:1], False
    )
    assert streamed == [["user"]]


def test_hooks_are_inert_for_sglangs_default_cache() -> None:
    scheduler = SimpleNamespace(tree_cache=object())
    queued: list[Any] = []
    hooks.add_request_to_queue(
        lambda s, r, retracted=False: queued.append(r), scheduler, new_req("x", TURN)
    )
    assert [r.rid for r in queued] == ["x"]
