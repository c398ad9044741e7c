"""Cache-affinity request routing: a pure-Python core plus a Ray Serve router.

The product's routing only: the peers' routers, modelled for the simulator,
are in `bench.peers`. ``ray_router`` imports Ray, so it is not imported here.

Modules:
    assignments  Where this router sent each session that the digests do not show yet
    board        Where sessions not yet in any digest were placed, shared by every router
                 of a deployment (imports Ray lazily, only for the ``ray`` kind)
    core         The cache-affinity routing core: plain Python, no Ray
    digest       The compact digest an engine replica publishes for the router
    hashing      Stable hashing for routing decisions that several routers must share
    local        The routers of this process, so that the process can say what they route to
    policies     The product's routing policies by name: ``affinity`` (Penelope) and
                 ``pow2`` (Ray's default)
    ray_router   Ray Serve request router on the routing core:
                 ``router.ray_router:PenelopeRequestRouter``
    schema       The data the routing policies exchange: options, replica views, requests,
                 decisions
"""

from router.core import AffinityRouter
from router.digest import (
    DigestError,
    ReplicaDigest,
    SessionHolding,
    build_digest,
    decode_digest,
    encode_digest,
)
from router.hashing import rendezvous_order, rendezvous_pick, stable_hash64
from router.policies import (
    ROUTING_POLICIES,
    Pow2Router,
    RouterFactory,
    RoutingPolicy,
    make_routing_policy,
    pow2_pair,
)
from router.schema import (
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
    pick_replica,
)

__all__ = [
    "ROUTING_POLICIES",
    "AffinityRouter",
    "Choice",
    "DigestError",
    "Pow2Router",
    "ReplicaDigest",
    "ReplicaView",
    "RouteDecision",
    "RouteRequest",
    "RouterConfig",
    "RouterFactory",
    "RoutingPolicy",
    "SessionHolding",
    "build_digest",
    "decode_digest",
    "encode_digest",
    "make_routing_policy",
    "pick_replica",
    "pow2_pair",
    "rendezvous_order",
    "rendezvous_pick",
    "stable_hash64",
]
