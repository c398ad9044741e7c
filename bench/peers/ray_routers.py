"""The Ray Serve routers of the peer grid, by the names results use.

Each entry is a `router.policies.RouterFactory`; `bench.peers.registry` adds
them to the simulator's routers. Names are fixed: runs are compared by them.

    ray_session_hash   ``ConsistentHashRouter`` keyed on the session (`ray_session_hash`)
    ray_prefix         ``PrefixCacheAffinityRouter``, Ray's code defaults (`ray_prefix`):
                       imbalanced_threshold inf, the prefix always decides
    ray_prefix_t5      the same with imbalanced_threshold 5 (Ray's user guide example)
    ray_prefix_t10     ... 10 (the value Ray's user guide documents)
    ray_prefix_t20     ... 20
    ray_kv_aware       Ray Serve LLM's ``KVAwareRouter`` on Dynamo's cost (`ray_kv_aware`)

Each router's ``name`` is its name here.
"""

from __future__ import annotations

from bench.peers.base import peer_factory, variants
from bench.peers.ray_kv_aware import RayKvAwareRouter
from bench.peers.ray_prefix import RayPrefixAffinityRouter, RayPrefixConfig
from bench.peers.ray_session_hash import RaySessionHashRouter
from router.policies import RouterFactory

PREFIX_THRESHOLDS = (5, 10, 20)  # imbalanced_threshold of the ray_prefix_t<N> variants


def _with_threshold(threshold: float) -> RayPrefixConfig:
    return RayPrefixConfig(imbalanced_threshold=threshold)


RAY_ROUTERS: dict[str, RouterFactory] = {
    RaySessionHashRouter.name: peer_factory(RaySessionHashRouter),
    RayPrefixAffinityRouter.name: peer_factory(RayPrefixAffinityRouter),
    **variants(RayPrefixAffinityRouter, "t", PREFIX_THRESHOLDS, _with_threshold),
    RayKvAwareRouter.name: peer_factory(RayKvAwareRouter),
}
