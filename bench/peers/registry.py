"""Every router the simulator can run: the product's and the peers' models."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.peers.engine_routers import ENGINE_ROUTERS
from bench.peers.ray_routers import RAY_ROUTERS
from router.policies import ROUTING_POLICIES, RouterFactory, RoutingPolicy, make_routing_policy
from router.schema import RouterConfig

SIM_ROUTERS = ROUTING_POLICIES.extended("routing policy", {**RAY_ROUTERS, **ENGINE_ROUTERS})


def make_sim_router(
    name: str, config: RouterConfig | None = None, clock: Callable[[], float] = time.monotonic
) -> RoutingPolicy:
    """A router the simulator can run, the peers' included."""
    return make_routing_policy(name, config, clock, SIM_ROUTERS)


__all__ = ["SIM_ROUTERS", "RouterFactory", "make_sim_router"]
