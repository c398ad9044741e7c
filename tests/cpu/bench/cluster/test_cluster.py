"""`penelope bench cluster`: the derived Serve config without Ray, then one real small run.

The real run starts a local S3 server and a two-node Ray cluster on this machine, deploys the app
with one engine replica per node, kills a replica, loses the worker node,
scales down and ramps load, as `penelope bench cluster --json` in a child
process (so Ray's driver, its signal handlers and its processes are the
command's, not pytest's). Afterwards nothing of the cluster is left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from bench.cluster.cases import case_sessions, summarize
from bench.cluster.client import Turn
from bench.cluster.config import (
    AGENT_KEY,
    ENGINE_DEPLOYMENT,
    INGRESS_DEPLOYMENT,
    MODEL,
    REFERENCE_KEY,
    ROUTER_ACTIVE_WINDOW_S,
    ClusterConfig,
    api_keys_text,
    serve_deploy_config,
)
from bench.cluster.nodes import ENGINE_SLOT, HEAD, WORKER, NodeSpec, node_command, pids_of
from cache_store import StoreLocation
from deployments.api.settings import parse_api_keys
from deployments.ray.serve_config import parse_serve_config

ROOT = Path(__file__).resolve().parents[4]
RUN_TIMEOUT_S = 900  # the run's own waits are bounded well inside this
# two sessions per case, the store a bucket on a local S3 server (a shared directory is the
# default; tests/cpu/cache_store covers both); a short ramp, its slots calibrated to this
# machine's service rate, in which one request in flight asks for a second replica
SMALL = ["--sessions", "2", "--store", "s3", "--ramp-s", "10", "--load-s", "20",
         "--target-ongoing-requests", "0.5"]  # fmt: skip


def _deploy_config(replicas: int | None) -> dict[str, Any]:
    return serve_deploy_config(
        ClusterConfig(), 8123, StoreLocation("/tmp/store"), "/tmp/keys", replicas
    )


def test_the_deployed_config_is_serve_config_yaml_pinned_to_engine_slots() -> None:
    config = _deploy_config(2)
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    app = config["applications"][0]
    parsed = parse_serve_config(app["args"])  # still a valid Penelope config
    assert parsed.engine.model == MODEL and parsed.engine.cache.store_uri == "/tmp/store"
    assert parsed.engine_deployment.autoscaling is None and parsed.ingress.api_keys_file
    # the bench's cases are seconds apart: the router's active window is seconds too
    assert app["args"]["router"]["options"]["active_window_s"] == ROUTER_ACTIVE_WINDOW_S
    overrides = {d["name"]: d for d in app["deployments"]}
    engine = overrides[ENGINE_DEPLOYMENT]
    assert engine["num_replicas"] == 2
    assert engine["ray_actor_options"]["resources"] == {ENGINE_SLOT: 1}
    assert overrides[INGRESS_DEPLOYMENT]["ray_actor_options"]["resources"] == {
        f"penelope_{HEAD}": 0.1
    }
    ramp = parse_serve_config(_deploy_config(None)["applications"][0]["args"])
    a = ramp.engine_deployment.autoscaling
    assert a is not None and (a.min_replicas, a.max_replicas) == (1, 2)
    assert a.upscale_delay_s <= 1 and a.downscale_delay_s <= 30  # seconds, not minutes
    assert a.kv_pressure.working_set_window_s <= 30


def test_an_s3_store_reaches_the_engine_config_as_a_user_writes_it() -> None:
    store = StoreLocation("s3://bucket/kv", endpoint="http://127.0.0.1:9000", region="us-east-1")
    config = serve_deploy_config(ClusterConfig(store="s3"), 8123, store, "/tmp/keys", 2)
    cache = parse_serve_config(config["applications"][0]["args"]).engine.cache
    assert (cache.store_uri, cache.store_endpoint, cache.store_region) == (
        "s3://bucket/kv",
        "http://127.0.0.1:9000",
        "us-east-1",
    )
    with pytest.raises(ValueError, match="store must be one of path, s3"):
        ClusterConfig(store="gcs")


def test_each_node_offers_its_own_engine_slots_and_role() -> None:
    head = node_command(NodeSpec(HEAD, 1, 1), "127.0.0.1:6390", Path("/tmp/x"), 8265)
    worker = node_command(NodeSpec(WORKER, 1, 1), "127.0.0.1:6390", Path("/tmp/x"), 8265)
    assert "--head" in head and "--port" in head and "--address" not in head
    assert worker[worker.index("--address") + 1] == "127.0.0.1:6390" and "--head" not in worker
    assert f'"penelope_{WORKER}": 1' in worker[worker.index("--resources") + 1]


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    """One small `penelope bench cluster --json` run, and what it left behind."""
    before = set(Path("/tmp").glob("pcl-*"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cluster.json"
        cmd = [sys.executable, "-m", "penelope_cli.cli", "bench", "cluster", *SMALL]
        done = subprocess.run(
            [*cmd, "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert out.exists(), done.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.read_text())
    left = set(Path("/tmp").glob("pcl-*")) - before
    result["_left"] = {str(d): pids_of(d) for d in left}
    return result


def _turn(session: str, turn: int, replica: str, text: str) -> Turn:
    usage = {"completion_tokens": 2, "penelope": {"store_tokens": 8, "recomputed_tokens": 0}}
    return Turn(session, turn, 200, replica, text, "length", usage, done=True)


def test_a_case_is_held_against_the_reference_of_its_plan() -> None:
    plans: list[Any] = [object(), object()]
    ids = [sid for sid, _ in case_sessions("node_loss", plans)]
    assert ids == ["node_loss-0", "node_loss-1"]
    # the case's tenant is not the reference run's: nothing the reference cached serves it
    tenants = parse_api_keys(api_keys_text())
    assert tenants[AGENT_KEY] != tenants[REFERENCE_KEY]
    answers = {(0, 0): "a", (1, 0): "b", (0, 1): "c", (1, 1): "d"}
    reference = {(f"node_loss-{i}", k): (text, 2, "length") for (i, k), text in answers.items()}
    turns = [_turn(ids[0], 0, "w", "a"), _turn(ids[1], 0, "h", "b"),
             _turn(ids[0], 1, "h", "c"), _turn(ids[1], 1, "h", "d")]  # fmt: skip
    homes = {ids[0]: "w", ids[1]: "h"}
    entry = summarize("node_loss", turns, homes, {"w"}, None, reference, 1.0)
    assert entry["identical"] and entry["affected_sessions"] == entry["moved_sessions"] == 1
    wrong = [*turns[:3], _turn(ids[1], 1, "h", "x")]
    entry = summarize("node_loss", wrong, homes, {"w"}, None, reference, 1.0)
    assert not entry["identical"] and entry["mismatched_turns"] == [(ids[1], 1)]


def test_what_leaving_replicas_logged_is_read_back(tmp_path: Path) -> None:
    """The drain's lines as `EngineReplica` writes them into a replica's log (Ray's
    prefix before each): pages drained, and each session it could not drain, with why."""
    from bench.cluster.autoscale import drained_pages, undrained
    from penelope_engine.protocol import UNDRAINED_PAGES_REFUSED

    log = tmp_path / "serve" / "replica_app_PenelopeEngine_x.log"
    log.parent.mkdir()
    prefix = "WARNING 2026-12-06 19:20:00,000 app_PenelopeEngine x engine_replica.py:240 - "
    log.write_text(
        f"{prefix}drained 12 KV pages to the store before shutdown in 0.20 s (pages ...)\n"
        f"{prefix}could not drain session agent-3 to the store: {UNDRAINED_PAGES_REFUSED}\n"
    )
    assert drained_pages(tmp_path) == 12
    assert undrained(tmp_path) == [{"session": "agent-3", "why": UNDRAINED_PAGES_REFUSED}]


def _moved_and_served_from_the_store(e: dict[str, Any]) -> None:
    assert "error" not in e, e
    # the case starts its sessions again until they live on every replica
    assert e["affected_sessions"] > 0, e
    assert e["moved_sessions"] == e["affected_sessions"], e
    assert e["identical"], e["mismatched_turns"]
    assert e["server_errors"] == 0, e
    usage = e["usage_by_session"]
    assert all(u["recomputed_tokens"] == 0 for u in usage.values()), usage
    # a session whose next prompt rewrote its history has nothing private to load
    loaders = {s: u for s, u in usage.items() if s not in e["rewritten_sessions"]}
    assert all(u["store_tokens"] > 0 for u in loaders.values()), usage


def on_the_cluster(test: Any) -> Any:
    """A test of the real run: Ray, slow, and a deadline past the run's own."""
    for mark in (pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT_S + 60)):
        test = mark(test)
    return test


