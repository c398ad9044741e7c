"""The faults bench's other server: the Ray Serve application, one engine replica.

`penelope bench faults --app ray` runs each case against the application as a
user deploys it (serve_config.yaml: the ingress, the cache-affinity router, an
engine replica) on a one-node Ray cluster of its own (`bench.cluster.nodes`),
with the engine set as `penelope serve` sets it for the bench (`server.py`):
the tiny model, the same pages, store options and admission limit. Each run
deploys the application afresh onto the case's store and deletes it after (its
replica drains to that store as it leaves); Serve's HTTP proxy keeps the port of
the first deploy. The bench samples the engine replica's resident memory: that
is where the KV and the store's queues live.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.cluster import app
from bench.cluster.config import APP, SERVE_CONFIG
from bench.faults.config import MODEL, FaultsConfig
from bench.faults.server import START_TIMEOUT_S, Serving, StoreTarget
from bench.net import wait_http
from deployments.ray.replica_stats import REPORT_PERIOD_S
from penelope_engine.shipped import SHIPPED_HOST_FACTOR

RAY_NODE_CPUS = 2  # the machine's: one replica, the ingress and the controller share it


def app_config(cfg: FaultsConfig, port: int, store: StoreTarget) -> dict[str, Any]:
    """serve_config.yaml with the engine `penelope serve` runs for the bench: one replica."""
    base = yaml.safe_load(SERVE_CONFIG.read_text())
    application = copy.deepcopy(base["applications"][0])
    args = application["args"]
    engine = args["engine"]
    engine["model"] = MODEL
    engine["cache"].update(
        page_size=cfg.page_size,
        device_pages=cfg.device_pages,
        host_pages=SHIPPED_HOST_FACTOR * cfg.device_pages,  # as `penelope serve` sizes it
        store_uri=store.uri,
        store_endpoint=store.endpoint,
        store_region=store.region,
        write_behind_bytes=cfg.write_behind_bytes,
        store_read_budget_s=cfg.read_budget_s,
        store_request_timeout_s=cfg.request_timeout_s,
        store_probe_s=1.0,
    )
    args["api"]["max_pending"] = cfg.max_pending
    deployment = args["engine_deployment"]
    deployment["autoscaling"] = None
    deployment["num_replicas"] = 1
    application["name"] = APP
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [application],
    }


class RayApp:
    """Deploys the application per run on a connected cluster (`app.connect`)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port: int | None = None  # Serve's proxy keeps the first deploy's port

    @contextmanager
    def __call__(
        self, cfg: FaultsConfig, port: int, store: StoreTarget, log: Path
    ) -> Iterator[Serving]:
        """The application up on `store` (one request served) for the block, then deleted."""
        from ray import serve

        self.port = self.port or port
        url = f"http://127.0.0.1:{self.port}"
        old = {r.tag for r in app.engine_replicas()}
        app.deploy(app_config(cfg, self.port, store), self.workdir / f"{log.stem}.yaml")
        try:
            app.wait_running(START_TIMEOUT_S, replicas=1)
            (replica,) = app.wait_for("the new engine replica", lambda: _new(old), START_TIMEOUT_S)
            wait_http(f"{url}/health", START_TIMEOUT_S)
            warm = {"model": MODEL, "prompt": [1, 2, 3, 4], "max_tokens": 2}
            httpx.post(
                f"{url}/v1/completions", json=warm, timeout=START_TIMEOUT_S
            ).raise_for_status()
            yield Serving(url, replica.pid, metrics_lag_s=REPORT_PERIOD_S)
        finally:
            serve.delete(APP)  # the replica drains to the case's store as it leaves
            gone = lambda: app.app_state()[0] == "NOT_STARTED"  # noqa: E731
            app.wait_for("the application deleted", gone, START_TIMEOUT_S)


def _new(old: set[str]) -> list[app.Replica]:
    fresh = [r for r in app.engine_replicas() if r.tag not in old]
    return fresh if len(fresh) == 1 else []
