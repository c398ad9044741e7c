"""The Ray Serve routers of the peer grid, by the names results use.

Each entry is a `router.policies.RouterFactory`; `bench.peers.registry` adds
them to the simulator's routers.
"""

from __future__ import annotations

from bench.peers.ray_prefix import RayPrefixAffinityRouter
from router.policies import RouterFactory

RAY_ROUTERS: dict[str, RouterFactory] = {
    RayPrefixAffinityRouter.name: RayPrefixAffinityRouter,
}
