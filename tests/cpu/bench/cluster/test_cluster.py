"""`penelope bench cluster`: the derived Serve config without Ray, then one real small run.

The real run starts a two-node Ray cluster on this machine, deploys the app
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

from bench.cluster.config import (
    ENGINE_DEPLOYMENT,
    INGRESS_DEPLOYMENT,
    MODEL,
    ClusterConfig,
    serve_deploy_config,
)
from bench.cluster.nodes import ENGINE_SLOT, HEAD, WORKER, NodeSpec, node_command, pids_of
from deployments.serve_config import parse_serve_config

ROOT = Path(__file__).resolve().parents[4]
RUN_TIMEOUT_S = 900  # the run's own waits are bounded well inside this
# two sessions per case; a short ramp in which one request in flight asks for a second replica
SMALL = ["--sessions", "2", "--ramp-sessions", "6", "--ramp-s", "10", "--load-s", "20",
         "--target-ongoing-requests", "0.5"]  # fmt: skip


def _deploy_config(replicas: int | None) -> dict[str, Any]:
    return serve_deploy_config(ClusterConfig(), 8123, "/tmp/store", "/tmp/keys", replicas)


def test_the_deployed_config_is_serve_config_yaml_pinned_to_engine_slots() -> None:
    config = _deploy_config(2)
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    app = config["applications"][0]
    parsed = parse_serve_config(app["args"])  # still a valid Penelope config
    assert parsed.engine.model == MODEL and parsed.engine.cache.store_uri == "/tmp/store"
    assert parsed.engine_deployment.autoscaling is None and parsed.ingress.api_keys_file
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


def _moved_and_served_from_the_store(e: dict[str, Any]) -> None:
    assert "error" not in e, e
    if e["affected_sessions"] == 0:  # placement is the router's: the case had nothing to move
        pytest.skip(f"no session of this case lived on the lost replica: {e}")
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


@on_the_cluster
def test_load_scales_the_fleet_up_and_its_end_scales_it_down(run: dict[str, Any]) -> None:
    a = run["autoscale"]
    assert "error" not in a, a
    assert a["max_replicas_seen"] == 2 and a["scaled_down"], a["replicas_over_time"]
    assert a["server_errors"] == 0 and a["signal"], a
