"""The OpenAI app and one engine in one process, without Ray (`penelope serve`).

For laptops and tests. Binds to loopback unless told otherwise; binding
elsewhere without API keys logs a warning. The command line is
`penelope_cli.serve`'s.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.connections import first_request_deadline
from deployments.api.settings import ApiSettings
from penelope_engine.config import EngineConfig
from penelope_engine.shipped import SHIPPED_MODEL

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 30.0  # uvicorn's graceful shutdown (5 s) plus the app's lifespan close


def standalone_app(engine_config: EngineConfig, settings: ApiSettings | None = None) -> FastAPI:
    """The app over an `AsyncEngine` built (in a thread) when the app starts.

    An engine whose step loop dies is replaced by a fresh one over the same
    weights (its cache starts empty; sessions recompute or load from the store).
    """
    settings = (settings or ApiSettings()).with_engine_store(engine_config.cache)

    async def make_backend() -> LocalBackend:
        from penelope_engine.async_engine import AsyncEngine
        from penelope_engine.model.registry import load_model

        c = engine_config
        loaded = await asyncio.to_thread(load_model, c.model, c.dtype, c.device, c.weights)
        engine = await asyncio.to_thread(AsyncEngine, c, loaded)
        return LocalBackend(engine, settings.replica_name, restart=lambda: AsyncEngine(c, loaded))

    return create_app(make_backend, settings)


def serve_standalone(
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str = SHIPPED_MODEL,
    *,
    engine_config: EngineConfig | None = None,
    settings: ApiSettings | None = None,
    log_level: str = "info",
) -> None:
    """Serve until interrupted. `engine_config`, when given, overrides `model`."""
    config = engine_config or EngineConfig(model=model)
    settings = settings or ApiSettings()
    _warn_if_exposed(host, settings)
    log.info(
        "Penelope: serving %s on http://%s:%d/v1 (metrics: /metrics)", config.model, host, port
    )
    uvicorn.run(
        standalone_app(config, settings),
        host=host,
        port=port,
        log_level=log_level,
        http=first_request_deadline(settings.connect_idle_timeout_s),
    )


def _warn_if_exposed(host: str, settings: ApiSettings) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not settings.auth_enabled:
        log.warning(
            "Penelope: listening on %s without API keys; anyone who can reach it "
            "can use it (set PENELOPE_API_KEYS or --api-keys-file)",
            host,
        )


@contextmanager
def background_server(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 120.0
) -> Iterator[str]:
    """Run `app` under uvicorn on a thread; yields its base URL (port 0: a free port).

    Start-up and shutdown have deadlines: a server that fails to start raises
    with the reason (its exception, or that it exited), one that is not up
    within `timeout_s` or not down within `STOP_TIMEOUT_S` raises naming that.
    """
    state = getattr(app.state, "penelope", None)  # an app of create_app's has its settings
    idle_s = (state.settings if state is not None else ApiSettings()).connect_idle_timeout_s
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=5,
            http=first_request_deadline(idle_s),
        )
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as e:  # noqa: BLE001 (reported by the waiting thread)
            failure.append(e)

    thread = threading.Thread(target=run, name="penelope-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive():
            why = repr(failure[0]) if failure else "it exited (e.g. the port is taken)"
            raise RuntimeError(f"the server on {host}:{port} did not start: {why}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server on {host}:{port} was not up within {timeout_s:g} s")
        time.sleep(0.05)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=STOP_TIMEOUT_S)
    if thread.is_alive():  # (not reached when the body raised: that error comes first)
        raise RuntimeError(
            f"the server on {host}:{bound_port} did not stop within {STOP_TIMEOUT_S:g} s"
        )
