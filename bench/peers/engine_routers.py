"""The engine-side routers of the peer grid (sgl-router / SMG, Dynamo, llm-d), by name.

Each entry is a `router.policies.RouterFactory`; `bench.peers.registry` adds
them to the simulator's routers. Names are fixed: runs are compared by them.

    sgl_cache_aware        sgl-router 0.3.2's ``cache_aware``, its CLI defaults
                           (balance_abs_threshold 64)
    sgl_cache_aware_abs4   the same with balance_abs_threshold 4
    sgl_cache_aware_abs8   ... 8
    sgl_cache_aware_abs16  ... 16
    sgl_cache_aware_abs32  ... 32
    sgl_sticky             sgl-router 0.3.2's ``manual`` policy (sticky sessions) on the
                           session id, random assignment
    dynamo_kv              Dynamo 1.6.1's KV router: its default cost, temperature 0
    llm_d                  llm-d inference scheduler v0.8.0's default profile: queue 2,
                           KV-cache utilization 2, approximate prefix 3, max score

Each router's ``name`` is its name here.
"""

from __future__ import annotations

from bench.peers.base import peer_factory, variants
from bench.peers.dynamo_kv import DynamoKvRouter
from bench.peers.llm_d import LlmdRouter
from bench.peers.sgl_cache_aware import SglCacheAwareConfig, SglCacheAwareRouter
from bench.peers.sgl_sticky import SglStickyRouter
from router.policies import RouterFactory

SGL_ABS_THRESHOLDS = (4, 8, 16, 32)  # balance_abs_threshold of the sgl_cache_aware_abs<N> variants


def _with_abs(threshold: int) -> SglCacheAwareConfig:
    return SglCacheAwareConfig(balance_abs_threshold=threshold)  # the other knobs: CLI defaults


ENGINE_ROUTERS: dict[str, RouterFactory] = {
    SglCacheAwareRouter.name: peer_factory(SglCacheAwareRouter),
    **variants(SglCacheAwareRouter, "abs", SGL_ABS_THRESHOLDS, _with_abs),
    SglStickyRouter.name: peer_factory(SglStickyRouter),
    DynamoKvRouter.name: peer_factory(DynamoKvRouter),
    LlmdRouter.name: peer_factory(LlmdRouter),
}
