"""sgl-router's cache_aware policy, pinned to its source.

Source: sglang-router 0.3.2 = lightseekorg/smg 4e108ef08197b42580768de054cf6e5ea5da1344,
``src/policies/cache_aware.rs`` (cited as ca:N) and ``src/policies/tree.rs`` (tree:N);
defaults from the wheel's ``sglang_router/router_args.py``.
"""

from __future__ import annotations

import pytest

from bench.peers.base import PeerRequest, PeerView
from bench.peers.registry import make_sim_router
from bench.peers.sgl_cache_aware import ApproxTree, SglCacheAwareConfig, SglCacheAwareRouter
from penelope_engine.errors import ConfigError


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def views(*loads: int) -> list[PeerView]:
    return [PeerView(f"r{i}", load, 10_000) for i, load in enumerate(loads)]


def req(*pages: int) -> PeerRequest:
    return PeerRequest(prompt_pages=tuple(pages))


def router(clock: FakeClock | None = None, **options: float) -> SglCacheAwareRouter:
    return SglCacheAwareRouter(None, clock or FakeClock(), SglCacheAwareConfig(**options))  # type: ignore[arg-type]


PROMPT = tuple(range(100, 110))  # ten pages


def test_defaults_are_the_cli_defaults_and_bad_knobs_are_refused() -> None:
    # router_args.py:33-37: 0.3, 64, 1.5, 60 s, 2**26
    cfg = SglCacheAwareConfig()
    assert (cfg.cache_threshold, cfg.balance_abs_threshold, cfg.balance_rel_threshold) == (
        0.3,
        64,
        1.5,
    )
    assert (cfg.eviction_interval_s, cfg.max_tree_size) == (60.0, 2**26)
    for bad in (
        {"cache_threshold": 1.5},
        {"balance_abs_threshold": -1},
        {"balance_rel_threshold": 0.0},
        {"eviction_interval_s": -1.0},
        {"max_tree_size": -1},
    ):
        with pytest.raises(ConfigError):
            SglCacheAwareConfig(**bad)  # type: ignore[arg-type]


def test_registered_under_its_name() -> None:
    policy = make_sim_router("sgl_cache_aware")
    assert isinstance(policy, SglCacheAwareRouter)
    assert policy.name == "sgl_cache_aware" and policy.reads_prompt is True
    assert policy.sync_replicas({"r0"}) == []


def test_imbalance_by_both_thresholds_goes_to_the_least_loaded_and_teaches_the_tree() -> None:
    r = router()
    assert r.choose(views(0, 0), req(*PROMPT)).replica_id == "r0"  # seeds PROMPT on r0
    # ca:371-372: 100 - 10 > 64 and 100 > 10 * 1.5: the least loaded, cache or not (ca:307-310)
    choice = r.choose(views(100, 10), req(*PROMPT))
    assert (choice.replica_id, choice.decision.reason) == ("r1", "imbalanced")
    assert choice.decision.ranks == (("r1",),)
    # ca:312-321: even then the prompt is inserted for the chosen worker
    assert "r1" in r.tree.root.children[PROMPT[0]].tenants


@pytest.mark.parametrize(
    ("loads", "why"),
    [
        ((300, 230), "abs met (70 > 64), rel not (300 <= 345)"),
        ((30, 10), "rel met (30 > 15), abs not (20 <= 64)"),
        ((74, 10), "abs at the bound: 64 is not > 64"),
        ((195, 130), "rel at the bound: 195 is not > 130 * 1.5"),
    ],
)
def test_one_threshold_alone_is_not_imbalance(loads: tuple[int, int], why: str) -> None:
    r = router()
    r.choose(views(0, 0), req(*PROMPT))  # PROMPT on r0, the more loaded below
    choice = r.choose(views(*loads), req(*PROMPT))
    assert (choice.replica_id, choice.decision.reason) == ("r0", "cache_hit"), why


def test_match_above_the_threshold_goes_to_the_matching_worker_though_busier() -> None:
    r = router()
    r.choose(views(5, 0), req(*PROMPT[:4]))  # low match: least loaded r1 gets 4 pages
    # 4 of 10 pages matched: 0.4 > 0.3 (ca:403-409), r1 though it is busier
    choice = r.choose(views(0, 50), req(*PROMPT))
    assert (choice.replica_id, choice.decision.reason) == ("r1", "cache_hit")


def test_match_at_or_below_the_threshold_goes_to_the_least_loaded_not_the_smallest_tree() -> None:
    r = router()
    r.choose(views(5, 0), req(*PROMPT[:3]))  # r1 holds 3 pages
    r.choose(views(0, 5), req(*range(500, 540)))  # r0 holds 40: the bigger tree
    # 3 of 10 = 0.3 is not > 0.3; ca:410-416 takes the least loaded worker (r0, the bigger
    # tree): the docstring's "smallest tree" (ca:29-30) is not what 0.3.2 runs
    choice = r.choose(views(1, 2), req(*PROMPT))
    assert (choice.replica_id, choice.decision.reason) == ("r0", "min_load")
    assert r.tree.tenant_pages == {"r0": 40 + 10, "r1": 3}


