"""PrefixCache: the tree, the page allocators of each tier and a policy. No torch.

It decides what to keep; the bytes move through a `TierIO` the engine
supplies (torch copies) or the simulator supplies (time accounting). Every
method says whether it mutates; `match` never does.

Tiers: device (always), host (when host_pages > 0), store (when the IO has one).
Device eviction demotes to the host when there is a host tier, host eviction
spills to the store when there is one; a page that leaves its last tier becomes
a hole (or, when no live page follows it, is trimmed off the tail of its leaf).

This module is the façade the scheduler and the simulator drive; the parts
live in their own modules:

    placement    each node's pages per tier, splits, trims, moves between tiers
    evict_heap   which nodes hold each tier; the policy's lazy victim heaps
    digests      what the router is told (shared prefixes)
    store_pages  pages between the cache and the store (`store_pages`, its face)
    integrity    the full invariant check

Sessions are not the cache's: the `Sessions` book (`session_book`) is built
first and handed in. The cache reads its records (the policies rank pages by
them, `insert` tells it of each path) and re-ranks a session's pages when the
book says a record changed; the book knows nothing of pages. A request's three
calls against the cache (`request_life.RequestLife`) use only this face.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache import digests, integrity
from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.cache.evict_heap import EvictionHeaps, first_page
from penelope_engine.cache.eviction import EvictionPolicy, make_eviction_policy
from penelope_engine.cache.placement import Placement, TierIO
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.store_pages import StorePages
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node, PageTree, TreeMatch
from penelope_engine.costs import C_ATTN, C_LIN
from penelope_engine.errors import CapacityError
from penelope_engine.protocol import DIGEST_LIMITS

# Names importable from here (`SessionInfo` and `TierIO` live in the modules above).
__all__ = ["InsertResult", "LockHandle", "PrefixCache", "SessionInfo", "TierIO"]


@dataclass(frozen=True)
class LockHandle:
    node: Node | None


@dataclass(frozen=True)
class InsertResult:
    pages: np.ndarray  # canonical device page of each inserted page
    leaf: Node


def default_page_cost(page_size: int) -> Callable[[int], float]:
    """Prefill cost (seconds) of a page at a page index: C_LIN + C_ATTN * position."""
    return lambda page: page_size * (C_LIN + C_ATTN * page * page_size)


@dataclass(frozen=True)
class CacheStats:
    """What `PrefixCache.stats` reports (`Engine.stats` composes it)."""

    device_used: int
    device_total: int
    host_used: int
    host_total: int
    evictions: tuple[tuple[str, str, int], ...]  # (policy, reason, pages)
    locked_nodes: int
    tree_nodes: int
    session_records: int


@dataclass(frozen=True)
class PolicyView:
    """What the cache's policy reads (`eviction.CacheView`): the clock and the records of
    the sessions book, and the page cost. Read only."""

    sessions: Sessions
    page_cost: Callable[[int], float]

    @property
    def now(self) -> float:
        return self.sessions.now

    def session_info(self, session_id: str) -> SessionInfo | None:
        return self.sessions.get(session_id)

    def first_page(self, node: Node, tier: Tier) -> int:
        return first_page(node, tier)


class PrefixCache:
    def __init__(
        self,
        page_size: int,
        device_pages: int,
        host_pages: int = 0,
        policy: str | EvictionPolicy = "penelope",
        io: TierIO | None = None,
        has_store: bool = False,
        *,
        sessions: Sessions,
        page_cost: Callable[[int], float] | None = None,
    ) -> None:
        """`sessions`: the book whose records the policy reads (its clock is the cache's)."""
        self.page_size = page_size
        self._tree = PageTree()
        self._device = PageAllocator(device_pages, "device")
        self._host = PageAllocator(host_pages, "host")
        # One policy instance per cache: a policy may keep state (GreedyDual's clock).
        self._policy = make_eviction_policy(policy) if isinstance(policy, str) else policy
        self._sessions = sessions
        self.page_cost = page_cost or default_page_cost(page_size)
        self._heaps = EvictionHeaps(self._policy, PolicyView(sessions, self.page_cost))
        sessions.watch(self._heaps.touch_path)
        self._placement = Placement(
            self._tree, self._device, self._host, self._policy, self._heaps, io, has_store
        )
        self._store_pages = StorePages(
            self._tree, self._host, self._heaps, self._placement, sessions
        )

    # -- read-only ---------------------------------------------------------
    @property
    def policy(self) -> EvictionPolicy:
        """The eviction policy object (the one configured, or the one injected)."""
        return self._policy

    def capacity(self, tier: Tier) -> int:
        """Pages the tier holds in all (0 for a cache without that tier)."""
        return (self._device if tier is Tier.DEVICE else self._host).capacity

    def stats(self) -> CacheStats:
        """Pages used per tier, evictions, nodes and session records, now."""
        return CacheStats(
            device_used=self._device.num_used,
            device_total=self._device.capacity,
            host_used=self._host.num_used,
            host_total=self._host.capacity,
            evictions=tuple((p, r, n) for (p, r), n in sorted(self._placement.evictions.items())),
            locked_nodes=self._tree.locked_nodes(),
            tree_nodes=self._tree.size,
            session_records=len(self._sessions),  # the book's, for one report
        )

    @property
    def has_store(self) -> bool:
        return self._placement.has_store

    @property
    def has_host(self) -> bool:
        return self._placement.has_host

    def match(self, hashes: np.ndarray) -> TreeMatch:
        """Where each page of `hashes` is. Does not mutate."""
        return self._tree.match(hashes)

    def evictable(self, tier: Tier = Tier.DEVICE) -> int:
        return self._heaps.evictable(tier)

    def can_allocate(self, n: int) -> bool:
        return self._device.num_free + self.evictable(Tier.DEVICE) >= n

    # -- locks ---------------------------------------------------------------
    def lock(self, node: Node | None) -> LockHandle:
        """Pin `node` and its ancestors (mutates lock counts only)."""
        if node is not None:
            self._tree.lock(node, +1)
        return LockHandle(node)

    def lock_match(self, match: TreeMatch) -> LockHandle:
        """Pin exactly the matched pages and the path above them (mutates).

        When the match ends inside a node, the node is split there first, so
        the pages past the match stay evictable: pinning them would hold
        memory the request does not use.
        """
        if match.num_pages == 0:
            return LockHandle(None)
        last = match.nodes[-1]
        used = match.num_pages - last.start
        if 0 < used < len(last):
            last = self._placement.split(last, used)
        return self.lock(last)

    def unlock(self, handle: LockHandle) -> None:
        if handle.node is not None:
            self._tree.lock(handle.node, -1)
            self._heaps.touch_path(handle.node)
            self._placement.trim(handle.node)

    # -- allocation ------------------------------------------------------------
    def allocate(self, n: int) -> np.ndarray:
        """Device pages for a request, evicting by policy.

        Raises CapacityError, having evicted nothing, when even evicting every
        unlocked page would not make room.
        """
        if n > self._device.num_free and not self.can_allocate(n):
            raise CapacityError(
                f"need {n} device pages, {self._device.num_free} free and "
                f"{self.evictable(Tier.DEVICE)} evictable; the rest are locked by running requests"
            )
        if n > self._device.num_free:
            self._heaps.evict(Tier.DEVICE, n - self._device.num_free, self._placement.drop)
        if n > self._device.num_free:
            raise CapacityError(
                f"need {n} device pages, {self._device.num_free} free and the rest locked by "
                f"running requests (capacity {self._device.capacity})"
            )
        return self._device.allocate(n)

    def free(self, pages: np.ndarray) -> None:
        self._device.free(pages)

    # -- insert ------------------------------------------------------------------
    def insert(
        self,
        hashes: np.ndarray,
        pages: np.ndarray,
        session_id: str,
        tenant: str = "default",
        tokens: np.ndarray | None = None,
    ) -> InsertResult:
        """Record that `pages` on the device hold the KV of `hashes` (mutates).

        Pages fill holes and extend the tree; where the tree already has a
        device page for a hash, that one is canonical and the request's copy
        is freed. `tokens` ([pages, page_size]) are kept on new nodes so the
        store can verify identity. Returns the canonical pages and the leaf.
        """
        now = self._sessions.now
        self._sessions.record(session_id)  # it has arrived (`Sessions.arrive`)
        pages, leaf = self._placement.insert(hashes, pages, session_id, tenant, tokens, now)
        self._sessions.inserted(session_id, leaf, hashes, now)
        self._heaps.touch_path(leaf)
        return InsertResult(pages, leaf)

    # -- host tier and store -------------------------------------------------------
    def write_through(self, leaf: Node) -> int:
        """Copy device pages on `leaf`'s path that lack a host copy to the host (mutates)."""
        return self._placement.write_through(leaf)

    @property
    def store_pages(self) -> StorePages:
        """Pages between the cache and the store: reads ahead, writes behind (mutates)."""
        return self._store_pages

    # -- a session's pages ----------------------------------------------------------------
    def release_session(self, session_id: str) -> int:
        """Its private device pages leave the device now (`Placement.release_private`)."""
        info = self._sessions.get(session_id)
        leaf = info.leaf if info is not None else None
        return self._placement.release_private(leaf, session_id) if leaf is not None else 0

    def prune_stored(self, keep: Container[str]) -> int:
        """Private leaves holding only store pages, idle past the sessions' TTL and not of
        a session in `keep`, leave the tree (mutates; `Placement.forget_stored`); nodes
        removed."""
        before = self._sessions.now - self._sessions.ttl_s
        leaves = [n for n in self._tree.iter_nodes() if not n.children and n.stored.any()]
        return sum(self._placement.forget_stored(n, keep, before) for n in leaves)

    # -- digests and checks ---------------------------------------------------------
    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        """Page ids of shared prefixes held on the device, depth first (router digests)."""
        return digests.shared_prefix_hashes(self._tree, limit)

    def check_integrity(self, request_pages: int = 0) -> None:
        """Tree and allocators agree; `request_pages` device pages are held outside the tree;
        the session records are well formed (`Sessions.check`)."""
        integrity.check_integrity(self._tree, self._device, self._host, self._heaps, request_pages)
        self._sessions.check()
