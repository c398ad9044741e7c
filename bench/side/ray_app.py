"""A local Ray, and one router set-up's application on it, each torn down when left.

`local_ray` starts a Ray of this process's own (`address="local"`, as
tests/cpu/deployments/test_ray_serve_app.py does: never a cluster named by
RAY_ADDRESS or a stale /tmp/ray/ray_current_cluster). `serve_setup` starts
Serve on a free port, deploys `deployments.ray.builder`'s application with the
set-up's `request_router_config` on the engine deployment, waits (with a
deadline) until it runs and answers `/v1/models`, and shuts Serve down on the
way out, so the next set-up starts with fresh replicas, routers and prefix
trees.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import ray
from ray import serve
from ray.serve import Application, Deployment
from ray.serve import api as serve_api
from ray.serve.config import RequestRouterConfig

from bench.net import free_port, wait_http
from bench.side.config import POW2, RAY_PREFIX, RAY_PREFIX_ROUTER_CLASS, RAY_SETUPS
from deployments.ray.builder import engine_options, ingress_options
from deployments.ray.engine_replica import EngineReplica
from deployments.ray.ingress import PenelopeIngress
from deployments.ray.launch import RAY_PROCESS_ENV
from deployments.ray.serve_config import ServeConfig

ROOT = Path(__file__).resolve().parents[2]
APP = "penelope-side"


def engine_deployment_options(setup: str, config: ServeConfig) -> dict[str, Any]:
    """`deployments.ray.builder.engine_options`, with the set-up's router (`bench.side.config`)."""
    if setup not in RAY_SETUPS:
        raise ValueError(f"{setup!r} is not a Ray set-up; valid: {', '.join(RAY_SETUPS)}")
    options = engine_options(config)
    if setup == POW2:
        del options["request_router_config"]  # Ray's default router, as an unconfigured app
    elif setup == RAY_PREFIX:
        # the import path, as deployments.ray.builder passes ours (Ray's public alias,
        # ray.serve.llm.request_router, imports vLLM or SGLang; this module does not)
        fields: dict[str, Any] = {"request_router_class": RAY_PREFIX_ROUTER_CLASS}
        options["request_router_config"] = RequestRouterConfig(**fields)
    return options


def build_setup_application(setup: str, config: ServeConfig) -> Application:
    """`deployments.ray.builder.build_application` with `engine_deployment_options`."""
    window_s = config.engine_deployment.kv_pressure.working_set_window_s
    engine = _as_deployment(EngineReplica).options(**engine_deployment_options(setup, config))
    ingress = _as_deployment(PenelopeIngress).options(**ingress_options(config))
    return ingress.bind(
        engine.bind(config.replica_engine, window_s), config.api, config.ingress.api_keys_file
    )


def _as_deployment(cls: type) -> Deployment:
    return cast(Deployment, serve.deployment(cls))


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    env = {**RAY_PROCESS_ENV, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for key, value in RAY_PROCESS_ENV.items():  # the local Ray's own processes inherit these
        os.environ.setdefault(key, value)
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def wait_running(app: str, timeout_s: float) -> None:
    """Until the application runs; its status message if it fails or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = serve.status().applications.get(app)
        state = status.status if status is not None else "NOT_STARTED"
        if state == "RUNNING":
            return
        if state in ("DEPLOY_FAILED", "UNHEALTHY") or time.monotonic() > deadline:
            detail = status.message if status is not None else ""
            deployments = {n: d.message for n, d in (status.deployments if status else {}).items()}
            raise RuntimeError(
                f"application {app} is {state} after {timeout_s:g} s: {detail} {deployments}"
            )
        time.sleep(1)


@contextmanager
def serve_setup(setup: str, config: ServeConfig, timeout_s: float) -> Iterator[str]:
    """Serve `setup`'s application on a free port; yields its base URL. Needs `local_ray`."""
    port = free_port()
    t0 = time.monotonic()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        # serve.run waits with no deadline; its non-waiting form lets wait_running give up.
        serve_api._run(
            build_setup_application(setup, config), name=APP, route_prefix="/", _blocking=False
        )
        wait_running(APP, timeout_s)
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/v1/models", max(1.0, timeout_s - (time.monotonic() - t0)))
        yield url
    finally:
        serve.shutdown()
