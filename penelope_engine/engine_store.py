"""The engine's store face: what a replica's shared store is asked through the engine.

`EngineStore` is a part `Engine` holds (`Engine.store`), built over the parts the
engine hands it: a session's record fetched off the step thread, the store's
counters, the drain when a replica leaves, the writes behind flushed or closed.
"""

from __future__ import annotations

from cache_store import ArrowSegmentStore, PathRecord, StoreStats
from penelope_engine.cache.pages import PublicPrefixes
from penelope_engine.cache.session_book import Sessions
from penelope_engine.protocol import UNDRAINED_NO_STORE, DrainReport, GenerateRequest
from penelope_engine.tiers.copies import TorchTiers
from penelope_engine.tiers.handover import SessionHandover

DRAIN_DEADLINE_S = 15.0  # within Ray Serve's graceful shutdown (20 s by default)


class EngineStore:
    """The store half of `Engine`'s face (the module); the engine owns the parts."""

    def __init__(
        self,
        store: ArrowSegmentStore | None,
        handover: SessionHandover | None,
        public: PublicPrefixes,
        sessions: Sessions,
        tiers: TorchTiers,
    ) -> None:
        self._store = store
        self._handover = handover
        self._public = public
        self._sessions = sessions
        self._tiers = tiers

    @property
    def has_store(self) -> bool:
        """Whether a shared store backs this engine (records and pages are read from it)."""
        return self._handover is not None

    def forget(self, session_ids: list[str]) -> None:
        """Dropped session records: the handover forgets them too."""
        if self._handover is not None:
            self._handover.forget(session_ids)

    def fetch_record(self, req: GenerateRequest) -> PathRecord | None:
        """What the fleet stored of the request's session (store I/O: call it off the step
        thread, and pass the result to `Engine.add_request`)."""
        if self._handover is None:
            return None
        return self._handover.fetch(req, self._public.tail(req.prompt_token_ids))

    def store_stats(self) -> StoreStats | None:
        """The Arrow store's counters (write and read errors included); None without one."""
        return self._store.stats() if self._store is not None else None

    def drain_to_store(self, deadline_s: float = DRAIN_DEADLINE_S) -> DrainReport:
        """Write every cached page the store lacks, and the session records that left
        stale; what was written, and the sessions left unwhole in the store, with why.

        Called when a replica leaves (downscale, drain): the sessions it held
        are then served from the shared store wherever they go next. With no
        store, every session it holds is named.
        """
        if self._handover is None:
            return DrainReport(undrained=tuple(
                (sid, UNDRAINED_NO_STORE) for sid in self._sessions.ids()
            ))  # fmt: skip
        return self._handover.drain(deadline_s)

    def flush_store_writes(self, timeout_s: float) -> bool:
        """Wait for the store writes behind queued so far; False if `timeout_s` passed."""
        return self._handover is None or self._handover.flush(timeout_s)

    def close(self, timeout_s: float = DRAIN_DEADLINE_S) -> bool:
        """Finish the store writes behind (within `timeout_s`) and stop their thread, and
        the read-ahead thread (reads not started stay in the store)."""
        self._tiers.close()
        return self._handover is None or self._handover.close(timeout_s)
