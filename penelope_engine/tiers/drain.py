"""A leaving replica's drain: what the store lacks written, what could not be, named.

`SessionDrain` is the drain a `SessionHandover` holds, built over the parts it is
handed (the tiers, the cache, the sessions book, the path records, and the
`Recorded` book it shares with the handover's writes behind): on a downscale or
redeploy the replica writes every cached page the store lacks, then the session
records those writes (or a refused write behind) left stale, within a deadline,
and reports each session whose history it could not leave whole in the store,
with why (`DrainReport`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.protocol import (
    UNDRAINED_PAGES_LATE,
    UNDRAINED_PAGES_LOST,
    UNDRAINED_PAGES_REFUSED,
    UNDRAINED_RECORD_LATE,
    UNDRAINED_RECORD_REFUSED,
    DrainReport,
)
from penelope_engine.tiers.copies import TorchTiers
from penelope_engine.tiers.path_records import PathRecords

log = logging.getLogger(__name__)


@dataclass
class Recorded:
    """What this replica knows of its sessions' records in the store: the handover's
    writes behind keep it, the drain reads it and writes what they left stale."""

    tenants: dict[str, str] = field(default_factory=dict)  # session id -> tenant
    pages: dict[str, int] = field(default_factory=dict)  # session id -> pages in its record
    refused: set[str] = field(default_factory=set)  # sessions a write behind failed for


class SessionDrain:
    """A leaving replica's drain (the module); `flush(timeout_s)` waits for the writes
    behind queued so far (the handover's)."""

    def __init__(
        self,
        tiers: TorchTiers,
        cache: PrefixCache,
        sessions: Sessions,
        records: PathRecords,
        known: Recorded,
        flush: Callable[[float], bool],
    ) -> None:
        self.tiers = tiers
        self.cache = cache
        self.sessions = sessions
        self.records = records
        self.known = known
        self.flush = flush
        self.last: DrainReport | None = None  # the last drain's report

    def drain(self, deadline_s: float) -> DrainReport:
        """Write every cached page the store lacks, then the records those writes (or a
        refused write behind) left stale, all within `deadline_s`; what was written, and
        each session whose history is still not whole in the store, with why.

        Called when a replica leaves (downscale, redeploy): its sessions are then
        served from the shared store wherever they go next. The writes behind go
        first (a record is never written ahead of its segments). A session whose
        record this replica wrote at its current length is not written again: it
        may since have moved on, and another replica's longer record must stand.
        """
        t0 = time.monotonic()
        end = t0 + deadline_s
        flushed = self.flush(deadline_s)
        if not flushed:
            log.warning("drain: store writes behind still running after %g s", deadline_s)
        pages, touched, refused, late = self._drain_pages(end)
        unstored = {id(node) for node, *_ in self.cache.store_pages.unstored_by_tier()}
        records = stale = 0
        undrained: dict[str, str] = {}  # session id -> why (the first reason found)
        known = self.known
        for sid, tenant in list(known.tenants.items()):
            info = self.sessions.get(sid)
            if info is None or not len(info.seen_hashes):
                continue
            path = {id(node) for node in info.leaf.path_up()} if info.leaf is not None else set()
            if sid in known.refused:
                undrained[sid] = UNDRAINED_PAGES_LOST
            elif path & refused:
                undrained[sid] = UNDRAINED_PAGES_REFUSED
            elif path & unstored:
                undrained[sid] = UNDRAINED_PAGES_LATE
            if known.pages.get(sid) == len(info.seen_hashes) and not path & touched:
                continue  # its record (written behind) is current
            if time.monotonic() > end:
                stale += 1
                undrained.setdefault(sid, UNDRAINED_RECORD_LATE)
                continue
            written = self.records.put(tenant, sid, self.records.owned(tenant, info.seen_hashes))
            if written:
                known.pages[sid] = len(info.seen_hashes)
                records += 1
            elif written is False:
                undrained.setdefault(sid, UNDRAINED_RECORD_REFUSED)
        report = DrainReport(
            pages, records, stale, flushed and not late, time.monotonic() - t0,
            tuple(undrained.items()),
        )  # fmt: skip
        self.last = report
        if stale or late:
            log.warning("drain: deadline of %g s passed: %s", deadline_s, report)
        return report

    def _drain_pages(self, end: float) -> tuple[int, set[int], set[int], bool]:
        """Write the cached pages the store lacks until `end`: pages written, the ids of
        the nodes they belong to, the ids of nodes whose write the store refused, and
        whether the deadline cut it short."""
        tiers, written, touched, refused = self.tiers, 0, set[int](), set[int]()
        pools = {Tier.HOST: tiers.host, Tier.DEVICE: tiers.device}
        last: Node | None = None
        store = self.cache.store_pages
        for node, tier, slots, idx in store.unstored_by_tier():
            if node is not last and time.monotonic() > end:
                return written, touched, refused, True
            last, pool = node, pools[tier]
            if pool is None:
                continue
            if tiers.write_segments(pool, slots, node, idx):
                store.mark_stored(node, idx)
                written += len(idx)
                touched.add(id(node))
            else:
                refused.add(id(node))
        return written, touched, refused, False
