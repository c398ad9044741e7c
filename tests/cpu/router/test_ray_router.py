"""PenelopeRequestRouter driven by Ray Serve's real routing loop, with fake replicas.

Same approach as Ray's own ``test_pow_2_request_router.py``: the base
``RequestRouter`` machinery (queue-length cache, probing, ranks, backoff) is
real; only the replicas are in-memory stand-ins, so no cluster starts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest
from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest, ReplicaID, RunningReplica

from penelope_engine.errors import ConfigError, UnknownNameError
from penelope_engine.protocol import GenerateRequest, SessionDigest
from router import build_digest, rendezvous_pick
from router.ray_router import PenelopeRequestRouter, route_request_of

DEPLOYMENT = DeploymentID(name="engine", app_name="penelope")
MAX_ONGOING = 10
T = TypeVar("T")


class FakeReplica(RunningReplica):
    """A replica that answers queue-length probes and publishes routing stats."""

    def __init__(self, unique_id: str, queue_len: int = 0, stats: dict[str, Any] | None = None):
        self._replica_id = ReplicaID(unique_id=unique_id, deployment_id=DEPLOYMENT)
        self.queue_len = queue_len
        self.stats = stats or {}

    @property
    def replica_id(self) -> ReplicaID:
        return self._replica_id

    @property
    def node_id(self) -> str:
        return ""

    @property
    def availability_zone(self) -> str | None:
        return None

    @property
    def multiplexed_model_ids(self) -> set[str]:
        return set()

    @property
    def max_ongoing_requests(self) -> int:
        return MAX_ONGOING

    @property
    def routing_stats(self) -> dict[str, Any]:
        return self.stats

    def push_proxy_handle(self, handle: object) -> None:
        pass

    async def get_queue_len(self, *, deadline_s: float) -> int:
        return self.queue_len


def holding(session: str, tokens: int, queue_len: int | None = None) -> dict[str, Any]:
    return build_digest(
        [SessionDigest(session, tokens, 0, 0, 1.0)], limit=16, queue_len=queue_len, now=1.0
    )


def pending(header_session: str = "", *args: Any, **kwargs: Any) -> PendingRequest:
    """A request as Ray's router sees it; ``header_session`` is the x-session-id value."""
    ids = uuid.uuid4().hex
    metadata = RequestMetadata(request_id=ids, internal_request_id=ids, session_id=header_session)
    return PendingRequest(args=list(args), kwargs=kwargs, metadata=metadata)


def make_router(deployment: DeploymentID = DEPLOYMENT, **options: Any) -> PenelopeRequestRouter:
    router = PenelopeRequestRouter(
        deployment_id=deployment,
        handle_source=DeploymentHandleSource.REPLICA,
        self_actor_id="test-actor",
        use_replica_queue_len_cache=True,
    )
    router.initialize_state(**options)
    router.update_backoff_params(0.001, 1.0, 0.001)
    return router


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=10))


async def route(router: PenelopeRequestRouter, request: PendingRequest) -> str:
    replica = await router._choose_replica_for_request(request)
    router.on_request_routed(request, replica.replica_id, None)
    return replica.replica_id.unique_id


async def settle() -> None:
    """Let the background queue-length probes started by update_replicas finish."""
    for _ in range(5):
        await asyncio.sleep(0)


def session_homed_on(target: str, ids: tuple[str, ...]) -> str:
    return next(f"s{i}" for i in range(1000) if rendezvous_pick(f"s{i}", ids) == target)


def test_returning_session_goes_to_the_replica_holding_it() -> None:
    async def body() -> None:
        router = make_router()
        replicas = [
            FakeReplica("r1"),
            FakeReplica("r2", stats=holding("s", 512)),
            FakeReplica("r3"),
        ]
        router.update_replicas(replicas)
        await settle()
        assert [await route(router, pending("s")) for _ in range(5)] == ["r2"] * 5
        assert router.curr_num_routing_tasks == 0 and router.num_pending_requests == 0

    run(body())


