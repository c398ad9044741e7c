"""The cache's session events and its bounded session records: `PrefixCache`'s base.

Each event updates the session's `SessionInfo` (`sessions`) and re-keys the
session's path for eviction; records are bounded by a TTL and a cap
(`sessions.expired`). `PrefixCache` holds the state; this class only groups the
methods that keep the session records. No torch.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

from penelope_engine.cache import sessions
from penelope_engine.cache.evict_heap import EvictionHeaps
from penelope_engine.cache.placement import Placement
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tree import PageTree


class SessionEvents:
    """Session records and their events (the state is `PrefixCache`'s)."""

    _sessions: dict[str, SessionInfo]
    _session_ttl_s: float
    _max_session_records: int
    _time_fn: Callable[[], float]
    _tree: PageTree
    _placement: Placement
    _heaps: EvictionHeaps

    @property
    def now(self) -> float:
        return self._time_fn()

    def session(self, sid: str) -> SessionInfo:
        """The session's record, created on first use (session events call this)."""
        info = self._sessions.get(sid)
        if info is None:
            info = self._sessions[sid] = SessionInfo(last_access=self.now)
        return info

    def session_info(self, sid: str) -> SessionInfo | None:
        """The session's record, or None (policies read this: it never creates one)."""
        return self._sessions.get(sid)

    # -- session events (each may re-key the session's path) ----------------------
    def on_arrival(self, sid: str, now: float | None = None) -> None:
        info = self.session(sid)
        info.arrive(self.now if now is None else now)
        self._heaps.touch_path(info.leaf)

    def on_start(self, sid: str) -> None:
        info = self.session(sid)
        info.start(self.now)
        self._heaps.touch_path(info.leaf)

    def on_turn_end(
        self, sid: str, stop_reason: str | None, now: float | None = None, gap: float | None = None
    ) -> None:
        info = self.session(sid)  # gap: a harness's expected seconds to the next turn
        info.end_turn(self.now if now is None else now, stop_reason, gap)
        self._heaps.touch_path(info.leaf)

    def on_abort(self, sid: str) -> None:
        """A queued request of the session was withdrawn before it ran."""
        info = self.session(sid)
        info.withdraw()
        self._heaps.touch_path(info.leaf)

    def release_session(self, sid: str) -> int:
        """Its private device pages leave the device now (`Placement.release_private`)."""
        leaf = self.session(sid).leaf
        return self._placement.release_private(leaf, sid) if leaf is not None else 0

    def set_tenant(self, sid: str, tenant: str) -> None:
        """The tenant of the session's request just admitted (the miss ledger reads it)."""
        self.session(sid).tenant = tenant

    def set_expected_gap(self, sid: str, gap: float | None) -> None:
        """A harness's `expected_gap_s` for the session's current gap (None: none)."""
        info = self.session(sid)
        info.expected_gap = gap
        self._heaps.touch_path(info.leaf)

    def rerank_session(self, sid: str) -> None:
        """What an injected policy knows of the session outside the cache changed (the
        simulator's oracle: its next arrival): its pages are ranked again."""
        info = self._sessions.get(sid)
        if info is not None:
            self._heaps.touch_path(info.leaf)

    # -- bounded session records (`sessions.expired`) ----------------------------
    def idle_sessions(self, keep: Container[str]) -> list[str]:
        """Records to drop: idle sessions holding no page past the TTL, then the least
        recently used idle ones past the cap; never those in `keep`. Does not mutate."""
        ttl, cap = self._session_ttl_s, self._max_session_records
        return sessions.expired(self._sessions, self.now, ttl, cap, keep)

    def prune_stored(self, keep: Container[str]) -> int:
        """Private leaves holding only store pages, idle past the TTL and not of a session
        in `keep`, leave the tree (mutates; `Placement.forget_stored`); nodes removed."""
        before = self.now - self._session_ttl_s
        leaves = [n for n in self._tree.iter_nodes() if not n.children and n.stored.any()]
        return sum(self._placement.forget_stored(n, keep, before) for n in leaves)

    def forget_sessions(self, sids: Iterable[str]) -> None:
        """Drop these sessions' records (mutates); their pages rank as `stand_in`s."""
        for sid in sids:
            info = self._sessions.pop(sid, None)
            if info is not None:
                self._heaps.touch_path(info.leaf)
