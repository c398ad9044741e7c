"""A session's path record in the shared store: read when it arrives, written after its pages.

A record (`cache_store.records`) names a session's pages, each with the tenant that
owns it (a declared public prefix's pages are `PUBLIC`'s), and the store segments
holding them when it is written. `SessionHandover` decides when; this module
reads and writes them:

- `fetch`: an arriving session's record, and its public prefix's, off the step
  thread within the tiers' read budget (the segments they name get indexed);
- `put`: a session's record from what is known when it is written (the
  session's pages seen by then), one write of it at a time, so the last one
  written names the most. A put that finds its session's record being written
  does not wait for that write (the store may be slow): it leaves its pages to
  the thread writing, which writes the record once more when it is done;
- `first`: the turn's first record on its own small queue, which the turn's
  last output waits for;
- `put_public`: the public prefix's own record, named by its last page, so a
  new session of any tenant finds it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from cache_store import ArrowSegmentStore, PathRecord
from penelope_engine.cache.pages import PUBLIC
from penelope_engine.cache.session_book import Sessions
from penelope_engine.protocol import GenerateRequest
from penelope_engine.tiers.budget import ReadBudget
from penelope_engine.tiers.copies import TorchTiers
from penelope_engine.tiers.write_behind import WriteBehind

log = logging.getLogger(__name__)

RECORD_JOB_BYTES = 4096  # what a record write counts against its queue's bound
RECORD_QUEUE_BYTES = 1024 * RECORD_JOB_BYTES  # records queued at most; past it a turn won't wait


@dataclass
class _Writing:
    """A session's record being written now, and what puts that came meanwhile left."""

    pages: list[tuple[str, int]]
    again: bool = False  # a put came meanwhile: write it once more when done
    then: list[Callable[[bool], None]] = field(default_factory=list)  # theirs, told then


class PathRecords:
    """Reads and writes of sessions' path records; `writer`: the first records' queue (None:
    records are written only by the page writer's jobs and drains)."""

    def __init__(
        self,
        store: ArrowSegmentStore,
        tiers: TorchTiers,
        sessions: Sessions,
        queued: bool,
        budget: ReadBudget | None = None,
    ) -> None:
        self.store = store
        self.tiers = tiers
        self.sessions = sessions
        self.budget = budget  # bounds `fetch` (None: unbounded)
        self.writer = WriteBehind(RECORD_QUEUE_BYTES, name="penelope-records") if queued else None
        self._lock = threading.Lock()  # `_writing`
        self._writing: dict[tuple[str, str], _Writing] = {}  # records being written now

    # -- any thread ------------------------------------------------------------------
    def fetch(self, req: GenerateRequest, public_tail: int | None) -> PathRecord | None:
        """The record of the request's session, its segments (and those of its public
        prefix, ending at page `public_tail`) indexed by the store. Store I/O: call it
        off the step thread. It waits its own budget at most
        (`CacheConfig.store_record_budget_s`): past it, or with the store degraded,
        the session has no record here (its history recomputes)."""
        budget = self.budget
        if budget is None:
            return self._fetch(req, public_tail)
        return budget.call(lambda: self._fetch(req, public_tail), None, "a path record read")

    def _fetch(self, req: GenerateRequest, public_tail: int | None) -> PathRecord | None:
        if public_tail is not None and self.store.lookup(PUBLIC, public_tail) is None:
            self.store.get_record(PUBLIC, public_name(public_tail))
        if req.session_id is None:
            return None
        return self.store.get_record(req.tenant, req.session_id)

    def owned(self, tenant: str, hashes: np.ndarray) -> list[tuple[str, int]]:
        """A record's pages: each hash with the tenant that owns it (public or `tenant`)."""
        return [(self.tiers.owner(tenant, h), h) for h in hashes.tolist()]

    # -- writer threads --------------------------------------------------------------
    def put(
        self,
        tenant: str,
        session_id: str,
        pages: list[tuple[str, int]],
        then: Callable[[bool], None] | None = None,
    ) -> bool | None:
        """(A writer thread.) Write the session's record; whether it was written, or None
        when another thread was writing it: that thread writes it once more when done,
        with these pages if longer. `then` is told the result of the write that covers
        this put, either way (on whichever thread wrote it).

        A record names what is known when it is written: the pages the session has
        seen by now (its latest turn here, if longer than `pages`) and the segments
        the store has indexed by now. A session's record is written one write at a
        time, so the last one written, whichever queue it came from, names the most:
        an early record never hides segments a slower job wrote. No put waits on
        another's store call: a record write stuck in a slow store holds up no page."""
        key = (tenant, session_id)
        with self._lock:
            writing = self._writing.get(key)
            if writing is not None:
                writing.again = True
                writing.pages = max(writing.pages, pages, key=len)
                if then is not None:
                    writing.then.append(then)
                return None
            writing = self._writing[key] = _Writing(pages)
        told = [then] if then is not None else []
        while True:
            ok = self._write(tenant, session_id, writing.pages)
            for tell in told:
                tell(ok)
            with self._lock:
                if not writing.again:
                    del self._writing[key]
                    return ok
                writing.again, told, writing.then = False, writing.then, []

    def _write(self, tenant: str, session_id: str, pages: list[tuple[str, int]]) -> bool:
        info = self.sessions.get(session_id)  # a dict read: thread-safe
        seen = info.seen_hashes if info is not None else None
        if seen is not None and len(seen) > len(pages):
            pages = self.owned(tenant, seen)
        try:
            return self.store.put_record(tenant, session_id, pages)
        except Exception:  # counted unwritten like a refused write; the writer goes on
            log.exception("the path record of session %s could not be written", session_id)
            return False

    def put_public(self, pages: list[tuple[str, int]]) -> None:
        """(The writer thread.) The record of the public prefix `pages` start with, if any."""
        head = [p for p in itertools.takewhile(lambda p: p[0] == PUBLIC, pages)]
        if head:
            self.store.put_record(PUBLIC, public_name(head[-1][1]), head)

    # -- the step thread -------------------------------------------------------------
    def first(self, tenant: str, session_id: str, pages: list[tuple[str, int]]) -> Future[bool]:
        """Queue the turn's first record on `writer`: done when it is written (True) or
        was not (False, and at once when the queue is full: the turn does not wait)."""
        done: Future[bool] = Future()
        if not pages:
            done.set_result(True)
            return done

        def settle(ok: bool) -> None:
            if done.set_running_or_notify_cancel():  # False: the waiter gave up
                done.set_result(ok)

        def job() -> None:
            self.put(tenant, session_id, pages, then=settle)

        assert self.writer is not None
        if not self.writer.submit(RECORD_JOB_BYTES, job):
            done.set_result(False)  # the queue is full: the turn does not wait for it
        return done


def public_name(tail_hash: int) -> str:
    """The record name of the public prefix whose last page is `tail_hash`."""
    return f"public-prefix-{tail_hash:016x}"