@on_the_cluster
def test_two_nodes_one_replica_each_and_nothing_left_after(run: dict[str, Any]) -> None:
    assert not run["_left"], run["_left"]  # no process, no directory of the cluster
    assert {n["role"] for n in run["nodes"]} == {HEAD, WORKER}
    assert sorted(run["replicas_by_node"].values()) == [1, 1]
    assert run["reference"]["failed"] == 0
    assert run["store_uri"].startswith("s3://") and run["store_bytes"] > 0


@on_the_cluster
@pytest.mark.parametrize("case", ["replica_kill", "node_loss"])
def test_a_cut_stream_ends_cleanly_and_its_sessions_load_their_history(
    run: dict[str, Any], case: str
) -> None:
    _moved_and_served_from_the_store(run[case])
    cut = run[case]["cut"]
    assert cut["error"] and cut["done"], cut  # an error event, then [DONE]


@on_the_cluster
def test_a_downscale_moves_its_sessions_with_their_history(run: dict[str, Any]) -> None:
    _moved_and_served_from_the_store(run["downscale"])
    assert run["downscale"]["undrained"] == [], run["downscale"]  # every session drained


@on_the_cluster
def test_load_scales_the_fleet_up_and_its_end_scales_it_down(run: dict[str, Any]) -> None:
    a = run["autoscale"]
    assert "error" not in a, a
    assert a["max_replicas_seen"] == 2 and a["scaled_down"], a["replicas_over_time"]
    assert a["server_errors"] == 0 and a["signal"], a
    calibration = a["calibration"]  # the ramp's slots came from this machine's service time
    assert calibration["service_s"] > 0 and a["ramp_sessions"] == calibration["slots"] >= 2
