"""Prefetch: a hinted session's store pages into the host tier before it returns.

Where the host tier cannot hold every idle session's history, the pages it
evicts spill to the store, and a returning session reads them back on its own
critical path at the store's bandwidth. When a harness has said when a
session comes back (`expected_gap_s`), the prefetcher starts that read
`AgentConfig.prefetch_lead_s` before then, soonest first, one read at a time
(the store is one channel), in the background (`SchedulerTiers.read_ahead`).
Sessions without the hint are left alone: a return learned from past gaps
misses by a median of 93 s on the Claude Code traces (docs/history.md A.15),
and a read that lands that early is evicted again before the turn.

A read asks only for what the host can take, and no more than the store gives
in `MAX_READ_S` (a returning session's own store load waits behind it): free
pages, and pages of idle sessions expected back later than this one
(`cache.sessions.expected_return`; with `return_aware` eviction those are
exactly the ones it frees first). The tree changes only when the read is done:
at the next step, the pages it found that are still only in the store go into
host pages. The admission then finds them in the host and loads them at PCIe
speed. A session is read at most `MAX_READS_PER_GAP` times between two turns
(its pages may reach the store in several evictions), and a read not done
`READ_DEADLINE_S` after it started is given up (its pages stay in the store,
read on demand).

The engine and the simulator run this code: the engine's read runs on a
thread (`tiers.copies.StoreReadAhead`), the simulator's takes the store's time
on its clock (`bench.sim.tiers.TimedTiers`). No torch.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.tiers.contract import ReadAhead, SchedulerTiers
from penelope_engine.tiers.planner import PlannerCost

MAX_READ_SHARE = 0.25  # one read fills at most this share of the host tier
# ... and holds the store's channel at most this long, by the planner's cost of a store
# load: a returning session's own store load waits behind a read ahead (one channel),
# and a quarter of an H200's host tier is 5.4 s of NVMe (docs/results.md, current figures)
MAX_READ_S = 0.5
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
    def __init__(
        self,
        lead_s: float,
        cache: PrefixCache,
        sessions: Sessions,
        tiers: SchedulerTiers,
        cost: Callable[[], PlannerCost],
    ) -> None:
        self.lead_s, self.cache, self.tiers, self.cost = lead_s, cache, tiers, cost
        self.sessions = sessions
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

    def turn_ended(
        self, session_id: str, turn_end: float | None, expected_gap_s: float | None
    ) -> None:
        """A turn of `session_id` ended at `turn_end` (its record's); a harness expects the next
        after the gap."""
        if self.enabled and expected_gap_s is not None and turn_end is not None:
            heapq.heappush(self._later, (turn_end + expected_gap_s, session_id, turn_end))

    def forget(self, session_ids: list[str]) -> None:
        """The sessions' records are gone."""
        for sid in session_ids:
            self._tried.pop(sid, None)
            self._due.pop(sid, None)
        gone = set(session_ids)
        self._later = [e for e in self._later if e[1] not in gone]
        heapq.heapify(self._later)

    def check(self) -> None:
        """Its state stays bounded: only sessions with a record are remembered."""
        known = self.sessions.ids()
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
        cap = self.read_cap()
        for t, sid in due:
            store = self.cache.store_pages
            run = store.store_only(sid, min(cap, store.host_room(sid, t, now)))
            if not len(run.hashes):
                continue  # nothing only in the store, or no room: looked at again later
            read = self.tiers.read_ahead(run.hashes, run.tokens, run.tenant)
            if read is None:
                return
            info = self.sessions.get(sid)
            ended = info.turn_end if info is not None else None
            assert ended is not None
            self._tried[sid] = (ended, self._reads(sid, ended) + 1)
            self.flight = _Flight(sid, run.hashes, read, t, now + READ_DEADLINE_S)
            self.stats.reads += 1
            self.stats.pages_read += len(run.hashes)
            return

    def read_cap(self) -> int:
        """Most pages one read asks for: `MAX_READ_SHARE` of the host tier, and what the
        store reads in `MAX_READ_S` by the planner's cost (its latency, then per page)."""
        share = max(1, int(MAX_READ_SHARE * self.cache.capacity(Tier.HOST)))
        ps, cost = self.cache.page_size, self.cost()
        one, two = cost.load_s(ps, Tier.STORE), cost.load_s(2 * ps, Tier.STORE)
        per_page = two - one
        if per_page <= 0:
            return share
        return max(1, min(share, int((MAX_READ_S - (one - per_page)) / per_page)))

    def _current(self, sid: str, turn_end: float) -> bool:
        """`sid` is still in the gap after the turn that ended at `turn_end`."""
        info = self.sessions.get(sid)
        return info is not None and info.turn_end == turn_end and info.leaf is not None

    def _reads(self, sid: str, turn_end: float) -> int:
        """Reads started for the session since its last turn ended."""
        tried = self._tried.get(sid)
        return tried[1] if tried is not None and tried[0] == turn_end else 0

    # -- installing what it found -------------------------------------------------------
    def _install(self, f: _Flight, now: float) -> None:
        done = self.cache.store_pages.install_read(
            f.sid, (f.hashes, f.read.found()), f.expected, now, f.read.install
        )
        self.stats.pages_stale += done.stale
        self.stats.pages_no_room += done.no_room
        self.stats.pages_installed += done.installed
