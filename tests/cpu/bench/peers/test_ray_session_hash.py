"""The ``ray_session_hash`` policy: behaviour, and agreement with Ray's real consistent-hash router.

The comparison tests build Ray Serve's ``ConsistentHashRouter`` with in-memory
replicas that answer queue-length probes (as ``test_ray_prefix.py`` does), so no
cluster starts; its ring, its key lookup and the base class's routing loop
(probe each rank in turn, take the first replica that is not full, back off and
retry when all are) run unchanged. Replica unique ids are the view ids, so the
real ring and the model's are the same ring.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import pytest
from ray_replicas import fake_replica_class

from bench.peers.base import PeerRequest, PeerView
from bench.peers.ray_session_hash import (
    CONSISTENT_HASH_SEED,
    HashRing,
    RaySessionHashConfig,
    RaySessionHashRouter,
    ring_hash,
)
from bench.peers.registry import SIM_ROUTERS, make_sim_router
from penelope_engine.errors import ConfigError
from router import RouterConfig

REAL = "ray.serve.experimental.consistent_hash_router"
IDS = ("r0", "r1", "r2", "r3", "r4")
MAX_ONGOING = 4
T = TypeVar("T")


def views(queues: Sequence[int], ids: Sequence[str] = IDS) -> list[PeerView]:
    return [PeerView(rid, q, MAX_ONGOING) for rid, q in zip(ids, queues, strict=True)]


def router(**options: Any) -> RaySessionHashRouter:
    return RaySessionHashRouter(RouterConfig(seed=7), options=RaySessionHashConfig(**options))


def session(sid: str) -> PeerRequest:
    return PeerRequest(session_id=sid, request_id=f"{sid}:0")


def sessions_by_primary(r: RaySessionHashRouter, n: int) -> dict[str, str]:
    """n session ids -> the replica each hashes to, with every replica idle."""
    idle = views([0] * len(IDS))
    return {f"s{i}": r.choose(idle, session(f"s{i}")).replica_id for i in range(n)}


# -- behaviour ------------------------------------------------------------------------------


def test_a_session_sticks_to_its_hashed_replica_whatever_the_load() -> None:
    r = router()
    sid = "agent-session-42"
    home = r.choose(views([0, 0, 0, 0, 0]), session(sid))
    assert home.decision.reason == "hash" and home.decision.ranks[0] == (home.replica_id,)
    assert len(home.decision.ranks) == 3 and len({x for (x,) in home.decision.ranks}) == 3
    busy = [MAX_ONGOING - 1 if rid == home.replica_id else 0 for rid in IDS]
    for turn in range(1, 6):  # the busiest replica, not full: still home
        again = r.choose(views(busy), PeerRequest(session_id=sid, request_id=f"{sid}:{turn}"))
        assert (again.replica_id, again.decision.overloaded) == (home.replica_id, False)
    # Sessions spread over every replica.
    assert set(sessions_by_primary(r, 200).values()) == set(IDS)


def test_a_full_primary_falls_back_along_the_ring_and_all_full_waits_on_the_ranks() -> None:
    r = router()
    ranks = [x for (x,) in r.rank(views([0] * 5), session("s1")).ranks]
    primary, first, second = ranks
    full = dict.fromkeys(IDS, 0)
    full[primary] = MAX_ONGOING
    choice = r.choose(views(list(full.values())), session("s1"))
    assert (choice.replica_id, choice.decision.overloaded) == (first, True)
    full[first] = MAX_ONGOING + 3
    assert r.choose(views(list(full.values())), session("s1")).replica_id == second
    # Every ranked replica full, the others idle: Ray waits for the ranks, never elsewhere.
    full[second] = MAX_ONGOING + 1
    choice = r.choose(views(list(full.values())), session("s1"))
    assert choice.replica_id == primary and choice.decision.overloaded
    # Strict affinity: no fallback at all.
    strict = router(num_fallback_replicas=0)
    only = strict.choose(views(list(full.values())), session("s1"))
    assert only.decision.ranks == ((primary,),) and only.replica_id == primary


def test_removing_a_replica_moves_only_its_sessions_and_adding_one_only_takes_sessions() -> None:
    r = router()
    before = sessions_by_primary(r, 400)
    assert r.sync_replicas(["r0", "r1", "r3", "r4"]) == []
    live = views([0, 0, 0, 0], ("r0", "r1", "r3", "r4"))
    after = {sid: r.choose(live, session(sid)).replica_id for sid in before}
    moved = {sid for sid in before if before[sid] != after[sid]}
    assert moved == {sid for sid, rid in before.items() if rid == "r2"} and moved
    # r2 back plus a new r5 (the views alone rebuild the ring, as update_replicas does).
    grown = views([0] * 6, (*IDS, "r5"))
    again = {sid: r.choose(grown, session(sid)).replica_id for sid in before}
    changed = {sid for sid in before if again[sid] != before[sid]}
    assert changed and all(again[sid] == "r5" for sid in changed)


def test_sessionless_requests_hash_their_request_id_or_a_fresh_one() -> None:
    r = router()
    idle = views([0] * 5)
    by_id = PeerRequest(request_id="req-1")
    assert r.rank(idle, by_id) == r.rank(idle, PeerRequest(session_id="req-1"))
    spread = {r.choose(idle, PeerRequest()).replica_id for _ in range(100)}
    assert spread == set(IDS)  # a fresh key each time: uniform, no affinity
    assert r.rank([], session("s")).ranks == ()


def test_registered_and_validated_with_rays_defaults() -> None:
    policy = make_sim_router("ray_session_hash")
    assert isinstance(policy, RaySessionHashRouter) and policy.name == "ray_session_hash"
    assert not policy.reads_prompt and not policy.reads_kv_state
    assert SIM_ROUTERS["ray_session_hash"] is RaySessionHashRouter
    with pytest.raises(ConfigError):
        RaySessionHashConfig(num_virtual_nodes=0)
    with pytest.raises(ConfigError):
        RaySessionHashConfig(num_fallback_replicas=-1)
    real = pytest.importorskip(REAL)
    assert real.CONSISTENT_HASH_SEED == CONSISTENT_HASH_SEED
    assert real.DEFAULT_NUM_VIRTUAL_NODES == RaySessionHashConfig().num_virtual_nodes
    assert real.DEFAULT_NUM_FALLBACK_REPLICAS == RaySessionHashConfig().num_fallback_replicas
    for key in ("", "x", "session-\u00e9", str(uuid.UUID(int=5))):
        assert real._hash_bytes(key.encode()) == ring_hash(key)


# -- the real class -------------------------------------------------------------------------


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


@pytest.fixture
def real_router() -> Any:
    """A factory for Ray's ConsistentHashRouter over in-memory replicas (call it in a loop)."""
    real_module = pytest.importorskip(REAL)
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID

    deployment = DeploymentID(name="llm", app_name="app")

    FakeReplica = fake_replica_class(MAX_ONGOING)

    def make(ids: Sequence[str] = IDS, **options: Any) -> Any:
        real = real_module.ConsistentHashRouter(
            deployment_id=deployment,
            handle_source=DeploymentHandleSource.REPLICA,
            self_actor_id="test-actor",
            use_replica_queue_len_cache=False,  # probe every time: the step's queue lengths
        )
        real.initialize_state(**options)
        real.fake_replicas = {rid: FakeReplica(rid) for rid in ids}
        real.update_replicas(list(real.fake_replicas.values()))
        return real

    return make


