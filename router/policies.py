"""The product's routing policies by name: ``affinity`` (Penelope) and ``pow2`` (Ray's default).

``pow2`` is the baseline every figure is compared with: two replicas drawn at
random, the less loaded one wins, no memory of sessions. The Ray router gets its
policy from ``make_routing_policy``; the simulator adds the peers' routers
(`bench.peers`) to this registry.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from penelope_engine.registry import Registry
from router.core import AffinityRouter
from router.schema import (
    NO_REPLICAS,
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
    pick_replica,
)


class RoutingPolicy(Protocol):
    name: str

    def rank(self, views: Sequence[ReplicaView], request: RouteRequest) -> RouteDecision: ...

    def choose(self, views: Sequence[ReplicaView], request: RouteRequest) -> Choice: ...

    def remember(self, session_id: str, replica_id: str, reported: bool = False) -> None: ...

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]: ...


def pow2_pair(replica_ids: Sequence[str], rng: random.Random) -> tuple[str, ...]:
    """Two distinct replicas drawn uniformly at random (one if there is only one)."""
    return tuple(rng.sample(list(replica_ids), min(2, len(replica_ids))))


class Pow2Router:
    """Ray Serve's power of two choices: a random pair, the less loaded wins."""

    name = "pow2"

    def __init__(
        self, config: RouterConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config if config is not None else RouterConfig()
        self._rng = random.Random(self.config.seed)

    def rank(self, views: Sequence[ReplicaView], request: RouteRequest) -> RouteDecision:
        if not views:
            return NO_REPLICAS
        return RouteDecision((pow2_pair([v.replica_id for v in views], self._rng),), "pow2")

    def choose(self, views: Sequence[ReplicaView], request: RouteRequest) -> Choice:
        decision = self.rank(views, request)
        return Choice(pick_replica(decision.ranks, {v.replica_id: v for v in views}), decision)

    def remember(self, session_id: str, replica_id: str, reported: bool = False) -> None:
        """Pow2 keeps no session memory."""

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        return []


RouterFactory = Callable[[RouterConfig, Callable[[], float]], RoutingPolicy]
ROUTING_POLICIES: Registry[RouterFactory] = Registry(
    "routing policy", {AffinityRouter.name: AffinityRouter, Pow2Router.name: Pow2Router}
)


def make_routing_policy(
    name: str,
    config: RouterConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
    registry: Registry[RouterFactory] = ROUTING_POLICIES,
) -> RoutingPolicy:
    """The routing policy registered as ``name`` (in ``registry``, the product's by default)."""
    return registry.get(name)(config if config is not None else RouterConfig(), clock)
