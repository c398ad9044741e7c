"""Prefetch: a hinted session's store pages into the host tier before it returns.

Where the host tier cannot hold every idle session's history, the pages it
evicts spill to the store, and a returning session reads them back on its own
critical path at the store's bandwidth. When a harness has said when a
session comes back (`expected_gap_s`), the prefetcher starts that read
`AgentConfig.prefetch_lead_s` before then, soonest first, one read at a time
(the store is one channel), in the background (`SchedulerTiers.read_ahead`).
Sessions without the hint are left alone: a return learned from past gaps
misses by a median of 93 s on the Claude Code traces (docs/results.md 15),
and a read that lands that early is evicted again before the turn.

A read asks only for what the host can take: free pages, and pages of idle
sessions expected back later than this one (`cache.sessions.expected_return`;
with `return_aware` eviction those are exactly the ones it frees first). The
tree changes only when the read is done: at the next step, the pages it found
that are still only in the store go into host pages. The admission then finds
them in the host and loads them at PCIe speed. A session is read at most
`MAX_READS_PER_GAP` times between two turns (its pages may reach the store in
several evictions), and a read not done `READ_DEADLINE_S` after it started is
given up (its pages stay in the store, read on demand).

The engine and the simulator run this code: the engine's read runs on a
thread (`tiers.copies.StoreReadAhead`), the simulator's takes the store's time
on its clock (`bench.sim.tiers.TimedTiers`). No torch.
"""

from __future__ import annotations

import heapq
from collections.abc import Container
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache.eviction import owner
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.sessions import SessionInfo, expected_return
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.tiers.contract import ReadAhead, SchedulerTiers

MAX_READ_SHARE = 0.25  # one read fills at most this share of the host tier
PLAN_PERIOD_S = 0.05  # idle sessions are scanned for the next read at most this often
READ_DEADLINE_S = 30.0  # a read not done by then is given up
MAX_READS_PER_GAP = 4  # reads of one session between two of its turns


@dataclass
class PrefetchStats:
    reads: int = 0
    pages_read: int = 0  # asked of the store
    pages_installed: int = 0  # in the host tier when the read was done
    pages_stale: int = 0  # read, but by then on a tier again, or off the session's path
    pages_no_room: int = 0  # read, but the host had no room short of sooner sessions' pages
    given_up: int = 0  # reads past `READ_DEADLINE_S`


@dataclass
class _Flight:
    sid: str
    hashes: np.ndarray
    read: ReadAhead
    expected: float
    deadline: float