def pending(session_id: str, internal_id: str | None = None) -> Any:
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    internal = internal_id or uuid.uuid4().hex
    return PendingRequest(
        args=[],
        kwargs={},
        metadata=RequestMetadata(
            request_id=internal, internal_request_id=internal, session_id=session_id
        ),
    )


def set_queues(real: Any, queues: Sequence[int], ids: Sequence[str] = IDS) -> None:
    for rid, q in zip(ids, queues, strict=True):
        real.fake_replicas[rid].queue_len = q


async def real_ranks(real: Any, request: Any) -> list[str]:
    groups = await real.choose_replicas(real._replicas_list, request)
    assert all(len(g) == 1 for g in groups)
    return [g[0].replica_id.unique_id for g in groups]


def test_ring_and_lookups_match_rays(real_router: Any) -> None:
    async def body() -> None:
        rng = random.Random(4)
        for vnodes, fallbacks in ((100, 2), (7, 0), (3, 6), (50, 1)):
            real = real_router(num_virtual_nodes=vnodes, num_fallback_replicas=fallbacks)
            model = router(num_virtual_nodes=vnodes, num_fallback_replicas=fallbacks)
            model.sync_replicas(IDS)
            assert real._ring_hashes == model.ring.hashes
            assert [r.unique_id for r in real._ring_replicas] == model.ring.owners
            for _ in range(200):
                key = f"session-{rng.getrandbits(48):x}"
                expected = [r.unique_id for r in real._lookup_ranked_replicas(key)]
                assert expected == model.ring.ranked(key, 1 + fallbacks), key
                ranked = model.rank(views([0] * 5), session(key)).ranks
                assert await real_ranks(real, pending(key)) == [x for (x,) in ranked], key

    run(body())


