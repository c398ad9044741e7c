"""Eviction policies: strategy objects that rank victim nodes. No torch here.

The cache asks a policy for a key per candidate node (lower is evicted
first) and whether to take that node's pages from the front (lowest
positions, forming holes) or the back (the tail, as a radix-tree LRU does).
Policies are chosen by name from `EVICTION_POLICIES`; the same names feed the CLI.
The offline oracle (it reads the future) is the benchmarks' own: `bench.sim.oracle`.
A policy instance serves one cache: GreedyDual keeps its clock and each
node's base value itself, fed by the cache's `on_access` / `on_split` /
`on_remove` / `on_evict` calls.

    lru           SGLang: least recently used leaves, tail first, never a hole
    penelope      shared last; coldest session first; its lowest private positions first
    greedydual    GreedyDual over recompute cost at each page's position
    return_aware  evict the session expected back last (its own tool gaps, last stop reason)
    oracle        evict the session that really returns last (needs next-arrival hints)
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from penelope_engine.cache.sessions import (  # SessionInfo re-exported
    SessionInfo,
    expected_return,
    stand_in,
)
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.registry import Registry


class CacheView(Protocol):
    """What a policy may read from the cache."""

    @property
    def now(self) -> float: ...

    def session_info(self, session_id: str) -> SessionInfo | None:
        """The session's record, or None if it has none (never creates one)."""
        ...

    def page_cost(self, page_index: int) -> float: ...

    def first_page(self, node: Node, tier: Tier) -> int:
        """Sequence page index of `node`'s first page held in `tier`."""
        ...


def owner(node: Node) -> str | None:
    return next(iter(node.sessions)) if len(node.sessions) == 1 else None


class EvictionPolicy:
    name: ClassVar[str]
    leaves_only: ClassVar[bool] = False  # candidates are leaves of the tier only
    static_keys: ClassVar[bool] = True  # keys change only on cache events, not with time

    def key(self, node: Node, tier: Tier, view: CacheView) -> tuple:
        raise NotImplementedError

    def front_first(self, node: Node) -> bool:
        return not node.shared

    def on_evict(self, key: tuple, view: CacheView) -> None:
        """Called with the key of each node a page was taken from."""

    def on_access(self, node: Node, view: CacheView) -> None:
        """A request inserted (or reused) `node`'s pages."""

    def on_split(self, lower: Node, upper: Node) -> None:
        """`upper` was cut off the front of `lower`; it inherits `lower`'s policy state."""

    def on_remove(self, node: Node) -> None:
        """`node` left the tree: forget any state kept for it."""


class LruPolicy(EvictionPolicy):
    name = "lru"
    leaves_only = True

    def key(self, node: Node, tier: Tier, view: CacheView) -> tuple:
        return (node.last_access, -node.start)

    def front_first(self, node: Node) -> bool:
        return False


class _SessionPolicy(EvictionPolicy):
    """Shared pages last (as LRU leaves); private pages ranked by session score."""

    def session_score(self, session_id: str, info: SessionInfo, view: CacheView) -> float:
        raise NotImplementedError

    def key(self, node: Node, tier: Tier, view: CacheView) -> tuple:
        sid = owner(node)
        if node.shared or sid is None:
            return (1, node.last_access, -node.start)
        info = view.session_info(sid)
        if info is None:  # its record expired, or a request without a session id
            info = stand_in(node.last_access)
        return (0, self.session_score(sid, info, view), node.start)


class PenelopePolicy(_SessionPolicy):
    name = "penelope"

    def session_score(self, session_id: str, info: SessionInfo, view: CacheView) -> float:
        return info.last_access


class ReturnAwarePolicy(_SessionPolicy):
    """Evict the session expected back last.

    Expected return: `sessions.expected_return` (the harness's
    `expected_gap_s`, else the session's own smoothed gaps, after the end of
    its last turn; the prefetcher reads the same). A queued session has already returned: its
    score is its arrival, earlier than any idle one's, so the queue keeps its
    KV and the head of the queue keeps it longest.
    """

    name = "return_aware"
    static_keys = False  # an overdue session's expected return moves with time

    def expected_return(self, session_id: str, info: SessionInfo, view: CacheView) -> float:
        return expected_return(info, view.now)

    def session_score(self, session_id: str, info: SessionInfo, view: CacheView) -> float:
        if info.queued_since is not None:
            return info.queued_since
        return self.expected_return(session_id, info, view)

    def key(self, node: Node, tier: Tier, view: CacheView) -> tuple:
        k = super().key(node, tier, view)
        return (0, -k[1], k[2]) if k[0] == 0 else k


class GreedyDualPolicy(EvictionPolicy):
    """Priority = clock at last access + recompute cost of the page at its position.

    The cheapest (front) page of the node goes first; the clock rises to each
    victim's priority, which ages everything not touched since.
    """

    name = "greedydual"

    def __init__(self) -> None:
        self.clock = 0.0  # rises to each private victim's priority
        self._base: dict[int, float] = {}  # node id -> clock at its last access

    def base(self, node: Node) -> float:
        return self._base.get(node.id, 0.0)

    def key(self, node: Node, tier: Tier, view: CacheView) -> tuple:
        cost = view.page_cost(view.first_page(node, tier))
        return (1 if node.shared else 0, self.base(node) + cost)

    def on_evict(self, key: tuple, view: CacheView) -> None:
        if key[0] == 0:
            self.clock = max(self.clock, key[1])

    def on_access(self, node: Node, view: CacheView) -> None:
        self._base[node.id] = self.clock

    def on_split(self, lower: Node, upper: Node) -> None:
        if lower.id in self._base:
            self._base[upper.id] = self._base[lower.id]

    def on_remove(self, node: Node) -> None:
        self._base.pop(node.id, None)


EVICTION_POLICIES: Registry[type[EvictionPolicy]] = Registry(
    "eviction policy",
    {p.name: p for p in (LruPolicy, PenelopePolicy, GreedyDualPolicy, ReturnAwarePolicy)},
)


def make_eviction_policy(name: str) -> EvictionPolicy:
    """A fresh policy registered as `name` (`UnknownNameError` lists the valid ones)."""
    return EVICTION_POLICIES.get(name)()
