"""What the eviction and the views ask of the penelope cache (`PenelopeRadixCache`).

A Protocol, so that `eviction` and `views` depend on this module and not on
`radix_cache`, which builds them: the dependency points one way,

    radix_cache -> eviction, views -> contract -> shelf, results, sessions

and this module imports neither of them nor `radix_cache` (nor SGLang at run time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

from penelope_sglang.results import PenelopeCounters
from penelope_sglang.sessions import RetainPins, SessionBook
from penelope_sglang.shelf import SuffixShelf

if TYPE_CHECKING:
    from penelope_sglang.host_tier import HostTier


class Clocked(Protocol):
    """The cache's clock for session times (`eviction.Evictor.clock`)."""

    clock: Callable[[], float]


class PenelopeTree(Protocol):
    """The penelope cache as its eviction and views see it: SGLang's tree core and page
    size, Penelope's shelf, counters, session book, pins, host tier and clock, and the two
    slot operations an eviction needs."""

    shelf: SuffixShelf
    counters: PenelopeCounters
    shared_ids: set[int]  # nodes two sessions' paths have used (sticky)
    book: SessionBook
    pins: RetainPins
    host_tier: HostTier | None
    evictor: Clocked
    tree_core: Any  # SGLang's Python TreeCore
    page_size: int

    def remove_keeping_slots(self, node_id: int) -> None:
        """Delete one device leaf through the tree core, without freeing its KV slots."""

    def free_slots(self, slots: torch.Tensor) -> None:
        """Give device KV slots back to SGLang's allocator."""

    def evict_host(self, num_tokens: int) -> int:
        """SGLang's own host eviction (its host-only tree nodes)."""
