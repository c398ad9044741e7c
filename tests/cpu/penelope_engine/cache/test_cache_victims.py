"""Which pages each policy evicts, in small scenarios written out by hand.

Every session below shares a 1-page prefix (tokens 0..3); segments are in tokens.
"""

from __future__ import annotations

import math

import pytest
from cache_testkit import CacheWorld

from bench.sim.oracle import tell_next_arrival
from penelope_engine.cache.eviction import EVICTION_POLICIES, GreedyDualPolicy
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.errors import CapacityError, UnknownNameError

PREFIX = (0, 4, Tier.DEVICE)


def three_sessions(policy: str) -> CacheWorld:
    """s0, s1, s2 (in that order) with 3 private pages each; the pool is full."""
    world = CacheWorld(policy, device_pages=10, shared_pages=1)
    for name in ("s0", "s1", "s2"):
        world.turn(name, 3)
    assert world.cache._device.num_free == 0
    return world


def test_penelope_makes_a_hole_at_the_front_of_the_coldest_session() -> None:
    world = three_sessions("penelope")
    assert world.hold(2)
    world.check()
    assert world.segments("s0") == [PREFIX, (4, 12, Tier.HOLE), (12, 16, Tier.DEVICE)]
    assert world.segments("s1") == world.segments("s2") == [(0, 16, Tier.DEVICE)]
    assert world.hold(1)  # the suffix goes last: the whole private history is gone now
    assert world.segments("s0") == [PREFIX]


def test_lru_takes_the_tail_of_the_least_recently_used_leaf() -> None:
    world = three_sessions("lru")
    assert world.hold(2)
    world.check()
    assert world.segments("s0") == [(0, 8, Tier.DEVICE)]
    assert world.segments("s1") == world.segments("s2") == [(0, 16, Tier.DEVICE)]


@pytest.mark.parametrize("policy", sorted(EVICTION_POLICIES))
def test_shared_pages_go_only_when_nothing_private_is_left(policy: str) -> None:
    world = three_sessions(policy)
    assert world.hold(9)
    world.check()
    assert [world.segments(s) for s in ("s0", "s1", "s2")] == [[PREFIX]] * 3
    assert world.hold(1)
    assert world.cache.match(world.hashes("s0")).segments(4) == ()
    world.release()
    world.check()


def test_locked_paths_are_skipped() -> None:
    world = three_sessions("penelope")
    world.lock_session("s0")
    assert world.hold(3)
    assert world.segments("s0") == [(0, 16, Tier.DEVICE)]
    assert world.segments("s1") == [PREFIX]
    assert not world.hold(7)  # only s2's 3 private pages are evictable
    world.unlock_session("s0")
    world.check()


def test_an_allocation_that_cannot_fit_raises_and_evicts_nothing() -> None:
    world = three_sessions("penelope")
    world.lock_session("s2")
    before = [world.segments(s) for s in ("s0", "s1", "s2")]
    with pytest.raises(CapacityError, match="need 8 device pages"):
        world.cache.allocate(8)  # 6 pages are evictable, 4 are locked
    world.check()
    assert [world.segments(s) for s in ("s0", "s1", "s2")] == before


def timed_turn(world: CacheWorld, name: str, at: float, pages: int, stop: str) -> None:
    world.clock.t = at - 1  # `turn` ticks once
    world.turn(name, pages, stop)


def tool_loop_and_user_turn() -> CacheWorld:
    """C: tool gaps of 60 s; A: tool gaps of 3 s; B: handed the turn to a human (end_turn).

    Least recently used first would be C, A, B; expected back last first is B, C, A.
    """
    world = CacheWorld("return_aware", device_pages=7, shared_pages=1)
    timed_turn(world, "C", 1, 2, "tool_use")
    timed_turn(world, "C", 61, 0, "tool_use")
    timed_turn(world, "A", 62, 2, "tool_use")
    timed_turn(world, "A", 65, 0, "tool_use")
    timed_turn(world, "B", 66, 2, "end_turn")
    world.clock.t = 67
    assert world.cache._device.num_free == 0
    return world


def test_return_aware_evicts_the_session_expected_back_last() -> None:
    world = tool_loop_and_user_turn()
    full = [(0, 12, Tier.DEVICE)]
    assert world.hold(2)
    assert [world.segments(s) for s in "ABC"] == [full, [PREFIX], full]
    assert world.hold(2)
    assert [world.segments(s) for s in "AC"] == [full, [PREFIX]]
    assert world.hold(1)
    assert world.segments("A") == [PREFIX, (4, 8, Tier.HOLE), (8, 12, Tier.DEVICE)]
    world.check()


def test_return_aware_keeps_the_queue_head_longest() -> None:
    world = tool_loop_and_user_turn()
    world.sessions.arrive("B", 67.0)  # B came back first, then C: both wait in the queue
    world.sessions.arrive("C", 68.0)
    world.clock.t = 69
    assert world.hold(2)
    assert world.segments("A") == [PREFIX]  # idle A goes before anyone queued
    assert world.hold(2)
    assert world.segments("C") == [PREFIX]  # then the latest arrival
    assert world.segments("B") == [(0, 12, Tier.DEVICE)]


def test_oracle_evicts_the_session_that_returns_last() -> None:
    world = CacheWorld("oracle", device_pages=7, shared_pages=1)
    for name in "ABC":
        world.turn(name, 2)
    hints = {"A": 500.0, "B": 100.0, "C": None}  # C never returns
    for name, t in hints.items():
        tell_next_arrival(world.cache, world.sessions, name, math.inf if t is None else t)
    order = []
    for _ in range(3):
        assert world.hold(2)
        order += [s for s in "ABC" if world.segments(s) == [PREFIX] and s not in order]
    assert order == ["C", "A", "B"]


def test_greedydual_takes_cheap_fronts_first_and_stale_sessions_whole() -> None:
    world = CacheWorld("greedydual", device_pages=9, shared_pages=1)
    world.turn("s1", 4)
    world.turn("s2", 4)
    assert world.hold(1) and world.hold(1)  # one front page of each: they cost the same
    hole = [PREFIX, (4, 8, Tier.HOLE), (8, 20, Tier.DEVICE)]
    assert world.segments("s1") == world.segments("s2") == hole
    policy = world.cache.policy
    assert isinstance(policy, GreedyDualPolicy)  # the clock is the policy's own
    clock = policy.clock
    assert clock > 0  # the clock rose to the victims' priority
    world.turn("s2", 0)  # s2 is back: its pages are valued at the risen clock
    assert world.hold(3)
    assert world.segments("s1") == [PREFIX]
    assert world.segments("s2") == hole
    assert policy.clock > clock
    world.check()


def test_unknown_policy_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        PrefixCache(4, 8, policy="fifo", sessions=Sessions())
    for name in EVICTION_POLICIES:
        assert name in str(err.value)
