"""PrefixCache: the tree, the page allocators of each tier and a policy. No torch.

It decides what to keep; the bytes move through a `TierIO` the engine
supplies (torch copies) or the simulator supplies (time accounting). Every
method says whether it mutates; `match` never does.

Tiers: device (always), host (when host_pages > 0), store (when the IO has
one). Device eviction demotes to the host when there is a host tier, host
eviction spills to the store when there is one; a page that leaves its last
tier becomes a hole (or, for a policy that forms no holes, is trimmed off the
tail of its leaf).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from penelope_engine.allocator import PageAllocator
from penelope_engine.errors import CapacityError
from penelope_engine.policies import EvictionPolicy, SessionInfo, make_policy
from penelope_engine.protocol import SessionDigest
from penelope_engine.tree import Node, PageTree, TreeMatch

DEVICE_TIER, HOST_TIER = "device", "host"


class TierIO(Protocol):
    """Moves page bytes between tiers; returns False when a copy failed."""

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool: ...

    def spill(self, node: Node, idx: np.ndarray) -> bool: ...


@dataclass(frozen=True)
class LockHandle:
    node: Node | None


@dataclass(frozen=True)
class InsertResult:
    pages: np.ndarray  # canonical device page of each inserted page
    leaf: Node


def default_page_cost(page_size: int) -> Callable[[int], float]:
    """Prefill cost (seconds) of a page at a page index: c_lin + c_attn * position."""
    c_lin, c_attn = 66e-6, 0.041e-6
    return lambda page: page_size * (c_lin + c_attn * page * page_size)


class PrefixCache:
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
    ) -> None:
        self.page_size = page_size
        self.tree = PageTree()
        self.device = PageAllocator(device_pages, "device")
        self.host = PageAllocator(host_pages, "host")
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.io = io
        self.has_store = has_store and io is not None
        self.time_fn = time_fn
        self.page_cost = page_cost or default_page_cost(page_size)
        self.clock = 0.0  # GreedyDual clock
        self.sessions: dict[str, SessionInfo] = {}
        self.evictions: Counter[tuple[str, str]] = Counter()
        self._holders: dict[str, dict[int, Node]] = {DEVICE_TIER: {}, HOST_TIER: {}}
        self._heaps: dict[str, list] = {DEVICE_TIER: [], HOST_TIER: []}

    # -- read-only ---------------------------------------------------------
    @property
    def now(self) -> float:
        return self.time_fn()

    @property
    def has_host(self) -> bool:
        return self.host.capacity > 0

    def session(self, sid: str) -> SessionInfo:
        info = self.sessions.get(sid)
        if info is None:
            info = self.sessions[sid] = SessionInfo(last_access=self.now)
        return info

    def match(self, hashes: np.ndarray) -> TreeMatch:
        """Where each page of `hashes` is. Does not mutate."""
        return self.tree.match(hashes)

    def evictable(self, tier: str = DEVICE_TIER) -> int:
        return sum(self._tier_count(n, tier) for n in self._holders[tier].values() if n.lock == 0)

    def can_allocate(self, n: int) -> bool:
        return self.device.num_free + self.evictable(DEVICE_TIER) >= n

    # -- locks ---------------------------------------------------------------
    def lock(self, node: Node | None) -> LockHandle:
        """Pin `node` and its ancestors (mutates lock counts only)."""
        if node is not None:
            self.tree.lock(node, +1)
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
            last = self._split(last, used)
        return self.lock(last)

    def unlock(self, handle: LockHandle) -> None:
        if handle.node is not None:
            self.tree.lock(handle.node, -1)
            self._touch_path(handle.node)
            self._trim(handle.node)

    # -- allocation ------------------------------------------------------------
    def allocate(self, n: int) -> np.ndarray:
        """Device pages for a request, evicting by policy.

        Raises CapacityError, having evicted nothing, when even evicting every
        unlocked page would not make room.
        """
        if n > self.device.num_free and not self.can_allocate(n):
            raise CapacityError(
                f"need {n} device pages, {self.device.num_free} free and "
                f"{self.evictable(DEVICE_TIER)} evictable; the rest are locked by running requests"
            )
        if n > self.device.num_free:
            self._evict(DEVICE_TIER, n - self.device.num_free)
        if n > self.device.num_free:
            raise CapacityError(
                f"need {n} device pages, {self.device.num_free} free and the rest locked by "
                f"running requests (capacity {self.device.capacity})"
            )
        return self.device.allocate(n)

    def free(self, pages: np.ndarray) -> None:
        self.device.free(pages)

    def allocate_host(self, n: int) -> np.ndarray | None:
        if n > self.host.num_free:
            self._evict(HOST_TIER, n - self.host.num_free)
        return self.host.allocate(n) if n <= self.host.num_free else None

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
        assert len(hashes) == len(pages) > 0
        pages = np.asarray(pages, dtype=np.int32).copy()
        now, node, i, n = self.now, self.tree.root, 0, len(hashes)
        info = self.session(session)
        while i < n:
            child = node.children.get(int(hashes[i]))
            if child is None:
                child = self.tree.add_child(
                    node, hashes[i:], tenant, None if tokens is None else tokens[i:]
                )
                self._set_device(child, np.arange(n - i), pages[i:])
                i = n
            else:
                m = min(len(child), n - i)
                diff = np.flatnonzero(child.hashes[:m] != hashes[i : i + m])
                k = int(diff[0]) if len(diff) else m
                if k < len(child):
                    child = self._split(child, k)
                self._merge_pages(child, pages[i : i + k])
                i += k
            child.sessions.add(session)
            child.last_access = now
            self.policy.on_access(child, self)
            node = child
        info.leaf = node
        info.last_access = now
        self._touch_path(node)
        if len(hashes) >= len(info.seen_hashes):
            info.seen_hashes = np.array(hashes, dtype=np.uint64)
        return InsertResult(pages, node)

    def _merge_pages(self, node: Node, pages: np.ndarray) -> None:
        cur = node.device
        if node.n_device == len(cur) and np.array_equal(cur, pages):
            return  # the request used the tree's own pages: nothing changes
        holes = np.flatnonzero(cur < 0)
        if len(holes):
            self._set_device(node, holes, pages[holes])
        dup = (cur >= 0) & (cur != pages)
        if dup.any():
            self.device.free(pages[dup])
            pages[dup] = cur[dup]

    # -- session events ----------------------------------------------------------
    def on_arrival(self, sid: str, now: float | None = None) -> None:
        info = self.session(sid)
        now = self.now if now is None else now
        if info.turn_end is not None:
            gap = max(0.0, now - info.turn_end)
            info.gap_ewma = gap if info.gap_ewma is None else 0.5 * info.gap_ewma + 0.5 * gap
        info.queued_since = now
        self._touch_path(info.leaf)

    def on_start(self, sid: str) -> None:
        info = self.session(sid)
        info.queued_since = None
        info.turn_end = None
        info.last_access = self.now
        self._touch_path(info.leaf)

    def on_turn_end(self, sid: str, stop_reason: str | None, now: float | None = None) -> None:
        info = self.session(sid)
        info.turn_end = info.last_access = self.now if now is None else now
        info.last_stop = stop_reason
        self._touch_path(info.leaf)

    def on_abort(self, sid: str) -> None:
        """A queued request of the session was withdrawn before it ran."""
        info = self.session(sid)
        info.queued_since = None
        self._touch_path(info.leaf)

    def set_next_arrival(self, sid: str, t: float | None) -> None:
        info = self.session(sid)
        info.next_arrival = t
        self._touch_path(info.leaf)

    # -- host tier -----------------------------------------------------------------
    def write_through(self, leaf: Node) -> int:
        """Copy device pages on `leaf`'s path that lack a host copy to the host (mutates)."""
        if not self.has_host or self.io is None:
            return 0
        copied, node = 0, leaf
        self.tree.lock(leaf, +1)  # the path must not move while host space is made
        try:
            while node is not self.tree.root:
                idx = np.flatnonzero((node.device >= 0) & (node.host < 0))
                if len(idx):
                    slots = self.allocate_host(len(idx))
                    if slots is None:
                        break
                    if not self.io.device_to_host(node.device[idx], slots):
                        self.host.free(slots)
                        break
                    self._set_host(node, idx, slots)
                    copied += len(idx)
                node = node.parent  # type: ignore[assignment]
        finally:
            self.tree.lock(leaf, -1)
        return copied

    # -- eviction -------------------------------------------------------------------
    def _candidates(self, tier: str) -> Iterable[Node]:
        return (n for n in self._holders[tier].values() if self._is_candidate(n, tier))

    def _is_tier_leaf(self, node: Node, tier: str) -> bool:
        if tier == DEVICE_TIER:
            return all(c.n_device == 0 for c in node.children.values())
        return all(c.n_device == 0 and c.n_host == 0 for c in node.children.values())

    @staticmethod
    def _tier_count(node: Node, tier: str) -> int:
        return node.n_device if tier == DEVICE_TIER else node.n_host

    def first_page(self, node: Node, tier: str) -> int:
        s = node.summary
        return node.start + (s.first_device if tier == DEVICE_TIER else s.first_host)

    def _tier_idx(self, node: Node, tier: str) -> np.ndarray:
        arr = node.device if tier == DEVICE_TIER else node.host
        return np.flatnonzero(arr >= 0)

    def _evict(self, tier: str, need: int) -> int:
        """Free `need` pages of `tier` by policy; returns how many were freed.

        Policies whose keys change only on cache events keep one lazy heap per
        tier: every event that may change a node's key pushes a fresh entry,
        and a popped entry whose key is no longer current is skipped. Other
        policies (keys that move with time) rank all candidates per call.
        """
        if self.policy.static_keys:
            heap = self._heaps[tier]
            if len(heap) > 4 * len(self._holders[tier]) + 64:
                heap[:] = self._ranked(tier)
        else:
            heap = self._ranked(tier)
        done = self._evict_from(heap, tier, need)
        if done < need and self.policy.static_keys:  # a key changed without an event
            heap[:] = self._ranked(tier)
            done += self._evict_from(heap, tier, need - done)
        return done

    def _ranked(self, tier: str) -> list:
        heap = [(self.policy.key(n, tier, self), n.id, n) for n in self._candidates(tier)]
        heapq.heapify(heap)
        return heap

    def _is_candidate(self, node: Node, tier: str) -> bool:
        return (
            node.parent is not None
            and not node.lock
            and self._tier_count(node, tier) > 0
            and (not self.policy.leaves_only or self._is_tier_leaf(node, tier))
        )

    def _evict_from(self, heap: list, tier: str, need: int) -> int:
        done = 0
        while done < need and heap:
            key, _, node = heapq.heappop(heap)
            if not self._is_candidate(node, tier):
                continue
            # A stale entry of the lazy heap (static keys only: a time-dependent key
            # moves between ranking and popping, and the heap was ranked just now).
            if self.policy.static_keys and self.policy.key(node, tier, self) != key:
                continue
            idx = self._tier_idx(node, tier)
            take = idx[: need - done] if self.policy.front_first(node) else idx[-(need - done) :]
            parent = node.parent
            self._drop(tier, node, take)
            self.policy.on_evict(key, self)
            done += len(take)
            for n in (node, parent):
                if n is not None and self._is_candidate(n, tier):
                    heapq.heappush(heap, (self.policy.key(n, tier, self), n.id, n))
        return done

    def _touch(self, node: Node | None) -> None:
        """`node`'s eviction key or candidacy may have changed: queue a fresh entry."""
        if not self.policy.static_keys:
            return
        for tier in (DEVICE_TIER, HOST_TIER):
            if node is not None and self._is_candidate(node, tier):
                heapq.heappush(
                    self._heaps[tier], (self.policy.key(node, tier, self), node.id, node)
                )

    def _touch_path(self, node: Node | None) -> None:
        while node is not None and node.parent is not None:
            self._touch(node)
            node = node.parent

    def _drop(self, tier: str, node: Node, idx: np.ndarray) -> None:
        name = self.policy.name
        if tier == DEVICE_TIER:
            pages = node.device[idx].copy()
            if self.has_host:
                missing = idx[node.host[idx] < 0]
                if len(missing):
                    # Pin the ancestors, not the node: host eviction may take this
                    # node's own later host pages (lru's tail), never the path above.
                    guard = node.parent if node.parent is not self.tree.root else None
                    if guard is not None:
                        self.tree.lock(guard, +1)
                    slots = self.allocate_host(len(missing))
                    if guard is not None:
                        self.tree.lock(guard, -1)
                    if (
                        slots is not None
                        and self.io is not None
                        and self.io.device_to_host(node.device[missing], slots)
                    ):
                        self._set_host(node, missing, slots)
                    elif slots is not None:
                        self.host.free(slots)
            demoted = int((node.host[idx] >= 0).sum())
            self.evictions[(name, "demote")] += demoted
            self.evictions[(name, "drop")] += len(idx) - demoted
            self._set_device(node, idx, np.full(len(idx), -1, dtype=np.int32))
            self.device.free(pages)
        else:
            pages = node.host[idx].copy()
            spill = idx[~node.stored[idx]]
            if self.has_store and len(spill) and self.io is not None and self.io.spill(node, spill):
                self.mark_stored(node, spill)
                self.evictions[(name, "spill")] += len(spill)
            self.evictions[(name, "host_drop")] += len(idx)
            self._set_host(node, idx, np.full(len(idx), -1, dtype=np.int32))
            self.host.free(pages)
        self._trim(node)

    # -- structure helpers ------------------------------------------------------------
    def _set_device(self, node: Node, idx: np.ndarray, pages: np.ndarray) -> None:
        node.device[idx] = pages
        node.recount()
        self._track(node)

    def mark_stored(self, node: Node, idx: np.ndarray) -> None:
        """The store now holds pages `idx` of `node` (spilled or drained)."""
        node.stored[idx] = True
        node.recount()

    def _set_host(self, node: Node, idx: np.ndarray, pages: np.ndarray) -> None:
        node.host[idx] = pages
        node.recount()
        self._track(node)

    def _track(self, node: Node) -> None:
        for tier, count in ((DEVICE_TIER, node.n_device), (HOST_TIER, node.n_host)):
            if count and node.parent is not None:
                self._holders[tier][node.id] = node
            else:
                self._holders[tier].pop(node.id, None)
        self._touch(node)

    def _split(self, node: Node, k: int) -> Node:
        upper = self.tree.split(node, k)
        self._track(upper)
        self._track(node)
        return upper

    def _trim(self, node: Node) -> None:
        """Drop trailing holes of childless unlocked nodes, and empty nodes, upwards."""
        while node.parent is not None and not node.children and node.lock == 0:
            live = np.flatnonzero((node.device >= 0) | (node.host >= 0) | node.stored)
            if len(live):
                if live[-1] < len(node) - 1:
                    self.tree.truncate(node, int(live[-1]) + 1)
                return
            parent = node.parent
            self.tree.remove(node)
            self._track(node)
            self._touch(parent)
            node = parent

    # -- digests and checks ---------------------------------------------------------------
    def shared_prefix_hashes(self, limit: int = 256) -> list[int]:
        """Page ids of shared prefixes held on the device, depth first (router digests)."""
        out: list[int] = []
        stack = list(self.tree.root.children.values())
        while stack and len(out) < limit:
            node = stack.pop()
            if node.shared and node.n_device:
                out.extend(int(h) for h in node.hashes[: limit - len(out)])
                stack.extend(node.children.values())
        return out

    def session_digests(self, limit: int = 1024) -> list[SessionDigest]:
        recent = sorted(self.sessions.items(), key=lambda kv: -kv[1].last_access)[:limit]
        out = []
        for sid, info in recent:
            dev = host = store = 0
            node = info.leaf
            while node is not None and node.parent is not None:
                summary = node.summary
                dev += node.n_device
                host += summary.host_only
                store += summary.store_only
                node = node.parent
            ps = self.page_size
            out.append(SessionDigest(sid, dev * ps, host * ps, store * ps, info.last_access))
        return out

    def check_integrity(self, request_pages: int = 0) -> None:
        """Tree and allocators agree; `request_pages` device pages are held outside the tree."""
        self.device.check()
        self.host.check()
        dev, host = [], []
        for node in self.tree.iter_nodes():
            assert node.lock >= 0
            assert node.n_device == int((node.device >= 0).sum()), "stale device count"
            assert node.n_host == int((node.host >= 0).sum()), "stale host count"
            assert node.summary_is_fresh(), "stale node summary (an array changed without recount)"
            assert (node.id in self._holders[DEVICE_TIER]) == (node.n_device > 0)
            assert (node.id in self._holders[HOST_TIER]) == (node.n_host > 0)
            assert len(node) > 0 and all(c.parent is node for c in node.children.values())
            dev.append(node.device[node.device >= 0])
            host.append(node.host[node.host >= 0])
        d = np.concatenate(dev) if dev else np.empty(0, np.int32)
        h = np.concatenate(host) if host else np.empty(0, np.int32)
        assert len(np.unique(d)) == len(d), "a device page is in the tree twice"
        assert len(np.unique(h)) == len(h), "a host page is in the tree twice"
        assert len(d) + request_pages == self.device.num_used, (
            f"device pages: tree {len(d)} + requests {request_pages} != used {self.device.num_used}"
        )
        assert len(h) == self.host.num_used, (
            f"host pages: tree {len(h)} != used {self.host.num_used}"
        )
