"""The host tier under the cache: demotion keeps each page's KV, host eviction forms holes.

`CacheWorld.check` verifies, after every operation, integrity per tier and
that every device and host page holds the KV of the page id the tree gives it.
"""

from __future__ import annotations

from cache_testkit import CacheWorld

from penelope_engine.cache.tier import Tier

PREFIX = (0, 4, Tier.DEVICE)
FULL = [(0, 16, Tier.DEVICE)]


def sessions(policy: str, host_pages: int, write_through: bool = False) -> CacheWorld:
    """s0, s1, s2 (in that order): a 1-page shared prefix and 3 private pages each."""
    world = CacheWorld(policy, device_pages=10, shared_pages=1, host_pages=host_pages)
    for name in ("s0", "s1", "s2"):
        world.turn(name, 3, write_through=write_through)
        world.check()
    return world


def test_write_through_makes_demotion_free() -> None:
    world = sessions("penelope", host_pages=20, write_through=True)
    assert world.cache._host.num_used == 10  # the shared page once, 3 private pages each
    assert world.hold(3)
    world.check()
    assert world.segments("s0") == [PREFIX, (4, 16, Tier.HOST)]
    assert world.cache._host.num_used == 10  # no new host page, no copy
    assert ("penelope", "demote", 3) in world.cache.stats().evictions


def test_demotion_copies_the_kv_when_there_is_no_host_copy() -> None:
    world = sessions("penelope", host_pages=20)
    assert world.cache._host.num_used == 0
    assert world.hold(3)
    world.check()  # the host pages hold the evicted pages' KV
    assert world.segments("s0") == [PREFIX, (4, 16, Tier.HOST)]
    assert world.cache._host.num_used == 3


def test_host_eviction_forms_holes_at_the_coldest_front() -> None:
    world = sessions("penelope", host_pages=3)
    assert world.hold(3)
    assert world.segments("s0") == [PREFIX, (4, 16, Tier.HOST)]
    assert world.hold(2)  # s1's front goes to the host; s0's front leaves the host
    world.check()
    assert world.segments("s1") == [PREFIX, (4, 12, Tier.HOST), (12, 16, Tier.DEVICE)]
    assert world.segments("s0") == [PREFIX, (4, 12, Tier.HOLE), (12, 16, Tier.HOST)]
    assert ("penelope", "host_drop", 2) in world.cache.stats().evictions


def test_a_returning_session_fills_its_holes_and_host_pages_back_on_the_device() -> None:
    world = sessions("penelope", host_pages=3)
    assert world.hold(5)
    world.release()
    assert world.turn("s0", 1)
    world.check()
    assert world.segments("s0") == [(0, 20, Tier.DEVICE)]


def test_lru_never_forms_a_hole_with_a_host_tier() -> None:
    world = CacheWorld("lru", device_pages=4, shared_pages=1, host_pages=1)
    world.turn("s0", 3)
    assert world.hold(1)
    assert world.segments("s0") == [(0, 12, Tier.DEVICE), (12, 16, Tier.HOST)]
    assert world.hold(1)
    world.check()
    assert world.holes() == 0, world.segments("s0")
