"""Cache-affinity request routing: a pure-Python core plus a Ray Serve router.

Modules: ``core`` (the affinity policy and its data types), ``policies``
(``pow2`` baseline and the registry), ``digest`` (what replicas publish),
``assignments`` (unreported session placements), ``hashing`` (rendezvous
hashing), ``ray_router`` (the ``RequestRouter`` subclass; imports Ray, so it is
not imported here).
"""

from router.core import (
    AffinityRouter,
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
    pick_replica,
)
from router.digest import (
    DigestError,
    ReplicaDigest,
    SessionHolding,
    build_digest,
    decode_digest,
    encode_digest,
)
from router.hashing import rendezvous_order, rendezvous_pick, stable_hash64
from router.policies import ROUTING_POLICIES, Pow2Router, RoutingPolicy, make_policy, pow2_pair

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
    "RoutingPolicy",
    "SessionHolding",
    "build_digest",
    "decode_digest",
    "encode_digest",
    "make_policy",
    "pick_replica",
    "pow2_pair",
    "rendezvous_order",
    "rendezvous_pick",
    "stable_hash64",
]
