"""A `PrefixCache` driven the way the scheduler drives it, with snapshots for checking evictions.

Sessions share a prefix of `shared_pages` pages, then grow their own private
history turn by turn. Each turn matches the history, locks the matched path,
allocates device pages for everything not on the device, "computes" those
pages (writes a value derived from the page's hash into the KV pool, so any
page that lands in the wrong slot is caught), inserts, unlocks and ends the
turn. Other requests can hold device pages outside the tree, and a session's
path can stay locked across operations, like a running request's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from bench.sim.oracle import make_sim_policy  # the product's policies and the oracle
from penelope_engine.cache.eviction import EvictionPolicy, owner
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import LockHandle, PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.config import ModelConfig
from penelope_engine.tiers.copies import TorchTiers
from penelope_engine.tiers.kv_pool import KVPool

PS = 4
KV_MODEL = ModelConfig(
    arch="qwen3",
    vocab_size=8,
    hidden_size=8,
    intermediate_size=8,
    num_layers=1,
    num_heads=1,
    num_kv_heads=1,
    head_dim=2,
)


class Clock:
    """A controllable clock (the sessions book's); every operation of `CacheWorld` advances it."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float = 1.0) -> float:
        self.t += dt
        return self.t


@dataclass(frozen=True)
class NodeRecord:
    id: int
    parent: int | None
    children: tuple[int, ...]
    start: int  # page index of the node's first page
    device: tuple[int, ...]  # device page per page, -1 where not on the device
    locked: bool
    shared: bool
    owner: str | None
    last_access: float


@dataclass(frozen=True)
class PageRecord:
    node: int
    position: int  # page index in the sequence
    locked: bool
    shared: bool
    owner: str | None


@dataclass(frozen=True)
class Snapshot:
    nodes: dict[int, NodeRecord]
    pages: dict[int, PageRecord]  # by device page

    @staticmethod
    def of(cache: PrefixCache) -> Snapshot:
        nodes, pages = {}, {}
        for n in cache._tree.iter_nodes():
            parent = n.parent.id if n.parent is not None and n.parent.parent is not None else None
            rec = NodeRecord(
                n.id,
                parent,
                tuple(c.id for c in n.children.values()),
                n.start,
                tuple(int(d) for d in n.device),
                n.lock > 0,
                n.shared,
                owner(n),
                n.last_access,
            )
            nodes[n.id] = rec
            for i, d in enumerate(rec.device):
                if d >= 0:
                    pages[d] = PageRecord(n.id, n.start + i, rec.locked, rec.shared, rec.owner)
        return Snapshot(nodes, pages)

    def evicted(self, after: Snapshot) -> dict[int, PageRecord]:
        return {p: r for p, r in self.pages.items() if p not in after.pages}

    def kept(self, after: Snapshot) -> dict[int, PageRecord]:
        return {p: r for p, r in self.pages.items() if p in after.pages}


Checker = Callable[[Snapshot, Snapshot, PrefixCache], None]


def page_value(page_hash: int) -> float:
    """The KV value a page's "computation" writes: exact in fp32, distinct per page id."""
    return float(page_hash % 1_000_003)


@dataclass
class CacheWorld:
    policy: str | EvictionPolicy
    device_pages: int
    shared_pages: int
    host_pages: int = 0
    checker: Checker | None = None  # run around every allocation that may evict
    clock: Clock = field(default_factory=Clock)
    history: dict[str, list[int]] = field(default_factory=dict)
    held: list[np.ndarray] = field(default_factory=list)
    locks: dict[str, tuple[LockHandle, np.ndarray, np.ndarray]] = field(default_factory=dict)
    _index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hasher = PageHasher(PS, "cache-testkit")
        self.device_kv = KVPool(KV_MODEL, self.device_pages, PS, torch.float32)
        host_kv = KVPool(KV_MODEL, self.host_pages, PS, torch.float32) if self.host_pages else None
        self.host_kv = host_kv
        self.sessions = Sessions(self.clock)
        self.cache = PrefixCache(
            PS,
            self.device_pages,
            self.host_pages,
            make_sim_policy(self.policy) if isinstance(self.policy, str) else self.policy,
            io=TorchTiers(self.device_kv, host_kv),
            sessions=self.sessions,
        )

    # -- sessions ------------------------------------------------------------------
    def hashes(self, sid: str) -> np.ndarray:
        return self.hasher.hashes(self.history[sid])

    def grow(self, sid: str, pages: int) -> None:
        """Append `pages` pages of tokens no other session has."""
        hist = self.history.setdefault(sid, list(range(self.shared_pages * PS)))
        base = (self._index.setdefault(sid, len(self._index)) + 1) * 1_000_000
        hist.extend(base + len(hist) + np.arange(pages * PS))

    def fork(self, parent: str, child: str) -> None:
        """`child` starts as a copy of `parent`'s history (nothing happens if it cannot)."""
        if parent in self.history and child not in self.history:
            self.history[child] = list(self.history[parent])

    def turn(self, sid: str, new_pages: int, stop: str = "tool_use", write_through: bool = False):
        """One request of `sid`; returns False (changing nothing) when it cannot fit."""
        self.clock.tick()
        self.grow(sid, new_pages)
        hs = self.hashes(sid)
        self.sessions.arrive(sid)
        m = self.cache.match(hs)
        lock = self.cache.lock(m.nodes[-1] if m.num_pages else None)
        on_device = np.zeros(len(hs), bool)
        on_device[: m.num_pages] = m.where == Tier.DEVICE
        need = len(hs) - int(on_device.sum())
        if not self.cache.can_allocate(need):
            self.cache.unlock(lock)
            return False
        table = np.empty(len(hs), np.int32)
        table[: m.num_pages][on_device[: m.num_pages]] = m.device[on_device[: m.num_pages]]
        table[~on_device] = self.allocate(need)
        self.sessions.on_start(sid)
        self._compute(hs[~on_device], table[~on_device])
        res = self.cache.insert(hs, table, sid)
        self.cache.unlock(lock)
        if write_through:
            self.cache.write_through(res.leaf)
        self.sessions.on_turn_end(sid, stop)
        return True

    def _compute(self, hashes: np.ndarray, pages: np.ndarray) -> None:
        for h, p in zip(hashes.tolist(), pages.tolist()):
            for pool in (self.device_kv.k[0], self.device_kv.v[0]):
                pool[p * PS : (p + 1) * PS] = page_value(h)

    # -- other requests ---------------------------------------------------------------
    def allocate(self, n: int) -> np.ndarray:
        before = Snapshot.of(self.cache)
        pages = self.cache.allocate(n)
        if self.checker is not None:
            self.checker(before, Snapshot.of(self.cache), self.cache)
        return pages

    def hold(self, n: int) -> bool:
        """A request outside the tree takes `n` device pages (when they can be had)."""
        self.clock.tick()
        if not self.cache.can_allocate(n):
            return False
        self.held.append(self.allocate(n))
        return True

    def release(self) -> None:
        self.clock.tick()
        for pages in self.held:
            self.cache.free(pages)
        self.held.clear()

    def lock_session(self, sid: str) -> None:
        """Lock the session's cached path as a running request would; remember its pages."""
        self.clock.tick()
        if sid not in self.history or sid in self.locks:
            return
        m = self.cache.match(self.hashes(sid))
        if m.num_pages:
            pos = np.flatnonzero(m.device >= 0)
            self.locks[sid] = (self.cache.lock(m.nodes[-1]), pos, m.device[pos].copy())

    def unlock_session(self, sid: str) -> None:
        self.clock.tick()
        entry = self.locks.pop(sid, None)
        if entry is not None:
            self.cache.unlock(entry[0])

    # -- checks ---------------------------------------------------------------------------
    def check(self) -> None:
        """Integrity, locked pages unmoved, and every cached page's KV where the tree says."""
        self.cache.check_integrity(request_pages=sum(len(p) for p in self.held))
        for sid, (_, pos, pages) in self.locks.items():
            m = self.cache.match(self.hashes(sid))
            assert not len(pos) or m.num_pages > int(pos[-1]), f"locked path of {sid} shrank"
            np.testing.assert_array_equal(m.device[pos], pages, f"locked pages of {sid} moved")
        self._check_kv()

    def _check_kv(self) -> None:
        nodes = list(self.cache._tree.iter_nodes())
        if not nodes:
            return
        want = torch.tensor([page_value(h) for n in nodes for h in n.hashes.tolist()])
        for kv, slots in ((self.device_kv, "device"), (self.host_kv, "host")):
            pages = torch.from_numpy(np.concatenate([getattr(n, slots) for n in nodes]))
            on = pages >= 0
            if kv is None or not bool(on.any()):
                continue
            got = kv.k[0].view(-1, PS * 2)[pages[on].long()]
            bad = (got != want[on, None]).any(dim=1)
            assert not bool(bad.any()), f"{int(bad.sum())} {slots} pages hold foreign KV"

    def segments(self, sid: str) -> list[tuple[int, int, str]]:
        return [(s.start, s.end, s.where) for s in self.cache.match(self.hashes(sid)).segments(PS)]

    def holes(self) -> int:
        return sum(int((n.where() == Tier.HOLE).sum()) for n in self.cache._tree.iter_nodes())
