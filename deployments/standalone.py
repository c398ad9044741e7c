"""`penelope serve`: the OpenAI app and one engine in one process, without Ray.

For laptops and tests. Binds to loopback unless told otherwise; binding
elsewhere without API keys logs a warning.

    penelope serve [--host 127.0.0.1] [--port 8000] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from deployments.api import create_app
from deployments.backend import LocalBackend
from deployments.serve_config import DEFAULT_MODEL
from deployments.settings import ApiSettings, load_api_keys
from penelope_engine import helpformat
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.policies import POLICIES

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 30.0  # uvicorn's graceful shutdown (5 s) plus the app's lifespan close


def standalone_app(engine_config: EngineConfig, settings: ApiSettings | None = None) -> FastAPI:
    """The app over an `AsyncEngine` built (in a thread) when the app starts.

    An engine whose step loop dies is replaced by a fresh one over the same
    weights (its cache starts empty; sessions recompute or load from the store).
    """
    settings = settings or ApiSettings()

    async def make_backend() -> LocalBackend:
        from penelope_engine.async_engine import AsyncEngine
        from penelope_engine.model.registry import load_model

        c = engine_config
        loaded = await asyncio.to_thread(load_model, c.model, c.dtype, c.device)
        engine = await asyncio.to_thread(AsyncEngine, c, loaded)
        return LocalBackend(engine, settings.replica_name, restart=lambda: AsyncEngine(c, loaded))

    return create_app(make_backend, settings)


def serve_standalone(
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str = DEFAULT_MODEL,
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
    uvicorn.run(standalone_app(config, settings), host=host, port=port, log_level=log_level)


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
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
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


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    """The `penelope serve` options."""
    d, c, s = EngineConfig(), CacheConfig(), SchedulerConfig()
    a = ApiSettings()
    parser.add_argument("--host", default="127.0.0.1", help="bind address")
    parser.add_argument("--port", type=int, default=8000, help="TCP port")
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="registered model name or checkpoint directory"
    )
    parser.add_argument("--device", default=d.device, help="cpu or cuda[:N]")
    parser.add_argument(
        "--dtype", default=d.dtype, choices=("float32", "float16", "bfloat16"), help="model dtype"
    )
    parser.add_argument("--page-size", type=int, default=c.page_size, help="tokens per KV page")
    parser.add_argument(
        "--device-pages", type=int, default=c.device_pages, help="KV pages on the device"
    )
    parser.add_argument(
        "--host-pages", type=int, default=c.host_pages, help="KV pages in host memory (0: no tier)"
    )
    parser.add_argument(
        "--policy", default=c.policy, choices=sorted(POLICIES), help="eviction policy"
    )
    parser.add_argument(
        "--max-running", type=int, default=s.max_running, help="most requests running at once"
    )
    parser.add_argument(
        "--max-pending",
        type=int,
        default=a.max_pending,
        help="admitted unfinished requests before 429",
    )
    parser.add_argument(
        "--api-keys-file",
        default=None,
        help="file of 'key[:tenant]' lines, with $PENELOPE_API_KEYS (neither: no auth)",
    )
    parser.add_argument(
        "--metrics-require-auth", action="store_true", help="/metrics needs an API key too"
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level")


def build_parser() -> argparse.ArgumentParser:
    """`penelope serve`'s parser (`main` takes what it parses)."""
    parser = helpformat.parser("penelope serve", __doc__)
    add_serve_args(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> tuple[EngineConfig, ApiSettings]:
    cache = CacheConfig(
        page_size=args.page_size,
        device_pages=args.device_pages,
        host_pages=args.host_pages,
        policy=args.policy,
    )
    engine = EngineConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        cache=cache,
        scheduler=SchedulerConfig(max_running=args.max_running),
    )
    settings = ApiSettings(
        api_keys=load_api_keys(args.api_keys_file),
        max_pending=args.max_pending,
        metrics_require_auth=args.metrics_require_auth,
    )
    return engine, settings


def main(args: argparse.Namespace) -> int:
    engine, settings = config_from_args(args)
    serve_standalone(
        args.host, args.port, engine_config=engine, settings=settings, log_level=args.log_level
    )
    return 0
