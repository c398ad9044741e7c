"""Eviction by a policy whose keys move with time works under a live clock, in order.

Each test records the exact victim order, as (session, page index) in the
order the cache takes pages off the device, so a policy or ranking that picks
the wrong victim fails; `test_a_reversed_key_changes_the_order` shows the
order assertion is sensitive by running the same scenario with the key flipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from penelope_engine.cache.eviction import CacheView, ReturnAwarePolicy, owner
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node

PS = 4
HASHER = PageHasher(PS, "t")
Victims = list[tuple[str | None, int]]


def record_victims(cache: PrefixCache) -> Victims:
    """(session, page index) of every device page the cache evicts, in order."""
    victims: Victims = []
    drop = cache._placement.drop

    def recorded(tier: Tier, node: Node, idx: np.ndarray) -> None:
        if tier == Tier.DEVICE:
            victims.extend((owner(node), node.start + int(i)) for i in idx)
        drop(tier, node, idx)

    cache._placement.drop = recorded  # type: ignore[method-assign]
    return victims


def two_sessions_under_a_ticking_clock() -> tuple[PrefixCache, Victims]:
    """Sessions a then b, 4 private pages each, both ended with `end_turn`; the clock
    moves 100 s on every read, so both are overdue by the time anything is evicted."""
    ticks = itertools.count()
    book = Sessions(lambda: 100.0 * next(ticks))
    cache = PrefixCache(PS, 8, policy="return_aware", sessions=book)
    for sid in ("a", "b"):
        hashes = HASHER.hashes(np.arange(16) + (0 if sid == "a" else 1000))
        book.arrive(sid)
        book.on_start(sid)
        cache.insert(hashes, cache.allocate(4), sid)
        book.on_turn_end(sid, "end_turn")  # overdue soon: keys move with the clock
    return cache, record_victims(cache)


# a is overdue longer, so it is expected back later ("overdue by t: t later again"):
# all of a goes first, front first, then b's front.
TICKING_ORDER: Victims = [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]


def test_return_aware_evicts_under_a_clock_that_moves_on_every_read() -> None:
    cache, victims = two_sessions_under_a_ticking_clock()
    pages = cache.allocate(6)  # must evict 6 of the 8 cached pages
    assert len(pages) == 6
    cache.check_integrity(request_pages=6)
    assert victims == TICKING_ORDER


def three_sessions_at(now: list[float]) -> tuple[PrefixCache, Victims]:
    """A and C stop for a tool (expected back 10 s later), B ends its turn (200 s later)."""
    book = Sessions(lambda: now[0])
    cache = PrefixCache(PS, 6, policy="return_aware", sessions=book)
    for t, (sid, stop) in enumerate((("A", "tool_use"), ("B", "end_turn"), ("C", "tool_use"))):
        now[0] = float(t)
        hashes = HASHER.hashes(np.arange(8) + 1000 * t)
        book.arrive(sid)
        book.on_start(sid)
        cache.insert(hashes, cache.allocate(2), sid)
        book.on_turn_end(sid, stop)
    return cache, record_victims(cache)


# Expected back: A at 10, B at 201, C at 12. Latest first, each session front first.
RETURN_ORDER: Victims = [("B", 0), ("B", 1), ("C", 0), ("C", 1), ("A", 0), ("A", 1)]


def test_return_aware_evicts_the_session_expected_back_last_first() -> None:
    now = [0.0]
    cache, victims = three_sessions_at(now)
    now[0] = 5.0  # nobody is overdue yet
    held = [cache.allocate(1) for _ in range(6)]  # one page at a time: each ranks afresh
    cache.check_integrity(request_pages=len(held))
    assert victims == RETURN_ORDER


_KEY = ReturnAwarePolicy.key


def _reversed_key(self: ReturnAwarePolicy, node: Node, tier: Tier, view: CacheView) -> tuple:
    """Private pages of the session expected back first go first: return_aware reversed."""
    k = _KEY(self, node, tier, view)
    return (0, -k[1], k[2]) if k[0] == 0 else k


@pytest.mark.parametrize(
    ("scenario", "expected", "flipped"),
    [
        (
            two_sessions_under_a_ticking_clock,
            TICKING_ORDER,
            [("b", 0), ("b", 1), ("b", 2), ("b", 3), ("a", 0), ("a", 1)],
        ),
        (
            lambda: three_sessions_at([0.0]),
            RETURN_ORDER,
            [("A", 0), ("A", 1), ("C", 0), ("C", 1), ("B", 0), ("B", 1)],
        ),
    ],
    ids=["ticking", "three-sessions"],
)
def test_a_reversed_key_changes_the_order(
    monkeypatch: pytest.MonkeyPatch,
    scenario: Callable[[], tuple[PrefixCache, Victims]],
    expected: Victims,
    flipped: Victims,
) -> None:
    """The order assertions above catch a wrong ranking: flip the key, the order differs."""
    monkeypatch.setattr(ReturnAwarePolicy, "key", _reversed_key)
    cache, victims = scenario()
    cache.allocate(6)
    assert victims == flipped != expected
