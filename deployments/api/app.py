"""The OpenAI-compatible FastAPI app; it takes its backend as a factory.

Routes: `/v1/chat/completions`, `/v1/completions` (SSE streaming or not),
Anthropic's `/v1/messages` and `/v1/messages/count_tokens`
(`deployments.api.anthropic`), OpenAI's Responses API: `/v1/responses` and
`/v1/responses/{id}` (`deployments.api.responses_api`),
`POST /v1/penelope/sessions/{id}` (a harness's hints after a turn's reply,
`deployments.api.hints`), `/v1/models` (with Codex's catalogue entry, `models`),
`/health`, `/ready` (with the store's state), `/metrics`, and SGLang's
`/server_info` and `/model_info` probes for sgl-router
(`deployments.api.sglang_probes`). The
backend factory runs at startup (the app's lifespan), so the same app serves
an in-process engine (standalone, tests) or Ray Serve engine replicas (the
ingress deployment).

A session is named by the `x-session-id` header (Ray Serve's session header)
or the body's `session_id`; the header wins. Without either, the request is
its own session. A harness's hints ride in the body's `penelope` object or
`x-penelope-*` headers (`deployments.api.hints`, docs/hints.md).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from cache_store import StoreStats
from deployments.api.admission import Admission, InflightSlots
from deployments.api.anthropic.routes import ERROR_SHAPES, add_anthropic_routes
from deployments.api.auth import Authenticator
from deployments.api.backend import Backend
from deployments.api.errors import ApiError, install_handlers, invalid, unavailable
from deployments.api.hints import grants_body, hint_headers, session_endpoint_hints
from deployments.api.middleware import BodyLimits, RequestCounter
from deployments.api.prepare import Caller, prepare_chat, prepare_text
from deployments.api.responses_api.catalogue import model_catalogue
from deployments.api.responses_api.routes import add_responses_routes
from deployments.api.responses_api.store import ResponseStore, ResponseStoreCollector
from deployments.api.run import CompletionHandler
from deployments.api.schemas import ChatCompletionRequest, CompletionRequest, SessionHintsRequest
from deployments.api.sessions import header_session, named_session
from deployments.api.settings import ApiSettings
from deployments.api.sglang_probes import add_sglang_probes
from deployments.metrics.series import ApiMetrics
from penelope_engine.protocol import EngineStats

API_KEY_HEADER = "x-api-key"  # Anthropic's clients' key header, beside bearer tokens
BackendFactory = Callable[[], Backend | Awaitable[Backend]]


@dataclass
class AppState:
    """What the routes share; `backend` is set once the lifespan has started."""

    settings: ApiSettings
    auth: Authenticator
    metrics: ApiMetrics
    runner: CompletionHandler
    responses: ResponseStore
    backend: Backend | None = None
    started: int = 0

    def ready_backend(self) -> Backend:
        if self.backend is None:
            raise ApiError(503, "The server is starting.", type="server_error", code="not_ready")
        return self.backend


def create_app(backend_factory: BackendFactory, settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    state = _new_state(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        made = backend_factory()
        state.backend = await made if inspect.isawaitable(made) else made
        state.started = int(time.time())
        try:
            yield
        finally:
            backend, state.backend = state.backend, None
            await backend.close()

    app = FastAPI(title="Penelope", lifespan=lifespan)
    app.state.penelope = state
    install_handlers(app, ERROR_SHAPES)
    _add_routes(app, state)
    add_anthropic_routes(app, state.ready_backend, settings, state.runner, _caller)
    add_responses_routes(app, state.ready_backend, settings, state.runner, _caller, state.responses)
    app.add_middleware(
        BodyLimits,
        max_bytes=settings.max_body_bytes,
        idle_s=settings.body_idle_timeout_s,
        total_s=settings.request_timeout_s,
        shapes=ERROR_SHAPES,
    )
    app.add_middleware(Admission, slots=InflightSlots(settings, state.metrics), shapes=ERROR_SHAPES)
    app.add_middleware(RequestCounter, metrics=state.metrics)
    return app


def _new_state(settings: ApiSettings) -> AppState:
    def replica_stats() -> Mapping[str, EngineStats]:
        return state.backend.replica_stats() if state.backend is not None else {}

    def store_stats() -> Mapping[str, StoreStats]:
        return state.backend.store_stats() if state.backend is not None else {}

    metrics = ApiMetrics(replica_stats, store_stats)
    runner = CompletionHandler(settings, metrics)
    responses = ResponseStore(
        settings.responses_store, settings.responses_budget_bytes, settings.responses_ttl_s
    )
    metrics.registry.register(ResponseStoreCollector(responses, settings.replica_name))
    state = AppState(settings, Authenticator(settings.api_keys), metrics, runner, responses)
    return state


def _caller(request: Request) -> Caller:
    """The tenant (from the API key, or a trusted gateway header) and the session header.

    The key is a bearer token or, as Anthropic's clients send it, `x-api-key`.
    """
    state: AppState = request.app.state.penelope
    settings = state.settings
    authorization = request.headers.get("authorization")
    api_key = request.headers.get(API_KEY_HEADER)
    if not authorization and api_key:
        authorization = f"Bearer {api_key}"
    tenant = state.auth.tenant(authorization)
    if settings.tenant_header:
        tenant = request.headers.get(settings.tenant_header) or tenant
    session = header_session(request.headers)
    return Caller(tenant, session, hint_headers(request.headers))


CallerDep = Annotated[Caller, Depends(_caller)]
AUTHENTICATED = [Depends(_caller)]  # a route's `dependencies`: a valid API key, when set


def _add_routes(app: FastAPI, state: AppState) -> None:
    settings = state.settings

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(
        body: ChatCompletionRequest, request: Request, who: CallerDep
    ) -> Response:
        backend = state.ready_backend()
        prepared = await prepare_chat(body, who, backend, settings)
        return await state.runner.run(prepared, backend, request)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request, who: CallerDep) -> Response:
        backend = state.ready_backend()
        prepared = await prepare_text(body, who, backend, settings)
        return await state.runner.run(prepared, backend, request)

    @app.post("/v1/penelope/sessions/{session_id}")
    async def session_hints(
        session_id: str, body: SessionHintsRequest, who: CallerDep
    ) -> JSONResponse:
        """What a harness learned once a turn's reply arrived: the session's gap, its end."""
        if named_session(session_id, "session_id") != session_id:
            raise invalid("session id must not be blank or padded with white space", "session_id")
        hints = session_endpoint_hints(body)
        grants = await state.ready_backend().session_hints(session_id, who.tenant, hints)
        return JSONResponse({"session_id": session_id, "hints": grants_body(tuple(grants))})

    @app.get("/v1/models", dependencies=AUTHENTICATED)
    async def models() -> JSONResponse:
        backend = state.ready_backend()
        card = {
            "id": backend.model_name,
            "object": "model",
            "created": state.started,
            "owned_by": "penelope",
        }
        catalogue = model_catalogue(backend.model_name, backend.max_model_len)
        return JSONResponse({"object": "list", "data": [card], "models": [catalogue]})

    add_sglang_probes(app, state.ready_backend, AUTHENTICATED)  # for sgl-router

    @app.get("/health")
    async def health() -> JSONResponse:
        if not state.ready_backend().healthy:
            raise unavailable("The engine has stopped.", settings.retry_after_s)
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """Ready to serve (503 while starting or stopped); `store` says "degraded" while a
        replica's KV store fails (it still serves: its store pages are recomputed)."""
        backend = state.ready_backend()
        if not backend.healthy:
            raise unavailable("The engine has stopped.", settings.retry_after_s)
        stats = await asyncio.to_thread(backend.replica_stats)  # waits for a step
        degraded = sorted(r for r, s in stats.items() if s.store_degraded)
        detail = {"status": "ready", "store": "degraded" if degraded else "ok"}
        return JSONResponse({**detail, "store_degraded_replicas": degraded})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if settings.metrics_require_auth:
            state.auth.tenant(request.headers.get("authorization"))
        # Off the event loop: reading engine stats waits for the engine's current step.
        body = await asyncio.to_thread(state.metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
