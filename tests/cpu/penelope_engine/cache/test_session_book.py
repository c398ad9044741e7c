"""The sessions book: reads never create a record, arrival does, and its checker catches
a corrupted record; its events re-rank the session's pages in the cache built over it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions, UnknownSession
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tree import Node


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_reading_a_session_it_does_not_know_creates_no_record() -> None:
    book = Sessions(Clock())
    assert book.get("s") is None
    with pytest.raises(UnknownSession, match="has not arrived"):
        book.record("s")
    assert "s" not in book.ids() and len(book) == 0 and list(book.records()) == []
    book.check()


def test_events_of_a_session_that_never_arrived_are_refused_and_change_nothing() -> None:
    book = Sessions(Clock())
    for event in (book.on_start, book.on_abort, lambda s: book.on_turn_end(s, "tool_use")):
        with pytest.raises(UnknownSession):
            event("s")
    with pytest.raises(UnknownSession):
        book.set_expected_gap("s", 3.0)
    book.rerank("s")  # a hint about a session it does not know: nothing to re-rank
    assert len(book) == 0


def test_arrival_creates_the_record_and_folds_the_gap() -> None:
    clock = Clock()
    book = Sessions(clock)
    clock.t = 5.0
    info = book.arrive("s")
    assert book.get("s") is info and book.record("s") is info
    assert info.first_arrival == info.queued_since == 5.0 and info.last_access == 5.0
    book.on_start("s")
    clock.t = 8.0
    book.on_turn_end("s", "tool_use")
    assert book.arrive("s", 11.0) is info  # the same record, the gap since turn end folded
    assert info.gap_ewma == 3.0 and info.first_arrival == 5.0 and info.queued_since == 11.0
    book.check()


def test_opening_a_known_session_returns_its_record() -> None:
    book = Sessions(Clock())
    info = book.open("s")
    assert book.open("s") is info and info.queued_since is None  # opened, not queued


def test_forget_drops_records_and_idle_names_those_past_the_ttl() -> None:
    clock = Clock()
    book = Sessions(clock, ttl_s=10.0, max_records=100)
    book.arrive("old")
    book.on_start("old")
    book.on_turn_end("old", "end_turn")
    clock.t = 5.0
    book.arrive("live")
    clock.t = 20.0
    assert book.idle(keep={"live"}) == ["old"]
    book.forget(["old", "never"])
    assert list(book.ids()) == ["live"]


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda info: setattr(info, "seen_hashes", np.zeros(3, np.int64)), "seen ids"),
        (lambda info: setattr(info, "first_arrival", None), "queued without an arrival"),
        (lambda info: setattr(info, "gap_ewma", -1.0), "a negative gap"),
    ],
)
def test_the_checker_catches_a_corrupted_record(
    corrupt: Callable[[SessionInfo], None], message: str
) -> None:
    book = Sessions(Clock())
    book.arrive("s")
    book.check()
    corrupt(book.record("s"))
    with pytest.raises(AssertionError, match=message):
        book.check()


def test_the_cache_check_runs_the_book_check() -> None:
    book = Sessions(Clock())
    cache = PrefixCache(4, 8, sessions=book)
    book.arrive("s")
    cache.check_integrity()
    book.record("s").gap_ewma = -1.0
    with pytest.raises(AssertionError, match="a negative gap"):
        cache.check_integrity()


def test_inserting_for_a_session_that_never_arrived_is_refused_before_any_page_moves() -> None:
    book = Sessions(Clock())
    cache = PrefixCache(4, 8, sessions=book)
    pages = cache.allocate(2)
    with pytest.raises(UnknownSession):
        cache.insert(PageHasher(4, "t").hashes(np.arange(8)), pages, "s")
    assert cache.stats().tree_nodes == 0
    cache.free(pages)
    cache.check_integrity()


def test_every_event_hands_the_session_leaf_to_the_rerank_listeners() -> None:
    book = Sessions(Clock())
    cache = PrefixCache(4, 8, sessions=book)
    seen: list[Node | None] = []
    book.watch(seen.append)
    book.arrive("s")
    leaf = cache.insert(PageHasher(4, "t").hashes(np.arange(8)), cache.allocate(2), "s").leaf
    assert book.record("s").leaf is leaf
    book.on_start("s")
    book.set_expected_gap("s", 4.0)
    book.on_turn_end("s", "tool_use")
    book.rerank("s")
    book.forget(["s"])
    assert seen == [None, leaf, leaf, leaf, leaf, leaf]
    cache.check_integrity()
