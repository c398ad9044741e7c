"""Ray Serve request router on the routing core: ``router.ray_router:PenelopeRequestRouter``.

How Ray Serve 2.60 drives it
----------------------------
Every process that holds a handle to the engine deployment (the HTTP proxy,
each ingress replica) builds one router instance from the deployment's
``RequestRouterConfig``: ``__init__`` with Ray's keyword arguments, then
``initialize_state(**request_router_kwargs)``. For each request Ray calls
``await choose_replicas(candidate_replicas, pending_request)``; we return ranked
groups of replicas and Ray's base class takes, from the first group that has
one, the replica with the shortest queue that is below ``max_ongoing_requests``
(from its queue-length cache, probing replicas it has no fresh entry for). If
none accepts, it calls ``choose_replicas`` again; ``should_backoff = True``
(which we always set, since each answer already lists every replica) makes it
sleep with exponential backoff between such rounds. When a replica accepts,
Ray calls ``on_request_routed``: that is where the session is remembered.

Replica state comes only from ``RunningReplica.routing_stats``: the dict the
replica's ``record_routing_stats`` returned, which the controller pulls every
``request_routing_stats_period_s`` and broadcasts to all routers; plus Ray's
own queue-length cache. Routers in different processes share where they placed
sessions that no digest shows yet through a placement board (``router.board``):
a new session's choice waits on one claim there, bounded by its deadline.
Nothing here calls ``ray.get``.

Wiring a deployment::

    from ray import serve
    from ray.serve.config import RequestRouterConfig
    from router.digest import build_digest

    @serve.deployment(
        max_ongoing_requests=32,
        request_router_config=RequestRouterConfig(
            request_router_class="router.ray_router:PenelopeRequestRouter",
            request_router_kwargs={"policy": "affinity", "overload_ratio": 0.75},
            request_routing_stats_period_s=2.0,   # digest freshness
            request_routing_stats_timeout_s=5.0,
        ),
    )
    class EngineDeployment:
        async def record_routing_stats(self) -> dict:  # sync or async, no arguments
            # DIGEST_LIMITS: penelope_engine.protocol's, the one home of the limits
            return build_digest(self.engine.session_digests(DIGEST_LIMITS.sessions),
                                self.prefix_hashes(), limit=DIGEST_LIMITS.sessions,
                                queue_len=self.engine.stats().queue_length,
                                now=self.engine.clock())

``request_router_kwargs`` must be JSON-serializable: ``policy`` ("affinity" or
"pow2"), ``placements`` ("ray", "process" or "none"; ``router.board``) plus any
``RouterConfig`` field. The class is pickled by value but
``router`` and ``penelope_engine`` are imported by reference, so they must be
importable wherever a handle lives (install the package or ship the repo as
the runtime_env ``working_dir``).

What a router sees
------------------
Each process's routers register themselves (``router.local``); its
``views()`` lists, per router, the replicas Ray has given it and what their digests report. The
ingress serves it at ``GET /v1/penelope/router``: after a replica starts, Ray
Serve's controller reports it running a moment (seconds, on a busy node)
before a router in another process learns of it, and a new session placed in
between can only go to the replicas it knows.

Where the request's routing fields come from (first found wins)
---------------------------------------------------------------
- session id: ``pending_request.metadata.session_id``, which the HTTP proxy
  fills from the ``x-session-id`` header (``RAY_SERVE_SESSION_ID_HEADER_KEY``)
  for the handle it calls, and which a deployment calling the engine sets
  with ``handle.options(session_id=sid)``; else a ``session_id`` keyword
  argument; else a ``session_id`` attribute or key of the first positional
  argument (``GenerateRequest.session_id`` or a JSON body dict). Arguments
  are already resolved when routing runs, so this costs a lookup.
- first-page hashes: ``prefix_hashes`` from the same places (optional).
- tenant: ``tenant`` from the same places, default "default".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ray.serve.request_router import (
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from router import local
from router.board import PlacementBoard, make_board
from router.core import NEW_HOME_REASONS
from router.digest import EMPTY_DIGEST, DigestError, ReplicaDigest, decode_digest
from router.policies import RoutingPolicy, make_routing_policy
from router.schema import ReplicaView, RouterConfig, RouteRequest

logger = logging.getLogger("ray.serve")


class PenelopeRequestRouter(RequestRouter):
    """Cache-affinity routing for Penelope engine replicas (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._policy: RoutingPolicy = make_routing_policy("affinity")
        self._digests: dict[str, tuple[object, ReplicaDigest]] = {}
        self._live_ids: set[str] = set()
        self._board: PlacementBoard | None = None
        local.register(self)

    def initialize_state(
        self, policy: str = "affinity", placements: str = "ray", **options: Any
    ) -> None:
        """Called once by Ray with ``request_router_kwargs``. ``placements`` names the board
        that routers of this deployment share new sessions' homes through (``router.board``)."""
        config = RouterConfig.from_kwargs(options)
        self._policy = make_routing_policy(policy, config)
        name = f"{self._deployment_id.app_name}.{self._deployment_id.name}"
        self._board = make_board(placements, name, config.assignment_ttl_s, config.max_assignments)

    @property
    def policy(self) -> RoutingPolicy:
        return self._policy

    def describe(self) -> dict[str, Any]:
        """The policy, and each replica Ray has given this router with its digest's
        session count and the queue length it would route by."""
        replicas = [
            {"replica_id": v.replica_id, "queue_len": v.queue_len,
             "sessions": len(v.digest.sessions)}
            for v in sorted((self._view(r) for r in self.curr_replicas.values()),
                            key=lambda v: v.replica_id)
        ]  # fmt: skip
        return {"app": self.app_name, "policy": self._policy.name, "replicas": replicas}

    def routing_stats(self) -> dict[str, Mapping[str, Any]]:
        """The latest routing stats of each replica, as Ray gave them to this router."""
        return {rid.unique_id: r.routing_stats or {} for rid, r in self.curr_replicas.items()}

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        if pending_request is None:
            return [list(candidate_replicas)]
        pending_request.routing_context.should_backoff = True
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        views = [self._view(r) for r in candidate_replicas]
        request = route_request_of(pending_request)
        decision = self._policy.rank(views, request)
        sid, home = request.session_id, decision.home
        if self._board is not None and sid is not None and home is not None and (
            decision.reason in NEW_HOME_REASONS
        ):  # placed by this router's view of load: another router may already have placed it
            held = await self._board.claim(sid, home, by_id)
            if held is not None and held != home and held in by_id:
                self._policy.remember(sid, held)
                decision = self._policy.rank(views, request)
        return [[by_id[rid] for rid in rank] for rank in decision.ranks]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: object
    ) -> None:
        session_id = route_request_of(pending_request).session_id
        replica = self.curr_replicas.get(replica_id)
        if session_id is None or replica is None:
            return
        reported = session_id in self._digest(replica).sessions
        self._policy.remember(session_id, replica_id.unique_id, reported=reported)
        if self._board is not None and not reported:
            self._board.settle(session_id, replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self._sync_replicas()

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._sync_replicas()

    def _sync_replicas(self) -> None:
        """Re-home sessions of replicas that left (only when the set changed)."""
        live = {rid.unique_id for rid in self.curr_replicas}
        if live == self._live_ids:
            return
        self._live_ids = live
        moved = self._policy.sync_replicas(live)
        if moved:
            logger.info("Penelope router: %d session(s) lost their replica", len(moved))
        for rid in [rid for rid in self._digests if rid not in live]:
            del self._digests[rid]

    def _view(self, replica: RunningReplica) -> ReplicaView:
        digest = self._digest(replica)
        queue_len = self.replica_queue_len_cache.get(replica.replica_id)
        if queue_len is None:
            queue_len = digest.queue_len if digest.queue_len is not None else 0
        return ReplicaView(
            replica.replica_id.unique_id, queue_len, replica.max_ongoing_requests, digest
        )

    def _digest(self, replica: RunningReplica) -> ReplicaDigest:
        """The decoded digest, re-decoded only when Ray delivers new routing stats."""
        rid = replica.replica_id.unique_id
        stats = replica.routing_stats
        cached = self._digests.get(rid)
        if cached is not None and cached[0] is stats:
            return cached[1]
        try:
            digest = decode_digest(stats)
        except DigestError as exc:
            logger.warning("Penelope router: ignoring bad digest from %s: %s", rid, exc)
            digest = EMPTY_DIGEST
        self._digests[rid] = (stats, digest)
        return digest


def route_request_of(pending_request: PendingRequest) -> RouteRequest:
    """The routing fields of a Ray pending request (see the module docstring)."""
    kwargs = pending_request.kwargs
    body = pending_request.args[0] if pending_request.args else None
    session_id = pending_request.metadata.session_id or _field(kwargs, body, "session_id")
    tenant = _field(kwargs, body, "tenant")
    return RouteRequest(
        session_id=session_id if isinstance(session_id, str) and session_id else None,
        prefix_hashes=_hashes(_field(kwargs, body, "prefix_hashes")),
        tenant=tenant if isinstance(tenant, str) and tenant else "default",
        request_id=pending_request.metadata.internal_request_id,
    )


def _field(kwargs: Mapping[Any, Any], body: object, name: str) -> object:
    if name in kwargs:
        return kwargs[name]
    if isinstance(body, Mapping):
        return body.get(name)
    return getattr(body, name, None)


def _hashes(value: object) -> tuple[int, ...]:
    """First-page hashes as ints; anything malformed means "unknown", never an error."""
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes)):
        return ()
    try:
        return tuple(int(h) for h in value)
    except (TypeError, ValueError):
        return ()
