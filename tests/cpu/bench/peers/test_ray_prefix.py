"""The ``ray_prefix`` policy: behaviour, and agreement with Ray's real prefix-aware router.

The comparison tests build Ray Serve LLM's ``PrefixCacheAffinityRouter`` with
the least scaffolding it needs: in-memory replicas that answer queue-length
probes (as in ``test_ray_router.py``), a real ``PrefixTree`` behind a stand-in
for its actor handle (``.remote`` calls the tree directly, and the module's
``ray.get`` returns the value it is given), so no cluster starts. The router's
own logic (queue probing, imbalance check, prefix match, smallest tenants,
pow2 fallback, picking the shortest queue, insert on route) runs unchanged.
Prompts are strings with one character per page hash.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import random
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from ray_replicas import fake_replica_class

from bench.peers.base import PeerRequest, PeerView
from bench.peers.ray_prefix import RayPrefixAffinityRouter, RayPrefixConfig, RayPrefixTree
from bench.peers.registry import SIM_ROUTERS, make_sim_router
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import GenerateRequest
from router import RouterConfig, pick_replica

REAL_ROUTER = "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router"
REAL_TREE = "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_tree"
IDS = ("r0", "r1", "r2", "r3")
PAIR = ("r0", "r1")
MAX_ONGOING = 10
T = TypeVar("T")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def views(queues: Sequence[int], ids: Sequence[str] = IDS) -> list[PeerView]:
    return [PeerView(rid, q, MAX_ONGOING) for rid, q in zip(ids, queues, strict=True)]


def prompt(*pages: int) -> PeerRequest:
    return PeerRequest(prompt_pages=tuple(pages))


def router(clock: FakeClock | None = None, **options: Any) -> RayPrefixAffinityRouter:
    return RayPrefixAffinityRouter(
        RouterConfig(seed=3), clock or FakeClock(), RayPrefixConfig(**options)
    )


# -- behaviour ------------------------------------------------------------------------------


def test_returning_prompt_goes_to_the_replica_that_served_its_prefix() -> None:
    r = router()
    first = r.choose(views([0, 1, 2, 3]), prompt(*range(1, 11)))
    assert (first.replica_id, first.decision.reason) == ("r0", "least_cached")
    # r0 is now the busiest, but it owns the prefix: Ray's default never rebalances.
    again = r.choose(views([9, 0, 0, 0]), prompt(*range(1, 14)))
    assert (again.replica_id, again.decision.reason) == ("r0", "prefix")
    assert again.decision.ranks == (("r0",),)
    assert r.tree.pages == {"r0": 13, "r1": 0, "r2": 0, "r3": 0}


def test_below_match_rate_threshold_goes_to_the_replica_with_least_cached() -> None:
    r = router()
    r.sync_replicas(IDS)
    r.record_route(prompt(*range(100, 120)), "r0")  # 20 pages
    r.record_route(prompt(*range(200, 205)), "r1")  # 5 pages
    r.record_route(prompt(*range(300, 303)), "r2")  # 3 pages
    r.record_route(prompt(*range(400, 403)), "r3")  # 3 pages
    # Shares 1 page of 11 with r0 (9% < 10%): the least cached (r2, r3), the less loaded.
    choice = r.choose(views([0, 0, 5, 4]), prompt(100, *range(1, 11)))
    assert choice.decision.ranks == (("r2", "r3"),)
    assert (choice.replica_id, choice.decision.reason) == ("r3", "least_cached")
    # Exactly at the threshold (1 page of 10) the prefix decides.
    at = r.choose(views([0, 0, 0, 0]), prompt(100, *range(500, 509)))
    assert (at.replica_id, at.decision.reason) == ("r0", "prefix")


def test_under_imbalance_it_falls_back_to_the_load_based_pair() -> None:
    r = router(imbalanced_threshold=2)
    r.record_route(prompt(1, 2, 3), "r0")  # not a tenant yet: ignored, as in Ray
    assert r.choose(views([0, 1, 1, 1]), prompt(1, 2, 3)).decision.reason == "least_cached"
    queues = [0, 5, 1, 1]  # spread 5 > 2: the prefix owner (r0) is not preferred
    seen = set()
    for _ in range(20):
        choice = r.choose(views(queues), prompt(1, 2, 3, 4))
        (pair,) = choice.decision.ranks
        assert choice.decision.reason == "pow2" and len(set(pair)) == 2
        assert choice.replica_id == min(pair, key=lambda rid: queues[IDS.index(rid)])
        seen.add(choice.replica_id)
    assert len(seen) > 1
    # Balanced again (spread 2 is not > 2): the longest owned prefix wins.
    assert r.choose(views([2, 0, 0, 0]), prompt(1, 2, 3, 4)).decision.reason == "prefix"


def test_a_full_group_keeps_the_request_as_ray_waits_for_it() -> None:
    r = router()
    r.choose(views([0, 1, 1, 1]), prompt(7, 8, 9))
    choice = r.choose(views([MAX_ONGOING, 0, 0, 0]), prompt(7, 8, 9, 10))
    assert (choice.replica_id, choice.decision.reason) == ("r0", "prefix")


def test_no_full_page_counts_as_no_match_and_empty_views_have_no_ranks() -> None:
    r = router()
    assert r.choose(views([3, 1, 2, 0]), prompt()).replica_id == "r3"
    assert r.rank([], prompt(1)).ranks == ()


def test_sync_replicas_drops_a_gone_replica_from_the_tree() -> None:
    r = router()
    r.choose(views([0, 1, 2, 3]), prompt(1, 2, 3))
    assert r.sync_replicas({"r1", "r2", "r3"}) == []
    assert "r0" not in r.tree.pages
    choice = r.choose(views([2, 1, 0], ("r1", "r2", "r3")), prompt(1, 2, 3))
    assert (choice.replica_id, choice.decision.reason) == ("r3", "least_cached")


def test_eviction_drops_least_recently_used_pages_on_its_interval() -> None:
    clock = FakeClock()
    r = router(
        clock,
        do_eviction=True,
        eviction_threshold_pages=8,
        eviction_target_pages=6,
        eviction_interval_s=10,
    )
    r.choose(views([0, 1], PAIR), prompt(1, 2, 3, 4, 5))  # starts the loop; goes to r0
    clock.now += 1
    r.record_route(prompt(1, 2, 6, 7, 8, 9), "r0")  # r0 owns 9 pages > 8
    clock.now += 8
    r.rank(views([0, 1], PAIR), prompt())
    assert r.tree.pages["r0"] == 9  # before the first tick
    clock.now += 2
    r.rank(views([0, 1], PAIR), prompt())  # the tick: 3 pages over target, the oldest touch goes
    assert r.tree.pages["r0"] == 6
    assert r.tree.match((1, 2, 3, 4), ["r0", "r1"]) == (2, ["r0"])
    assert r.tree.match((1, 2, 6, 7), ["r0", "r1"]) == (4, ["r0"])
    # A whole timestamp goes at once, even past the amount asked for.
    assert r.tree.evict("r0", 1) == 6 and r.tree.pages["r0"] == 0


def test_registered_and_validated_with_rays_defaults() -> None:
    policy = make_sim_router("ray_prefix")
    assert isinstance(policy, RayPrefixAffinityRouter) and policy.reads_prompt
    assert SIM_ROUTERS["ray_prefix"] is RayPrefixAffinityRouter
    with pytest.raises(ConfigError):
        RayPrefixConfig(match_rate_threshold=1.5)
    with pytest.raises(ConfigError):
        RayPrefixConfig(eviction_threshold_pages=10, eviction_target_pages=11)
    real = pytest.importorskip(REAL_ROUTER).PrefixCacheAffinityRouter
    params = inspect.signature(real.initialize_state).parameters
    ours = RayPrefixConfig()
    assert params["imbalanced_threshold"].default == ours.imbalanced_threshold == math.inf
    assert params["match_rate_threshold"].default == ours.match_rate_threshold
    assert params["do_eviction"].default == ours.do_eviction
    assert params["eviction_threshold_chars"].default == ours.eviction_threshold_pages
    assert params["eviction_target_chars"].default == ours.eviction_target_pages
    assert params["eviction_interval_secs"].default == ours.eviction_interval_s


# -- the real class on a recorded trace -----------------------------------------------------

CHARS: dict[int, str] = {}


def text(pages: Sequence[int]) -> str:
    """One unique character per page hash."""
    return "".join(CHARS.setdefault(h, chr(0x4E00 + len(CHARS))) for h in pages)


def agent_trace(
    seed: int, steps: int, spread: int, distinct: bool
) -> list[tuple[tuple[int, ...], list[int]]]:
    """Agent turns: (prompt pages, queue length per replica) per step.

    A new session starts from one of three system prompts (6, 3 or 1 pages) or
    none, and grows by a few pages a turn; a one-page system prompt ahead of a
    long first message matches below the 10% threshold. With ``distinct`` the
    queue lengths at a step are all different (no ties for Ray to break).
    """
    rng = random.Random(seed)
    page = lambda: rng.getrandbits(63)
    systems = [tuple(page() for _ in range(n)) for n in (6, 3, 1, 0, 0)]
    sessions: list[list[int]] = []
    trace = []
    for _ in range(steps):
        if not sessions or rng.random() < 0.35:
            sessions.append([*rng.choice(systems), *(page() for _ in range(rng.randint(1, 12)))])
            pages = sessions[-1]
        else:
            pages = rng.choice(sessions)
            pages.extend(page() for _ in range(rng.randint(1, 3)))
        if distinct:
            queues = rng.sample(range(spread + 1), len(IDS))
        else:
            queues = [rng.randint(0, spread) for _ in IDS]
        trace.append((tuple(pages), queues))
    return trace


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


@pytest.fixture
def real_router(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A factory for Ray's router over a real PrefixTree, without a cluster."""
    par = pytest.importorskip(REAL_ROUTER)
    prefix_tree = pytest.importorskip(REAL_TREE)
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID

    deployment = DeploymentID(name="llm", app_name="app")
    # the class's own module globals: once Serve has resolved the router class by its
    # import path, they are not `par.__dict__`
    router_globals = par.PrefixCacheAffinityRouter.update_replicas.__globals__
    monkeypatch.setitem(router_globals, "ray", SimpleNamespace(get=lambda value: value))

    FakeReplica = fake_replica_class(MAX_ONGOING)

    class TreeHandle:  # an actor handle's `.method.remote(...)`, called in place
        def __init__(self, tree: Any) -> None:
            self.tree = tree

        def __getattr__(self, name: str) -> Any:
            return SimpleNamespace(remote=getattr(self.tree, name))

    def make(**options: Any) -> Any:
        real = par.PrefixCacheAffinityRouter(
            deployment_id=deployment,
            handle_source=DeploymentHandleSource.REPLICA,
            self_actor_id="test-actor",
            use_replica_queue_len_cache=False,  # probe every time: the step's queue lengths
        )
        real.tree = prefix_tree.PrefixTree()
        real.initialize_state(tree_actor=TreeHandle(real.tree), **options)
        real.fake_replicas = {rid: FakeReplica(rid) for rid in IDS}
        real.update_replicas(list(real.fake_replicas.values()))
        decisions: list[Any] = []
        inner = real._prefix_match_best_replicas

        async def spy(*args: Any) -> Any:  # records the decision, changes nothing
            out = await inner(*args)
            decisions.append(out[0])
            return out

        real._prefix_match_best_replicas = spy
        real.decisions = decisions
        return real

    return make


