"""The per-session view of SGLang's tree, through the Ray router's core; hints and ledger.

Two penelope caches stand for two SGLang replicas. Requests name their session in
SGLang's `kv_hints` envelope, as the adapter sends it; each replica's snapshot
(what `get_internal_state` returns) becomes the adapter's digests, the wire digest
Ray hands the router, and the router's choice.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from sglang.srt.managers.kv_hints import decode_kv_hints_envelope
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import match_prefix
from sglang_helpers import (
    accounting_holds,
    build_penelope,
    build_penelope_hicache,
    cpu_hicache_standins,
    insert,
    key,
)

from penelope_engine.cache.pages import FirstPages, PageNaming
from penelope_sglang import digests, hooks
from penelope_sglang.sessions import SessionHint
from router.core import AffinityRouter
from router.digest import build_digest, decode_digest
from router.schema import ReplicaView, RouteRequest

KV = 256
CFG = CacheConfig(page_size=4, kv_size=KV)
SHARED = list(range(1, 17))  # four shared pages
NAMING = PageNaming(4, "sglang:test-model")


@pytest.fixture(autouse=True)
def _standins() -> Iterator[None]:
    with cpu_hicache_standins():
        yield


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def request(session: str, tokens: list[int], **hints) -> SimpleNamespace:
    envelope = decode_kv_hints_envelope(SessionHint(session, **hints).envelope(f"m-{session}"))
    return SimpleNamespace(
        rid=f"r-{session}-{len(tokens)}",
        origin_input_ids=tokens,
        output_ids=[],
        kv_hints=envelope,
        extra_key=None,
        cache_salt=None,
        cached_tokens=0,
    )


def turn(cache, allocator, session: str, tokens: list[int], **hints) -> SimpleNamespace:
    """One request of `session`: queued (hints), computed and cached, released."""
    cache.evictor.clock.t += 1.0  # each turn a second after the last
    req = request(session, tokens, **hints)
    cache.note_request(req, key(tokens[:-1]))
    req.cached_tokens = match_prefix(cache, tokens).device_prefix_len
    insert(cache, allocator, tokens)
    cache.views.settle(session, req)
    return req


def history(base: int, pages: int) -> list[int]:
    return SHARED + list(range(base, base + 4 * pages))


def view(replica: str, cache) -> ReplicaView:
    snap = cache.views.snapshot()
    wire = build_digest(
        digests.session_digests(snap),
        digests.shared_prefix_hashes(snap, NAMING.hasher()),
        now=snap["clock"],
        queue_len=0,
    )
    return ReplicaView(replica, queue_len=0, max_ongoing=8, digest=decode_digest(wire))


@pytest.fixture
def replicas():
    built = {}
    for name in ("r1", "r2"):
        cache, allocator, _ = build_penelope_hicache(CFG, 64)
        cache.evictor.clock = Clock()
        built[name] = (cache, allocator)
    return built


def test_a_returning_session_goes_to_the_replica_holding_it(replicas) -> None:
    c1, a1 = replicas["r1"]
    c2, a2 = replicas["r2"]
    s1, s2 = history(100, 6), history(200, 6)
    turn(c1, a1, "s1", s1)
    turn(c2, a2, "s2", s2)
    views = [view("r1", c1), view("r2", c2)]
    held = views[0].digest.sessions["s1"]
    assert (held.device_tokens, held.host_tokens) == (len(s1), 0)
    router = AffinityRouter()
    for sid, home in (("s1", "r1"), ("s2", "r2")):
        decision = router.rank(views, RouteRequest(session_id=sid))
        assert decision.ranks[0] == (home,) and decision.reason == "holder"


def test_a_session_demoted_to_the_host_still_routes_home_and_counts_there(replicas) -> None:
    c1, a1 = replicas["r1"]
    s1 = history(100, 6)
    turn(c1, a1, "s1", s1)
    turn(c1, a1, "s3", history(300, 2))
    c1.evict(EvictParams(num_tokens=8))  # s1's front: to the host
    held = view("r1", c1).digest.sessions["s1"]
    assert (held.device_tokens, held.host_tokens) == (len(s1) - 8, 8)
    views = [view("r1", c1), view("r2", replicas["r2"][0])]
    assert AffinityRouter().rank(views, RouteRequest(session_id="s1")).ranks[0] == ("r1",)


def test_shared_prefix_pages_are_named_as_the_ingress_names_a_prompt(replicas) -> None:
    c1, a1 = replicas["r1"]
    turn(c1, a1, "s1", history(100, 2))
    turn(c1, a1, "s2", history(200, 2))  # the four SHARED pages are now shared
    published = view("r1", c1).digest.prefix_hashes
    first_pages = FirstPages(NAMING)(tuple(history(900, 3)), "default", 8)
    assert set(first_pages[:4]) <= published and not set(first_pages[4:]) & published


def test_retain_s_pins_a_session_until_it_runs_out(replicas) -> None:
    cache, allocator = replicas["r1"]
    clock = cache.evictor.clock
    kept = history(100, 4)
    turn(cache, allocator, "kept", kept, retain_s=30.0)
    turn(cache, allocator, "other", history(200, 4))
    cache.evict(EvictParams(num_tokens=KV))  # everything evictable goes
    assert match_prefix(cache, kept + [0]).device_prefix_len == len(kept)
    accounting_holds(cache, allocator, KV)
    clock.t += 31.0
    cache.evict(EvictParams(num_tokens=KV))
    assert match_prefix(cache, kept + [0]).device_prefix_len < len(kept)
    accounting_holds(cache, allocator, KV)


def test_end_session_and_expected_gap_order_the_victims() -> None:
    cache, allocator, _ = build_penelope(CFG)
    clock = cache.evictor.clock = Clock()
    soon, later, ended = history(100, 2), history(200, 2), history(300, 2)
    turn(cache, allocator, "ended", ended, end_session=True)  # the oldest would go first
    clock.t += 1
    turn(cache, allocator, "soon", soon, expected_gap_s=5.0)
    clock.t += 1
    turn(cache, allocator, "later", later, expected_gap_s=600.0)
    clock.t += 1
    order = []
    for _ in range(3):
        cache.evict(EvictParams(num_tokens=8))
        order.append(
            next(
                name
                for name, tokens in (("soon", soon), ("later", later), ("ended", ended))
                if name not in order and match_prefix(cache, tokens + [0]).device_prefix_len < 24
            )
        )
    assert order == ["ended", "later", "soon"]  # ended first, then the latest expected return


def test_the_ledger_tells_evicted_tokens_from_new_ones() -> None:
    cache, allocator, _ = build_penelope(CFG)
    cache.evictor.clock = Clock()
    s1 = history(100, 6)
    turn(cache, allocator, "s1", s1)
    turn(cache, allocator, "s2", history(200, 6))
    cache.evict(EvictParams(num_tokens=KV))  # s1's pages are gone (and s2's)
    grown = s1 + list(range(500, 512))
    req = request("s1", grown)
    cache.note_request(req, key(grown[:-1]))
    req.cached_tokens = match_prefix(cache, grown).device_prefix_len
    details = hooks.get_cached_tokens_details(lambda _s, _r: None, None, req)
    usage = digests.usage_of(
        {
            "prompt_tokens": len(grown),
            "cached_tokens": req.cached_tokens,
            "cached_tokens_details": details,
        },
        completion_tokens=1,
    )
    assert usage.recomputed_tokens == len(s1) - req.cached_tokens  # it had them once
    assert usage.new_tokens == len(grown) - len(s1)  # never cached for s1
    assert usage.misses.evicted_device == usage.recomputed_tokens
    assert usage.misses.new == usage.new_tokens


def test_a_request_without_a_session_is_a_victim_before_any_session() -> None:
    cache, allocator, _ = build_penelope(CFG)
    cache.evictor.clock = Clock()
    anonymous = history(900, 2)
    turn(cache, allocator, "s1", history(100, 2))
    insert(cache, allocator, anonymous)  # newer, but names no session
    cache.evict(EvictParams(num_tokens=8))
    assert match_prefix(cache, anonymous + [0]).device_prefix_len == len(SHARED)
    assert match_prefix(cache, history(100, 2) + [0]).device_prefix_len == len(SHARED) + 8
