"""PageAllocator: every page free, used or in flight; double frees are caught."""

from __future__ import annotations

import numpy as np
import pytest

from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.errors import CapacityError


def test_allocate_and_free_round_trip() -> None:
    alloc = PageAllocator(8)
    a = alloc.allocate(3)
    b = alloc.allocate(5)
    assert len(set(a.tolist()) | set(b.tolist())) == 8
    assert alloc.num_free == 0 and alloc.num_used == 8
    alloc.check()
    alloc.free(a)
    alloc.check()
    assert alloc.num_free == 3
    assert sorted(alloc.allocate(3).tolist()) == sorted(a.tolist())
    alloc.check()


def test_over_allocation_raises_and_changes_nothing() -> None:
    alloc = PageAllocator(4, "host")
    alloc.allocate(3)
    assert not alloc.can_allocate(2)
    with pytest.raises(CapacityError, match="host pool: asked for 2 pages, 1 free"):
        alloc.allocate(2)
    assert alloc.num_free == 1
    alloc.check()


def test_double_free_raises_and_changes_nothing() -> None:
    alloc = PageAllocator(8)
    pages = alloc.allocate(4)
    alloc.free(pages[2:])
    for bad in (pages[2:3], np.array([pages[0], pages[0]])):  # already free; twice in one call
        with pytest.raises(AssertionError, match="double free"):
            alloc.free(bad)
        assert alloc.num_free == 6
        alloc.check()


def test_check_catches_a_corrupted_free_stack() -> None:
    alloc = PageAllocator(4)
    alloc.allocate(1)
    alloc._state[alloc._free[0]] = 1  # a used page left on the free stack
    with pytest.raises(AssertionError):
        alloc.check()


def test_empty_and_negative_pools() -> None:
    alloc = PageAllocator(0)
    alloc.check()
    alloc.free(np.empty(0, np.int32))
    assert alloc.allocate(0).tolist() == []
    with pytest.raises(ValueError, match="num_pages"):
        PageAllocator(-1)
