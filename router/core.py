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
talking. The data types it exchanges live in ``router.schema``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from router.assignments import AssignmentTable
from router.digest import ReplicaDigest
from router.hashing import rendezvous_order, stable_hash64
from router.schema import (
    NO_REPLICAS,
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
    pick_replica,
)

PAIR_SALT = "pow2"
NEW_HOME_REASONS = frozenset({"balance", "prefix", "hash"})  # a home chosen afresh, by load


class AffinityRouter:
    """Cache-affinity routing (see the module docstring). One event loop; not thread-safe."""

    name = "affinity"

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
        return RouteDecision(tuple(r for r in ranks if r), reason, overloaded, rehomed_from, home)
