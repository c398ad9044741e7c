"""The cluster bench from start to end: cluster, deploy, reference run, cases, ramp.

    local_cluster ─ connect ─ deploy fleet of 2 ─ reference run (tenant `reference`)
        ─ replica_kill ─ (Serve replaces the replica)
        ─ node_loss ─ worker rejoins ─ (Serve places the replica there)
        ─ downscale ─ deploy autoscaling ─ ramp ─ teardown

The result has the fields the issue names (`nodes`, `replicas_by_node`,
`replica_kill`, `node_loss`, `downscale`, `autoscale`, `ok`) and `workload`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster import app, autoscale
from bench.cluster.calibrate import calibrate
from bench.cluster.cases import Answers, Run, case_sessions, run_case
from bench.cluster.client import Turn, whole_sessions
from bench.cluster.config import (
    MAX_REPLICAS,
    MODEL,
    REFERENCE_KEY,
    ClusterConfig,
    api_keys_text,
    serve_deploy_config,
)
from bench.cluster.nodes import (
    HEAD,
    WORKER,
    Cluster,
    NodeSpec,
    local_cluster,
    start_node,
)
from bench.cluster.s3 import credentials_env, local_s3_server, new_bucket, store_bytes
from bench.net import free_port, wait_http
from bench.plan import PlanConfig, SessionPlan, describe, plan_sessions
from cache_store import StoreLocation

CASE_ORDER = ("replica_kill", "node_loss", "downscale")
Guard = Callable[[str, Callable[[], dict[str, Any]]], dict[str, Any]]


def plan_cases(cfg: ClusterConfig) -> dict[str, list[SessionPlan]]:
    """`bench.plan`'s seeded sessions, `cfg.sessions` per case."""
    draw = PlanConfig(
        sessions=cfg.sessions * len(CASE_ORDER), turns=cfg.turns, seed=cfg.seed,
        max_tokens=cfg.max_tokens, window_tokens=cfg.window_tokens, trace=cfg.trace,
    )  # fmt: skip
    plans = list(plan_sessions(draw))
    n = cfg.sessions
    return {case: plans[i * n : (i + 1) * n] for i, case in enumerate(CASE_ORDER)}


def reference_run(
    url: str, cases: dict[str, list[SessionPlan]], timeout_s: float
) -> tuple[Answers, list[Turn]]:
    """Every case's sessions, uninterrupted, under the `reference` tenant (its own cache)."""
    sessions = [
        (f"ref:{sid}", p) for case, plans in cases.items() for sid, p in case_sessions(case, plans)
    ]
    turns = whole_sessions(url, sessions, REFERENCE_KEY, timeout_s)
    answers = {
        (t.session.removeprefix("ref:"), t.turn): t.answer
        for t in turns
        if t.status == 200 and not t.server_error
    }
    return answers, [t for t in turns if t.server_error or t.status != 200]


def _nodes() -> list[dict[str, Any]]:
    return [
        {"node_id": n, "role": role}
        for n, role in sorted(app.node_roles().items(), key=lambda x: x[1])
    ]


class Deployer:
    """`serve deploy` of the derived config into the cluster's dir."""

    def __init__(self, cluster: Cluster, cfg: ClusterConfig, store: StoreLocation) -> None:
        self.cluster, self.cfg, self.port = cluster, cfg, free_port()
        self.keys = cluster.dir / "api_keys"
        self.keys.write_text(api_keys_text())
        self.store = store
        self.url = f"http://127.0.0.1:{self.port}"

    def config(self, replicas: int | None) -> dict[str, Any]:
        return serve_deploy_config(self.cfg, self.port, self.store, str(self.keys), replicas)

    def __call__(self, replicas: int | None) -> None:
        name = f"serve_{replicas or 'autoscaling'}.yaml"
        app.deploy(self.config(replicas), self.cluster.dir / name)


def run(cfg: ClusterConfig, guarded: Guard) -> dict[str, Any]:
    cases = plan_cases(cfg)
    result: dict[str, Any] = {
        "bench": "cluster",
        "config": {**vars(cfg), "model": MODEL},
        "workload": describe([p for plans in cases.values() for p in plans]),
    }
    worker = NodeSpec(WORKER, cfg.node_cpus, 1)
    with contextlib.ExitStack() as stack:
        s3 = None
        if cfg.store == "s3":  # before the nodes start: they inherit the AWS credentials
            s3 = new_bucket(stack.enter_context(local_s3_server()))
            stack.enter_context(credentials_env())
        cluster = stack.enter_context(local_cluster(NodeSpec(HEAD, cfg.node_cpus, 1), worker))
        store = s3 or StoreLocation(str(cluster.dir / "store"))
        with app.connect(cluster):
            result.update(_run_on(cluster, worker, cfg, cases, guarded, store))
    result["ok"] = bool(
        result["reference"]["failed"] == 0
        and all(result[c].get("ok") for c in CASE_ORDER)
        and result["autoscale"].get("ok")
    )
    return result


