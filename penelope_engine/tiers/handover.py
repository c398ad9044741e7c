"""Sessions that change replica find their history in the shared store.

A session may be routed to another replica at any turn (upscale, overload, a
replica or node lost). So at the end of each turn the replica writes the
session's pages the store lacks *behind* (the copy out of the pools on the
step thread, the upload on `WriteBehind`'s thread), then the session's path
record (`cache_store.records`): its pages and the segments holding them.

    turn ends on A:  copy new pages -> [writer] put segments -> put record(tenant, session)
    next turn on B:  get record (off the step thread) -> index its segments
                     -> admission loads them (store tokens); pages the record
                        lists that cannot be loaded count as recomputed

Why a record in the store, and not the router or the ingress telling B how
long the session's history was: the store is the one place every replica
already shares and that outlives any of them (a lost node takes its router
digests with it; an ingress sees prompts, not what a replica cached), and the
record names the very segments B must load: without it B's index only knows
what was in the store when B started. Reading it costs one small object per
turn, off the step thread. A declared public prefix has a record of its own
(named by its last page), so a new session of any tenant finds it too.

Pages are marked stored when copied, not when uploaded: if the upload fails
the page reads as a miss and is recomputed (correct, only slower).

This module decides when pages and records are written (turn end, drain); the
records themselves are read and written by `path_records`.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future

import numpy as np

from cache_store import ArrowSegmentStore, PathRecord
from penelope_engine.cache.pages import PUBLIC
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tree import Node
from penelope_engine.protocol import DrainReport, GenerateRequest
from penelope_engine.tiers.budget import ReadBudget
from penelope_engine.tiers.copies import PageSnapshot, TorchTiers
from penelope_engine.tiers.drain import Recorded, SessionDrain
from penelope_engine.tiers.path_records import PathRecords
from penelope_engine.tiers.segment_writer import SegmentWriter
from penelope_engine.tiers.write_behind import WriteBehind

log = logging.getLogger(__name__)


class SessionHandover:
    """Write-behind of sessions' pages and records; reading records for arriving sessions;
    the drain (`SessionDrain`, held). `writes`: the segment writer the tiers spill through
    (None: pages and records are written only by a drain)."""

    def __init__(
        self,
        store: ArrowSegmentStore,
        tiers: TorchTiers,
        cache: PrefixCache,
        sessions: Sessions,
        writes: SegmentWriter | None,
        record_budget: ReadBudget | None = None,
    ) -> None:
        self.store = store
        self.tiers = tiers
        self.cache = cache
        self.sessions = sessions
        self.writes = writes
        self.writer = writes.writer if writes is not None else None
        self.records = PathRecords(
            store, tiers, sessions, queued=self.writer is not None, budget=record_budget
        )
        self.known = Recorded()  # tenants, record lengths, refused writes: shared with the drain
        self.deferred_pages = 0  # pages not written behind for want of room (offered again)
        self._drain = SessionDrain(tiers, cache, sessions, self.records, self.known, self.flush)

    @property
    def tenants(self) -> dict[str, str]:
        """Session id -> tenant, for its record (sessions this replica served)."""
        return self.known.tenants

    @property
    def last_drain(self) -> DrainReport | None:
        return self._drain.last

    def drain(self, deadline_s: float) -> DrainReport:
        """Write what the store lacks, within `deadline_s` (`SessionDrain.drain`)."""
        return self._drain.drain(deadline_s)

    @property
    def lost_pages(self) -> int:
        """Pages copied to be written whose write failed (recomputed if needed again)."""
        return self.writes.lost_pages if self.writes is not None else 0

    @property
    def pending_pages(self) -> int:
        """Pages copied out and queued for the store, not yet written."""
        return self.writes.pending_pages if self.writes is not None else 0

    @property
    def written_pages(self) -> int:
        """Pages the write-behind wrote to the store."""
        return self.writes.written_pages if self.writes is not None else 0

    # -- any thread ------------------------------------------------------------------
    def fetch(self, req: GenerateRequest, public_tail: int | None) -> PathRecord | None:
        """The record of the request's session (`PathRecords.fetch`; store I/O: call it
        off the step thread)."""
        return self.records.fetch(req, public_tail)

    def flush(self, timeout_s: float) -> bool:
        """Wait for the writes queued so far; False if `timeout_s` passed first."""
        return all(w.flush(timeout_s) for w in self._writers())

    def close(self, timeout_s: float) -> bool:
        if self.records.budget is not None:
            self.records.budget.close()
        return all([w.close(timeout_s) for w in self._writers()])

    def fault_counts(self) -> dict[str, int]:
        """`EngineStats`' store fields: the store's state, the write-behind queues (bytes
        and jobs queued, the bytes' cap, jobs refused, pages deferred, pending, written
        and lost) and reads that passed or skipped their budget (pages' and records')."""
        ws = self._writers()
        budgets = (self.tiers.read_budget, self.records.budget)
        return {
            "store_degraded": int(self.store.degraded),
            "write_behind_bytes": sum(w.pending_bytes for w in ws),
            "write_behind_jobs": sum(w.pending_jobs for w in ws),
            "write_behind_cap_bytes": sum(w.max_bytes for w in ws),
            "write_behind_refused": sum(w.refused for w in ws),
            "write_behind_deferred_pages": self.deferred_pages,
            "store_lost_pages": self.lost_pages,
            "write_behind_pages": self.pending_pages,
            "store_written_pages": self.written_pages,
            "store_read_timeouts": sum(b.timeouts + b.skipped for b in budgets if b is not None),
        }

    def _writers(self) -> list[WriteBehind]:
        return [w for w in (self.records.writer, self.writer) if w is not None]

    # -- the step thread -------------------------------------------------------------
    def arrived(self, tenant: str, session_id: str, record: PathRecord | None) -> None:
        """A request of the session is queued: what the fleet held of it counts as seen."""
        self.tenants[session_id] = tenant
        if record is not None:
            seen = np.array(record.page_hashes, np.uint64)
            self.sessions.open(session_id).held_elsewhere(seen)  # it arrives: opened here

    def forget(self, session_ids: list[str]) -> None:
        """The sessions' records in the cache were dropped (`sched.records`)."""
        for sid in session_ids:
            self.tenants.pop(sid, None)
            self.known.pages.pop(sid, None)

    def turn_ended(self, tenant: str, session_id: str) -> Future[bool] | None:
        """Queue the session's record now, then its unstored pages and the record again.

        The record written first lists every page the session has seen and the
        segments the store has of them so far (never a segment still to come), on
        its own small queue: the turn's last output waits for it (`recorded`), so a
        next turn that another replica serves counts what it rebuilds as recomputed,
        not new, even before the pages land. Pages that do not fit the writer's
        bound stay unstored, offered again at the session's next turn end (or by a
        spill or a drain). Returns when the first record is written (True) or was
        not (False); None without a writer.
        """
        self.tenants[session_id] = tenant
        if self.writer is None or self.records.writer is None:
            return None
        info = self.sessions.get(session_id)  # None: its record was just swept
        seen = info.seen_hashes if info is not None else np.empty(0, np.uint64)
        pages = self.records.owned(tenant, seen)
        recorded = self.records.first(tenant, session_id, pages)
        self._queue_pages(tenant, session_id, pages)
        return recorded

    def _queue_pages(self, tenant: str, session_id: str, pages: list[tuple[str, int]]) -> None:
        """The session's unstored pages, then its record, on the write-behind queue."""
        assert self.writer is not None
        taken: list[tuple[Node, np.ndarray]] = []
        room = self.writer.room() // self.tiers.device.bytes_per_page
        if self.store.writes.degraded:  # no copies for a store that refuses: offered later
            room = 0
        for node, idx in self.cache.store_pages.unstored(session_id):
            self.deferred_pages += max(0, len(idx) - room)
            if room > 0 and len(idx):
                taken.append((node, idx[:room]))
                room -= len(taken[-1][1])
        if not taken and self.known.pages.get(session_id) == len(pages):
            return
        snaps = [snap for node, idx in taken for snap in self._snapshot(node, idx)]
        public = any(s.owner == PUBLIC for s in snaps)
        job = lambda: self._write(snaps, tenant, session_id, pages, public)  # noqa: E731
        self.known.pages[session_id] = len(pages)  # before the job runs: a failed one undoes it
        assert self.writes is not None
        if not self.writes.submit(snaps, job):
            self.known.pages.pop(session_id, None)  # pages unstored, record stale: a drain writes
            return
        for node, idx in taken:
            self.cache.store_pages.mark_stored(node, idx)

    def _snapshot(self, node: Node, idx: np.ndarray) -> list[PageSnapshot]:
        """Copies of pages `idx` of `node`, read from the host where it has them."""
        host, device = self.tiers.host, self.tiers.device
        on_host = idx[node.host[idx] >= 0] if host is not None else idx[:0]
        on_device = np.setdiff1d(idx, on_host)
        snaps = self.tiers.snapshot(device, node.device, node, on_device)
        if host is not None:
            snaps += self.tiers.snapshot(host, node.host, node, on_host)
        return snaps

    def _write(
        self,
        snaps: list[PageSnapshot],
        tenant: str,
        session_id: str,
        pages: list[tuple[str, int]],
        public: bool,
    ) -> None:
        """(The writer thread.) The segments, then the records that name them: the
        session's, and the public prefix's when its pages were among them."""
        assert self.writes is not None  # jobs are queued only with a writer
        if not self.writes.put(snaps):
            self.known.refused.add(session_id)  # marked stored when copied: a drain names it
        if pages:
            self.records.put(tenant, session_id, pages, then=lambda ok: self._told(session_id, ok))
        if public:
            self.records.put_public(pages)

    def _told(self, session_id: str, written: bool) -> None:
        """(A writer thread.) A record this replica queued was written, or not: then a
        drain writes it."""
        if not written:
            self.known.pages.pop(session_id, None)
