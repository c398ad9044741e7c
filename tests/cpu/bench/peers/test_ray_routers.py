"""The Ray routers' registry: every name builds its router with its options, under its name.

The ``ray_prefix_t<N>`` variants are ``ray_prefix`` with ``imbalanced_threshold``
N; ``test_ray_prefix.py`` checks that threshold against Ray's real class, these
tests that each name switches at its own N.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from bench.peers.base import PeerRequest, PeerView
from bench.peers.ray_kv_aware import RayKvAwareRouter
from bench.peers.ray_prefix import RayPrefixAffinityRouter
from bench.peers.ray_routers import RAY_ROUTERS
from bench.peers.ray_session_hash import RaySessionHashRouter
from bench.peers.registry import SIM_ROUTERS, make_sim_router
from router import RouterConfig

NAMES = {
    "ray_session_hash": RaySessionHashRouter,
    "ray_prefix": RayPrefixAffinityRouter,
    "ray_prefix_t5": RayPrefixAffinityRouter,
    "ray_prefix_t10": RayPrefixAffinityRouter,
    "ray_prefix_t20": RayPrefixAffinityRouter,
    "ray_kv_aware": RayKvAwareRouter,
}
IDS = ("r0", "r1", "r2", "r3")


def views(queues: Sequence[int]) -> list[PeerView]:
    return [PeerView(rid, q, 128) for rid, q in zip(IDS, queues, strict=True)]


def test_every_name_builds_its_router_under_that_name() -> None:
    assert set(RAY_ROUTERS) == set(NAMES)
    for name, cls in NAMES.items():
        assert name in SIM_ROUTERS
        policy = make_sim_router(name, RouterConfig(seed=1))
        assert type(policy) is cls and policy.name == name, name
        assert policy.config.seed == 1  # type: ignore[attr-defined]
    thresholds = {
        name: make_sim_router(name).options.imbalanced_threshold  # type: ignore[attr-defined]
        for name in NAMES
        if name.startswith("ray_prefix")
    }
    assert thresholds == {
        "ray_prefix": math.inf,
        "ray_prefix_t5": 5,
        "ray_prefix_t10": 10,
        "ray_prefix_t20": 20,
    }
    # The variants leave the class (and ray_prefix's own name) alone.
    assert RayPrefixAffinityRouter.name == "ray_prefix"
    assert make_sim_router("ray_prefix").name == "ray_prefix"


@pytest.mark.parametrize("threshold", [5, 10, 20])
def test_a_variant_leaves_the_prefix_owner_only_past_its_threshold(threshold: int) -> None:
    policy = make_sim_router(f"ray_prefix_t{threshold}", RouterConfig(seed=2))
    request = PeerRequest(session_id="s", prompt_pages=(1, 2, 3, 4))
    first = policy.choose(views([0, 1, 1, 1]), request)
    assert (first.replica_id, first.decision.reason) == ("r0", "least_cached")
    # r0 owns the prompt; a spread of exactly the threshold is not imbalanced.
    at = policy.choose(views([threshold, 0, 0, 0]), request)
    assert (at.replica_id, at.decision.reason) == ("r0", "prefix")
    past = policy.choose(views([threshold + 1, 0, 0, 0]), request)
    assert past.decision.reason == "pow2"
    # The default never leaves it.
    default = make_sim_router("ray_prefix", RouterConfig(seed=2))
    default.choose(views([0, 1, 1, 1]), request)
    assert default.choose(views([1000, 0, 0, 0]), request).replica_id == "r0"


def test_prefix_variants_are_distinct_routers_sharing_no_state() -> None:
    a, b = make_sim_router("ray_prefix_t10"), make_sim_router("ray_prefix_t10")
    request = PeerRequest(prompt_pages=(7, 8))
    a.choose(views([0, 1, 1, 1]), request)
    assert a.tree.pages["r0"] == 2  # type: ignore[attr-defined]
    assert b.tree.pages == {}  # type: ignore[attr-defined]
