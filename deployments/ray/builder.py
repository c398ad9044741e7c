"""Build the Ray Serve application from a `ServeConfig` (a pure function).

    HTTP ──> PenelopeIngress (FastAPI, tokenizes, OpenAI API, /metrics)
                 │ handle.options(session_id=...)       cache-affinity router
                 ▼                                      (router.ray_router)
             PenelopeEngine × N (AsyncEngine each; record_routing_stats,
                                 record_autoscaling_stats; autoscaled)

`build_app` is the `import_path` target of `serve_config.yaml`: Ray passes the
YAML's `args:` mapping, which `parse_serve_config` validates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ray import serve
from ray.serve import Application, Deployment
from ray.serve.config import AutoscalingConfig, AutoscalingPolicy, RequestRouterConfig

from deployments.ray.engine_replica import EngineReplica
from deployments.ray.ingress import PenelopeIngress
from deployments.ray.serve_config import AutoscalingSettings, ServeConfig, parse_serve_config
from penelope_engine.config import EngineConfig

ENGINE_DEPLOYMENT = "PenelopeEngine"
INGRESS_DEPLOYMENT = "PenelopeIngress"
INGRESS_ROUTER_CLASS = "ray.serve.experimental.consistent_hash_router:ConsistentHashRouter"
INGRESS_ROUTER: dict[str, Any] = {"request_router_class": INGRESS_ROUTER_CLASS}
ROUTER_CLASS = "router.ray_router:PenelopeRequestRouter"
POLICY_FUNCTION = "deployments.metrics.autoscaling_policy:KvAwarePolicy"


def autoscaling_config(a: AutoscalingSettings) -> AutoscalingConfig:
    kv = a.kv_pressure
    policy = AutoscalingPolicy(
        policy_function=POLICY_FUNCTION,
        policy_kwargs={
            "working_set_window_s": kv.working_set_window_s,
            "working_set_target": kv.working_set_target,
            "occupancy_threshold": kv.occupancy_threshold,
            "recompute_threshold": kv.recompute_threshold,
        },
    )
    return AutoscalingConfig(
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        initial_replicas=a.initial_replicas,
        target_ongoing_requests=a.target_ongoing_requests,
        upscale_delay_s=a.upscale_delay_s,
        downscale_delay_s=a.downscale_delay_s,
        look_back_period_s=a.look_back_period_s,
        metrics_interval_s=a.metrics_interval_s,
        policy=policy,
    )


def engine_options(config: ServeConfig) -> dict[str, Any]:
    """Ray Serve options of the engine deployment."""
    d, r = config.engine_deployment, config.router
    router_fields: dict[str, Any] = {
        "request_router_class": ROUTER_CLASS,
        "request_router_kwargs": r.router_kwargs(),
        "request_routing_stats_period_s": r.stats_period_s,
        "request_routing_stats_timeout_s": r.stats_timeout_s,
    }
    options: dict[str, Any] = {
        "name": ENGINE_DEPLOYMENT,
        "ray_actor_options": {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus},
        "max_ongoing_requests": d.max_ongoing_requests,
        "max_queued_requests": d.max_queued_requests,
        "request_router_config": RequestRouterConfig(**router_fields),
    }
    if d.autoscaling is None:
        options["num_replicas"] = d.num_replicas
    else:
        options["autoscaling_config"] = autoscaling_config(d.autoscaling)
    return options


def ingress_options(config: ServeConfig) -> dict[str, Any]:
    """Ray Serve options of the ingress deployment.

    With several ingress replicas, the proxy sends every request of a session
    (its `x-session-id` header) to the same one, by Ray's consistent hash: the
    engine router there remembers where it sent the session's last turn, which
    its replica's digest may not show yet (a stats period), so the next turn
    follows it. Sessions named otherwise (Claude Code's header, Codex's body) reach
    either ingress; their routers agree through the placement board (`router.board`)."""
    i = config.ingress
    return {
        "name": INGRESS_DEPLOYMENT,
        "num_replicas": i.num_replicas,
        "ray_actor_options": {"num_cpus": i.num_cpus},
        # The ingress only parses and streams; engines bound the real work.
        "max_ongoing_requests": config.api.max_pending,
        "request_router_config": RequestRouterConfig(**INGRESS_ROUTER),
    }


def build_application(config: ServeConfig) -> Application:
    window_s = config.engine_deployment.kv_pressure.working_set_window_s
    engine = _as_deployment(EngineReplica).options(**engine_options(config))
    ingress = _as_deployment(PenelopeIngress).options(**ingress_options(config))
    api = config.api
    if isinstance(config.engine, EngineConfig):  # stored responses beside the KV store
        api = api.with_engine_store(config.engine.cache)
    return ingress.bind(
        engine.bind(config.replica_engine, window_s, INGRESS_DEPLOYMENT),
        api,
        config.ingress.api_keys_file,
    )


def _as_deployment(cls: type) -> Deployment:
    # `serve.deployment(cls)` returns a Deployment; Ray annotates only the decorator form.
    return cast(Deployment, serve.deployment(cls))


def build_app(args: Mapping[str, Any] | None = None) -> Application:
    """`import_path` target: `deployments.ray.builder:build_app` with the YAML's `args`."""
    return build_application(parse_serve_config(args))
