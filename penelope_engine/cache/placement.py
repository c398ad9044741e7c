"""Where each page of the tree lives, and every move of pages between tiers. No torch.

`Placement` is the mutating core under `PrefixCache`: it places a request's
pages in the tree (`insert`), sets a node's device and host pages (keeping
its counts and the eviction index fresh), splits and trims nodes, and takes
an eviction victim's pages off a tier:

    device victim -> demoted to the host (a copy, when the page has none yet),
                     else dropped
    host victim   -> spilled to the store (when there is one and it lacks it),
                     then dropped from the host

A page that leaves its last tier becomes a hole; holes at the tail of a
childless node, and nodes with nothing left, are trimmed off the tree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container
from typing import Protocol

import numpy as np

from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.cache.evict_heap import EvictionHeaps
from penelope_engine.cache.eviction import EvictionPolicy
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node, PageTree


class TierIO(Protocol):
    """Moves page bytes between tiers; returns False when a copy failed."""

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool: ...

    def spill(self, node: Node, idx: np.ndarray) -> bool: ...


class Placement:
    def __init__(
        self,
        tree: PageTree,
        device: PageAllocator,
        host: PageAllocator,
        policy: EvictionPolicy,
        heaps: EvictionHeaps,
        io: TierIO | None,
        has_store: bool,
    ) -> None:
        self.tree = tree
        self.device = device
        self.host = host
        self.policy = policy
        self.heaps = heaps
        self.io = io
        self.has_store = has_store and io is not None
        self.evictions: Counter[tuple[str, str]] = Counter()  # (policy, reason) -> pages

    @property
    def has_host(self) -> bool:
        return self.host.capacity > 0

    # -- a node's pages ---------------------------------------------------------------
    def set_device(self, node: Node, idx: np.ndarray, pages: np.ndarray) -> None:
        node.device[idx] = pages
        node.recount()
        self.heaps.track(node)

    def set_host(self, node: Node, idx: np.ndarray, pages: np.ndarray) -> None:
        node.host[idx] = pages
        node.recount()
        self.heaps.track(node)

    def mark_stored(self, node: Node, idx: np.ndarray) -> None:
        """The store now holds pages `idx` of `node` (spilled or drained)."""
        node.stored[idx] = True
        node.recount()

    def split(self, node: Node, k: int) -> Node:
        """Split `node` after its first `k` pages; returns the new upper node."""
        upper = self.tree.split(node, k)
        self.policy.on_split(node, upper)
        self.heaps.track(upper)
        self.heaps.track(node)
        return upper

    def forget_stored(self, node: Node, keep: Container[str], before: float) -> int:
        """Private childless nodes, from `node` up, that hold only store pages, are not
        locked, were last used before `before` and whose session is not in `keep`, leave
        the tree (the store keeps their pages: `store_run` finds them past a match).
        Returns the nodes removed."""
        removed = 0
        while (
            node.parent is not None
            and not node.children
            and node.lock == 0
            and not node.shared
            and node.n_device == node.n_host == 0
            and node.last_access < before
            and not any(sid in keep for sid in node.sessions)
        ):
            parent = node.parent
            node.stored[:] = False
            node.recount()
            self.trim(node)
            removed += 1
            node = parent
        return removed

    def trim(self, node: Node) -> None:
        """Drop trailing holes of childless unlocked nodes, and empty nodes, upwards."""
        while node.parent is not None and not node.children and node.lock == 0:
            live = np.flatnonzero((node.device >= 0) | (node.host >= 0) | node.stored)
            if len(live):
                if live[-1] < len(node) - 1:
                    self.tree.truncate(node, int(live[-1]) + 1)
                return
            parent = node.parent
            self.tree.remove(node)
            self.heaps.track(node)
            self.policy.on_remove(node)
            self.heaps.touch(parent)
            node = parent

    def insert(
        self,
        hashes: np.ndarray,
        pages: np.ndarray,
        session_id: str,
        tenant: str,
        tokens: np.ndarray | None,
        now: float,
    ) -> tuple[np.ndarray, Node]:
        """Place the device `pages` of `hashes` in the tree; the canonical pages and the leaf.

        Pages fill holes and extend the tree (splitting a node where the path
        leaves it); where the tree already has a device page for a hash, that
        one is canonical and the request's copy is freed.
        """
        assert len(hashes) == len(pages) > 0
        pages = np.asarray(pages, dtype=np.int32).copy()
        node, i, n = self.tree.root, 0, len(hashes)
        while i < n:
            child = node.children.get(int(hashes[i]))
            if child is None:
                child = self.tree.add_child(
                    node, hashes[i:], tenant, None if tokens is None else tokens[i:]
                )
                self.set_device(child, np.arange(n - i), pages[i:])
                i = n
            else:
                m = min(len(child), n - i)
                diff = np.flatnonzero(child.hashes[:m] != hashes[i : i + m])
                k = int(diff[0]) if len(diff) else m
                if k < len(child):
                    child = self.split(child, k)
                self._merge_pages(child, pages[i : i + k])
                i += k
            if len(child.sessions) < 2:  # two make it shared: more would only pile up
                child.sessions.add(session_id)
            child.last_access = now
            self.policy.on_access(child, self.heaps.view)
            node = child
        return pages, node

    def _merge_pages(self, node: Node, pages: np.ndarray) -> None:
        cur = node.device
        if node.n_device == len(cur) and np.array_equal(cur, pages):
            return  # the request used the tree's own pages: nothing changes
        holes = np.flatnonzero(cur < 0)
        if len(holes):
            self.set_device(node, holes, pages[holes])
        dup = (cur >= 0) & (cur != pages)
        if dup.any():
            self.device.free(pages[dup])
            pages[dup] = cur[dup]

    # -- the host tier ------------------------------------------------------------------
    def allocate_host(self, n: int) -> np.ndarray | None:
        """`n` host pages, evicting host pages by policy; None when they cannot be had."""
        if n > self.host.num_free:
            self.heaps.evict(Tier.HOST, n - self.host.num_free, self.drop)
        return self.host.allocate(n) if n <= self.host.num_free else None

    def write_through(self, leaf: Node) -> int:
        """Copy device pages on `leaf`'s path that lack a host copy to the host (mutates)."""
        if not self.has_host or self.io is None:
            return 0
        copied = 0
        self.tree.lock(leaf, +1)  # the path must not move while host space is made
        try:
            for node in leaf.path_up():
                idx = np.flatnonzero((node.device >= 0) & (node.host < 0))
                if len(idx):
                    slots = self.allocate_host(len(idx))
                    if slots is None:
                        break
                    if not self.io.device_to_host(node.device[idx], slots):
                        self.host.free(slots)
                        break
                    self.set_host(node, idx, slots)
                    copied += len(idx)
        finally:
            self.tree.lock(leaf, -1)
        return copied

    # -- eviction: taking a victim's pages off a tier -------------------------------------
    def drop(self, tier: Tier, node: Node, idx: np.ndarray) -> None:
        """Take pages `idx` of `node` off `tier` (an `EvictionHeaps` victim)."""
        name = self.policy.name
        if tier == Tier.DEVICE:
            pages = node.device[idx].copy()
            if self.has_host:
                self._demote(node, idx)
            demoted = int((node.host[idx] >= 0).sum())
            self.evictions[(name, "demote")] += demoted
            self.evictions[(name, "drop")] += len(idx) - demoted
            self.set_device(node, idx, np.full(len(idx), -1, dtype=np.int32))
            self.device.free(pages)
        else:
            pages = node.host[idx].copy()
            spill = idx[~node.stored[idx]]
            if self.has_store and len(spill) and self.io is not None and self.io.spill(node, spill):
                self.mark_stored(node, spill)
                self.evictions[(name, "spill")] += len(spill)
            self.evictions[(name, "host_drop")] += len(idx)
            self.set_host(node, idx, np.full(len(idx), -1, dtype=np.int32))
            self.host.free(pages)
        self.trim(node)

    def release_private(self, leaf: Node, session_id: str) -> int:
        """Take the device pages of `session_id`'s own nodes on `leaf`'s path off the device, as
        an eviction would (demoted with a host tier, dropped without); shared nodes and
        nodes a running request locks stay. Returns the pages taken (mutates)."""
        taken = 0
        for node in leaf.path_up():  # `drop` may trim `node` out of the tree
            if (
                not node.shared
                and node.lock == 0
                and node.sessions <= {session_id}
                and node.n_device
            ):
                idx = np.flatnonzero(node.device >= 0)
                self.drop(Tier.DEVICE, node, idx)
                taken += len(idx)
        return taken

    def _demote(self, node: Node, idx: np.ndarray) -> None:
        """Copy device pages `idx` of `node` (evicted) that have no host copy to the host."""
        missing = idx[node.host[idx] < 0]
        if not len(missing):
            return
        # Pin the ancestors, not the node: host eviction may take this
        # node's own later host pages (lru's tail), never the path above.
        guard = node.parent if node.parent is not self.tree.root else None
        if guard is not None:
            self.tree.lock(guard, +1)
        slots = self.allocate_host(len(missing))
        if guard is not None:
            self.tree.lock(guard, -1)
        if slots is not None:
            # Making room may have dropped host copies of other pages of `idx` (they
            # leave the device now): the slots go to the pages the policy evicts last,
            # so a page between them never loses both copies (lru forms no hole).
            missing = idx[node.host[idx] < 0]
            n = len(slots)
            missing = missing[-n:] if self.policy.front_first(node) else missing[:n]
        if (
            slots is not None
            and self.io is not None
            and self.io.device_to_host(node.device[missing], slots)
        ):
            self.set_host(node, missing, slots)
        elif slots is not None:
            self.host.free(slots)
