"""Page allocators: hand out page indices of one pool. No torch here.

Every page is in exactly one state: free or used (by the tree or a running
request). `check()` verifies free + used == capacity and that the free stack
agrees with the states; tests call it after every operation.
"""

from __future__ import annotations

import numpy as np

from penelope_engine.errors import CapacityError

FREE, USED = 0, 1


class PageAllocator:
    def __init__(self, num_pages: int, name: str = "device") -> None:
        if num_pages < 0:
            raise ValueError(f"num_pages must be >= 0, got {num_pages}")
        self.name = name
        self.capacity = num_pages
        self._state = np.zeros(num_pages, dtype=np.int8)
        self._free = np.arange(num_pages - 1, -1, -1, dtype=np.int32)  # stack, top at the end
        self._top = num_pages

    @property
    def num_free(self) -> int:
        return self._top

    @property
    def num_used(self) -> int:
        return self.capacity - self._top

    def can_allocate(self, n: int) -> bool:
        return n <= self._top

    def allocate(self, n: int) -> np.ndarray:
        if n > self._top:
            raise CapacityError(f"{self.name} pool: asked for {n} pages, {self._top} free")
        pages = self._free[self._top - n : self._top][::-1].copy()
        self._top -= n
        self._state[pages] = USED
        return pages

    def free(self, pages: np.ndarray) -> None:
        pages = np.asarray(pages, dtype=np.int32)
        if len(pages) == 0:
            return
        if (self._state[pages] == FREE).any() or len(np.unique(pages)) != len(pages):
            raise AssertionError(f"{self.name} pool: double free of pages {pages.tolist()[:8]}")
        self._state[pages] = FREE
        self._free[self._top : self._top + len(pages)] = pages
        self._top += len(pages)

    def check(self) -> None:
        counts = np.bincount(self._state, minlength=2)
        free, used = int(counts[FREE]), int(counts[USED])
        assert free + used == self.capacity, (free, used, self.capacity)
        assert free == self._top, f"{self.name}: free stack {self._top} != free states {free}"
        stack = self._free[: self._top]
        assert (self._state[stack] == FREE).all(), f"{self.name}: used page on the free stack"
        assert len(np.unique(stack)) == len(stack), f"{self.name}: duplicate on the free stack"
