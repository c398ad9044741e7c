"""The engine-side routers' registry and the ``sgl_cache_aware_abs<N>`` variants.

Source: sglang-router 0.3.2 = lightseekorg/smg 4e108ef08197b42580768de054cf6e5ea5da1344,
``src/policies/cache_aware.rs`` (ca:N): imbalanced when max_load - min_load >
balance_abs_threshold and max_load > min_load * balance_rel_threshold (ca:371-372),
then the least loaded worker whatever the cache (ca:307-321).
"""

from __future__ import annotations

import pytest

from bench.peers.base import PeerRequest, PeerView
from bench.peers.dynamo_kv import DynamoKvRouter
from bench.peers.engine_routers import ENGINE_ROUTERS, SGL_ABS_THRESHOLDS
from bench.peers.llm_d import LlmdRouter
from bench.peers.registry import SIM_ROUTERS, make_sim_router
from bench.peers.sgl_cache_aware import SglCacheAwareRouter
from bench.peers.sgl_sticky import SglStickyRouter

PROMPT = tuple(range(100, 110))  # ten pages


def views(*loads: int) -> list[PeerView]:
    return [PeerView(f"r{i}", load, 10_000) for i, load in enumerate(loads)]


def test_every_engine_router_is_registered_under_its_fixed_name() -> None:
    assert set(ENGINE_ROUTERS) == {
        "sgl_cache_aware",
        "sgl_cache_aware_abs4",
        "sgl_cache_aware_abs8",
        "sgl_cache_aware_abs16",
        "sgl_cache_aware_abs32",
        "sgl_sticky",
        "dynamo_kv",
        "llm_d",
    }
    assert all(SIM_ROUTERS[name] is factory for name, factory in ENGINE_ROUTERS.items())
    kinds = {
        "sgl_cache_aware": SglCacheAwareRouter,
        "sgl_cache_aware_abs16": SglCacheAwareRouter,
        "sgl_sticky": SglStickyRouter,
        "dynamo_kv": DynamoKvRouter,
        "llm_d": LlmdRouter,
    }
    for name, kind in kinds.items():
        router = make_sim_router(name)
        assert isinstance(router, kind) and router.name == name
    assert make_sim_router("sgl_cache_aware").name == "sgl_cache_aware"  # the class keeps its name
    assert (make_sim_router("dynamo_kv").reads_kv_state, make_sim_router("llm_d").reads_prompt) == (
        True,
        True,
    )


@pytest.mark.parametrize("t", SGL_ABS_THRESHOLDS)
def test_abs_variant_changes_only_the_abs_threshold(t: int) -> None:
    opts = make_sim_router(f"sgl_cache_aware_abs{t}").options  # type: ignore[attr-defined]
    default = make_sim_router("sgl_cache_aware").options  # type: ignore[attr-defined]
    assert opts.balance_abs_threshold == t and default.balance_abs_threshold == 64
    assert (opts.cache_threshold, opts.balance_rel_threshold, opts.eviction_interval_s) == (
        default.cache_threshold,
        default.balance_rel_threshold,
        default.eviction_interval_s,
    )


def _after_seeding(name: str, loads: tuple[int, int]) -> tuple[str, str]:
    """Seed PROMPT on r0 (both idle: the first least loaded), then route it at `loads`."""
    router = make_sim_router(name)
    assert router.choose(views(0, 0), PeerRequest(prompt_pages=PROMPT)).replica_id == "r0"
    choice = router.choose(views(*loads), PeerRequest(prompt_pages=PROMPT))
    return choice.replica_id, choice.decision.reason


@pytest.mark.parametrize("t", SGL_ABS_THRESHOLDS)
def test_abs_threshold_sends_to_the_least_loaded_exactly_past_it(t: int) -> None:
    name = f"sgl_cache_aware_abs{t}"
    # (2t, t): a spread of exactly t is not > t: the cache decides, the busier r0 keeps it
    assert _after_seeding(name, (2 * t, t)) == ("r0", "cache_hit")
    # (2t + 1, t): t + 1 > t and 2t + 1 > 1.5 t: imbalanced, the least loaded r1
    assert _after_seeding(name, (2 * t + 1, t)) == ("r1", "imbalanced")
    # the CLI default (64) still follows the cache at that spread
    assert _after_seeding("sgl_cache_aware", (2 * t + 1, t)) == ("r0", "cache_hit")


@pytest.mark.parametrize("t", SGL_ABS_THRESHOLDS)
def test_abs_variant_still_needs_the_relative_threshold(t: int) -> None:
    # spread 10 t > t, but 100 t <= 90 t * 1.5: not imbalanced (ca:371-372 needs both)
    assert _after_seeding(f"sgl_cache_aware_abs{t}", (100 * t, 90 * t)) == ("r0", "cache_hit")
