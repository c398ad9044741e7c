"""`SegmentWriter`: KV segments written to the store behind the step, counted by page.

One bounded queue (`WriteBehind`) carries host evictions' pages (`spill`, which
the tiers are built with) and turn ends' (`SessionHandover`'s jobs). It is built
before both, so neither is rewired after it is built. Each page is pending from
the moment it is copied out and queued until its segment is written (then
written) or its write fails (then lost): what a replica dying now would lose is
`pending_pages` (`penelope_write_behind_queue_pages` on /metrics).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cache_store import ArrowSegmentStore
from penelope_engine.tiers.copies import PageSnapshot
from penelope_engine.tiers.write_behind import WriteBehind

log = logging.getLogger(__name__)


class SegmentWriter:
    """KV segments written to the store behind the step, on one bounded queue: host
    evictions' pages (`spill`, which the tiers are built with) and turn ends' (the
    handover's jobs). Built before both, so neither is rewired after it is built."""

    def __init__(self, store: ArrowSegmentStore, max_bytes: int) -> None:
        self.store = store
        self.writer = WriteBehind(max_bytes)
        self._lock = threading.Lock()  # the counts below: the step thread and the writer's
        self.pending_pages = 0  # copied out and queued, not yet written
        self.written_pages = 0
        self.lost_pages = 0  # pages copied to be written whose write failed (recomputed)

    def spill(self, snaps: list[PageSnapshot]) -> bool:
        """(The step thread.) A host eviction's pages, on the queue: True once queued (they
        count as stored; a write that then fails counts them lost), False when the queue
        has no room (they are dropped, and recomputed if needed again)."""
        return self.submit(snaps, lambda: self.put(snaps))

    def submit(self, snaps: list[PageSnapshot], job: Callable[[], object]) -> bool:
        """(The step thread.) `job`, which writes `snaps` (`put`) and maybe more, on the
        queue; their pages count as pending until it has. False: no room, nothing queued."""
        pages = sum(len(s.hashes) for s in snaps)
        with self._lock:
            self.pending_pages += pages
        if self.writer.submit(sum(s.nbytes for s in snaps), job):
            return True
        with self._lock:
            self.pending_pages -= pages
        return False

    def put(self, snaps: list[PageSnapshot]) -> bool:
        """(The writer thread.) Each segment; the pages of one that fails count as lost.
        Whether every one was written."""
        every = True
        for snap in snaps:
            try:
                ok = self.store.put(snap.segment(self.store.namespace))
            except Exception:  # counted lost like a refused write; the writer goes on
                log.exception("a KV segment could not be written to the store")
                ok = False
            with self._lock:
                self.pending_pages -= len(snap.hashes)
                if ok:
                    self.written_pages += len(snap.hashes)
                else:
                    self.lost_pages += len(snap.hashes)
            every = every and ok
        return every
