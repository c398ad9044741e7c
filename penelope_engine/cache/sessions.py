"""What the cache knows of each session's timing, and how its events update it. No torch.

`PrefixCache` keeps one `SessionInfo` per session id and forwards the
scheduler's events (arrival, start, turn end, abort, next-arrival hint) to it;
the return-aware and oracle policies read these fields to rank sessions. The
methods here only update the record: re-keying the session's path for
eviction is the cache's part.
"""

from __future__ import annotations

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
    next_arrival: float | None = None  # oracle hint (from a trace); inf = never returns
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

    def start(self, now: float) -> None:
        """Its request left the queue and runs."""
        self.queued_since = None
        self.turn_end = None
        self.last_access = now

    def end_turn(self, now: float, stop_reason: str | None) -> None:
        self.turn_end = self.last_access = now
        self.last_stop = stop_reason

    def withdraw(self) -> None:
        """A queued request of the session was withdrawn before it ran."""
        self.queued_since = None

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
