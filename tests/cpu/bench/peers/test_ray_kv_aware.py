"""The ``ray_kv_aware`` policy: Dynamo's default cost, and Ray's ``KVAwareRouter`` around it.

Ray's router delegates the score to Dynamo's ``SelectionService`` (ai-dynamo, a
Rust extension not installed here), so the cost is checked against hand-worked
values of ``DefaultWorkerSelector::worker_logit`` with Dynamo's defaults. Ray's
own part runs for real: ``KVAwareRouter`` over in-memory replicas, with a
stand-in tracker in place of the ``KVTokenTracker`` whose ``select_worker``
scores the candidates it is handed with the model's cost. That checks what Ray
hands the selection service (the whole prompt, every candidate) and what it does
with the answer (one rank; a full pick is waited for, never replaced).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from ray_replicas import fake_replica_class

from bench.peers.base import CachedRun, PeerRequest, PeerView
from bench.peers.dynamo_kv import DynamoKvConfig
from bench.peers.ray_kv_aware import RAY_DYNAMO_CONFIG, RayKvAwareRouter
from bench.peers.registry import SIM_ROUTERS, make_sim_router
from penelope_engine.errors import ConfigError
from router import RouterConfig

REAL_ROUTER = "ray.llm._internal.serve.routing_policies.kv_aware.kv_aware_router"
REAL_TRACKER = "ray.llm._internal.serve.routing_policies.kv_aware.kv_token_tracker"
MAX_ONGOING = 8
PROMPT = tuple(range(100, 110))  # 10 pages
NOTHING = CachedRun()
T = TypeVar("T")


def cached(device: int = 0, host: int = 0, store: int = 0) -> Callable[[Sequence[int]], CachedRun]:
    return lambda pages: CachedRun(device, host, store)


def view(
    rid: str,
    run: CachedRun = NOTHING,
    *,
    waiting_tokens: int = 0,
    active_pages: int = 0,
    queue_len: int = 0,
) -> PeerView:
    return PeerView(
        rid,
        queue_len,
        MAX_ONGOING,
        active_pages=active_pages,
        waiting_tokens=waiting_tokens,
        cached=cached(*run),
    )


def router(seed: int = 3, **options: Any) -> RayKvAwareRouter:
    config = dataclasses.replace(RAY_DYNAMO_CONFIG, **options)
    return RayKvAwareRouter(RouterConfig(seed=seed), options=config)


def prompt(pages: Sequence[int] = PROMPT) -> PeerRequest:
    return PeerRequest(session_id="s", prompt_pages=tuple(pages))


def pick(views: Sequence[PeerView], r: RayKvAwareRouter | None = None) -> str:
    return (r or router()).choose(views, prompt()).replica_id


# -- Dynamo's cost --------------------------------------------------------------------------


def test_logit_is_prefill_left_after_the_credit_plus_active_blocks() -> None:
    r = router()
    # 10-page prompt, 6 device pages cached, nothing queued or running:
    # max(0 + 10 - 6, 0) + (0 + 0 + 10) = 14.
    assert r.logit(view("a", CachedRun(6)), PROMPT) == 14.0
    # 32 queued tokens (2 blocks) and 5 running pages: max(2 + 10 - 6, 0) + (5 + 2 + 10) = 23.
    busy = view("a", CachedRun(6), waiting_tokens=32, active_pages=5)
    assert r.logit(busy, PROMPT) == 23.0
    # A fully cached prompt has no prefill left: only the load counts.
    assert r.logit(view("a", CachedRun(10), active_pages=3), PROMPT) == 13.0
    # 4 device + 4 host: credit 4 + 0.75 x 4 = 7; store pages earn nothing by default.
    assert r.logit(view("a", CachedRun(4, 4, 2)), PROMPT) == 13.0
    assert router(disk_cache_hit_weight=0.25).logit(view("a", CachedRun(4, 4, 2)), PROMPT) == 12.5
    # No cached lookup (a caller without KV state), or no full page: no credit.
    plain = PeerView("a", 0, MAX_ONGOING, waiting_tokens=16)
    assert r.logit(plain, PROMPT) == 11.0 + 11.0
    assert r.logit(view("a", CachedRun(5), waiting_tokens=16), ()) == 2.0


def test_prefers_the_replica_with_more_cached_prefix_at_equal_load() -> None:
    views = [view("r0", CachedRun(2)), view("r1", CachedRun(7)), view("r2", CachedRun(5))]
    choice = router().choose(views, prompt())
    assert choice.replica_id == "r1"
    assert choice.decision.ranks == (("r1",),) and choice.decision.reason == "kv"


def test_host_blocks_earn_three_quarters_of_a_device_block() -> None:
    # 8 host pages are worth 6 device pages: more than 5, less than 7.
    assert pick([view("host", CachedRun(0, 8)), view("dev", CachedRun(5))]) == "host"
    assert pick([view("host", CachedRun(0, 8)), view("dev", CachedRun(7))]) == "dev"
    # A run of 4 device pages extended by 4 host pages (7) beats 6 device pages.
    assert pick([view("mixed", CachedRun(4, 4)), view("dev", CachedRun(6))]) == "mixed"
    # Store pages count only with a store weight (Ray feeds Dynamo no disk tier).
    stored = [view("store", CachedRun(0, 0, 10)), view("dev", CachedRun(1))]
    assert pick(stored) == "dev"
    assert pick(stored, router(disk_cache_hit_weight=0.25)) == "store"


def test_load_outweighs_cache_when_it_costs_more_blocks() -> None:
    warm = CachedRun(8)
    # Queued prompts count twice (prefill pending and blocks booked): 20 blocks queued
    # cost 20 + 20 against the 8-page credit, the idle replica 20 in all.
    assert pick([view("warm", warm, waiting_tokens=320), view("idle")]) == "idle"
    # Running pages: 3 of them keep the warm replica ahead (15 < 20), 11 do not (23 > 20).
    assert pick([view("warm", warm, active_pages=3), view("idle")]) == "warm"
    assert pick([view("warm", warm, active_pages=11), view("idle")]) == "idle"
    # No prefix weight: pure load balance.
    cold = router(overlap_score_credit=0.0, host_cache_hit_weight=0.0)
    assert pick([view("warm", warm, active_pages=1), view("idle")], cold) == "idle"


def test_a_full_pick_is_kept_as_ray_waits_for_it() -> None:
    views = [view("warm", CachedRun(9), queue_len=MAX_ONGOING), view("idle")]
    choice = router().choose(views, prompt())
    assert choice.replica_id == "warm" and choice.decision.ranks == (("warm",),)


def test_ties_are_drawn_at_random_and_temperature_samples_a_softmax() -> None:
    r = router(seed=1)
    idle = [view(f"r{i}") for i in range(3)]
    seen = Counter(r.choose(idle, prompt()).replica_id for _ in range(300))
    assert set(seen) == {"r0", "r1", "r2"} and min(seen.values()) > 60
    draws = lambda seed: [router(seed=seed).choose(idle, prompt()).replica_id for _ in range(1)]
    same = [router(seed=4) for _ in range(2)]
    assert len({tuple(x.choose(idle, prompt()).replica_id for _ in range(50)) for x in same}) == 1
    assert len({draws(seed)[0] for seed in range(20)}) == 3  # the seed decides the draw
    # Temperature 1 over logits 10, 13, 19: P ~ exp(-(x - 10) / 9), Dynamo's normalization.
    hot = router(seed=2, router_temperature=1.0)
    views = [view("a", CachedRun(10)), view("b", CachedRun(7)), view("c", CachedRun(1))]
    assert [hot.logit(v, PROMPT) for v in views] == [10.0, 13.0, 19.0]
    n = 6000
    counts = Counter(hot.choose(views, prompt()).replica_id for _ in range(n))
    weights = {"a": 1.0, "b": 2.718281828 ** (-3 / 9), "c": 2.718281828 ** (-9 / 9)}
    total = sum(weights.values())
    for rid, w in weights.items():
        assert abs(counts[rid] / n - w / total) < 0.03, (rid, counts)


def test_registered_and_validated() -> None:
    policy = make_sim_router("ray_kv_aware")
    assert isinstance(policy, RayKvAwareRouter) and policy.name == "ray_kv_aware"
    assert policy.reads_prompt and policy.reads_kv_state
    assert SIM_ROUTERS["ray_kv_aware"] is RayKvAwareRouter
    assert policy.rank([], prompt()).ranks == ()
    for bad in (
        {"overlap_score_credit": -1.0},
        {"host_cache_hit_weight": -0.1},
        {"router_temperature": -1.0},
    ):
        with pytest.raises(ConfigError):
            DynamoKvConfig(**bad)


# -- Ray's KVAwareRouter around the selection service ---------------------------------------


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


class StandInTracker:
    """``KVTokenTracker.select_worker`` with the model's cost in place of Dynamo's service."""

    def __init__(self, worker_id: Callable[[str], int]) -> None:
        self.worker_id = worker_id
        self.views: list[PeerView] = []
        self.calls: list[tuple[str, list[int], list[int], int | None]] = []
        self.model = router(seed=5)

    async def select_worker(
        self,
        request_id: str,
        token_ids: list[int],
        allowed_worker_ids: list[int],
        expected_output_tokens: int | None = None,
    ) -> dict[str, int]:
        self.calls.append((request_id, token_ids, allowed_worker_ids, expected_output_tokens))
        allowed = [v for v in self.views if self.worker_id(v.replica_id) in allowed_worker_ids]
        chosen = self.model.choose(allowed, prompt(token_ids)).replica_id
        return {"worker_id": self.worker_id(chosen), "dp_rank": 0}


@pytest.fixture
def real_router() -> Any:
    """A factory for Ray's KVAwareRouter over in-memory replicas (call it in a loop)."""
    kv_router = pytest.importorskip(REAL_ROUTER)
    tracker_module = pytest.importorskip(REAL_TRACKER)
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID

    deployment = DeploymentID(name="llm", app_name="app")

    FakeReplica = fake_replica_class(MAX_ONGOING)

    def make(ids: Sequence[str]) -> Any:
        real = kv_router.KVAwareRouter(
            deployment_id=deployment,
            handle_source=DeploymentHandleSource.REPLICA,
            self_actor_id="test-actor",
            use_replica_queue_len_cache=False,
        )
        real.initialize_state()  # no tracker in this process: degrades to random picks
        real.stand_in = StandInTracker(tracker_module.get_worker_id)
        real.fake_replicas = {rid: FakeReplica(rid) for rid in ids}
        real.update_replicas(list(real.fake_replicas.values()))
        return real

    return make


