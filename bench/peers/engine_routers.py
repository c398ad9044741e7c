"""The engine-side routers of the peer grid (sgl-router / SMG, Dynamo, llm-d), by name.

Each entry is a `router.policies.RouterFactory`; `bench.peers.registry` adds
them to the simulator's routers.
"""

from __future__ import annotations

from bench.peers.sgl_cache_aware import SglCacheAwareRouter
from router.policies import RouterFactory

ENGINE_ROUTERS: dict[str, RouterFactory] = {
    SglCacheAwareRouter.name: SglCacheAwareRouter,
}
