"""`penelope serve` arguments and API-key loading (no server starts here)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from deployments.api.auth import Authenticator
from deployments.api.errors import ApiError
from deployments.api.settings import ApiSettings, load_api_keys, parse_api_keys
from deployments.ray.serve_config import parse_serve_config
from penelope_cli.serve import add_serve_args, config_from_args
from penelope_engine.config import AgentConfig, SchedulerConfig
from penelope_engine.errors import ConfigError
from penelope_engine.shipped import SHIPPED_POLICY, shipped_engine, shipped_scheduler

ROOT = Path(__file__).resolve().parents[3]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    return parser.parse_args(list(argv))


def test_defaults_bind_loopback_and_serve_the_default_model() -> None:
    args = parse()
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    engine, settings = config_from_args(args)
    assert engine.model == "smollm2-135m" and not settings.auth_enabled
    assert settings.default_temperature == 1.0
    assert config_from_args(parse("--default-temperature", "0"))[1].default_temperature == 0.0
    # what ships and is measured (penelope_engine.shipped), unless the levers are turned off
    assert engine.cache.policy == SHIPPED_POLICY
    assert engine.scheduler == shipped_scheduler(2048, args.max_running, device="cpu")
    assert engine.scheduler.max_prefills == 1 and engine.scheduler.agent.admission == "shortest"
    cuda = config_from_args(parse("--device", "cuda"))[0].scheduler
    assert cuda == shipped_scheduler(2048, args.max_running, device="cuda")
    given = config_from_args(parse("--max-prefills", "0", "--admission", "aged"))[0].scheduler
    assert (given.max_prefills, given.agent.admission) == (0, "aged")
    assert engine.scheduler.prefill_chunk == engine.scheduler.max_batch_tokens // 4
    off = config_from_args(parse("--agent-levers", "off"))[0].scheduler
    assert off == SchedulerConfig(max_running=args.max_running) and off.agent == AgentConfig()


def test_the_defaults_are_what_serve_config_yaml_deploys() -> None:
    """`penelope serve` runs one replica of serve_config.yaml's engine: the same model,
    cache (host tier and store included), scheduler and levers."""
    doc = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    deployed = parse_serve_config(doc["applications"][0]["args"]).engine
    engine, _ = config_from_args(parse())
    assert engine == deployed == shipped_engine()  # one home: penelope_engine.shipped
    assert parse_serve_config(None).engine == deployed  # args that name no engine
    assert engine.cache.host_pages == 2 * engine.cache.device_pages
    assert engine.cache.store_uri == "~/.cache/penelope/store"
    assert engine.scheduler.agent.prefetch_lead_s > 0  # with a store, prefetch runs
    bare = config_from_args(parse("--store-uri", "none", "--host-pages", "0"))[0].cache
    assert bare.store_uri is None and bare.host_pages == 0


def test_flags_reach_the_engine_and_api_configs(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nsk-alpha-0001:alpha\nsk-beta-00001\n")
    args = parse(
        "--model",
        "tiny-qwen3",
        "--page-size",
        "8",
        "--device-pages",
        "64",
        "--policy",
        "lru",
        "--max-pending",
        "3",
        "--api-keys-file",
        str(keys),
        "--session-ttl-s",
        "60",
        "--max-session-records",
        "500",
        "--tenant-pin-seconds",
        "120",
        "--tenant-pin-tokens",
        "4096",
    )
    engine, settings = config_from_args(args)
    assert (engine.cache.session_ttl_s, engine.cache.max_session_records) == (60.0, 500)
    assert (engine.cache.tenant_pin_seconds, engine.cache.tenant_pin_tokens) == (120.0, 4096)
    assert config_from_args(parse())[0].cache.tenant_pin_tokens is None
    assert (engine.model, engine.cache.page_size, engine.cache.device_pages) == (
        "tiny-qwen3",
        8,
        64,
    )
    assert engine.cache.policy == "lru" and settings.max_pending == 3
    assert dict(settings.api_keys) == {"sk-alpha-0001": "alpha", "sk-beta-00001": "default"}
    with pytest.raises(SystemExit):
        parse("--policy", "fifo")


def test_keys_from_env_and_constant_time_matching() -> None:
    keys = load_api_keys(env={"PENELOPE_API_KEYS": "sk-one-00001:t1, sk-two-00002:t2"})
    auth = Authenticator(keys)
    assert auth.tenant("Bearer sk-two-00002") == "t2"
    for header in (None, "Bearer sk-two-0000", "Basic sk-two-00002", "Bearer "):
        with pytest.raises(ApiError) as err:
            auth.tenant(header)
        assert err.value.status == 401
    assert parse_api_keys("") == {}


def test_short_keys_are_refused() -> None:
    with pytest.raises(ConfigError):
        ApiSettings(api_keys={"short": "t"})


def test_the_config_options_take_type_choices_and_help_from_their_fields() -> None:
    import dataclasses

    from deployments.api.settings import ApiSettings
    from penelope_cli import serve
    from penelope_engine.config import DTYPE_NAMES, CacheConfig, EngineConfig, SchedulerConfig

    actions = {a.dest: a for a in serve.build_parser()._actions}
    by_config = {
        EngineConfig: serve.ENGINE_OPTIONS,
        CacheConfig: serve.CACHE_OPTIONS + serve.STORE_OPTIONS + serve.SESSION_OPTIONS,
        SchedulerConfig: serve.SCHEDULER_OPTIONS,
        ApiSettings: serve.API_OPTIONS + ("metrics_require_auth", "tool_parser"),
    }
    for config, names in by_config.items():
        helps = {f.name: f.metadata.get("help") for f in dataclasses.fields(config)}
        for name in names:
            assert actions[name].help == helps[name], name
    assert tuple(actions["dtype"].choices) == DTYPE_NAMES  # the Literal's values
    assert actions["tenant_pin_tokens"].type is int and actions["store_region"].type is str
    assert actions["metrics_require_auth"].default is False
