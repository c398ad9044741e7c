"""The application on the cluster: `serve deploy`, and what runs where.

The bench is a Ray driver connected to the GCS (`connect`): it applies the
`serve deploy` config (`deploy`, what the dashboard's REST API does with it)
and reads state: the application's status, each engine replica's actor and
node (Ray's state API), the nodes themselves. Every wait has a
deadline and fails with what it saw last.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.cluster.config import APP, ENGINE_DEPLOYMENT
from bench.cluster.nodes import HEAD, WORKER, Cluster, ClusterError

POLL_S = 0.5
REPLICA_ACTOR = f"ServeReplica:{APP}:{ENGINE_DEPLOYMENT}"


@dataclass(frozen=True, order=True)
class Replica:
    tag: str  # what `x-penelope-replica` names
    actor_name: str
    node_id: str
    pid: int


def terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def connect(cluster: Cluster) -> Iterator[None]:
    """This process as a driver of `cluster` (token auth from the cluster's env)."""
    import ray
    import ray._private.services as services
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    from bench.cluster.loopback import keep_loopback

    saved_env = {k: os.environ.get(k) for k in cluster.env}
    saved_resolve = services.resolve_ip_for_localhost
    saved_sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.update(cluster.env)
    # Ray read the auth mode when it was imported: read it again, with the cluster's token
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    keep_loopback()
    try:
        ray.init(address=cluster.gcs_address, log_to_driver=False, logging_level=logging.WARNING)
        # ray.init replaced the SIGTERM handler with one that aborts: SIGTERM must unwind
        # through the teardown like Ctrl-C does
        signal.signal(signal.SIGTERM, terminate)
        yield
    finally:
        ray.shutdown()
        # this process may start or join another Ray after (a test session does): leave
        # nothing of this cluster's token auth, addresses or handlers behind
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        services.resolve_ip_for_localhost = saved_resolve
        signal.signal(signal.SIGTERM, saved_sigterm)


def deploy(config: dict[str, Any], path: Path) -> None:
    """Apply a `serve deploy` config (also written to `path`) as the dashboard would.

    `serve deploy` PUTs the config to the dashboard, whose Serve module starts
    Serve and calls `deploy_apps` as a driver of its own; on this one-machine
    cluster that driver resolves 127.0.0.1 to the machine's outward address
    (see `bench.cluster.loopback`) and finds no raylet there. So this driver
    does the same two calls with the same validated schema.
    """
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    path.write_text(yaml.safe_dump(config, sort_keys=False))
    schema = ServeDeploySchema.model_validate(config)
    client = serve_start(
        http_options=schema.http_options.model_dump(),
        proxy_location=schema.proxy_location,
        grpc_options=schema.grpc_options.model_dump(),
        global_logging_config=schema.logging_config,
        controller_options=schema.controller_options,
    )
    client.deploy_apps(schema)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float) -> Any:
    """Poll `check` until it returns something truthy; ClusterError naming `what` after that."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not within {timeout_s:g} s")
        time.sleep(POLL_S)


def routed_replicas(url: str, api_key: str) -> set[str] | None:
    """The engine replicas the ingress's router knows (`GET /v1/penelope/router`); None
    before it has routed anything (Ray builds a router on a handle's first request)."""
    import httpx

    resp = httpx.get(
        f"{url}/v1/penelope/router", headers={"authorization": f"Bearer {api_key}"}, timeout=10
    )
    resp.raise_for_status()
    routers = resp.json()["routers"]
    if not routers:
        return None
    return {r["replica_id"] for router in routers for r in router["replicas"]}


def wait_routed(url: str, api_key: str, timeout_s: float) -> set[str]:
    """Until the ingress's router knows exactly the live engine replicas; their tags.

    Serve reports a new replica running a moment before a router in another process
    learns of it; a session placed in between can only go to the replicas it knows."""
    seen: list[set[str] | None] = [None]

    def check() -> set[str] | None:
        live = {r.tag for r in engine_replicas()}
        seen[0] = routed_replicas(url, api_key)
        return live if live and seen[0] == live else None

    try:
        return wait_for("the ingress's router to know every live replica", check, timeout_s)
    except ClusterError as e:
        raise ClusterError(f"{e} (it knows {sorted(seen[0] or ())})") from None


def by_replica(url: str, api_key: str, names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per metric of `names` (as the ingress's `/metrics` names its family) and engine
    replica: its value now."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {api_key}"}, timeout=10)
    resp.raise_for_status()
    found: dict[str, dict[str, float]] = {name: {} for name in names}
    for family in text_string_to_metric_families(resp.text):
        if family.name in found:
            for s in family.samples:
                if not s.name.endswith("_created"):
                    found[family.name][s.labels.get("replica", "")] = s.value
    return found


def write_behind_jobs(url: str, api_key: str) -> dict[str, float]:
    """Per engine replica: the writes it has queued for the store now
    (`penelope_write_behind_queue_jobs` on the ingress's `/metrics`)."""
    name = "penelope_write_behind_queue_jobs"
    return by_replica(url, api_key, (name,))[name]


# What a replica's store did, reported with each case: why a session did not load
STORE_FAULTS = (
    "penelope_store_read_timeouts",
    "penelope_store_degraded",
    "penelope_store_lost_pages",
    "penelope_store_written_pages",
)


def wait_writes_settled(url: str, api_key: str, timeout_s: float, report_s: float) -> float:
    """Until no engine replica has store writes queued, judged on reports made after this
    call (`report_s`: the replicas' stats period); the seconds from the call. Raises
    `ClusterError` past `timeout_s`: a finished turn's KV did not reach the store in time."""
    t0 = time.monotonic()
    time.sleep(2 * report_s)  # every replica has reported since the last turn ended
    seen: list[dict[str, float]] = [{}]

    def settled() -> bool:
        seen[0] = write_behind_jobs(url, api_key)
        return bool(seen[0]) and not any(seen[0].values())

    try:
        wait_for("the replicas' store writes to finish", settled, timeout_s)
    except ClusterError as e:
        raise ClusterError(f"{e} (queued writes by replica: {seen[0]})") from None
    return time.monotonic() - t0


def app_state() -> tuple[str, dict[str, int]]:
    """The application's status and the engine deployment's replica states."""
    from ray import serve

    status = serve.status().applications.get(APP)
    if status is None:
        return "NOT_STARTED", {}
    engine = status.deployments.get(ENGINE_DEPLOYMENT)
    replicas = engine.replica_states if engine else {}
    states = {getattr(k, "value", str(k)): int(v) for k, v in replicas.items()}
    return str(getattr(status.status, "value", status.status)), states


def wait_running(timeout_s: float, replicas: int | None = None) -> None:
    """Until the application runs (with `replicas` running engine replicas, if given)."""

    last: list[object] = ["no status yet"]

    def check() -> bool:
        state, states = app_state()
        last[0] = (state, states)
        if state == "DEPLOY_FAILED":
            raise ClusterError(f"the application failed to deploy: {states}")
        return state == "RUNNING" and (replicas is None or states == {"RUNNING": replicas})

    try:
        wait_for(f"the application running with {replicas or 'its'} replicas", check, timeout_s)
    except ClusterError as e:
        raise ClusterError(f"{e}; last seen (application, engine replicas): {last[0]}") from None


def wait_fleet(replicas: int, timeout_s: float) -> dict[str, int]:
    """Until `replicas` engine replicas run, as Serve and Ray's state API both report;
    replicas by node."""
    wait_running(timeout_s, replicas)
    found = wait_for(
        f"{replicas} live engine replica actors",
        lambda: len(r := engine_replicas()) == replicas and r,
        timeout_s,
    )
    return replicas_by_node(found)


def engine_replicas() -> list[Replica]:
    """The live engine replica actors and their nodes."""
    import ray
    from ray.util.state import list_actors

    # the address of the cluster this driver is connected to: without one, Ray's state API
    # looks for "the" Ray on this machine, and fails when another one runs beside it
    actors = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return sorted(
        Replica(str(a.name).rpartition("#")[2], str(a.name), str(a.node_id), int(a.pid or 0))
        for a in actors
        if a.class_name == REPLICA_ACTOR
    )


def node_roles() -> dict[str, str]:
    """node id -> HEAD or WORKER, for the nodes alive now."""
    import ray

    roles = {}
    for n in ray.nodes():
        if n.get("Alive"):
            res = n.get("Resources", {})
            roles[n["NodeID"]] = HEAD if f"penelope_{HEAD}" in res else WORKER
    return roles


def replicas_by_node(replicas: list[Replica]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in replicas:
        counts[r.node_id] = counts.get(r.node_id, 0) + 1
    return counts


def kill_replica(replica: Replica) -> None:
    """`ray.kill` the replica's actor (no restart: Serve starts a new replica)."""
    import ray

    ray.kill(ray.get_actor(replica.actor_name, namespace="serve"), no_restart=True)


def wait_nodes(count: int, timeout_s: float) -> dict[str, str]:
    return dict(
        wait_for(f"{count} live nodes", lambda: len(r := node_roles()) == count and r, timeout_s)
    )