def pending(token_ids: Sequence[int] | None, max_tokens: int | None = None) -> Any:
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    ids = uuid.uuid4().hex
    kwargs = {} if token_ids is None else {"request_token_ids": list(token_ids)}
    return PendingRequest(
        args=[SimpleNamespace(max_tokens=max_tokens)],
        kwargs=kwargs,
        metadata=RequestMetadata(request_id=ids, internal_request_id=ids),
    )


def test_ray_hands_every_candidate_to_the_service_and_routes_its_pick(real_router: Any) -> None:
    async def body() -> None:
        ids = ("r0", "r1", "r2", "r3")
        real = real_router(ids)
        real._kv_token_tracker = real.stand_in
        rng, model, picked = random.Random(8), router(seed=5), set()
        for step in range(60):
            pages = tuple(rng.randrange(50) for _ in range(rng.randint(1, 12)))
            views = [
                view(
                    rid,
                    CachedRun(*(rng.randint(0, len(pages)) // k for k in (2, 3, 4))),
                    waiting_tokens=rng.choice((0, 16, 64, 200)),
                    active_pages=rng.randint(0, 8),
                    queue_len=rng.randint(0, MAX_ONGOING - 1),
                )
                for rid in ids
            ]
            real.stand_in.views = views
            for rid, v in zip(ids, views, strict=True):
                real.fake_replicas[rid].queue_len = v.queue_len
            got = await real._choose_replica_for_request(pending(pages, max_tokens=64))
            ours = model.choose(views, prompt(pages))
            picked.add(ours.replica_id)
            assert got.replica_id.unique_id == ours.replica_id, step
            _, token_ids, allowed, expected = real.stand_in.calls[-1]
            assert token_ids == list(pages) and expected == 64
            assert sorted(allowed) == sorted(real.stand_in.worker_id(rid) for rid in ids)
        assert len(picked) > 1

    run(body())


def test_ray_waits_for_a_full_pick_and_picks_at_random_without_tokens(real_router: Any) -> None:
    async def body() -> None:
        ids = ("warm", "idle")
        real = real_router(ids)
        real._kv_token_tracker = real.stand_in
        views = [view("warm", CachedRun(9), queue_len=MAX_ONGOING), view("idle")]
        real.stand_in.views = views
        real.fake_replicas["warm"].queue_len = MAX_ONGOING
        assert router().choose(views, prompt()).replica_id == "warm"
        task = asyncio.ensure_future(real._choose_replica_for_request(pending(PROMPT)))
        await asyncio.sleep(0.3)
        assert not task.done()  # the idle replica is free, yet Ray waits for its pick
        real.fake_replicas["warm"].queue_len = MAX_ONGOING - 1
        got = await asyncio.wait_for(task, timeout=20)
        assert got.replica_id.unique_id == "warm"
        # Without token ids the service is not asked: a random candidate.
        calls = len(real.stand_in.calls)
        picked = {
            (await real._choose_replica_for_request(pending(None))).replica_id.unique_id
            for _ in range(40)
        }
        assert picked == set(ids) and len(real.stand_in.calls) == calls

    run(body())
