"""Session records stay bounded: sessionless requests keep none, idle ones expire.

The sessions book keeps a record per session (`Sessions.ids`), retention keeps its
tool gaps, the engine's handover its tenant and last record length. A request
without a session id drops its record when it finishes; every `SWEEP_EVERY`
finished requests the records of idle sessions that hold no page past
`CacheConfig.session_ttl_s` go (and, past `max_session_records`, the least
recently used idle ones), from all three at once; and the tree forgets private
leaves that only the store still holds, idle as long (`PrefixCache.prune_stored`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.sched.agent import Retention
from penelope_engine.sched.sequence import Sequence

SWEEP_EVERY = 256  # finished requests between sweeps of idle session records


class SessionRecords:
    def __init__(self, cache: PrefixCache, sessions: Sessions, retention: Retention) -> None:
        self.cache = cache
        self.sessions = sessions
        self.retention = retention
        self.finished_requests = 0
        self.sweep_every = SWEEP_EVERY
        # Called with the session ids whose records were dropped (`build_core` wires
        # the prefetcher and the engine's handover).
        self._listeners: list[Callable[[list[str]], None]] = []

    def listen(self, forget: Callable[[list[str]], None]) -> None:
        """Call `forget` with the session ids whose records are dropped from now on."""
        self._listeners.append(forget)

    def finished(self, seq: Sequence, live: Callable[[], Collection[str]]) -> None:
        """`seq` left the scheduler; `live()` are the sessions whose records must stay."""
        self.finished_requests += 1
        if seq.req.session_id is None:
            self.forget([seq.req.engine_session_id])
        if self.finished_requests % self.sweep_every == 0:
            keep = live()
            self.forget(self.sessions.idle(keep))
            self.cache.prune_stored(keep)

    def check(self) -> None:
        """Records stay within the cap plus one sweep's worth of new sessions; retention
        and the book agree on which sessions exist; each record is well formed."""
        book = self.sessions
        known = book.ids()
        assert len(known) <= book.max_records + self.sweep_every, (
            f"{len(known)} session records, cap {book.max_records}"
        )
        book.check()
        assert not (self.retention.own.keys() - known), "gaps of a forgotten session"
        assert not (self.retention.pins.keys() - known), "a pin of a forgotten session"

    def forget(self, session_ids: list[str]) -> None:
        """Drop the sessions' records everywhere: the book, retention, the listeners."""
        if not session_ids:
            return
        self.sessions.forget(session_ids)
        self.retention.forget(session_ids)
        for listener in self._listeners:
            listener(session_ids)
