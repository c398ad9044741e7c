"""Routing policies by name: ``affinity`` (Penelope) and ``pow2`` (Ray Serve's default).

``pow2`` is the baseline every figure is compared with: two replicas drawn at
random, the less loaded one wins, no memory of sessions. The simulator and the
Ray router both get their policy from ``make_policy``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from penelope_engine.errors import UnknownNameError
from router.core import (
    NO_REPLICAS,
    AffinityRouter,
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
    pick_replica,
)
from router.ray_prefix import RayPrefixAffinityRouter
from router.sgl_cache_aware import SglCacheAwareRouter


class RoutingPolicy(Protocol):
    name: str
    reads_prompt: bool  # needs RouteRequest.prompt_pages (every page of the prompt)

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
    reads_prompt = False

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


ROUTING_POLICIES: dict[str, Callable[[RouterConfig, Callable[[], float]], RoutingPolicy]] = {
    AffinityRouter.name: AffinityRouter,
    Pow2Router.name: Pow2Router,
    RayPrefixAffinityRouter.name: RayPrefixAffinityRouter,
    SglCacheAwareRouter.name: SglCacheAwareRouter,
}


def make_policy(
    name: str,
    config: RouterConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RoutingPolicy:
    """The routing policy registered as ``name``."""
    factory = ROUTING_POLICIES.get(name)
    if factory is None:
        valid = ", ".join(sorted(ROUTING_POLICIES))
        raise UnknownNameError(f"unknown routing policy {name!r}; valid: {valid}")
    return factory(config if config is not None else RouterConfig(), clock)
