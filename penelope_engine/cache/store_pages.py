"""Pages between the cache and the store, the cache's side: reads ahead, writes behind.

The prefetcher (`sched.prefetch`) and the handover (`tiers.handover`) decide
*when* pages move; `StorePages` (the cache's `store_pages`, built over its
parts) answers which pages, and installs what a read found:

    store_only   a session's pages only the store holds (its tenant's), root first
    host_room    free host pages, plus host pages of other idle sessions due back later
    install      read pages still only in the store go into host pages, as room allows
    unstored     cached pages the store lacks: on a session's path, or tier by tier
    mark_stored  the store now holds pages of a node (spilled or drained)

The tree changes only in `install`, with the session's path locked while
host room is made, so the free + cached == total invariant holds here. No torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.cache.evict_heap import EvictionHeaps
from penelope_engine.cache.eviction import owner
from penelope_engine.cache.placement import Placement
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.sessions import SessionInfo, expected_return
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node, PageTree

# Copies read pages (indices into the read) into host slots; False: they were not copied.
CopyIn = Callable[[np.ndarray, np.ndarray], bool]


@dataclass(frozen=True)
class StoreRun:
    """The first pages of a session's path only the store holds, with their tokens."""

    hashes: np.ndarray
    tokens: np.ndarray
    tenant: str


@dataclass(frozen=True)
class Installed:
    """What became of a finished read's pages."""

    installed: int  # now in host pages
    stale: int  # by then on a tier again, or off the session's path
    no_room: int  # the host had no room short of sooner sessions' pages


class StorePages:
    """The cache's pages against the store (`PrefixCache.store_pages`). The parts are the
    cache's own, handed over when it is built; the sessions book is the cache's too."""

    def __init__(
        self,
        tree: PageTree,
        host: PageAllocator,
        heaps: EvictionHeaps,
        placement: Placement,
        sessions: Sessions,
    ) -> None:
        self.tree = tree
        self.host = host
        self.heaps = heaps
        self.placement = placement
        self.sessions = sessions

    def mark_stored(self, node: Node, idx: np.ndarray) -> None:
        """The store now holds pages `idx` of `node` (spilled or drained)."""
        self.placement.mark_stored(node, idx)

    def unstored(self, session_id: str) -> list[tuple[Node, np.ndarray]]:
        """Cached pages on the session's path the store lacks (`unstored`)."""
        info = self.sessions.get(session_id)
        return unstored(info.leaf if info is not None else None)

    def unstored_by_tier(self) -> Iterator[tuple[Node, Tier, np.ndarray, np.ndarray]]:
        """Every node's pages the store lacks, tier by tier (`unstored_by_tier`)."""
        return unstored_by_tier(self.tree)

    def store_only(self, session_id: str, cap: int) -> StoreRun:
        """The first `cap` pages of the session's path only the store holds."""
        return store_only(self.sessions.record(session_id), cap)

    def host_room(self, session_id: str, due: float, now: float) -> int:
        """Free host pages plus those on unlocked private nodes of other idle sessions
        expected back later than `due` (or with no record): what may go to make room.
        Does not mutate."""
        n = self.host.num_free
        for node in self.heaps.holders(Tier.HOST):
            if node.lock or node.shared:
                continue
            other = owner(node)
            if other == session_id:
                continue
            info = self.sessions.get(other) if other is not None else None
            later = info is None or expected_return(info, now) > due
            if later and (info is None or info.queued_since is None):
                n += node.n_host
        return n

    def install_read(
        self,
        session_id: str,
        read: tuple[np.ndarray, np.ndarray],
        due: float,
        now: float,
        copy_in: CopyIn,
    ) -> Installed:
        """Put the read pages (hashes, those found) that are still only in the store on
        `session_id`'s path into host pages, as far as `host_room` allows (mutates)."""
        hashes, found = read
        read_at = {int(h): i for i, h in enumerate(hashes) if i < len(found) and found[i]}
        info = self.sessions.get(session_id)
        groups: list[tuple[Node, np.ndarray, np.ndarray]] = []  # node, its pages, read index
        if info is not None and info.leaf is not None:
            for node, idx in _store_only_pages(info.leaf):
                at = np.array([read_at.pop(int(h), -1) for h in node.hashes[idx]], np.int64)
                keep = at >= 0
                if keep.any():
                    groups.append((node, idx[keep], at[keep]))
        stale, no_room, installed = len(read_at), 0, 0
        want = sum(len(g[1]) for g in groups)
        room = self.host_room(session_id, due, now)
        if want > room:
            no_room += want - room
            groups, want = _first(groups, room), room
        if want <= 0 or info is None or info.leaf is None:
            return Installed(installed, stale, no_room)
        leaf = info.leaf
        self.tree.lock(leaf, +1)  # the path must not lose pages while room is made
        try:
            slots = self.placement.allocate_host(want)
        finally:
            self.tree.lock(leaf, -1)
        if slots is None:
            return Installed(installed, stale, no_room + want)
        for node, idx, at in groups:
            mine, slots = slots[: len(idx)], slots[len(idx) :]
            if not copy_in(at, mine):
                self.host.free(mine)
                continue
            self.placement.set_host(node, idx, mine)
            installed += len(idx)
        return Installed(installed, stale, no_room)


