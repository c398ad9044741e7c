"""`Sessions`: the book of session records and every session event. No torch.

One `SessionInfo` per session id (`sessions`). A record is created by one
named call, at arrival (`arrive`; `open` for what arrives with a request before
it is queued: the fleet's record of its path); every read (`get`, `record`,
`ids`, `records`) only reads. The scheduler's events (arrival, start, turn end,
abort, hints) update the record; the cache's `insert` tells the book of each
path a session inserted.

    Sessions  --rerank(leaf)-->  whoever ranks pages by session (the cache's heaps)

The book knows nothing of pages: when an event changes what a policy reads of a
session, it hands the session's leaf to the `rerank` listeners (`PrefixCache`
registers its eviction heaps when it is built over the book). Records are
bounded by a TTL and a cap (`idle`, `sessions.expired`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, KeysView, ValuesView

import numpy as np

from penelope_engine.cache import digests, sessions
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tree import Node
from penelope_engine.protocol import DIGEST_LIMITS, SessionDigest

Rerank = Callable[[Node | None], None]  # re-rank the pages on the path ending at a leaf


class UnknownSession(KeyError):
    """A session with no record was read where one must exist (it never arrived, or its
    record was dropped)."""


class Sessions:
    """Session records and their events; no page moves here (see the module)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        ttl_s: float = 3600.0,
        max_records: int = 100_000,
    ) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._max_records = max_records
        self._records: dict[str, SessionInfo] = {}
        self._rerank: list[Rerank] = []

    def watch(self, rerank: Rerank) -> None:
        """Call `rerank(leaf)` whenever what a policy reads of a session changes."""
        self._rerank.append(rerank)

    # -- reads (never create) -------------------------------------------------------------
    @property
    def now(self) -> float:
        return self._clock()

    @property
    def ttl_s(self) -> float:
        """Seconds an idle session holding no page keeps its record."""
        return self._ttl_s

    @property
    def max_records(self) -> int:
        return self._max_records

    def get(self, session_id: str) -> SessionInfo | None:
        """The session's record, or None (policies and other threads read this)."""
        return self._records.get(session_id)

    def record(self, session_id: str) -> SessionInfo:
        """The record of a session that has arrived and is still known; `UnknownSession`
        otherwise."""
        info = self._records.get(session_id)
        if info is None:
            raise UnknownSession(f"session {session_id!r} has no record: it has not arrived")
        return info

    def ids(self) -> KeysView[str]:
        """The sessions with a record (a live view: copy it to mutate)."""
        return self._records.keys()

    def records(self) -> ValuesView[SessionInfo]:
        """Their records (a live view; read only)."""
        return self._records.values()

    def __len__(self) -> int:
        return len(self._records)

    def digests(self, page_size: int, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]:
        """Tokens each of the `limit` most recent sessions holds per tier (router digests)."""
        return digests.session_digests(self._records, page_size, limit)

    # -- creation, at arrival ---------------------------------------------------------------
    def open(self, session_id: str) -> SessionInfo:
        """The session's record, created now when it has none (mutates): a request of it
        arrives (`arrive`), or the fleet's record of its path came with one."""
        info = self._records.get(session_id)
        if info is None:
            info = self._records[session_id] = SessionInfo(last_access=self.now)
        return info

    def arrive(self, session_id: str, now: float | None = None) -> SessionInfo:
        """A request of the session is queued: its record (opened if new) folds the gap."""
        info = self.open(session_id)
        info.arrive(self.now if now is None else now)
        self._changed(info)
        return info

    # -- events of known sessions (each may re-rank the session's path) ---------------------
    def on_start(self, session_id: str) -> None:
        info = self.record(session_id)
        info.start(self.now)
        self._changed(info)

    def on_turn_end(
        self,
        session_id: str,
        stop_reason: str | None,
        now: float | None = None,
        gap: float | None = None,
    ) -> None:
        info = self.record(session_id)  # gap: a harness's expected seconds to the next turn
        info.end_turn(self.now if now is None else now, stop_reason, gap)
        self._changed(info)

    def on_abort(self, session_id: str) -> None:
        """A queued request of the session was withdrawn before it ran."""
        info = self.record(session_id)
        info.withdraw()
        self._changed(info)

    def set_tenant(self, session_id: str, tenant: str) -> None:
        """The tenant of the session's request just admitted (the miss ledger reads it)."""
        self.record(session_id).tenant = tenant

    def set_expected_gap(self, session_id: str, gap: float | None) -> None:
        """A harness's `expected_gap_s` for the session's current gap (None: none)."""
        info = self.record(session_id)
        info.expected_gap = gap
        self._changed(info)

    def inserted(self, session_id: str, leaf: Node, hashes: np.ndarray, now: float) -> None:
        """The session's path `hashes`, ending at `leaf`, was inserted at `now` (the
        cache's `insert`; it re-ranks the path itself)."""
        self.record(session_id).inserted(leaf, hashes, now)

    def rerank(self, session_id: str) -> None:
        """What an injected policy knows of the session outside the book changed (the
        simulator's oracle: its next arrival): its pages are ranked again."""
        info = self._records.get(session_id)
        if info is not None:
            self._changed(info)

    # -- bounded records (`sessions.expired`) -----------------------------------------------
    def idle(self, keep: Container[str]) -> list[str]:
        """Records to drop: idle sessions holding no page past the TTL, then the least
        recently used idle ones past the cap; never those in `keep`. Does not mutate."""
        return sessions.expired(self._records, self.now, self._ttl_s, self._max_records, keep)

    def forget(self, session_ids: Iterable[str]) -> None:
        """Drop these sessions' records (mutates); their pages rank as `stand_in`s."""
        for sid in session_ids:
            info = self._records.pop(sid, None)
            if info is not None:
                self._changed(info)

    def check(self) -> None:
        """Every record is well formed: seen page ids a flat uint64 array, a queued session
        has arrived, gaps are not negative, a leaf is a node of pages."""
        for sid, info in self._records.items():
            seen = info.seen_hashes
            assert seen.dtype == np.uint64 and seen.ndim == 1, f"{sid}: seen ids {seen.dtype}"
            assert info.queued_since is None or info.first_arrival is not None, (
                f"{sid}: queued without an arrival"
            )
            assert info.gap_ewma is None or info.gap_ewma >= 0, f"{sid}: a negative gap"
            assert info.leaf is None or len(info.leaf) > 0, f"{sid}: an empty leaf"

    def _changed(self, info: SessionInfo) -> None:
        for rerank in self._rerank:
            rerank(info.leaf)
