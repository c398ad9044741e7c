"""llm-d's inference scheduler (``llm_d``), pinned to its source.

Source: llm-d/llm-d-inference-scheduler v0.8.0 runs the EPP of
sigs.k8s.io/gateway-api-inference-extension v1.5.0 (GIE); with no configuration its
default is ``pkg/epp/config/loader/defaults.go`` (queue-scorer 2, kv-cache-utilization-scorer
2, prefix-cache-scorer 3; max-score picker). Scorers: ``scorer/queuedepth/queue.go``
(min-max normalized waiting queue, 1.0 when all equal), ``scorer/kvcacheutilization`` (1 -
usage), ``scorer/prefix/plugin.go`` (matched / total blocks) over the approximate index of
``requestcontrol/dataproducer/approximateprefix`` (``matchLongestPrefix``, ``indexer.go``'s
per-endpoint LRU, 256 blocks at most); ``scheduling/scheduler_profile.go`` sums
weight x score, each clamped to [0, 1].
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.peers.base import PeerRequest, PeerView
from bench.peers.llm_d import ApproxPrefixIndex, LlmdConfig, LlmdRouter
from bench.peers.registry import make_sim_router
from penelope_engine.errors import ConfigError
from router.schema import RouterConfig

PROMPT = tuple(range(1000, 1012))  # twelve pages


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def v(rid: str, queue: int = 0, kv: float = 0.0) -> PeerView:
    return PeerView(rid, queue, 64, kv_usage=kv, waiting_requests=queue)


def llmd(seed: int = 0, clock: FakeClock | None = None, **options: Any) -> LlmdRouter:
    return LlmdRouter(RouterConfig(seed=seed), clock or FakeClock(), LlmdConfig(**options))


def route(r: LlmdRouter, vs: list[PeerView], pages: tuple[int, ...] = PROMPT) -> str:
    return r.choose(vs, PeerRequest(prompt_pages=pages)).replica_id


def teach(r: LlmdRouter, rid: str, pages: tuple[int, ...]) -> None:
    """Make `rid` the pick for `pages` (the index then holds them there)."""
    others = [v(f"x{i}", queue=50, kv=1.0) for i in range(2)]
    assert route(r, [v(rid), *others], pages) == rid


def test_defaults_are_gies_default_profile_and_bad_knobs_are_refused() -> None:
    cfg = LlmdConfig()
    weights = (
        cfg.queue_scorer_weight,
        cfg.kv_cache_utilization_scorer_weight,
        cfg.prefix_cache_scorer_weight,
    )
    assert weights == (2.0, 2.0, 3.0)
    assert (cfg.max_prefix_blocks, cfg.lru_capacity_per_server, cfg.pod_check_interval_s) == (
        256,
        31_250,
        120.0,
    )
    for bad in (
        {"queue_scorer_weight": -1.0},
        {"max_prefix_blocks": 0},
        {"lru_capacity_per_server": 0},
    ):
        with pytest.raises(ConfigError):
            LlmdConfig(**bad)
    r = make_sim_router("llm_d")
    assert isinstance(r, LlmdRouter) and (r.reads_prompt, r.reads_kv_state) == (True, True)


def test_scores_are_the_weighted_sum_of_the_three_scorers() -> None:
    r = llmd()
    teach(r, "a", PROMPT[:9])  # "a" holds 9 of the 12 blocks
    vs = [v("a", queue=4, kv=0.25), v("b", queue=0, kv=0.5), v("c", queue=8, kv=1.0)]
    # queue (max 8 - q) / (8 - 0); kv 1 - usage; prefix 9 / 12 on "a" only
    a = 2 * 0.5 + 2 * 0.75 + 3 * 0.75
    b = 2 * 1.0 + 2 * 0.5 + 0.0
    c = 2 * 0.0 + 2 * 0.0 + 0.0
    assert r.scores(vs, PROMPT) == pytest.approx([a, b, c])


@pytest.mark.parametrize(
    ("cached", "winner"),
    [
        (9, "a"),  # 3 x 9/12 = 2.25 > 2 x 1 (the queue score "b" has and "a" lacks)
        (8, "tie"),  # 3 x 8/12 = 2.0: a tie
        (7, "b"),  # 3 x 7/12 = 1.75 < 2
    ],
)
def test_prefix_beats_the_queue_only_as_the_weights_say(cached: int, winner: str) -> None:
    vs = [v("a", queue=6), v("b", queue=2)]  # queue scores 0 and 1, same KV usage
    picks = set()
    for seed in range(30):
        r = llmd(seed)
        teach(r, "a", PROMPT[:cached])
        picks.add(route(r, vs))
    assert picks == ({"a", "b"} if winner == "tie" else {winner})


def test_kv_utilization_decides_between_equal_queues_and_caches() -> None:
    r = llmd()
    assert route(r, [v("a", kv=0.9), v("b", kv=0.1), v("c", kv=0.5)]) == "b"
    # equal queues score 1.0 each (queue.go), so only KV and prefix differ
    assert r.scores([v("a", queue=3), v("b", queue=3)], (7, 8)) == [4.0, 4.0]


def test_other_weights_pick_otherwise() -> None:
    vs = [v("a", queue=6), v("b", queue=2)]
    r = llmd(queue_scorer_weight=5.0)  # 3 x 9/12 = 2.25 < 5: the queue wins now
    teach(r, "a", PROMPT[:9])
    assert route(r, vs) == "b"


def test_the_match_walk_stops_at_the_first_block_no_endpoint_holds() -> None:
    idx = ApproxPrefixIndex(capacity=100)
    idx.add((1, 2, 3, 4), "b")
    idx.add((1, 2), "a")
    idx.add((1, 2, 9, 4), "c")  # "c" holds block 4's hash too, past a block it does not share
    assert idx.match((1, 2, 3, 4, 5)) == {"a": 2, "b": 4, "c": 3}  # per endpoint: its blocks
    assert idx.match((7, 1, 2)) == {}  # the first block unknown: nothing


def test_the_lru_drops_an_endpoints_oldest_blocks_and_with_them_its_matches() -> None:
    idx = ApproxPrefixIndex(capacity=4)
    idx.add((1, 2, 3), "a")
    idx.add((7, 8), "a")  # 5 > 4: block 1, the oldest, leaves "a"
    assert idx.hash_to_pods.get(1) is None
    assert idx.match((1, 2, 3)) == {}  # and the walk for that prompt stops at once
    assert idx.match((2, 3)) == {"a": 2}
    idx.add((2,), "a")  # a hit refreshes it: 3 is now the oldest
    idx.add((5,), "a")
    assert idx.match((2,)) == {"a": 1} and idx.match((3,)) == {}


def test_only_the_first_256_blocks_count() -> None:
    r = llmd()
    long_a = tuple(range(300))
    long_b = tuple(range(256)) + tuple(range(900, 944))  # same first 256, then different
    teach(r, "a", long_a)
    # 256 of 256 blocks matched: a full match, though the prompts differ past it
    assert r.scores([v("a"), v("b")], long_b) == [7.0, 4.0]
    assert len(r.index.pod_lru["a"]) == 256


def test_a_prompt_under_a_block_has_no_prefix_score_and_ties_go_at_random() -> None:
    r = llmd()
    teach(r, "a", PROMPT)
    assert r.scores([v("a"), v("b")], ()) == [4.0, 4.0]
    picks = Counter(route(llmd(seed), [v("a"), v("b"), v("c")], ()) for seed in range(60))
    assert set(picks) == {"a", "b", "c"}


def test_endpoints_that_leave_are_dropped_at_the_two_minute_sweep() -> None:
    clock = FakeClock()
    r = llmd(clock=clock)
    teach(r, "a", PROMPT)
    clock.now += 119.0  # "a" gone from the pool, not yet swept: its blocks still match
    route(r, [v("b"), v("c")], (5, 6))
    assert r.index.match(PROMPT) == {"a": len(PROMPT)}
    clock.now += 2.0  # the tick at 50 + 120 has passed: swept
    route(r, [v("b"), v("c")], (5, 6))
    assert r.index.match(PROMPT) == {} and "a" not in r.index.pod_lru
    teach(r, "d", PROMPT)
    assert r.sync_replicas({"d"}) == [] and set(r.index.pod_lru) == {"d"}


def test_no_replicas_and_same_seed_same_choices() -> None:
    assert llmd().rank([], PeerRequest(prompt_pages=PROMPT)).ranks == ()
    with pytest.raises(ValueError):
        llmd().choose([], PeerRequest(prompt_pages=PROMPT))
    vs = [v("a"), v("b"), v("c")]
    prompts = [tuple(range(k, k + 3)) for k in range(0, 120, 3)]
    a, b = llmd(5), llmd(5)
    assert [route(a, vs, p) for p in prompts] == [route(b, vs, p) for p in prompts]
