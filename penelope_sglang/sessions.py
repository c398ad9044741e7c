"""The backend's per-session view: what each session left in the cache, its hints, its pins.

The adapter names a request's session (and its harness hints) in SGLang's
versioned KV-hint envelope (`GenerateReqInput.kv_hints`, which SGLang carries
untouched to the scheduler's `Req.kv_hints`), as one action:

    {"action_type": "penelope.session", "action_version": "1",
     "payload": {"session": "s1", "retain_s": 30.0, "expected_gap_s": 5.0,
                 "end_session": false}}

`SessionBook` keeps, per session id: the token path its last request left in
the tree (prompt + output), the tree node that path ends at, its last access
(monotonic seconds, the adapter's `clock()`), and the hints. The tree reads it
for its victim order and pins (`victim_key`, `retain_until`), for the
router's digests (`radix_cache.PenelopeRadixCache.session_view`), and for the
miss ledger (`known_tokens`: how much of a prompt the session had cached once).

Victim order (lowest key first):

    0  ended sessions (end_session)                 by last access
    1  requests that named no session (one-shot)    by SGLang's access counter
    2  sessions with a history, unretained          latest expected return first:
           last_access + expected_gap_s, or, without that hint, now + age (LRU)

A retained session (now < last_access + retain_s) is not a victim: the tree
locks its node (SGLang's own lock_ref pin) until the retention runs out.

No SGLang import here.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Protocol

from penelope_engine.errors import InvalidRequestError

HINT_ACTION = "penelope.session"
HINT_VERSION = "1"
ENVELOPE_VERSION = "1"


@dataclass(frozen=True)
class SessionHint:
    """One request's session id and harness hints, as the adapter sent them."""

    session: str
    retain_s: float | None = None
    expected_gap_s: float | None = None
    end_session: bool = False

    def __post_init__(self) -> None:
        if not self.session:
            raise InvalidRequestError("session must be a non-empty string")
        for name in ("retain_s", "expected_gap_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidRequestError(f"{name} must be >= 0, got {value}")

    def envelope(self, message_id: str) -> dict[str, Any]:
        """The `kv_hints` envelope that carries this hint to SGLang's scheduler."""
        payload: dict[str, Any] = {"session": self.session, "end_session": self.end_session}
        if self.retain_s is not None:
            payload["retain_s"] = float(self.retain_s)
        if self.expected_gap_s is not None:
            payload["expected_gap_s"] = float(self.expected_gap_s)
        action = {
            "action_id": f"{message_id}:session",
            "action_type": HINT_ACTION,
            "action_version": HINT_VERSION,
            "payload": payload,
        }
        return {"protocol_version": ENVELOPE_VERSION, "message_id": message_id, "actions": [action]}


def _float_or_none(payload: dict[str, Any], name: str) -> float | None:
    value = payload.get(name)
    return None if value is None else float(value)


def hint_of(envelope: Any) -> SessionHint | None:
    """The Penelope session action of a `KvHintsEnvelope` (or its dict form), if any."""
    if envelope is None:
        return None
    actions = envelope.get("actions", ()) if isinstance(envelope, dict) else envelope.actions
    for action in actions:
        get = action.get if isinstance(action, dict) else lambda k, a=action: getattr(a, k)
        if get("action_type") != HINT_ACTION or get("action_version") != HINT_VERSION:
            continue
        payload = dict(get("payload") or {})
        return SessionHint(
            session=str(payload.get("session", "")),
            retain_s=_float_or_none(payload, "retain_s"),
            expected_gap_s=_float_or_none(payload, "expected_gap_s"),
            end_session=bool(payload.get("end_session", False)),
        )
    return None


@dataclass
class SessionEntry:
    """What the backend knows of one session (mutable: it follows the session)."""

    session: str
    namespace: tuple[str | None, str | None]
    last_access: float  # monotonic seconds
    path: array  # tokens the last finished request left in the tree
    node_id: int | None = None  # the tree node that path ends at
    retain_until: float = 0.0
    expected_gap_s: float | None = None
    ended: bool = False
    lock: Any = None  # SGLang TreeLock while retained

    def retained(self, now: float) -> bool:
        return not self.ended and now < self.retain_until

    def expected_return(self, now: float) -> float:
        if self.expected_gap_s is not None:
            return self.last_access + self.expected_gap_s
        return now + (now - self.last_access)


def common_prefix(a: array, b: Any) -> int:
    """Length of the common prefix of two token sequences."""
    n = min(len(a), len(b))
    if a[:n] == array("q", b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == array("q", b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


class SessionBook:
    """Session id -> `SessionEntry`, and tree node id -> session, for one cache."""

    def __init__(self, max_sessions: int = 65536) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self._entries: dict[str, SessionEntry] = {}
        self._by_node: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> tuple[SessionEntry, ...]:
        return tuple(self._entries.values())

    def get(self, session: str | None) -> SessionEntry | None:
        return None if session is None else self._entries.get(session)

    def touch(
        self, hint: SessionHint, namespace: tuple[str | None, str | None], now: float
    ) -> SessionEntry:
        """A request of `hint.session` arrived: apply its hints, stamp the access."""
        entry = self._entries.get(hint.session)
        if entry is None:
            entry = SessionEntry(hint.session, namespace, now, array("q"))
            self._entries[hint.session] = entry
            self._trim()
        entry.last_access = now
        entry.ended = hint.end_session
        entry.expected_gap_s = hint.expected_gap_s  # for the gap after this request only
        if hint.retain_s is not None:
            entry.retain_until = now + hint.retain_s
        if hint.end_session:
            entry.retain_until = 0.0
        return entry

    def settle(self, session: str, path: array, node_id: int | None, now: float) -> None:
        """A request of `session` finished; its tokens now end at tree node `node_id`."""
        entry = self._entries.get(session)
        if entry is None:
            return
        if entry.node_id is not None and self._by_node.get(entry.node_id) == session:
            del self._by_node[entry.node_id]
        entry.path, entry.node_id, entry.last_access = path, node_id, now
        if node_id is not None:
            self._by_node[node_id] = session

    def session_of_node(self, node_id: int) -> str | None:
        return self._by_node.get(node_id)

    def known_tokens(self, session: str | None, tokens: Any) -> int:
        """How much of `tokens` the session's last request had left in the cache."""
        entry = self.get(session)
        return 0 if entry is None else common_prefix(entry.path, tokens)

    def victim_key(
        self, session: str | None, counter: float, now: float
    ) -> tuple[int, float, float]:
        """The eviction order key of a candidate (see the module docstring); SGLang's
        access counter breaks ties."""
        entry = self.get(session)
        if entry is None:
            return (1, counter, counter)
        if entry.ended:
            return (0, counter, counter)
        return (2, -entry.expected_return(now), counter)

    def is_retained(self, session: str | None, now: float) -> bool:
        entry = self.get(session)
        return entry is not None and entry.retained(now)

    def _trim(self) -> None:
        """Forget the least recently used sessions past `max_sessions` (unpinned ones)."""
        if len(self._entries) <= self.max_sessions:
            return
        for entry in sorted(self._entries.values(), key=lambda e: e.last_access):
            if len(self._entries) <= self.max_sessions:
                break
            if entry.lock is None:
                self.forget(entry.session)

    def forget(self, session: str) -> None:
        entry = self._entries.pop(session, None)
        if entry is not None and entry.node_id is not None:
            self._by_node.pop(entry.node_id, None)


class NodeLocker(Protocol):
    """SGLang's node locks, as `UnifiedRadixCache` offers them."""

    def lock(self, node_id: Any) -> Any: ...

    def unlock(self, lock: Any) -> None: ...


class RetainPins:
    """`retain_s` as SGLang's own pin: a lock on the session's tree node until it runs out.

    A locked node and its ancestors are neither Penelope's victims nor SGLang's
    (they count as protected in SGLang's memory accounting, like a running
    request's prefix).
    """

    def __init__(self, book: SessionBook, locker: NodeLocker) -> None:
        self.book = book
        self.locker = locker

    def pin(self, entry: SessionEntry, now: float) -> None:
        """Lock the node the session's history ends at, while it is retained."""
        self.unpin(entry)
        if entry.retained(now) and entry.node_id is not None:
            entry.lock = self.locker.lock(entry.node_id)

    def unpin(self, entry: SessionEntry) -> None:
        if entry.lock is not None:
            lock, entry.lock = entry.lock, None
            self.locker.unlock(lock)

    def release_expired(self, now: float) -> None:
        for entry in self.book.entries():
            if entry.lock is not None and not entry.retained(now):
                self.unpin(entry)

    def release_all(self) -> None:
        for entry in self.book.entries():
            self.unpin(entry)

    def pinned(self) -> int:
        return sum(1 for entry in self.book.entries() if entry.lock is not None)
