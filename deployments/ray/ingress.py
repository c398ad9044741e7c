"""The ingress deployment: the OpenAI app in front of the engine deployment.

The ingress tokenizes (with the engine's own tokenizer, fetched once from a
replica), validates, and streams each request from an engine replica chosen
by the cache-affinity router: the handle carries the request's session id
(`handle.options(session_id=...)`), which is what the router keys on.
`GET /v1/penelope/router` shows what this ingress's router routes to
(`router.local.views`): the engine replicas it knows, each with its
digest's session count and queue length.

Metrics: each engine replica reports its `EngineStats` to the ingress from the
moment it is up, every few seconds, and with the last output of every
request (`deployments.ray.replica_stats`); the ingress's `/metrics` exports every
replica it heard from lately, with the same names as standalone mode. So
`/metrics` on the Serve HTTP port covers the fleet, with any number of ingress
replicas: each also reads every engine replica's stats from its router's
routing stats (`deployments.ray.replica_stats.merged`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import cast

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from cache_store import StoreStats
from deployments.api.app import AUTHENTICATED, create_app
from deployments.api.backend import ReplicaOutput
from deployments.api.errors import overloaded, unavailable
from deployments.api.settings import ApiSettings, load_api_keys
from deployments.ray.calls import REPLICA_FAILURES, cancel_call
from deployments.ray.engine_replica import EngineInfo
from deployments.ray.replica_logs import route_package_logs
from deployments.ray.replica_stats import ReplicaStatsBook, merged, stores_merged
from penelope_engine.cache.pages import FirstPages
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.protocol import EngineStats, GenerateRequest
from router import local
from router.schema import ROUTE_PREFIX_PAGES


class RayBackend:
    """`Backend` over a Ray Serve handle to the engine deployment."""

    def __init__(
        self,
        handle: DeploymentHandle,
        info: EngineInfo,
        retry_after_s: int,
        book: ReplicaStatsBook | None = None,
    ) -> None:
        self._handle = handle.options(stream=True, method_name="generate")
        self._hints = handle.options(method_name="session_hints")
        self._retry_after_s = retry_after_s
        self._stats = book if book is not None else ReplicaStatsBook()
        self.model_name = info.model_name
        self.max_model_len = info.max_model_len
        self.tokenizer = info.tokenizer.build()
        self._first_pages = FirstPages(info.page_naming) if info.page_naming else None

    @classmethod
    async def connect(
        cls, handle: DeploymentHandle, retry_after_s: int, book: ReplicaStatsBook | None = None
    ) -> RayBackend:
        info: EngineInfo = await handle.options(method_name="describe").remote()
        return cls(handle, info, retry_after_s, book)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]:
        if self._first_pages is not None:  # the router places new sessions by these
            ids = self._first_pages(request.prompt_token_ids, request.tenant, ROUTE_PREFIX_PAGES)
            request = dataclasses.replace(request, prefix_hashes=ids)
        handle = self._handle
        if request.session_id is not None:
            handle = handle.options(session_id=request.engine_session_id)
        responses = cast(DeploymentResponseGenerator, handle.remote(request))
        finished = False
        try:
            async for item in responses:
                if item.stats is not None:
                    self._stats.report(item.replica, item.stats)
                finished = item.output.finished
                yield item
        except BackPressureError as exc:
            raise overloaded(f"All engine replicas are busy: {exc}", self._retry_after_s) from exc
        except REPLICA_FAILURES as exc:
            raise unavailable(
                "The engine replica serving this request failed; retry (the session's next "
                "turn is served from what survives, or recomputed).",
                self._retry_after_s,
            ) from exc
        finally:
            if not finished:
                cancel_call(responses)

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """To the replica the router sends the session to (its cache-affinity key; keyword
        arguments, so the router reads the session and the tenant as a request's)."""
        handle = self._hints.options(session_id=session_id)
        try:
            grants: list[HintGrant] = await handle.remote(
                session_id=session_id, tenant=tenant, hints=hints
            )
        except BackPressureError as exc:
            raise overloaded(f"All engine replicas are busy: {exc}", self._retry_after_s) from exc
        except REPLICA_FAILURES as exc:
            raise unavailable("The engine replica failed; retry.", self._retry_after_s) from exc
        return grants

    def replica_stats(self) -> Mapping[str, EngineStats]:
        return merged(self._stats.live(), local.routing_stats())

    @property
    def healthy(self) -> bool:
        """Ray Serve health-checks the engine replicas and restarts dead ones."""
        return True

    def store_stats(self) -> Mapping[str, StoreStats]:
        """Every live replica's store counters: reported to this ingress, or in the
        routing stats every router holds."""
        return stores_merged(self._stats.live_stores(), local.routing_stats())

    async def close(self) -> None:
        self._stats.clear()


@serve.ingress()
class PenelopeIngress:
    """The user class of the ingress deployment (see `deployments.ray.builder`)."""

    def __init__(
        self, engine: DeploymentHandle, api: ApiSettings, api_keys_file: str | None
    ) -> None:
        route_package_logs()  # a request that fails leaves its traceback in this log
        keys = load_api_keys(api_keys_file)
        self._settings = dataclasses.replace(api, api_keys=keys)
        self._engine = engine
        self._book = ReplicaStatsBook()

    def __serve_build_asgi_app__(self) -> FastAPI:
        retry = self._settings.retry_after_s
        connect = lambda: RayBackend.connect(self._engine, retry, self._book)  # noqa: E731
        app = create_app(connect, self._settings)

        @app.get("/v1/penelope/router", dependencies=AUTHENTICATED)
        async def routing() -> JSONResponse:
            return JSONResponse({"routers": local.views()})

        return app

    async def report_stats(
        self, replica: str, stats: EngineStats | None, store: StoreStats | None = None
    ) -> None:
        """An engine replica's periodic report, with its store's counters when it has a
        store (None: it is leaving)."""
        self._book.report(replica, stats, store)
