"""The suffix shelf in SGLang's memory accounting: a layer under `PenelopeRadixCache`.

Shelved slots stay allocated off the tree, so SGLang's base would lose track of
them. This layer adds them back: evictable (or protected while a refill pins
them), so `evictable_size`, `protected_size`, `total_size` and
`all_values_flatten` include them and SGLang's memory invariant
(free + evictable + protected == total) holds; `sanity_check` checks the shelf
too (no slot both in the tree and on the shelf), and `release_host_resources`
frees the shelf's host spans with SGLang's own.

    UnifiedRadixCache  <-  ShelfAccounting (this)  <-  PenelopeRadixCache
"""

from __future__ import annotations

import torch
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from penelope_sglang.host_tier import HostTier
from penelope_sglang.shelf import SuffixShelf


class ShelfAccounting(UnifiedRadixCache):
    """SGLang's tree whose sizes and slots count a suffix shelf's too (set by the subclass)."""

    shelf: SuffixShelf
    host_tier: HostTier | None

    def evictable_size(self) -> int:
        return super().evictable_size() + self.shelf.evictable_tokens()

    def full_evictable_size(self) -> int:
        return super().full_evictable_size() + self.shelf.evictable_tokens()

    def protected_size(self) -> int:
        return super().protected_size() + self.shelf.pinned_tokens()

    def full_protected_size(self) -> int:
        return super().full_protected_size() + self.shelf.pinned_tokens()

    def total_size(self) -> tuple[int, int]:
        tree, aux = super().total_size()
        return tree + self.shelf.evictable_tokens() + self.shelf.pinned_tokens(), aux

    def all_values_flatten(self) -> torch.Tensor:
        tree = super().all_values_flatten()
        return torch.cat([tree.to(torch.int64).cpu(), self.shelf.all_indices()])

    def release_host_resources(self) -> None:
        if self.host_tier is not None:
            for record in self.shelf.host_records():
                self.host_tier.free(self.shelf.drop_host_front(record, record.host_len))
        super().release_host_resources()

    def sanity_check(self) -> None:
        super().sanity_check()
        self.shelf.check()
        tree_slots = set(super().all_values_flatten().tolist())
        shelf_slots = set(self.shelf.all_indices().tolist())
        assert not tree_slots & shelf_slots, "a slot is both in the tree and on the shelf"
