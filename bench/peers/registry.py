"""Every router the simulator can run: the product's and the peers' models."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.peers.ray_prefix import RayPrefixAffinityRouter
from bench.peers.sgl_cache_aware import SglCacheAwareRouter
from router.policies import ROUTING_POLICIES, RouterFactory, RoutingPolicy, make_routing_policy
from router.schema import RouterConfig

SIM_ROUTERS = ROUTING_POLICIES.extended(
    "routing policy",
    {
        RayPrefixAffinityRouter.name: RayPrefixAffinityRouter,
        SglCacheAwareRouter.name: SglCacheAwareRouter,
    },
)


def make_sim_router(
    name: str, config: RouterConfig | None = None, clock: Callable[[], float] = time.monotonic
) -> RoutingPolicy:
    """A router the simulator can run, the peers' included."""
    return make_routing_policy(name, config, clock, SIM_ROUTERS)


__all__ = ["SIM_ROUTERS", "RouterFactory", "make_sim_router"]
