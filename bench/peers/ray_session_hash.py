"""Ray Serve's consistent-hash router on the session id, as a routing policy: ``ray_session_hash``.

Models ``ConsistentHashRouter`` of ``ray/serve/experimental/consistent_hash_router.py``,
Ray 2.60.0, with its defaults (``num_virtual_nodes`` 100, ``num_fallback_replicas`` 2)::

    ring ─────────── every replica has num_virtual_nodes points, each the low 64 bits
                     of MurmurHash3 x64-128 (seed 0xF9B4CA77) of "<replica id>:<i>",
                     sorted; rebuilt whenever the replica set changes
    key ──────────── the request's session id (the x-session-id header); without
                     one its internal request id (a fresh id per request, so
                     sessionless traffic spreads uniformly with no affinity)
    ranks ────────── the first point clockwise after hash(key) (bisect_right,
                     wrapping) is the primary; walking on, the next distinct
                     replicas are up to num_fallback_replicas fallbacks, one per rank
    routed ───────── the first rank whose replica is not full (queue_len <
                     max_ongoing), in ring order; queue depth never reorders them
    all full ─────── the request backs off and tries the same ranks again: it waits
                     for one of them, never goes to another replica

The ring depends only on the replica set, so a session keeps its replica until
that replica goes (its sessions move to their clockwise successors, the rest
stay) or a new replica takes over part of the ring. The router keeps no table
of sessions, and never reads load except the full/not-full check.

Where the model differs from Ray:

- A replica is keyed by ``PeerView.replica_id`` where Ray uses the replica's
  ``unique_id`` (a random string), so the ring's layout differs from a real
  deployment's, not its rules: sessions still land on replicas uniformly with
  the same variance for the same vnode count.
- The ring follows the replica set of each ranking's views (Ray rebuilds it in
  ``update_replicas``, called with the same live set), and ``sync_replicas``.
- A request without a session id hashes ``PeerRequest.request_id`` (one per
  request, as Ray's ``internal_request_id``), or, if it has none, a fresh id
  drawn from ``random.Random(config.seed)``.
- All ranked replicas full: ``choose`` returns the least loaded of them (the
  earliest rank on a tie), standing for the wait; the simulator has no router
  queue. Ray's retry takes whichever frees first, primary first.
"""

from __future__ import annotations

import bisect
import dataclasses
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import mmh3

from bench.peers.base import PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    Choice,
    RouteDecision,
)

CONSISTENT_HASH_SEED = 0xF9B4CA77  # Ray's fixed seed: a change remaps every session


def ring_hash(key: str) -> int:
    """Ray's ``_hash_bytes``: the low 64 bits of MurmurHash3 x64-128, unsigned."""
    return int(mmh3.hash64(key.encode(), seed=CONSISTENT_HASH_SEED, signed=False)[0])


@dataclass(frozen=True)
class RaySessionHashConfig:
    """``ConsistentHashRouter.initialize_state``'s kwargs, with Ray's defaults."""

    num_virtual_nodes: int = 100  # points per replica on the ring
    num_fallback_replicas: int = 2  # clockwise successors tried after the primary

    def __post_init__(self) -> None:
        require(
            self.num_virtual_nodes >= 1,
            f"num_virtual_nodes must be a positive int, got {self.num_virtual_nodes}",
        )
        require(
            self.num_fallback_replicas >= 0,
            f"num_fallback_replicas must be a non-negative int, got {self.num_fallback_replicas}",
        )


class HashRing:
    """Ray's ring: ``_rebuild_ring`` and ``_lookup_ranked_replicas``."""

    def __init__(self, replica_ids: Iterable[str], num_virtual_nodes: int) -> None:
        self.replicas = frozenset(replica_ids)
        points = sorted(
            (
                (ring_hash(f"{rid}:{i}"), rid)
                for rid in self.replicas
                for i in range(num_virtual_nodes)
            ),
            key=lambda p: p[0],
        )
        self.hashes = [h for h, _ in points]
        self.owners = [rid for _, rid in points]

    def ranked(self, key: str, max_ranked: int) -> list[str]:
        """The primary replica of ``key`` and up to ``max_ranked - 1`` distinct successors."""
        if not self.hashes:
            return []
        n = len(self.hashes)
        start = bisect.bisect_right(self.hashes, ring_hash(key)) % n
        ranked: list[str] = []
        for offset in range(n):
            rid = self.owners[(start + offset) % n]
            if rid in ranked:
                continue
            ranked.append(rid)
            if len(ranked) == max_ranked or len(ranked) == len(self.replicas):
                break
        return ranked


class RaySessionHashRouter(PeerRouter[RaySessionHashConfig]):
    """Ray Serve's ``ConsistentHashRouter`` keyed on the session (see the module docstring)."""

    name = "ray_session_hash"
    make_options = RaySessionHashConfig

    def setup(self) -> None:
        self.ring = HashRing((), self.options.num_virtual_nodes)

    def routing_key(self, request: PeerRequest) -> str:
        """Ray's ``_routing_key``: the session id, else the request's own id."""
        if request.session_id:
            return request.session_id
        if request.request_id:
            return request.request_id
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """Ray's ``choose_replicas``: the primary, then each fallback, one replica a rank."""
        if not views:
            return NO_REPLICAS
        self._follow([v.replica_id for v in views])
        ranked = self.ring.ranked(self.routing_key(request), 1 + self.options.num_fallback_replicas)
        return RouteDecision(tuple((rid,) for rid in ranked), "hash")

    def choose(self, views: Sequence[PeerView], request: PeerRequest) -> Choice:
        """The first ranked replica that is not full; all full: Ray waits for them."""
        decision = self.rank(views, request)
        if not decision.ranks:
            raise ValueError("cannot pick a replica: there are none")
        by_id = {v.replica_id: v for v in views}
        ranked = [rid for (rid,) in decision.ranks]
        chosen = next((rid for rid in ranked if not by_id[rid].full), None)
        if chosen is None:  # backs off and retries these ranks; the least loaded frees first
            chosen = min(ranked, key=lambda rid: by_id[rid].queue_len)
        overloaded = by_id[ranked[0]].full
        return Choice(chosen, dataclasses.replace(decision, overloaded=overloaded))

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Ray's ``update_replicas``: rebuild the ring if the set changed; no table to re-home."""
        self._follow(live_ids)
        return []

    def _follow(self, replica_ids: Iterable[str]) -> None:
        live = frozenset(replica_ids)
        if live != self.ring.replicas:
            self.ring = HashRing(live, self.options.num_virtual_nodes)