async def real_step(real: Any, pages: Sequence[int], queues: Sequence[int]) -> tuple[Any, str]:
    """One request through Ray's routing loop: (its prefix decision, the replica it got)."""
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    for rid, q in zip(IDS, queues, strict=True):
        real.fake_replicas[rid].queue_len = q
    ids = uuid.uuid4().hex
    request = PendingRequest(
        args=[SimpleNamespace(prompt=text(pages))],
        kwargs={},
        metadata=RequestMetadata(request_id=ids, internal_request_id=ids),
    )
    replica = await real._choose_replica_for_request(request)
    real.on_request_routed(request, replica.replica_id, None)
    group = real.decisions[-1]
    decision = {r.replica_id.unique_id for r in group} if group else "pow2"
    return decision, replica.replica_id.unique_id


def real_counts(real: Any) -> dict[str, int]:
    return {t.rsplit("#", 1)[1]: n for t, n in real.tree.tenant_to_char_count.items()}


def test_matches_the_real_router_step_by_step(real_router: Any) -> None:
    async def body() -> None:
        real = real_router()
        model = router()
        reasons = []
        for step, (pages, queues) in enumerate(agent_trace(11, 48, spread=6, distinct=True)):
            decision, chosen = await real_step(real, pages, queues)
            choice = model.choose(views(queues), prompt(*pages))
            reasons.append(choice.decision.reason)
            assert decision == set(choice.decision.ranks[0]), step
            assert chosen == choice.replica_id, step
            assert real_counts(real) == model.tree.pages, step
        assert {"prefix", "least_cached"} <= set(reasons)

    run(body())


