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
    sessions     `SessionInfo` and how session events update it
    session_events  the cache's session events and bounded records (a base of it)
    digests      what the router is told (session holdings, shared prefixes)
    store_pages  pages between the cache and the store (reads ahead, writes behind)
    integrity    the full invariant check
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, KeysView, ValuesView
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache import digests, integrity, store_pages
from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.cache.evict_heap import EvictionHeaps, first_page
from penelope_engine.cache.eviction import EvictionPolicy, make_eviction_policy
from penelope_engine.cache.placement import Placement, TierIO
from penelope_engine.cache.request_life import Claim, InsertResult, LockHandle, RequestLife
from penelope_engine.cache.session_events import SessionEvents
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.store_pages import CopyIn, Installed, StoreRun
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node, PageTree, TreeMatch
from penelope_engine.costs import C_ATTN, C_LIN
from penelope_engine.errors import CapacityError
from penelope_engine.protocol import DIGEST_LIMITS, SessionDigest

# Names importable from here since before the split (they live in the modules above).
__all__ = ["Claim", "InsertResult", "LockHandle", "PrefixCache", "SessionInfo", "TierIO"]


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


class PrefixCache(SessionEvents, RequestLife):
    def __init__(
        self,
        page_size: int,
        device_pages: int,
        host_pages: int = 0,
        policy: str | EvictionPolicy = "penelope",
        io: TierIO | None = None,
        has_store: bool = False,
        time_fn: Callable[[], float] = time.monotonic,
        page_cost: Callable[[int], float] | None = None,
        session_ttl_s: float = 3600.0,
        max_session_records: int = 100_000,
    ) -> None:
        self.page_size = page_size
        self._tree = PageTree()
        self._device = PageAllocator(device_pages, "device")
        self._host = PageAllocator(host_pages, "host")
        # One policy instance per cache: a policy may keep state (GreedyDual's clock).
        self._policy = make_eviction_policy(policy) if isinstance(policy, str) else policy
        self._time_fn = time_fn
        self.page_cost = page_cost or default_page_cost(page_size)
        self._sessions: dict[str, SessionInfo] = {}
        self._session_ttl_s = session_ttl_s
        self._max_session_records = max_session_records
        self._heaps = EvictionHeaps(self._policy, self)
        self._placement = Placement(
            self._tree, self._device, self._host, self._policy, self._heaps, io, has_store
        )
        self._parts = store_pages.CacheParts(
            self._tree, self._host, self._heaps, self._placement, self.session_info,
            self.allocate_host,
        )  # fmt: skip

    # -- read-only ---------------------------------------------------------
    @property
    def io(self) -> TierIO | None:
        return self._placement.io

    @property
    def policy(self) -> EvictionPolicy:
        """The eviction policy object (the one configured, or the one injected)."""
        return self._policy

    @property
    def max_session_records(self) -> int:
        return self._max_session_records

    def capacity(self, tier: Tier) -> int:
        """Pages the tier holds in all (0 for a cache without that tier)."""
        return (self._device if tier is Tier.DEVICE else self._host).capacity

    def session_ids(self) -> KeysView[str]:
        """The sessions the cache keeps a record of (a live view: copy it to mutate)."""
        return self._sessions.keys()

    def session_records(self) -> ValuesView[SessionInfo]:
        """Those sessions' records (a live view; read only)."""
        return self._sessions.values()

    def stats(self) -> CacheStats:
        """Pages used per tier, evictions, nodes and session records, now."""
        return CacheStats(
            device_used=self._device.num_used,
            device_total=self._device.capacity,
            host_used=self._host.num_used,
            host_total=self._host.capacity,
            evictions=tuple((p, r, n) for (p, r), n in sorted(self.evictions.items())),
            locked_nodes=self._tree.locked_nodes(),
            tree_nodes=self._tree.size,
            session_records=len(self._sessions),
        )

    @property
    def has_store(self) -> bool:
        return self._placement.has_store

    @property
    def has_host(self) -> bool:
        return self._placement.has_host

    @property
    def evictions(self) -> Counter[tuple[str, str]]:
        """Pages evicted, by (policy, reason): demote, drop, spill, host_drop."""
        return self._placement.evictions

    def match(self, hashes: np.ndarray) -> TreeMatch:
        """Where each page of `hashes` is. Does not mutate."""
        return self._tree.match(hashes)

    def evictable(self, tier: Tier = Tier.DEVICE) -> int:
        return self._heaps.evictable(tier)

    def can_allocate(self, n: int) -> bool:
        return self._device.num_free + self.evictable(Tier.DEVICE) >= n

    def locked_nodes(self) -> int:
        return self._tree.locked_nodes()

    @property
    def tree_nodes(self) -> int:
        return self._tree.size

    def first_page(self, node: Node, tier: Tier) -> int:
        """Sequence page index of `node`'s first page held in `tier` (for policies)."""
        return first_page(node, tier)

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

    def allocate_host(self, n: int) -> np.ndarray | None:
        """`n` host pages, evicting host pages by policy; None when they cannot be had."""
        return self._placement.allocate_host(n)

    # -- insert ------------------------------------------------------------------
    def insert(
        self,
        hashes: np.ndarray,
        pages: np.ndarray,
        session: str,
        tenant: str = "default",
        tokens: np.ndarray | None = None,
    ) -> InsertResult:
        """Record that `pages` on the device hold the KV of `hashes` (mutates).

        Pages fill holes and extend the tree; where the tree already has a
        device page for a hash, that one is canonical and the request's copy
        is freed. `tokens` ([pages, page_size]) are kept on new nodes so the
        store can verify identity. Returns the canonical pages and the leaf.
        """
        now = self.now
        info = self.session(session)
        pages, leaf = self._placement.insert(hashes, pages, session, tenant, tokens, now)
        info.inserted(leaf, hashes, now)
        self._heaps.touch_path(leaf)
        return InsertResult(pages, leaf)

    # -- host tier and store -------------------------------------------------------
    def write_through(self, leaf: Node) -> int:
        """Copy device pages on `leaf`'s path that lack a host copy to the host (mutates)."""
        return self._placement.write_through(leaf)

    def mark_stored(self, node: Node, idx: np.ndarray) -> None:
        """The store now holds pages `idx` of `node` (spilled or drained)."""
        self._placement.mark_stored(node, idx)

    def unstored(self, sid: str) -> list[tuple[Node, np.ndarray]]:
        """Cached pages on the session's path the store lacks (`store_pages.unstored`)."""
        return store_pages.unstored(self.session(sid).leaf)

    def unstored_by_tier(self) -> Iterator[tuple[Node, Tier, np.ndarray, np.ndarray]]:
        """Every node's pages the store lacks, tier by tier (`store_pages`)."""
        return store_pages.unstored_by_tier(self._tree)

    def store_only(self, sid: str, cap: int) -> StoreRun:
        """The first `cap` pages of the session's path only the store holds."""
        return store_pages.store_only(self._sessions[sid], cap)

    def host_room(self, sid: str, due: float, now: float) -> int:
        """Host pages a read for `sid`, due back at `due`, may take. Does not mutate."""
        return store_pages.host_room(self._parts, sid, due, now)

    def install_read(
        self, sid: str, read: tuple[np.ndarray, np.ndarray], due: float, now: float, copy_in: CopyIn
    ) -> Installed:
        """Put what a read of (hashes, found) found into host pages (mutates; `store_pages`)."""
        return store_pages.install(self._parts, sid, *read, due, now, copy_in)

    # -- digests and checks ---------------------------------------------------------
    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        """Page ids of shared prefixes held on the device, depth first (router digests)."""
        return digests.shared_prefix_hashes(self._tree, limit)

    def session_digests(self, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]:
        return digests.session_digests(self._sessions, self.page_size, limit)

    def check_integrity(self, request_pages: int = 0) -> None:
        """Tree and allocators agree; `request_pages` device pages are held outside the tree."""
        integrity.check_integrity(self._tree, self._device, self._host, self._heaps, request_pages)