def test_ties_go_to_the_first_worker() -> None:
    r = router()
    # Rust's min_by_key returns the first of equal minima (ca:412-415, and ca:307-310)
    assert r.choose(views(3, 3, 3), req(1, 2)).replica_id == "r0"
    assert r.choose(views(200, 9, 9), req(7, 8)).decision.reason == "imbalanced"
    assert r.choose(views(200, 9, 9), req(5, 6)).replica_id == "r1"


def test_a_shared_prefix_names_the_worker_that_created_its_node() -> None:
    r = router()
    r.choose(views(0, 9), req(*PROMPT))  # r0 creates the node
    r.choose(views(200, 0), req(*PROMPT))  # imbalanced: r1 joins the node later
    node = r.tree.root.children[PROMPT[0]]
    assert list(node.tenants) == ["r0", "r1"] and node.last_tenant == "r0"
    # tree:570-599: the node's cached tenant, the one that created it, not the latest
    assert r.choose(views(9, 0), req(*PROMPT)).replica_id == "r0"


def test_a_partly_matched_edge_counts_and_names_its_tenant() -> None:
    r = router()
    r.choose(views(9, 0), req(1, 2, 3, 4, 5, 6))  # r1: one edge of six pages
    # tree:554-558: 2 pages of the edge match; 2 / 5 = 0.4 > 0.3, the edge's tenant
    choice = r.choose(views(0, 9), req(1, 2, 7, 8, 9))
    assert (choice.replica_id, choice.decision.reason) == ("r1", "cache_hit")


def test_split_and_pass_through_count_pages_per_tenant() -> None:
    tree = ApproxTree()
    tree.insert((1, 2, 3, 4), "a")
    tree.insert((1, 2, 5), "b")  # tree:435-477: split (1, 2) | (3, 4); b adds 2 + 1
    tree.insert((1, 2, 3, 4), "b")  # tree:488-499: passes (3, 4) for b: + 2
    assert tree.tenant_pages == {"a": 4, "b": 5}
    top = tree.root.children[1]
    assert top.text == (1, 2) and set(top.children) == {3, 5}
    assert tree.prefix_match((1, 2, 3, 4, 6)) == ("a", 4)


def test_a_stale_tenant_is_removed_and_the_first_worker_serves() -> None:
    r = router()
    r.choose(views(9, 9, 0), req(*PROMPT))  # r2 learns PROMPT
    # ca:441-461: r2 is gone (not among the workers): drop it, send to the first, no insert
    choice = r.choose(views(5, 0), req(*PROMPT))
    assert (choice.replica_id, choice.decision.reason) == ("r0", "stale_tenant")
    assert "r2" not in r.tree.tenant_pages and not r.tree.root.children


def test_sync_replicas_removes_workers_that_left() -> None:
    r = router()
    r.choose(views(9, 0), req(*PROMPT))
    r.choose(views(0, 9), req(9, 9, 9))
    assert r.sync_replicas({"r0"}) == []  # remove_worker -> remove_tenant (ca:186-191)
    assert set(r.tree.tenant_pages) == {"r0"} and set(r.tree.root.children) == {9}


def test_eviction_runs_at_the_interval_and_drops_the_least_recent_leaves() -> None:
    clock = FakeClock()
    r = router(clock, max_tree_size=4)
    r.choose(views(0), req(1, 2, 3))  # older
    r.choose(views(0), req(7, 8, 9))  # newer: r0 holds 6 > 4 pages
    clock.now += 59.5
    r.choose(views(0), req())  # before the tick (ca:101-120, PeriodicTask every 60 s)
    assert r.tree.tenant_pages["r0"] == 6
    clock.now += 0.5
    r.choose(views(0), req())  # the tick: tree:718-815 pops the oldest leaf first
    assert r.tree.tenant_pages["r0"] == 3 and set(r.tree.root.children) == {7}
    r.choose(views(0), req(4, 5, 6))  # 6 pages again, but the next tick is at +120 s
    clock.now += 59.0
    r.choose(views(0), req())
    assert r.tree.tenant_pages["r0"] == 6
    clock.now += 1.0
    r.choose(views(0), req())
    assert r.tree.tenant_pages["r0"] == 3 and set(r.tree.root.children) == {4}


def test_no_eviction_when_the_interval_is_zero() -> None:
    clock = FakeClock()
    r = router(clock, max_tree_size=1, eviction_interval_s=0.0)
    r.choose(views(0), req(1, 2, 3))
    clock.now += 1e6
    r.choose(views(0), req())
    assert r.tree.tenant_pages["r0"] == 3


def test_an_empty_prompt_and_no_workers() -> None:
    r = router()
    choice = r.choose(views(4, 2), req())  # match rate 0 (ca:396-397): least loaded
    assert (choice.replica_id, choice.decision.reason) == ("r1", "min_load")
    assert r.rank([], req(1)).reason == "no_replicas"
