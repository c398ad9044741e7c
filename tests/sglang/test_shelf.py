"""The suffix shelf on its own: hit rules, hole growth, accounting, integrity."""

from __future__ import annotations

from array import array

import pytest
import torch

from penelope_sglang.shelf import ShelvedSuffix, SuffixShelf

NS = (None, None)


def record(path: list[int], hole: tuple[int, int], first_slot: int = 100) -> ShelvedSuffix:
    start, end = hole
    n = len(path) - end
    return ShelvedSuffix(
        NS, array("q", path), start, end, torch.arange(first_slot, first_slot + n), last_access=1.0
    )


def test_hit_needs_the_hole_tokens_and_reports_whole_suffix_pages() -> None:
    shelf = SuffixShelf(page_size=4)
    path = list(range(1, 25))  # prefix [0,8), hole [8,12), suffix [12,24)
    shelf.add(record(path, (8, 12)))
    hit = shelf.find(NS, array("q", path + [99]))
    assert hit is not None
    assert (hit.hole_start, hit.hole_end, hit.suffix_end) == (8, 12, 24)
    diverged = path[:10] + [0] + path[11:]
    assert shelf.find(NS, array("q", diverged)) is None  # different history inside the hole
    partial = path[:18] + [0] * 6  # shares [12,18): one whole page
    hit = shelf.find(NS, array("q", partial))
    assert hit is not None and hit.suffix_len == 4


def test_hit_respects_namespace_and_prefers_longest_reuse() -> None:
    shelf = SuffixShelf(page_size=2)
    long_path = list(range(20))
    shelf.add(record(long_path[:10], (2, 4)))
    shelf.add(record(long_path, (2, 6), first_slot=200))
    hit = shelf.find(NS, array("q", long_path))
    assert hit is not None and hit.suffix_end == 20
    assert shelf.find(("tenant-b", None), array("q", long_path)) is None


def test_drop_front_grows_the_hole_by_pages_then_empties() -> None:
    shelf = SuffixShelf(page_size=4)
    rec = record(list(range(24)), (8, 12))
    shelf.add(rec)
    freed = shelf.drop_front(rec, 5)  # 5 tokens: two pages
    assert freed.tolist() == list(range(100, 108))
    assert (rec.hole_end, rec.suffix_len, len(shelf)) == (20, 4, 1)
    assert shelf.drop_front(rec, 100).tolist() == [108, 109, 110, 111]
    assert len(shelf) == 0


def test_accounting_splits_pinned_from_evictable() -> None:
    shelf = SuffixShelf(page_size=4)
    a, b = record(list(range(24)), (8, 12)), record(list(range(50, 66)), (0, 8), first_slot=300)
    shelf.add(a)
    shelf.add(b)
    b.pins = 1
    assert (shelf.evictable_tokens(), shelf.pinned_tokens()) == (12, 8)
    assert sorted(shelf.all_indices().tolist()) == list(range(100, 112)) + list(range(300, 308))
    shelf.check()


@pytest.mark.parametrize(
    ("hole", "slots", "message"),
    [
        ((8, 8), 16, "neither hole nor host"),
        ((8, 10), 14, "page-aligned"),
        ((8, 12), 5, "slots for"),
    ],
)
def test_integrity_check_rejects_broken_records(
    hole: tuple[int, int], slots: int, message: str
) -> None:
    shelf = SuffixShelf(page_size=4)
    bad = ShelvedSuffix(NS, array("q", range(24)), hole[0], hole[1], torch.arange(slots), 0.0)
    with pytest.raises(AssertionError, match=message):
        shelf.add(bad)


def test_covered_by_lists_records_whose_hole_a_key_spans() -> None:
    shelf = SuffixShelf(page_size=4)
    rec = record(list(range(24)), (8, 12))
    shelf.add(rec)
    assert shelf.covered_by(NS, array("q", range(12))) == [rec]
    assert shelf.covered_by(NS, array("q", range(11))) == []
    assert shelf.covered_by(NS, array("q", [7] + list(range(1, 12)))) == []
