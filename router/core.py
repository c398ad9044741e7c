"""The cache-affinity routing core: plain Python, no Ray.

Inputs are a view of every replica (load plus the digest it published) and the
request (session id, first-page hashes of its prompt, tenant). The output is a
ranked list of candidate groups; the caller takes, from the first group that
has one, the least loaded replica that is not full (Ray Serve's request router
does exactly that with the ranks ``choose_replicas`` returns).

Policy (``AffinityRouter``)::

    returning session ─┬─ assigned here, not yet in a digest ─> that replica
                       └─ else the replica retaining the most of it
                          (device > host > store tokens, weighted)
    new session ───────── two rendezvous choices drawn from the session id:
                          the one clearly lighter in active load (tokens of
                          sessions used within active_window_s, and of those
                          sent there and not yet reported); if neither is,
                          the one caching the longer run of its first pages;
                          else the first
    home overloaded ───── queue_len >= overload_ratio * max_ongoing:
                          the less loaded of two choices drawn from the session
                          id (rendezvous with another salt), then the rest

Every choice that does not depend on load is a pure function of the digests
and the session id, so several routers (one per calling process) agree without
talking.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from penelope_engine.util import require
from router.assignments import AssignmentTable
from router.digest import EMPTY_DIGEST, ReplicaDigest
from router.hashing import rendezvous_order, stable_hash64

PAIR_SALT = "pow2"


@dataclass(frozen=True)
class RouterConfig:
    """Knobs of the routing policies; validated at construction."""

    overload_ratio: float = 0.75  # home overloaded at queue_len >= ratio * max_ongoing
    device_weight: float = 1.0  # value of one retained token, per tier
    host_weight: float = 0.5
    store_weight: float = 0.25
    min_holder_tokens: int = 1  # retained tokens that make a replica a session's holder
    prefix_affinity: bool = True
    min_prefix_pages: int = 1  # leading pages a replica must cache to attract a new session
    active_window_s: float = 300.0  # a session used this recently counts toward a replica's load
    balance_slack: float = 0.1  # new sessions go to the lighter choice if lighter by this share
    assignment_ttl_s: float = 300.0  # how long an unreported assignment sticks
    max_assignments: int = 100_000
    seed: int | None = None  # random draws (sessionless requests, pow2)

    def __post_init__(self) -> None:
        require(
            0.0 < self.overload_ratio <= 1.0,
            f"overload_ratio must be in (0, 1], got {self.overload_ratio}",
        )
        require(
            self.device_weight >= self.host_weight >= self.store_weight >= 0.0
            and self.device_weight > 0.0,
            "tier weights must satisfy device > 0 and device >= host >= store >= 0, got "
            f"{self.device_weight}, {self.host_weight}, {self.store_weight}",
        )
        require(
            self.min_holder_tokens >= 1,
            f"min_holder_tokens must be >= 1, got {self.min_holder_tokens}",
        )
        require(
            self.min_prefix_pages >= 1,
            f"min_prefix_pages must be >= 1, got {self.min_prefix_pages}",
        )
        require(
            self.active_window_s > 0, f"active_window_s must be > 0, got {self.active_window_s}"
        )
        require(
            0.0 <= self.balance_slack < 1.0,
            f"balance_slack must be in [0, 1), got {self.balance_slack}",
        )
        require(
            self.assignment_ttl_s > 0, f"assignment_ttl_s must be > 0, got {self.assignment_ttl_s}"
        )
        require(
            self.max_assignments >= 1, f"max_assignments must be >= 1, got {self.max_assignments}"
        )

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> RouterConfig:
        """Build from a plain mapping (Ray's ``request_router_kwargs``), naming bad keys."""
        valid = sorted(f.name for f in fields(cls))
        unknown = sorted(set(kwargs) - set(valid))
        require(not unknown, f"unknown router option(s) {unknown}; valid: {', '.join(valid)}")
        return cls(**kwargs)


@dataclass(frozen=True)
class ReplicaView:
    """What the router knows of one replica when it routes."""

    replica_id: str
    queue_len: int
    max_ongoing: int
    digest: ReplicaDigest = EMPTY_DIGEST

    @property
    def full(self) -> bool:
        return self.queue_len >= self.max_ongoing


@dataclass(frozen=True)
class RouteRequest:
    """The routing-relevant part of a request."""

    session_id: str | None = None  # None: the request is its own session
    prefix_hashes: tuple[int, ...] = ()  # hashes of its first full pages, in order
    tenant: str = "default"
    request_id: str = ""
    prompt_pages: tuple[int, ...] = ()  # every full page's hash (the prompt-tree peers read it)


@dataclass(frozen=True)
class RouteDecision:
    """Ranked candidate groups, most preferred first, and why."""

    ranks: tuple[tuple[str, ...], ...]
    reason: str  # "assigned" | "holder" | "balance" | "prefix" | "hash" | "pow2" | "no_replicas"
    overloaded: bool = False  # the preferred home was over the threshold
    rehomed_from: str | None = None  # the vanished replica this session lived on


class Choice(NamedTuple):
    replica_id: str
    decision: RouteDecision


NO_REPLICAS = RouteDecision((), "no_replicas")


def pick_replica(ranks: Sequence[Sequence[str]], views: Mapping[str, ReplicaView]) -> str:
    """The least loaded non-full replica of the first rank that has one.

    If every ranked replica is full, the least loaded non-full replica anywhere
    (Ray keeps retrying until one accepts); if all are full, the least loaded.
    """
    for rank in (*ranks, tuple(views)):
        open_ = [views[rid] for rid in rank if rid in views and not views[rid].full]
        if open_:
            return min(open_, key=lambda v: v.queue_len).replica_id
    if not views:
        raise ValueError("cannot pick a replica: there are none")
    return min(views.values(), key=lambda v: v.queue_len).replica_id


class AffinityRouter:
    """Cache-affinity routing (see the module docstring). One event loop; not thread-safe."""

    name = "affinity"
    reads_prompt = False

    def __init__(
        self, config: RouterConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config if config is not None else RouterConfig()
        self._clock = clock
        self._rng = random.Random(self.config.seed)
        self._assignments = AssignmentTable(
            self.config.assignment_ttl_s, self.config.max_assignments
        )

    def rank(self, views: Sequence[ReplicaView], request: RouteRequest) -> RouteDecision:
        """Ranked candidates for ``request``; mutates only to expire stale assignments."""
        if not views:
            return NO_REPLICAS
        by_id = {v.replica_id: v for v in views}
        sid = request.session_id
        key = sid if sid is not None else request.request_id or self._anonymous_key()
        found = self._returning_home(by_id, sid) if sid is not None else None
        home, reason = found or self._new_home(by_id, key, request.prefix_hashes)
        rehomed = self._assignments.rehomed_from(sid) if sid is not None else None
        return self._with_fallbacks(by_id, key, home, reason, rehomed)

    def choose(self, views: Sequence[ReplicaView], request: RouteRequest) -> Choice:
        """Rank, pick one replica the way Ray Serve would, and remember the session there."""
        by_id = {v.replica_id: v for v in views}
        decision = self.rank(views, request)
        replica_id = pick_replica(decision.ranks, by_id)
        sid = request.session_id
        if sid is not None:
            self.remember(sid, replica_id, reported=sid in by_id[replica_id].digest.sessions)
        return Choice(replica_id, decision)

    def remember(self, session_id: str, replica_id: str, reported: bool = False) -> None:
        """Record that ``session_id`` was sent to ``replica_id``.

        The placement sticks until that replica's digest shows the session; if
        it already does (``reported``), the digests decide and nothing is kept.
        """
        if reported:
            self._assignments.drop(session_id)
        else:
            self._assignments.put(session_id, replica_id, self._clock())

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Forget assignments to replicas not in ``live_ids``; returns the re-homed sessions."""
        return self._assignments.retain_replicas(live_ids)

    def _anonymous_key(self) -> str:
        """A random key: a request without session or id spreads like pow2."""
        return f"anon:{self._rng.getrandbits(64):016x}"

    def _returning_home(self, by_id: Mapping[str, ReplicaView], sid: str) -> tuple[str, str] | None:
        assigned = self._assignments.get(sid, self._clock())
        if assigned is not None and assigned in by_id:
            if sid not in by_id[assigned].digest.sessions:
                return assigned, "assigned"
            self._assignments.drop(sid)  # its digest reports it now: digests decide
        holder = self._holder(by_id.values(), sid)
        return (holder, "holder") if holder is not None else None

    def _holder(self, views: Iterable[ReplicaView], sid: str) -> str | None:
        best: tuple[float, int] | None = None
        best_id: str | None = None
        cfg = self.config
        for view in views:
            held = view.digest.sessions.get(sid)
            if held is None or held.total_tokens < cfg.min_holder_tokens:
                continue
            score = (
                cfg.device_weight * held.device_tokens
                + cfg.host_weight * held.host_tokens
                + cfg.store_weight * held.store_tokens
            )
            key = (score, stable_hash64(sid, view.replica_id))
            if best is None or key > best:
                best, best_id = key, view.replica_id
        return best_id

    def _new_home(
        self, by_id: Mapping[str, ReplicaView], key: str, prefix_hashes: Sequence[int]
    ) -> tuple[str, str]:
        """Two rendezvous choices for the session; the lighter one, then the prefix, wins.

        A session stays where it starts, so a new session is the router's one
        chance to balance: the choice with fewer active sessions takes it.
        Sending every new session to whichever replica holds the shared prefix
        would pile them onto the first replica to publish it (every agent
        shares one system prompt), so the prefix only breaks a tie.
        """
        pair = rendezvous_order(key, by_id)[:2]
        if len(pair) < 2:
            return pair[0], "hash"
        load = self.active_load(by_id.values())
        a, b = pair
        light, heavy = (a, b) if load[a] <= load[b] else (b, a)
        if load[light] < (1.0 - self.config.balance_slack) * load[heavy]:
            return light, "balance"
        if self.config.prefix_affinity and prefix_hashes:
            holders = self._prefix_holders((by_id[r] for r in pair), prefix_hashes)
            if len(holders) == 1:
                return holders[0], "prefix"
        return a, "hash"

    def active_load(self, views: Iterable[ReplicaView]) -> dict[str, float]:
        """Per replica: tokens retained for sessions its digest shows used within the
        active window (in the replica's own clock), plus, for each session sent there
        that its digest does not show yet, the mean active session's tokens."""
        window = self.config.active_window_s
        load: dict[str, float] = {}
        digests: dict[str, ReplicaDigest] = {}
        n = total = 0
        for v in views:
            d = v.digest
            digests[v.replica_id] = d
            active = [h.total_tokens for h in d.sessions.values() if d.ts - h.last_access <= window]
            load[v.replica_id] = float(sum(active))
            n, total = n + len(active), total + sum(active)
        mean = total / n if n else 1.0
        for sid, rid in self._assignments.pending(self._clock()):
            if rid in load and sid not in digests[rid].sessions:
                load[rid] += mean
        return load

    def _prefix_holders(self, views: Iterable[ReplicaView], hashes: Sequence[int]) -> list[str]:
        """Replicas caching the longest leading run of ``hashes`` (at least the minimum)."""
        best_len, best = 0, []
        for view in views:
            cached = view.digest.prefix_hashes
            run = 0
            while run < len(hashes) and hashes[run] in cached:
                run += 1
            if run > best_len:
                best_len, best = run, [view.replica_id]
            elif run == best_len and run > 0:
                best.append(view.replica_id)
        return best if best_len >= self.config.min_prefix_pages else []

    def _with_fallbacks(
        self,
        by_id: Mapping[str, ReplicaView],
        key: str,
        home: str,
        reason: str,
        rehomed_from: str | None,
    ) -> RouteDecision:
        """Home first unless overloaded, then a deterministic pair, then the rest."""
        others = rendezvous_order(key, (rid for rid in by_id if rid != home), salt=PAIR_SALT)
        pair, rest = tuple(others[:2]), tuple(others[2:])
        view = by_id[home]
        overloaded = view.queue_len >= self.config.overload_ratio * view.max_ongoing
        ranks = (pair, (*rest, home)) if overloaded else ((home,), pair, rest)
        return RouteDecision(tuple(r for r in ranks if r), reason, overloaded, rehomed_from)