def test_matches_the_real_router_under_imbalance_and_ties(real_router: Any) -> None:
    async def body() -> None:
        real = real_router(imbalanced_threshold=3)
        model = router(imbalanced_threshold=3)
        reasons = []
        for step, (pages, queues) in enumerate(agent_trace(5, 60, spread=5, distinct=False)):
            decision, chosen = await real_step(real, pages, queues)
            ranked = model.rank(views(queues), prompt(*pages))
            reasons.append(ranked.reason)
            if ranked.reason == "pow2":
                assert decision == "pow2", step
            else:  # Ray breaks queue-length ties by set order: same group, same queue
                assert decision == set(ranked.ranks[0]), step
                by_id = {v.replica_id: v for v in views(queues)}
                ours = pick_replica(ranked.ranks, by_id)
                assert queues[IDS.index(ours)] == queues[IDS.index(chosen)], step
            model.record_route(prompt(*pages), chosen)  # follow Ray's pick to stay in step
            assert real_counts(real) == model.tree.pages, step
        assert {"prefix", "least_cached", "pow2"} <= set(reasons)

    run(body())


def test_page_tree_matches_rays_prefix_tree_with_eviction() -> None:
    """Random inserts, LRU evictions, removals and matches on both trees."""
    prefix_tree = pytest.importorskip(REAL_TREE)
    rng = random.Random(2)
    real, ours = prefix_tree.PrefixTree(), RayPrefixTree()
    bases = [tuple(rng.getrandbits(63) for _ in range(8)) for _ in range(3)]
    real.add_tenants(list(IDS), 0.0)
    for rid in IDS:
        ours.add_tenant(rid, 0.0)
    for t in range(1, 300):
        pages = (*rng.choice(bases)[: rng.randint(0, 8)], *(rng.randrange(40) for _ in range(3)))
        tenant, op = rng.choice(IDS), rng.random()
        if op < 0.5:
            real.insert(text(pages), tenant, float(t))
            ours.insert(pages, tenant, float(t))
        elif op < 0.65:
            n = rng.randint(1, 12)
            assert real.evict_tenant_by_lru(tenant, n) == ours.evict(tenant, n), t
        elif op < 0.68:
            real.remove_tenants([tenant])
            ours.remove_tenant(tenant)
            real.add_tenants([tenant], float(t))
            ours.add_tenant(tenant, float(t))
        else:
            candidates = rng.sample(IDS, rng.randint(1, len(IDS)))
            matched, owners = real.prefix_match(text(pages), candidates)
            assert (len(matched), owners or []) == ours.match(pages, candidates), t
        assert real.tenant_to_char_count == ours.pages, t


