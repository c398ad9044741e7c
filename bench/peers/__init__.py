"""Peers' routers, modelled from their source for the simulator (never served).

Each module names the file and release it models and is checked, where the real
code runs here, choice by choice against it. `SIM_ROUTERS` is the product's
routing registry (`router.policies.ROUTING_POLICIES`) plus these.

Modules:
    base             the peers' contract: `PeerView`, `PeerRequest`, the `PeerRouter` skeleton
    dynamo_kv        NVIDIA Dynamo's KV router (default cost, temperature 0): ``dynamo_kv``
    engine_routers   the engine-side routers of the grid (sgl-router / SMG, Dynamo, llm-d)
    llm_d            llm-d's inference scheduler, its default scheduling profile: ``llm_d``
    ray_kv_aware     Ray Serve LLM's token-load ``KVAwareRouter`` on Dynamo's cost: ``ray_kv_aware``
    ray_prefix       Ray Serve LLM's ``PrefixCacheAffinityRouter`` as a routing policy:
                     ``ray_prefix``
    ray_routers      the Ray Serve routers of the grid
    ray_session_hash Ray Serve's ``ConsistentHashRouter`` on the session id: ``ray_session_hash``
    registry         Every router the simulator can run: the product's and the peers' models
    sgl_cache_aware  sgl-router's ``cache_aware`` policy over page hashes, as a Penelope
                     routing policy
    sgl_sticky       sgl-router's ``manual`` policy (sticky sessions) on the session: ``sgl_sticky``
"""
