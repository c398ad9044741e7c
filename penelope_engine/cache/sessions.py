"""What the cache knows of each session's timing, and how its events update it. No torch.

The sessions book (`session_book.Sessions`) keeps one `SessionInfo` per
session id and forwards the scheduler's events (arrival, start, turn end,
abort, next-arrival hint) to it; the return-aware and oracle policies read
these fields to rank sessions. The methods here only update the record:
re-keying the session's path for eviction is the cache's part.

Records are bounded (`expired`): a record goes once its session holds no
cached page and has been idle past a TTL, and past a cap the least recently
used idle records go first. A page whose owner has no record is ranked as a
session last used when the page was (`stand_in`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field

import numpy as np

from penelope_engine.cache.tree import Node


@dataclass
class SessionInfo:
    """What the cache knows about one session's timing."""

    last_access: float = 0.0
    first_arrival: float | None = None  # the session's first request (program-level order)
    turn_end: float | None = None  # end of the last turn; None while a turn runs
    last_stop: str | None = None  # "tool_use" | "end_turn" | None
    gap_ewma: float | None = None  # smoothed past gaps between turn end and next arrival
    queued_since: float | None = None  # set while a request of the session waits
    expected_gap: float | None = None  # a harness's `expected_gap_s` for the current gap
    tenant: str | None = None  # the tenant of its last admitted request (the miss ledger)
    leaf: Node | None = None  # the node ending its last inserted path
    # Page ids of the longest path the session inserted: a missing page whose id
    # is here was cached once and evicted (recomputed), any other is new.
    seen_hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))

    def arrive(self, now: float) -> None:
        """A request of the session is queued: fold the gap since its last turn ended."""
        if self.first_arrival is None:
            self.first_arrival = now
        if self.turn_end is not None:
            gap = max(0.0, now - self.turn_end)
            self.gap_ewma = gap if self.gap_ewma is None else 0.5 * self.gap_ewma + 0.5 * gap
        self.queued_since = now
        self.expected_gap = None

    def start(self, now: float) -> None:
        """Its request left the queue and runs."""
        self.queued_since = None
        self.turn_end = None
        self.last_access = now

    def end_turn(self, now: float, stop_reason: str | None, gap: float | None = None) -> None:
        self.turn_end = self.last_access = now
        self.last_stop = stop_reason
        self.expected_gap = gap

    def withdraw(self) -> None:
        """A queued request of the session was withdrawn before it ran."""
        self.queued_since = None

    def holds_pages(self) -> bool:
        """A private node on the session's path holds a page on the device or the host
        (pages in the store are the store's: bounded by its budget, found by hash)."""
        path = self.leaf.path_up() if self.leaf is not None else ()
        return any(not node.shared and (node.n_device or node.n_host) for node in path)

    def held_elsewhere(self, hashes: np.ndarray) -> None:
        """The fleet held the path `hashes` for this session (its record in the store)."""
        if len(hashes) > len(self.seen_hashes):
            self.seen_hashes = np.array(hashes, dtype=np.uint64)

    def inserted(self, leaf: Node, hashes: np.ndarray, now: float) -> None:
        """The session's path `hashes`, ending at `leaf`, was inserted at `now`."""
        self.leaf = leaf
        self.last_access = now
        if len(hashes) >= len(self.seen_hashes):
            self.seen_hashes = np.array(hashes, dtype=np.uint64)


TOOL_GAP_PRIOR_S = 10.0  # a session's expected tool time before it has shown its own
USER_GAP_S = 200.0  # after `end_turn` a person answers: at least this long
OVERDUE_HINTED_SHARE = 0.25  # past its harness's estimate, a session is due in this x it


def expected_return(info: SessionInfo, now: float) -> float:
    """When the session's next turn is expected (`now` while a turn runs or waits).

    The end of its last turn + its expected gap: the harness's `expected_gap_s`
    when it gave one, else the smoothed gap of its past turns (a prior when it
    has none), and at least a person's think time after `end_turn`. A session
    overdue by t is expected t later again, unless a harness gave the gap: then
    it is due any moment (`OVERDUE_HINTED_SHARE` of the gap from now; an
    estimate is off by a factor, not by as much again)."""
    if info.turn_end is None:
        return now
    gap = info.gap_ewma if info.gap_ewma is not None else TOOL_GAP_PRIOR_S
    if info.expected_gap is not None:
        gap = info.expected_gap
    elif info.last_stop == "end_turn":
        gap = max(gap, USER_GAP_S)
    expected = info.turn_end + gap
    if expected >= now:
        return expected
    if info.expected_gap is not None:
        return now + OVERDUE_HINTED_SHARE * gap
    return 2 * now - info.turn_end


def stand_in(last_access: float) -> SessionInfo:
    """The record a policy reads for a session that has none (expired, or a request
    without a session id): idle since `last_access`, its turn over."""
    return SessionInfo(last_access=last_access, turn_end=last_access)


def expired(
    sessions: Mapping[str, SessionInfo],
    now: float,
    ttl_s: float,
    cap: int,
    keep: Container[str],
) -> list[str]:
    """Session ids whose records to drop: those idle past `ttl_s` that hold no cached
    page, then, while more than `cap` would remain, the least recently used of the
    rest. Sessions in `keep` (queued, running, pinned) are never dropped."""
    out = [
        sid
        for sid, info in sessions.items()
        if sid not in keep and now - info.last_access > ttl_s and not info.holds_pages()
    ]
    over = len(sessions) - len(out) - cap
    if over > 0:
        gone = set(out)
        idle = sorted(
            (info.last_access, sid)
            for sid, info in sessions.items()
            if sid not in gone and sid not in keep
        )
        out += [sid for _, sid in idle[:over]]
    return out