def test_overloaded_holder_sends_the_session_to_a_less_loaded_replica() -> None:
    async def body() -> None:
        router = make_router(overload_ratio=0.5)
        replicas = [FakeReplica(f"r{i}", queue_len=2) for i in range(4)]
        replicas[0] = FakeReplica("r0", queue_len=6, stats=holding("s", 4096))
        router.update_replicas(replicas)
        await settle()
        request = pending("s")
        ranks = await router.choose_replicas(router._replicas_list, request)
        assert request.routing_context.should_backoff
        assert replicas[0] not in ranks[0] and len(ranks[0]) == 2
        moved_to = await route(router, pending("s"))
        assert moved_to != "r0"
        assert await route(router, pending("s")) == moved_to  # sticks to its new home

    run(body())


def test_two_router_instances_agree_on_new_sessions() -> None:
    async def body() -> None:
        routers = [make_router(), make_router()]
        for router in routers:
            router.update_replicas([FakeReplica(f"r{i}") for i in range(4)])
        await settle()
        for i in range(20):
            homes = {await route(router, pending(f"new{i}")) for router in routers}
            assert len(homes) == 1

    run(body())


def test_routers_of_one_deployment_agree_through_the_board_where_load_views_differ() -> None:
    """Each router counts its own recent placements as load, so two routers place a new
    session differently (as two ingress replicas did when a session's turns reached both
    before a digest showed it); through a shared board the first placement holds."""

    async def homes_of(placements: str) -> tuple[str, str]:
        deployment = DeploymentID(name="engine", app_name=f"app-{uuid.uuid4().hex}")
        busy, fresh = (make_router(deployment, placements=placements) for _ in range(2))
        for router in (busy, fresh):
            router.update_replicas([FakeReplica("r0"), FakeReplica("r1")])
        await settle()
        on_r0 = (f"s{i}" for i in range(1000) if rendezvous_pick(f"s{i}", ("r0", "r1")) == "r0")
        first, sid = next(on_r0), next(on_r0)
        assert await route(busy, pending(first)) == "r0"  # now busy counts r0 as loaded
        return await route(busy, pending(sid)), await route(fresh, pending(sid))

    async def body() -> None:
        assert await homes_of("none") == ("r1", "r0")  # each by its own view: apart
        assert await homes_of("process") == ("r1", "r1")  # the first claim holds

    run(body())


def test_a_board_that_cannot_answer_leaves_the_router_placing_by_its_own_view() -> None:
    async def body() -> None:
        router = make_router(placements="ray")  # no Ray in this process
        router.update_replicas([FakeReplica("r0"), FakeReplica("r1")])
        await settle()
        sid = session_homed_on("r1", ("r0", "r1"))
        assert await route(router, pending(sid)) == "r1"
        assert await route(router, pending(sid)) == "r1"

    run(body())


def test_new_session_goes_to_the_shared_prefix_holder_at_equal_load() -> None:
    async def body() -> None:
        router = make_router()
        prefix = build_digest([], prefix_hashes=[101, 202], now=0.0)
        router.update_replicas([FakeReplica("r0"), FakeReplica("r1", stats=prefix)])
        await settle()
        hashes = np.array([101, 202, 303], dtype=np.uint64)
        # at equal load the prefix decides; after that, sessions in flight count
        # as load, so the prefix does not pull every new session onto r1
        assert await route(router, pending("n0", prefix_hashes=hashes)) == "r1"
        homes = [await route(router, pending(f"n{i}", prefix_hashes=hashes)) for i in range(1, 9)]
        assert set(homes) == {"r0", "r1"}

    run(body())


