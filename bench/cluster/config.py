"""The cluster bench's settings (`ClusterConfig`) and the Serve config it deploys.

The deployed config is `serve_config.yaml` itself with what a two-node run on a
2-core machine changes (`serve_deploy_config`):

    http_options     127.0.0.1 and a free port; the proxy on the head only
    engine           tiny Qwen3 on CPU, a small pool; one store both nodes reach, so
                     replicas share it: a directory (the cluster's temp dir) or a
                     bucket on a local S3 server (`store_uri`, `store_endpoint`,
                     `store_region`; credentials in each node's environment)
    engine_deployment  a fixed fleet of two (cases a-c) or autoscaling from one with
                     delays of seconds (the ramp), half a CPU per replica
    ingress          API keys from a file (two keys, two tenants)
    deployments:     Serve's per-deployment overrides: every engine replica takes one
                     ENGINE_SLOT (so each node holds at most its slots of replicas), the
                     ingress runs on the head (beside the proxy), and the case fleet's
                     `num_replicas` (changing it is a lightweight update: no restart)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.cluster.nodes import ENGINE_SLOT, HEAD, ROOT
from bench.config import one_of, option, positive
from bench.traces import DEFAULT_TRACE
from cache_store import StoreLocation

MODEL = "tiny-qwen3"
APP = "penelope"
ENGINE_DEPLOYMENT = "PenelopeEngine"  # deployments.ray.builder's names
INGRESS_DEPLOYMENT = "PenelopeIngress"
SERVE_CONFIG = ROOT / "serve_config.yaml"
REPLICA_CPUS = 0.5
INGRESS_CPUS = 0.25
AGENT_KEY, REFERENCE_KEY = "agents-key", "reference-key"
AGENT_TENANT, REFERENCE_TENANT = "agents", "reference"
# The router's active window here: a session used this recently counts toward its
# replica's load. Production keeps minutes; the bench's cases are seconds apart, and
# each waits this long so that the earlier cases' sessions no longer weigh on placement.
ROUTER_ACTIVE_WINDOW_S = 5.0
STATS_PERIOD_S = 0.5  # routing stats (digests) every half second


STORES = ("path", "s3")


@dataclass(frozen=True)
class ClusterConfig:
    """One `penelope bench cluster` option per field; its help is the field's `help` metadata."""

    sessions: int = option(4, "agent sessions per case (each case starts its own)")
    turns_before: int = option(
        1, "turns each session runs before its fault (one more runs after it)"
    )
    max_tokens: int = option(8, "cap on each turn's output tokens (greedy)")
    window_tokens: int = option(
        1024, "only trace sessions whose turns all fit in this many tokens are drawn"
    )
    seed: int = option(0, "seed of the session draw")
    device_pages: int = option(256, "KV pages per engine replica")  # 16-token pages
    host_pages: int = option(128, "host-tier pages per engine replica")
    node_cpus: int = option(1, "CPUs each of the two nodes offers Ray")  # two nodes, one machine
    ramp_sessions: int = option(  # the ramp runs bench.load's client
        0,
        "session slots of the autoscaling load ramp (0: calibrated to the measured service "
        "rate, `bench.cluster.calibrate`)",
    )
    ramp_s: float = option(20.0, "seconds over which the ramp's slots start")
    load_s: float = option(40.0, "seconds the ramp's load lasts once all slots run")
    target_ongoing_requests: float = option(
        1.0, "autoscaling target of ongoing requests per replica"
    )
    # longer than a lull in the ramp's closed-loop load
    downscale_delay_s: float = option(15.0, "autoscaling downscale delay")
    settle_timeout_s: float = option(
        120.0, "each wait for the fleet to change (recover, rejoin, scale)"
    )
    startup_timeout_s: float = option(
        300.0, "the cluster up and the application running within this"
    )
    request_timeout_s: float = option(
        120.0, "one HTTP request, or one turn of every session at once"
    )
    trace: str = option(str(DEFAULT_TRACE), "Claude Code trace file")
    store: str = option(
        "path",
        "the replicas' shared store: path (a directory of the cluster) or s3 (a "
        "bucket on a local S3 server, moto's server mode)",
    )

    def __post_init__(self) -> None:
        one_of(self, "store", STORES)
        positive(self, "sessions", "turns_before", "max_tokens", "settle_timeout_s",
                 "startup_timeout_s", "request_timeout_s")  # fmt: skip
        if self.ramp_sessions < 0:
            raise ValueError("ramp_sessions must be >= 0 (0: calibrated)")
        if self.node_cpus < REPLICA_CPUS + INGRESS_CPUS:
            raise ValueError("node_cpus must hold a replica and the ingress: >= 0.75")

    @property
    def turns(self) -> int:
        return self.turns_before + 1


