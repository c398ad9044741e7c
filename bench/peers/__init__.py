"""Peers' routers, modelled from their source for the simulator (never served).

Each module names the file and release it models and is checked, where the real
code runs here, choice by choice against it. `SIM_ROUTERS` is the product's
routing registry (`router.policies.ROUTING_POLICIES`) plus these.

Modules:
    engine_routers   the engine-side routers of the grid (sgl-router / SMG, Dynamo, llm-d)
    ray_routers      the Ray Serve routers of the grid
    ray_prefix       Ray Serve LLM's ``PrefixCacheAffinityRouter`` as a routing policy:
                     ``ray_prefix``
    registry         Every router the simulator can run: the product's and the peers' models
    sgl_cache_aware  sgl-router's ``cache_aware`` policy over page hashes, as a Penelope
                     routing policy
"""