def _run_on(cluster: Cluster, worker: NodeSpec, cfg: ClusterConfig,
            cases: dict[str, list[SessionPlan]], guarded: Guard,
            store: StoreLocation) -> dict[str, Any]:  # fmt: skip
    """Deploy the fleet, the reference run, each case, the ramp: the result's entries."""
    app.wait_nodes(2, cfg.startup_timeout_s)
    deploy = Deployer(cluster, cfg, store)
    deploy(2)
    out: dict[str, Any] = {"replicas_by_node": app.wait_fleet(2, cfg.startup_timeout_s)}
    wait_http(f"{deploy.url}/health", cfg.startup_timeout_s)
    out.update(nodes=_nodes(), store_uri=store.uri, store_endpoint=store.endpoint)
    reference, failed = reference_run(deploy.url, cases, cfg.request_timeout_s * cfg.turns)
    out["reference"] = {"turns": len(reference), "failed": len(failed)}
    run = Run(cluster, deploy.url, reference, deploy, cfg.settle_timeout_s, cfg.request_timeout_s)

    def recovered() -> dict[str, Any]:
        return {"replicas_by_node": app.wait_fleet(2, cfg.settle_timeout_s)}

    def rejoin() -> dict[str, Any]:
        start_node(cluster, worker)
        app.wait_nodes(2, cfg.settle_timeout_s)
        return recovered()

    def case(name: str) -> dict[str, Any]:
        return guarded(name, lambda: run_case(run, name, cases[name]))

    out["replica_kill"] = case("replica_kill")
    out["recovery"] = guarded("recovery", recovered)
    out["node_loss"] = case("node_loss")
    out["rejoin"] = guarded("worker rejoin", rejoin)
    drained = autoscale.drained_pages(cluster.logs_dir)
    undrained = len(autoscale.undrained(cluster.logs_dir))
    out["downscale"] = case("downscale")
    out["downscale"]["drained_pages"] = autoscale.drained_pages(cluster.logs_dir) - drained
    out["downscale"]["undrained"] = autoscale.undrained(cluster.logs_dir)[undrained:]
    out["store_bytes"] = store_bytes(store) if store.is_s3 else autoscale.dir_bytes(Path(store.uri))
    out["autoscale"] = guarded("autoscale", lambda: _autoscale(deploy, cluster, cfg))
    return out


def _autoscale(deploy: Deployer, cluster: Cluster, cfg: ClusterConfig) -> dict[str, Any]:
    from penelope_engine.model.tiny import tiny_qwen3_config

    old = {r.tag for r in app.engine_replicas()}
    deploy(None)  # new args: every replica is replaced by one of the new version

    def replaced() -> bool:
        state, states = app.app_state()
        new = {r.tag for r in app.engine_replicas()}
        return state == "RUNNING" and states == {"RUNNING": 1} and not new & old

    app.wait_for("the autoscaling application running", replaced, cfg.settle_timeout_s)
    vocab = tiny_qwen3_config().vocab_size
    load = autoscale.load_config(max(cfg.ramp_sessions, 1), cfg.ramp_s, cfg.load_s, cfg.trace)
    calibration = None
    if not cfg.ramp_sessions:  # the slots that load one replica past what the fleet serves
        wanted = 2 * cfg.target_ongoing_requests * MAX_REPLICAS
        calibration = calibrate(deploy.url, load, vocab, wanted)
        load = dataclasses.replace(load, sessions=calibration["slots"])
    entry = autoscale.ramp(
        deploy.url, cluster.logs_dir, load, vocab, cfg.target_ongoing_requests,
        cfg.settle_timeout_s,
    )  # fmt: skip
    entry["calibration"] = calibration
    entry["ramp_sessions"] = load.sessions
    entry["ok"] = bool(
        entry["max_replicas_seen"] > 1 and entry["scaled_down"] and entry["server_errors"] == 0
    )
    return entry