MAX_REPLICAS = 2  # the autoscaling ramp's ceiling: one engine replica per node


def api_keys_text() -> str:
    return f"{AGENT_KEY}:{AGENT_TENANT}\n{REFERENCE_KEY}:{REFERENCE_TENANT}\n"


def _args(cfg: ClusterConfig, base: dict[str, Any], store: StoreLocation, keys_file: str) -> dict:
    args = copy.deepcopy(base)
    engine = args["engine"]
    engine["model"] = MODEL
    engine["cache"].update(
        device_pages=cfg.device_pages,
        host_pages=cfg.host_pages,
        store_uri=store.uri,
        store_endpoint=store.endpoint,
        store_region=store.region,
        store_bytes=256 << 20,
    )
    d = args["engine_deployment"]
    d["num_cpus"] = REPLICA_CPUS
    d["max_ongoing_requests"] = 4
    d["max_queued_requests"] = 32
    args["ingress"].update(num_cpus=INGRESS_CPUS, api_keys_file=keys_file)
    args["router"]["stats_period_s"] = STATS_PERIOD_S
    # new sessions are spread by load, not drawn to the replica holding the shared prefix:
    # every case needs sessions on both nodes
    args["router"]["options"] = {
        **args["router"].get("options", {}),
        "prefix_affinity": False,
        "active_window_s": ROUTER_ACTIVE_WINDOW_S,
    }
    return args


def fleet_args(args: dict[str, Any]) -> dict[str, Any]:
    """Cases a-c: a fixed fleet (its size is set in the `deployments:` overrides)."""
    d = args["engine_deployment"]
    d["autoscaling"] = None
    d["num_replicas"] = 2
    return args


def autoscaling_args(args: dict[str, Any], cfg: ClusterConfig) -> dict[str, Any]:
    """The ramp: from one replica up to two (one per node), with delays of seconds."""
    a = args["engine_deployment"]["autoscaling"]
    a.update(
        min_replicas=1,
        max_replicas=MAX_REPLICAS,
        initial_replicas=1,
        target_ongoing_requests=cfg.target_ongoing_requests,
        upscale_delay_s=1.0,
        downscale_delay_s=cfg.downscale_delay_s,
        look_back_period_s=2.0,
        metrics_interval_s=0.5,  # four queue reports in each look-back window
    )
    # a session used in the last 10 s is live (not 3 minutes): the fleet may shrink soon
    # after the load stops
    a["kv_pressure"]["working_set_window_s"] = 10.0
    args["ingress"].pop("api_keys_file")  # bench.load's client sends no key
    return args


def serve_deploy_config(
    cfg: ClusterConfig,
    port: int,
    store: StoreLocation,
    keys_file: str,
    num_replicas: int | None,
    base_path: Path = SERVE_CONFIG,
) -> dict[str, Any]:
    """The `serve deploy` config: the fixed fleet of `num_replicas`, or autoscaling (None)."""
    base = yaml.safe_load(base_path.read_text())
    app = base["applications"][0]
    args = _args(cfg, app["args"], store, keys_file)
    engine_override: dict[str, Any] = {
        "name": ENGINE_DEPLOYMENT,
        "ray_actor_options": {"num_cpus": REPLICA_CPUS, "resources": {ENGINE_SLOT: 1}},
    }
    if num_replicas is None:
        args = autoscaling_args(args, cfg)
    else:
        args = fleet_args(args)
        engine_override["num_replicas"] = num_replicas
    ingress_override = {
        "name": INGRESS_DEPLOYMENT,
        "ray_actor_options": {"num_cpus": INGRESS_CPUS, "resources": {f"penelope_{HEAD}": 0.1}},
    }
    app.update(name=APP, args=args, deployments=[engine_override, ingress_override])
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [app],
    }
