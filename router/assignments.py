"""Where this router sent each session that the digests do not show yet.

Digests arrive every few seconds, so a session routed a moment ago is not in
any of them: without this table its next turn could land elsewhere. Entries
expire after a TTL, the table keeps at most ``capacity`` sessions (least
recently routed go first), and an entry whose replica disappears moves to a
small "re-homed" record so the next route can say where the session came from.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from typing import NamedTuple, TypeVar

_V = TypeVar("_V")


class Assignment(NamedTuple):
    replica_id: str
    at: float


class AssignmentTable:
    """Bounded session -> replica memory with expiry. Not thread-safe (one event loop)."""

    def __init__(self, ttl_s: float, capacity: int) -> None:
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._live: OrderedDict[str, Assignment] = OrderedDict()
        self._rehomed: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def get(self, session_id: str, now: float) -> str | None:
        """The replica ``session_id`` was last sent to, unless that has expired."""
        entry = self._live.get(session_id)
        if entry is None:
            return None
        if now - entry.at > self._ttl_s:
            del self._live[session_id]
            return None
        return entry.replica_id

    def put(self, session_id: str, replica_id: str, now: float) -> None:
        """Record a routing; mutates. Evicts the least recently routed beyond capacity."""
        self._live[session_id] = Assignment(replica_id, now)
        self._live.move_to_end(session_id)
        self._rehomed.pop(session_id, None)
        _trim(self._live, self._capacity)

    def claim(self, session_id: str, replica_id: str, live_ids: Collection[str], now: float) -> str:
        """The replica ``session_id`` already has, if unexpired and in ``live_ids``; else
        record ``replica_id`` for it and return that. Mutates. The first claim wins, so
        every caller of one table places a session alike."""
        held = self.get(session_id, now)
        if held is not None and held in live_ids:
            return held
        self.put(session_id, replica_id, now)
        return replica_id

    def pending(self, now: float) -> list[tuple[str, str]]:
        """(session, replica) of every unexpired entry, oldest first."""
        return [(sid, a.replica_id) for sid, a in self._live.items() if now - a.at <= self._ttl_s]

    def drop(self, session_id: str) -> None:
        self._live.pop(session_id, None)

    def retain_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Forget sessions whose replica is not in ``live_ids``; returns those sessions."""
        lost = [sid for sid, a in self._live.items() if a.replica_id not in live_ids]
        for sid in lost:
            self._rehomed[sid] = self._live.pop(sid).replica_id
            self._rehomed.move_to_end(sid)
        _trim(self._rehomed, self._capacity)
        return lost

    def rehomed_from(self, session_id: str) -> str | None:
        """The vanished replica ``session_id`` lived on, until it is routed again."""
        return self._rehomed.get(session_id)


def _trim(table: OrderedDict[str, _V], capacity: int) -> None:
    while len(table) > capacity:
        table.popitem(last=False)
