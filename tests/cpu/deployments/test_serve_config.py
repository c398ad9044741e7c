"""`serve_config.yaml`, its parser and the Ray Serve options the builder derives (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.config import AutoscalingConfig, RequestRouterConfig

from deployments.metrics.autoscaling_policy import KvAwarePolicy
from deployments.ray.builder import POLICY_FUNCTION, ROUTER_CLASS, engine_options, ingress_options
from deployments.ray.serve_config import ServeConfig, parse_serve_config
from penelope_engine.errors import ConfigError
from router.ray_router import PenelopeRequestRouter

ROOT = Path(__file__).resolve().parents[3]


def app_args() -> dict:
    doc = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    assert doc["http_options"]["host"] == "127.0.0.1"
    (app,) = doc["applications"]
    assert app["import_path"] == "deployments.ray.builder:build_app"
    return app["args"]


def test_the_shipped_serve_config_parses_into_two_fractional_replicas() -> None:
    config = parse_serve_config(app_args())
    assert config.engine.model == "smollm2-135m" and config.engine.device == "cpu"
    scaling = config.engine_deployment.autoscaling
    assert scaling is not None and scaling.min_replicas == 2
    assert 0 < config.engine_deployment.num_cpus < 1


def test_engine_options_wire_the_router_and_the_kv_aware_policy() -> None:
    config = parse_serve_config(app_args())
    options = engine_options(config)
    router = options["request_router_config"]
    assert isinstance(router, RequestRouterConfig)
    assert router.request_router_class == ROUTER_CLASS
    assert router.get_request_router_class() is PenelopeRequestRouter
    assert router.request_router_kwargs == {"policy": "affinity", "placements": "ray"}
    scaling = options["autoscaling_config"]
    assert isinstance(scaling, AutoscalingConfig)
    assert (scaling.min_replicas, scaling.max_replicas, scaling.target_ongoing_requests) == (
        2,
        4,
        4,
    )
    # the look-back window holds two of each replica's queue reports
    assert (scaling.look_back_period_s, scaling.metrics_interval_s) == (20, 10)
    assert scaling.policy.policy_function == POLICY_FUNCTION
    policy = scaling.policy.get_policy()(**scaling.policy.policy_kwargs)
    assert isinstance(policy, KvAwarePolicy)
    assert policy.settings.working_set_target == 0.8
    assert options["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0.0}
    ingress = ingress_options(config)
    assert ingress["num_replicas"] == 1
    # a session's requests all pass one ingress replica (its router remembers the session)
    routed = ingress["request_router_config"].get_request_router_class()
    assert routed.__name__ == "ConsistentHashRouter"


def test_a_fixed_replica_count_when_autoscaling_is_off() -> None:
    config = parse_serve_config({"engine_deployment": {"autoscaling": None, "num_replicas": 3}})
    options = engine_options(config)
    assert options["num_replicas"] == 3 and "autoscaling_config" not in options


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            {"engine": {"cache": {"pagesize": 8}}},
            "unknown key(s) ['pagesize'] in args.engine.cache",
        ),
        ({"enigne": {}}, "unknown key(s) ['enigne'] in args"),
        ({"engine": {"dtype": "int8"}}, "engine.EngineConfig.dtype: Input should be 'float32'"),
        ({"engine_deployment": {"num_cpus": 0}}, "num_cpus must be positive"),
        ({"engine_deployment": {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}}, "max_r"),
        (
            {"engine_deployment": {"autoscaling": {"look_back_period_s": 2}}},
            "metrics_interval_s (10.0) must be positive and below look_back_period_s (2.0)",
        ),
        ({"router": {"policy": "random"}}, "router policy must be one of"),
        ({"router": {"policy": "ray_prefix"}}, "router policy must be one of affinity, pow2"),
        ({"router": {"options": {"overload": 1}}}, "unknown key(s) ['overload']"),
        ({"api": {"api_keys": {"k" * 8: "t"}}}, "api_keys_file"),
        ({"engine": {"cache": {"tenant_pin_seconds": -1}}}, "tenant_pin_seconds must be"),
        ({"engine": {"cache": {"tenant_pin_tokens": -5}}}, "tenant_pin_tokens must be"),
    ],
)
def test_bad_config_names_the_key(args: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_serve_config(args)
    assert needle in str(err.value)


def test_defaults_without_args() -> None:
    assert parse_serve_config(None) == ServeConfig()


def test_hint_quotas_come_from_the_yaml() -> None:
    args = {"engine": {"cache": {"tenant_pin_seconds": 30, "tenant_pin_tokens": 4096}}}
    cache = parse_serve_config(args).engine.cache
    assert (cache.tenant_pin_seconds, cache.tenant_pin_tokens) == (30.0, 4096)


def test_agent_levers_come_from_the_yaml() -> None:
    args = {"engine": {"scheduler": {"agent": {"admission": "aged", "backfill": True}}}}
    agent = parse_serve_config(args).engine.scheduler.agent
    assert (agent.admission, agent.backfill, agent.retention) == ("aged", True, "none")
    with pytest.raises(ConfigError, match="admission must be one of"):
        parse_serve_config({"engine": {"scheduler": {"agent": {"admission": "lifo"}}}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['ttl'\]"):
        parse_serve_config({"engine": {"scheduler": {"agent": {"ttl": 5}}}})