def test_removed_replica_rehomes_sessions_and_is_never_chosen() -> None:
    async def body() -> None:
        router = make_router()
        replicas = [FakeReplica(f"r{i}") for i in range(3)]
        router.update_replicas(replicas)
        await settle()
        sid = session_homed_on("r1", ("r0", "r1", "r2"))
        assert await route(router, pending(sid)) == "r1"
        router.update_replicas([replicas[0], replicas[2]])  # scaled down
        await settle()
        assert await route(router, pending(sid)) in {"r0", "r2"}
        router.on_replica_actor_died(replicas[2].replica_id)  # died
        assert {await route(router, pending(f"x{i}")) for i in range(10)} == {"r0"}

    run(body())


def test_full_replicas_make_the_request_wait_then_route() -> None:
    async def body() -> None:
        router = make_router()
        replicas = [FakeReplica("r0", MAX_ONGOING), FakeReplica("r1", MAX_ONGOING)]
        router.update_replicas(replicas)
        await settle()
        task = asyncio.ensure_future(route(router, pending("s")))
        done, _ = await asyncio.wait([task], timeout=0.05)
        assert not done
        replicas[1].queue_len = 0
        assert await task == "r1"

    run(body())


def test_new_routing_stats_are_picked_up() -> None:
    async def body() -> None:
        router = make_router()
        replicas = [FakeReplica("a", stats=holding("s", 64)), FakeReplica("b")]
        router.update_replicas(replicas)
        await settle()
        assert await route(router, pending("s")) == "a"
        replicas[0].stats = {}
        replicas[1].stats = holding("s", 4096)
        assert await route(router, pending("s")) == "b"

    run(body())


def test_bad_digest_is_ignored_not_fatal() -> None:
    async def body() -> None:
        router = make_router()
        router.update_replicas([FakeReplica("a", stats={"v": 99}), FakeReplica("b")])
        await settle()
        assert await route(router, pending("s")) in {"a", "b"}

    run(body())


def test_pow2_policy_returns_one_random_pair() -> None:
    async def body() -> None:
        router = make_router(policy="pow2", seed=0)
        router.update_replicas([FakeReplica(f"r{i}") for i in range(5)])
        await settle()
        ranks = await router.choose_replicas(router._replicas_list, pending("s"))
        assert len(ranks) == 1 and len(ranks[0]) == 2

    run(body())


def test_session_id_sources() -> None:
    async def body() -> None:
        generate = GenerateRequest("q", (1, 2, 3), session_id="from-arg", tenant="acme")
        by_arg = route_request_of(pending("", generate))
        assert (by_arg.session_id, by_arg.tenant) == ("from-arg", "acme")
        from_body = route_request_of(pending("", {"session_id": "from-body"}))
        assert from_body.session_id == "from-body"
        assert route_request_of(pending("", session_id="from-kw")).session_id == "from-kw"
        assert route_request_of(pending("from-header", session_id="x")).session_id == "from-header"
        assert route_request_of(pending("")).session_id is None
        assert route_request_of(pending("", prefix_hashes="junk")).prefix_hashes == ()
        hashes = np.array([1, 2], dtype=np.uint64)
        assert route_request_of(pending("", prefix_hashes=hashes)).prefix_hashes == (1, 2)
        # what the Ray ingress sends: the GenerateRequest carries the first pages' ids
        named = GenerateRequest("r", (1, 2, 3), session_id="s", prefix_hashes=(7, 8))
        assert route_request_of(pending("s", named)).prefix_hashes == (7, 8)

    run(body())


def test_initialize_state_validates_options() -> None:
    with pytest.raises(UnknownNameError, match="valid: affinity, pow2"):
        make_router(policy="random")
    with pytest.raises(ConfigError, match="unknown router option"):
        make_router(overload=0.5)
    with pytest.raises(UnknownNameError, match="valid: ray, process, none"):
        make_router(placements="redis")


def test_request_router_config_loads_the_class_by_path() -> None:
    config = RequestRouterConfig(
        request_router_class="router.ray_router:PenelopeRequestRouter",
        request_router_kwargs={"policy": "affinity", "overload_ratio": 0.5},
    )
    assert config.get_request_router_class() is PenelopeRequestRouter