@dataclass(frozen=True)
class TextPromptRequest(GenerateRequest):
    """Our request as Ray Serve LLM's `PrefixCacheAffinityRouter` needs it: that router
    reads `.prompt` of the call's argument. One character per token id (its code point,
    shifted past the surrogates), so a text prefix is a token prefix."""

    @property
    def prompt(self) -> str:
        return "".join(chr(t + 0x800 if t >= 0xD800 else t) for t in self.prompt_token_ids)


def test_rays_prefix_router_reads_the_prompt_of_our_request() -> None:
    router_module = pytest.importorskip(REAL_ROUTER)
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    real = object.__new__(router_module.PrefixCacheAffinityRouter)
    first = TextPromptRequest("r1", (5, 0xD7FF, 0xD800, 0xDFFF, 151_000), session_id="s")
    longer = TextPromptRequest("r2", (*first.prompt_token_ids, 7, 8), session_id="s")

    async def text_of(request: TextPromptRequest) -> str:
        ids = uuid.uuid4().hex
        metadata = RequestMetadata(request_id=ids, internal_request_id=ids, session_id="s")
        pending = PendingRequest(args=[request], kwargs={}, metadata=metadata)
        return str(real._extract_text_from_request(pending))

    a, b = asyncio.run(text_of(first)), asyncio.run(text_of(longer))
    assert a == first.prompt and len(a) == 5 and b.startswith(a) and len(b) == 7
    assert len(set(a)) == 5 and a.encode("utf-8")  # distinct ids, no surrogate characters