def store_only(info: SessionInfo, cap: int) -> StoreRun:
    """The first `cap` store-only pages of the session's path of its own tenant
    (another's pages are not its to read). The session must hold a path."""
    assert info.leaf is not None
    tenant = _tenant(info)
    parts = [(n, i) for n, i in _store_only_pages(info.leaf) if n.tenant == tenant]
    if not parts:
        return StoreRun(np.empty(0, np.uint64), np.empty((0, 0), np.int64), tenant)
    hashes = np.concatenate([n.hashes[i] for n, i in parts])[:cap]
    tokens = np.concatenate([n.tokens[i] for n, i in parts])[:cap]  # type: ignore[index]
    return StoreRun(hashes, tokens, tenant)


def unstored(leaf: Node | None) -> list[tuple[Node, np.ndarray]]:
    """Pages on `leaf`'s path held on the device or the host and not in the store, per
    node, root first."""
    out = []
    for node in leaf.path_up() if leaf is not None else ():
        idx = np.flatnonzero(((node.device >= 0) | (node.host >= 0)) & ~node.stored)
        if len(idx):
            out.append((node, idx))
    return out[::-1]


def unstored_by_tier(tree: PageTree) -> Iterator[tuple[Node, Tier, np.ndarray, np.ndarray]]:
    """Every node's host pages the store lacks, then its device pages the store lacks,
    as (node, tier, that tier's slots, page indices); each is looked at when reached, so
    pages marked stored meanwhile are not offered again."""
    for node in list(tree.iter_nodes()):
        for tier, slots in ((Tier.HOST, node.host), (Tier.DEVICE, node.device)):
            idx = np.flatnonzero((slots >= 0) & ~node.stored)
            if len(idx):
                yield node, tier, slots, idx


def _store_only_pages(leaf: Node) -> list[tuple[Node, np.ndarray]]:
    """The pages on `leaf`'s path only the store holds, root first, per node."""
    out = []
    for node in leaf.path_up():
        idx = np.flatnonzero(node.stored & (node.device < 0) & (node.host < 0))
        if len(idx) and node.tokens is not None:
            out.append((node, idx))
    return out[::-1]


def _tenant(info: SessionInfo) -> str:
    return info.tenant if info.tenant is not None else info.leaf.tenant  # type: ignore[union-attr]


def _first(
    groups: list[tuple[Node, np.ndarray, np.ndarray]], n: int
) -> list[tuple[Node, np.ndarray, np.ndarray]]:
    """The first `n` pages of `groups`, in path order."""
    out = []
    for node, idx, at in groups:
        if n <= 0:
            break
        out.append((node, idx[:n], at[:n]))
        n -= len(idx[:n])
    return out