def test_matches_the_real_router_step_by_step(real_router: Any) -> None:
    """Agent turns under load: the primary is often full, so fallbacks decide too."""

    async def body() -> None:
        rng = random.Random(9)
        real, model = real_router(), router()
        sids = [f"sess-{i}" for i in range(12)]
        outcomes, waits = set(), 0
        for step in range(150):
            sid = rng.choice(sids)
            queues = [rng.choice((0, 1, 3, MAX_ONGOING, MAX_ONGOING + 2)) for _ in IDS]
            choice = model.choose(views(queues), session(sid))
            ranked = [x for (x,) in choice.decision.ranks]
            if all(queues[IDS.index(x)] >= MAX_ONGOING for x in ranked):
                waits += 1  # Ray waits here; test_all_full_ranks_wait covers it
                assert choice.replica_id in ranked
                continue
            set_queues(real, queues)
            got = await real._choose_replica_for_request(pending(sid))
            assert got.replica_id.unique_id == choice.replica_id, step
            outcomes.add((choice.decision.overloaded, ranked.index(choice.replica_id)))
        assert {(False, 0), (True, 1), (True, 2)} <= outcomes and waits

    run(body())


def test_all_full_ranks_wait_until_one_frees(real_router: Any) -> None:
    async def body() -> None:
        real, model = real_router(), router()
        idle = views([0] * 5)
        sid = "s1"
        ranked = [x for (x,) in model.rank(idle, session(sid)).ranks]
        queues = [MAX_ONGOING if rid in ranked else 0 for rid in IDS]
        set_queues(real, queues)
        task = asyncio.ensure_future(real._choose_replica_for_request(pending(sid)))
        await asyncio.sleep(0.3)
        assert not task.done()  # two idle replicas, yet Ray waits for the ranked ones
        assert model.choose(views(queues), session(sid)).replica_id in ranked
        real.fake_replicas[ranked[2]].queue_len = MAX_ONGOING - 1  # the last fallback frees
        got = await asyncio.wait_for(task, timeout=20)
        assert got.replica_id.unique_id == ranked[2]
        queues[IDS.index(ranked[2])] = MAX_ONGOING - 1
        assert model.choose(views(queues), session(sid)).replica_id == ranked[2]

    run(body())


def test_replica_changes_and_sessionless_keys_match_rays(real_router: Any) -> None:
    async def body() -> None:
        real, model = real_router(), router()
        subset = ("r0", "r2", "r3")
        real.update_replicas([real.fake_replicas[rid] for rid in subset])
        model.sync_replicas(subset)
        assert [r.unique_id for r in real._ring_replicas] == model.ring.owners
        for i in range(100):
            ranked = model.rank(views([0] * 3, subset), session(f"s{i}")).ranks
            assert await real_ranks(real, pending(f"s{i}")) == [x for (x,) in ranked]
        # No session id: Ray hashes the internal request id, the model the request id.
        for i in range(50):
            rid = f"req-{i}"
            ranked = model.rank(views([0] * 3, subset), PeerRequest(request_id=rid)).ranks
            assert await real_ranks(real, pending("", internal_id=rid)) == [x for (x,) in ranked]

    run(body())


def test_hash_ring_counts_each_replica_once_in_its_ranks() -> None:
    ring = HashRing(("a", "b"), 100)
    assert len(ring.hashes) == 200 and ring.hashes == sorted(ring.hashes)
    assert sorted(ring.ranked("k", 5)) == ["a", "b"]  # only two replicas to rank
    assert HashRing((), 100).ranked("k", 3) == []
