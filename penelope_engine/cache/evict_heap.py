"""Which nodes hold pages of each tier, and the heaps that pick eviction victims. No torch.

`EvictionHeaps` keeps, per tier (device, host), the nodes holding at least
one page there and, for policies whose keys change only on cache events
(`static_keys`), one lazy heap of (key, node id, node): every event that may
change a node's key or candidacy pushes a fresh entry (`touch`), and a popped
entry whose key is no longer current is skipped. Policies whose keys move
with time are ranked afresh on every eviction. Taking pages off a victim is
the cache's job: `evict` hands each victim to a `drop` callback.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

import numpy as np

from penelope_engine.cache.eviction import CacheView, EvictionPolicy
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node

TIERS = (Tier.DEVICE, Tier.HOST)  # the two tiers with pools to evict from

# drop(tier, node, idx): take pages `idx` of `node` off `tier` (demote, spill or drop them)
Drop = Callable[[Tier, Node, np.ndarray], None]


def tier_count(node: Node, tier: Tier) -> int:
    return node.n_device if tier == Tier.DEVICE else node.n_host


def tier_idx(node: Node, tier: Tier) -> np.ndarray:
    """Indices of `node`'s pages held in `tier`."""
    arr = node.device if tier == Tier.DEVICE else node.host
    return np.flatnonzero(arr >= 0)


def first_page(node: Node, tier: Tier) -> int:
    """Sequence page index of `node`'s first page held in `tier`."""
    s = node.summary
    return node.start + (s.first_device if tier == Tier.DEVICE else s.first_host)


def is_tier_leaf(node: Node, tier: Tier) -> bool:
    """No child holds a page of `tier` (host: of the device or the host)."""
    if tier == Tier.DEVICE:
        return all(c.n_device == 0 for c in node.children.values())
    return all(c.n_device == 0 and c.n_host == 0 for c in node.children.values())


class EvictionHeaps:
    def __init__(self, policy: EvictionPolicy, view: CacheView) -> None:
        self.policy = policy
        self.view = view  # what the policy's keys read (the cache's `PolicyView`)
        self._holders: dict[Tier, dict[int, Node]] = {tier: {} for tier in TIERS}
        self._heaps: dict[Tier, list] = {tier: [] for tier in TIERS}

    # -- read-only ---------------------------------------------------------
    def holds(self, node: Node, tier: Tier) -> bool:
        """`node` is tracked as holding pages of `tier`."""
        return node.id in self._holders[tier]

    def holders(self, tier: Tier) -> Iterable[Node]:
        """The nodes holding pages of `tier` (locked or not)."""
        return self._holders[tier].values()

    def evictable(self, tier: Tier) -> int:
        """Pages of `tier` on unlocked nodes."""
        return sum(tier_count(n, tier) for n in self._holders[tier].values() if n.lock == 0)

    def is_candidate(self, node: Node, tier: Tier) -> bool:
        return (
            node.parent is not None
            and not node.lock
            and tier_count(node, tier) > 0
            and (not self.policy.leaves_only or is_tier_leaf(node, tier))
        )

    def _key(self, node: Node, tier: Tier) -> tuple:
        return self.policy.key(node, tier, self.view)

    # -- events ------------------------------------------------------------
    def track(self, node: Node) -> None:
        """`node`'s tier counts or place in the tree changed."""
        for tier, count in ((Tier.DEVICE, node.n_device), (Tier.HOST, node.n_host)):
            if count and node.parent is not None:
                self._holders[tier][node.id] = node
            else:
                self._holders[tier].pop(node.id, None)
        self.touch(node)

    def touch(self, node: Node | None) -> None:
        """`node`'s eviction key or candidacy may have changed: queue a fresh entry."""
        if not self.policy.static_keys:
            return
        for tier in TIERS:
            if node is not None and self.is_candidate(node, tier):
                heapq.heappush(self._heaps[tier], (self._key(node, tier), node.id, node))

    def touch_path(self, node: Node | None) -> None:
        for n in node.path_up() if node is not None else ():
            self.touch(n)

    # -- eviction ----------------------------------------------------------
    def evict(self, tier: Tier, need: int, drop: Drop) -> int:
        """Free `need` pages of `tier` by policy; returns how many were freed."""
        if self.policy.static_keys:
            heap = self._heaps[tier]
            if len(heap) > 4 * len(self._holders[tier]) + 64:
                heap[:] = self._ranked(tier)
        else:
            heap = self._ranked(tier)
        done = self._evict_from(heap, tier, need, drop)
        if done < need and self.policy.static_keys:  # a key changed without an event
            heap[:] = self._ranked(tier)
            done += self._evict_from(heap, tier, need - done, drop)
        return done

    def _candidates(self, tier: Tier) -> Iterable[Node]:
        return (n for n in self._holders[tier].values() if self.is_candidate(n, tier))

    def _ranked(self, tier: Tier) -> list:
        heap = [(self._key(n, tier), n.id, n) for n in self._candidates(tier)]
        heapq.heapify(heap)
        return heap

    def _evict_from(self, heap: list, tier: Tier, need: int, drop: Drop) -> int:
        done = 0
        while done < need and heap:
            key, _, node = heapq.heappop(heap)
            if not self.is_candidate(node, tier):
                continue
            # A stale entry of the lazy heap (static keys only: a time-dependent key
            # moves between ranking and popping, and the heap was ranked just now).
            if self.policy.static_keys and self._key(node, tier) != key:
                continue
            idx = tier_idx(node, tier)
            take = idx[: need - done] if self.policy.front_first(node) else idx[-(need - done) :]
            parent = node.parent
            drop(tier, node, take)
            self.policy.on_evict(key, self.view)
            done += len(take)
            for n in (node, parent):
                if n is not None and self.is_candidate(n, tier):
                    heapq.heappush(heap, (self._key(n, tier), n.id, n))
        return done
