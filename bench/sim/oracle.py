"""The offline oracle eviction policy: it reads the future, so only the simulator runs it.

The simulator tells the oracle, at the end of each turn, when that session's
next request arrives (`tell_next_arrival`: the oracle's own table, then the sessions
book has the session's pages ranked again); the oracle evicts the session that returns last.
It bounds what any deployable victim choice can reach (DESIGN.md section 1).
`SIM_EVICTION_POLICIES` is the product's registry plus the oracle: what
`bench simulate --policies` accepts.
"""

from __future__ import annotations

import math

from penelope_engine.cache.eviction import (
    EVICTION_POLICIES,
    CacheView,
    EvictionPolicy,
    ReturnAwarePolicy,
    SessionInfo,
)
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.config import EvictionPolicyName
from penelope_engine.registry import Registry


class OraclePolicy(ReturnAwarePolicy):
    """Uses the future: the session whose next request arrives last goes first."""

    name = "oracle"

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}  # session id -> its next request (inf: none)

    def expected_return(self, sid: str, info: SessionInfo, view: CacheView) -> float:
        if info.turn_end is None:
            return view.now
        return self.arrivals.get(sid, math.inf)


def tell_next_arrival(cache: PrefixCache, sessions: Sessions, sid: str, t: float) -> None:
    """When the session's next request arrives (inf: never), for the cache's policy if it
    is the oracle (no other policy reads the future). The session's pages are ranked
    again whatever the policy, as the simulator always has: its results stay comparable
    run to run (a `penelope`-policy run moves by 5e-5 of its mean TTFT without it)."""
    policy = cache.policy
    if isinstance(policy, OraclePolicy):
        policy.arrivals[sid] = t
    sessions.rerank(sid)


SIM_EVICTION_POLICIES: Registry[type[EvictionPolicy]] = EVICTION_POLICIES.extended(
    "eviction policy", {OraclePolicy.name: OraclePolicy}
)


def make_sim_policy(name: str) -> EvictionPolicy:
    """A fresh eviction policy by name, the oracle included."""
    return SIM_EVICTION_POLICIES.get(name)()


def policy_for_config(name: str) -> tuple[EvictionPolicyName, EvictionPolicy | None]:
    """A policy name as a `CacheConfig` takes it, and the object to inject in its place
    (`BenchHooks.policy`) when the name is the simulator's own: the oracle is configured
    as its deployable base (`return_aware`) and injected."""
    if name in EVICTION_POLICIES:
        return name, None
    return ReturnAwarePolicy.name, make_sim_policy(name)