class Prefetcher:
    def __init__(self, lead_s: float, cache: PrefixCache, tiers: SchedulerTiers) -> None:
        self.lead_s, self.cache, self.tiers = lead_s, cache, tiers
        self.stats = PrefetchStats()
        self.flight: _Flight | None = None
        self._next_plan = -np.inf
        self._tried: dict[str, tuple[float, int]] = {}  # session -> (turn end, reads since)
        # Hinted sessions between turns, by due time: the heap until they are within the
        # lead, then `_due` until they return (a scan costs what is due, not every record).
        self._later: list[tuple[float, str, float]] = []  # (due, session, its turn end)
        self._due: dict[str, tuple[float, float]] = {}  # session -> (due, its turn end)

    @property
    def enabled(self) -> bool:
        return self.lead_s > 0 and self.cache.has_host and self.cache.has_store

    def step(self, now: float, live: Container[str]) -> None:
        """Install a finished read, then start the next one; `live`: sessions with a
        request queued or running (they read on demand)."""
        if not self.enabled:
            return
        f = self.flight
        if f is not None and f.read.done(now):
            self.flight = None
            self._install(f, now)
        elif f is not None and now > f.deadline:
            self.flight = None
            self.stats.given_up += 1
        if self.flight is None and now >= self._next_plan:
            self._next_plan = now + PLAN_PERIOD_S
            self._launch(now, live)

    @property
    def tracked(self) -> int:
        """Hinted sessions between turns it keeps a due time for."""
        return len(self._later) + len(self._due)

    def turn_ended(self, sid: str, turn_end: float | None, expected_gap_s: float | None) -> None:
        """A turn of `sid` ended at `turn_end` (its record's); a harness expects the next
        after the gap."""
        if self.enabled and expected_gap_s is not None and turn_end is not None:
            heapq.heappush(self._later, (turn_end + expected_gap_s, sid, turn_end))

    def forget(self, sids: list[str]) -> None:
        """The sessions' records are gone."""
        for sid in sids:
            self._tried.pop(sid, None)
            self._due.pop(sid, None)
        gone = set(sids)
        self._later = [e for e in self._later if e[1] not in gone]
        heapq.heapify(self._later)

    def check(self) -> None:
        """Its state stays bounded: only sessions with a record are remembered."""
        known = self.cache.sessions.keys()
        assert not (self._tried.keys() - known), "a forgotten session's reads"
        assert not (self._due.keys() - known), "a forgotten session is due"
        assert all(sid in known for _, sid, _ in self._later), "a forgotten session waits"
        assert self.stats.pages_installed + self.stats.pages_stale <= self.stats.pages_read

    # -- starting a read -------------------------------------------------------------
    def _launch(self, now: float, live: Container[str]) -> None:
        while self._later and self._later[0][0] - now <= self.lead_s:
            at, sid, turn_end = heapq.heappop(self._later)
            if self._current(sid, turn_end):  # not a gap it has already come back from
                self._due[sid] = (at, turn_end)
        for sid, (_, turn_end) in list(self._due.items()):
            if not self._current(sid, turn_end):
                del self._due[sid]  # it came back, or its record went
        due = sorted(
            (t, sid)
            for sid, (t, turn_end) in self._due.items()
            if sid not in live and self._reads(sid, turn_end) < MAX_READS_PER_GAP
        )
        cap = max(1, int(MAX_READ_SHARE * self.cache.host.capacity))
        for t, sid in due:
            info = self.cache.sessions[sid]
            room = self.cache.host.num_free + self._evictable_after(t, sid, now)
            hashes, tokens = _store_only(info, min(cap, room))
            if not len(hashes):
                continue  # nothing only in the store, or no room: looked at again later
            read = self.tiers.read_ahead(hashes, tokens, _tenant(info))
            if read is None:
                return
            assert info.turn_end is not None
            self._tried[sid] = (info.turn_end, self._reads(sid, info.turn_end) + 1)
            self.flight = _Flight(sid, hashes, read, t, now + READ_DEADLINE_S)
            self.stats.reads += 1
            self.stats.pages_read += len(hashes)
            return

    def _current(self, sid: str, turn_end: float) -> bool:
        """`sid` is still in the gap after the turn that ended at `turn_end`."""
        info = self.cache.session_info(sid)
        return info is not None and info.turn_end == turn_end and info.leaf is not None

    def _reads(self, sid: str, turn_end: float) -> int:
        """Reads started for the session since its last turn ended."""
        tried = self._tried.get(sid)
        return tried[1] if tried is not None and tried[0] == turn_end else 0

    # -- installing what it found -------------------------------------------------------
    def _install(self, f: _Flight, now: float) -> None:
        found = f.read.found()
        read_at = {int(h): i for i, h in enumerate(f.hashes) if i < len(found) and found[i]}
        info = self.cache.session_info(f.sid)
        groups: list[tuple[Node, np.ndarray, np.ndarray]] = []  # node, its pages, read index
        if info is not None and info.leaf is not None:
            for node, idx in _store_only_pages(info.leaf):
                at = np.array([read_at.pop(int(h), -1) for h in node.hashes[idx]], dtype=np.int64)
                keep = at >= 0
                if keep.any():
                    groups.append((node, idx[keep], at[keep]))
        self.stats.pages_stale += len(read_at)
        want = sum(len(g[1]) for g in groups)
        room = self.cache.host.num_free + self._evictable_after(f.expected, f.sid, now)
        if want > room:
            self.stats.pages_no_room += want - room
            groups, want = _first(groups, room), room
        if want <= 0 or info is None or info.leaf is None:
            return
        leaf = info.leaf
        self.cache.tree.lock(leaf, +1)  # the path must not lose pages while room is made
        try:
            slots = self.cache.allocate_host(want)
        finally:
            self.cache.tree.lock(leaf, -1)
        if slots is None:
            self.stats.pages_no_room += want
            return
        for node, idx, at in groups:
            mine, slots = slots[: len(idx)], slots[len(idx) :]
            if not f.read.install(at, mine):
                self.cache.host.free(mine)
                continue
            self.cache.placement.set_host(node, idx, mine)
            self.stats.pages_installed += len(idx)

    def _evictable_after(self, expected: float, sid: str, now: float) -> int:
        """Host pages on unlocked private nodes of other idle sessions expected back
        later than `expected` (or with no record): what may go to make room."""
        n = 0
        for node in self.cache.heaps.holders(Tier.HOST):
            if node.lock or node.shared:
                continue
            other = owner(node)
            if other == sid:
                continue
            info = self.cache.session_info(other) if other is not None else None
            later = info is None or expected_return(info, now) > expected
            if later and (info is None or info.queued_since is None):
                n += node.n_host
        return n


def _store_only_pages(leaf: Node) -> list[tuple[Node, np.ndarray]]:
    """The pages on `leaf`'s path only the store holds, root first, per node."""
    out, node = [], leaf
    while node.parent is not None:
        idx = np.flatnonzero(node.stored & (node.device < 0) & (node.host < 0))
        if len(idx) and node.tokens is not None:
            out.append((node, idx))
        node = node.parent
    return out[::-1]


def _store_only(info: SessionInfo, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes and tokens of the first `cap` store-only pages of the session's path (of
    its own tenant: another's pages are not its to read)."""
    assert info.leaf is not None
    tenant = _tenant(info)
    parts = [(n, i) for n, i in _store_only_pages(info.leaf) if n.tenant == tenant]
    if not parts:
        return np.empty(0, np.uint64), np.empty((0, 0), np.int64)
    hashes = np.concatenate([n.hashes[i] for n, i in parts])[:cap]
    tokens = np.concatenate([n.tokens[i] for n, i in parts])[:cap]  # type: ignore[index]
    return hashes, tokens


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
