"""The Ray Serve application's configuration: frozen dataclasses, parsed with pydantic.

`serve_config.yaml` passes its `args:` mapping to `deployments.ray.builder:build_app`,
which calls `parse_serve_config`. Pydantic validates the types at this YAML
edge (and the dataclasses' own checks run), unknown keys are errors that name
the key, and everything past this point is frozen dataclasses.

    args:
      engine:      penelope_engine.config.EngineConfig (model, cache, scheduler),
                   or the string "sglang" to run SGLang with the Penelope backend
      sglang:      penelope_sglang.config.SGLangEngineConfig (with engine: sglang;
                   CUDA only to run, parsed anywhere)
      api:         deployments.api.settings.ApiSettings (limits; keys come from a file/env)
      engine_deployment: EngineDeploymentSettings (CPUs, queue bounds, autoscaling)
      ingress:     IngressSettings
      router:      RouterSettings (router.schema.RouterConfig under `options`)
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from deployments.api.settings import ApiSettings
from deployments.metrics.autoscaling import KvPressureSettings
from penelope_engine.config import EngineConfig
from penelope_engine.errors import ConfigError
from penelope_engine.shipped import shipped_engine
from penelope_engine.util import require
from penelope_sglang.config import SGLangEngineConfig
from router.board import PLACEMENT_BOARDS
from router.policies import ROUTING_POLICIES
from router.schema import RouterConfig


@dataclass(frozen=True)
class AutoscalingSettings:
    min_replicas: int = 1
    max_replicas: int = 4
    initial_replicas: int | None = None
    target_ongoing_requests: float = 4.0
    upscale_delay_s: float = 10.0
    downscale_delay_s: float = 300.0
    look_back_period_s: float = 20.0
    # how often each replica reports the queue Ray scales on (Ray's default); the look-back
    # window must hold more than one report, or a window may hold none and scaling stalls
    metrics_interval_s: float = 10.0
    kv_pressure: KvPressureSettings = field(default_factory=KvPressureSettings)

    def __post_init__(self) -> None:
        require(self.min_replicas >= 1, "min_replicas must be >= 1 (sessions hold KV)")
        require(
            self.max_replicas >= self.min_replicas,
            f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})",
        )
        initial = self.initial_replicas
        require(
            initial is None or self.min_replicas <= initial <= self.max_replicas,
            f"initial_replicas ({initial}) must be in [min_replicas, max_replicas]",
        )
        require(self.target_ongoing_requests > 0, "target_ongoing_requests must be positive")
        for name in ("upscale_delay_s", "downscale_delay_s", "look_back_period_s"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0")
        require(
            0 < self.metrics_interval_s < self.look_back_period_s,
            f"metrics_interval_s ({self.metrics_interval_s}) must be positive and below "
            f"look_back_period_s ({self.look_back_period_s}), so every window holds reports",
        )


@dataclass(frozen=True)
class EngineDeploymentSettings:
    """One engine per replica. `autoscaling: null` runs a fixed `num_replicas`."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    num_replicas: int = 2
    max_ongoing_requests: int = 16
    max_queued_requests: int = 64
    retry_after_s: float = 1.0
    autoscaling: AutoscalingSettings | None = field(default_factory=AutoscalingSettings)

    def __post_init__(self) -> None:
        require(self.num_cpus > 0, f"num_cpus must be positive, got {self.num_cpus}")
        require(self.num_gpus >= 0, f"num_gpus must be >= 0, got {self.num_gpus}")
        require(self.num_replicas >= 1, "num_replicas must be >= 1")
        require(self.max_ongoing_requests >= 1, "max_ongoing_requests must be >= 1")
        require(self.max_queued_requests >= 1, "max_queued_requests must be >= 1")
        require(self.retry_after_s >= 0, "retry_after_s must be >= 0")

    @property
    def kv_pressure(self) -> KvPressureSettings:
        return self.autoscaling.kv_pressure if self.autoscaling else KvPressureSettings()


@dataclass(frozen=True)
class IngressSettings:
    num_cpus: float = 0.25
    num_replicas: int = 1
    api_keys_file: str | None = None  # read on each ingress replica, with PENELOPE_API_KEYS

    def __post_init__(self) -> None:
        require(self.num_cpus >= 0, f"num_cpus must be >= 0, got {self.num_cpus}")
        require(self.num_replicas >= 1, "num_replicas must be >= 1")


@dataclass(frozen=True)
class RouterSettings:
    policy: str = "affinity"
    # how the routers of several calling processes (ingress replicas) agree on a new
    # session's home before a digest shows it: router.board's PLACEMENT_BOARDS
    placements: str = "ray"
    options: RouterConfig = field(default_factory=RouterConfig)
    stats_period_s: float = 2.0  # how fresh the replicas' session digests are
    stats_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        require(
            self.policy in ROUTING_POLICIES,
            f"router policy must be one of {', '.join(ROUTING_POLICIES)}, got {self.policy!r}",
        )
        require(
            self.placements in PLACEMENT_BOARDS,
            f"router placements must be one of {', '.join(PLACEMENT_BOARDS)}, "
            f"got {self.placements!r}",
        )
        require(self.stats_period_s > 0, "stats_period_s must be positive")
        require(self.stats_timeout_s > 0, "stats_timeout_s must be positive")

    def router_kwargs(self) -> dict[str, Any]:
        """JSON-serializable `request_router_kwargs`: the policy plus non-default options."""
        default = RouterConfig()
        changed = {
            f.name: getattr(self.options, f.name)
            for f in dataclasses.fields(RouterConfig)
            if getattr(self.options, f.name) != getattr(default, f.name)
        }
        return {"policy": self.policy, "placements": self.placements, **changed}


@dataclass(frozen=True)
class ServeConfig:
    """Everything `build_application` needs."""

    engine: EngineConfig | typing.Literal["sglang"] = field(default_factory=shipped_engine)
    sglang: SGLangEngineConfig | None = None
    api: ApiSettings = field(default_factory=ApiSettings)
    engine_deployment: EngineDeploymentSettings = field(default_factory=EngineDeploymentSettings)
    ingress: IngressSettings = field(default_factory=IngressSettings)
    router: RouterSettings = field(default_factory=RouterSettings)

    def __post_init__(self) -> None:
        require(not self.api.api_keys, "put API keys in ingress.api_keys_file or the env")
        require(
            (self.engine == "sglang") == (self.sglang is not None),
            "engine: sglang needs an sglang: section (model_path, ...), and sglang: needs "
            "engine: sglang",
        )

    @property
    def replica_engine(self) -> EngineConfig | SGLangEngineConfig:
        """What each engine replica builds."""
        if isinstance(self.engine, EngineConfig):
            return self.engine
        assert self.sglang is not None
        return self.sglang


def parse_serve_config(args: Mapping[str, Any] | None) -> ServeConfig:
    """Validate the YAML `args` mapping; errors name the offending key."""
    raw = dict(args or {})
    _reject_unknown(raw, ServeConfig, "args")
    try:
        return TypeAdapter(ServeConfig).validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"serve config: {where}: {first['msg']}") from exc


def _reject_unknown(raw: Mapping[str, Any], cls: type, where: str) -> None:
    """Pydantic ignores unknown keys of plain dataclasses; a typo must not pass silently."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(by_name))
    require(
        not unknown,
        f"serve config: unknown key(s) {unknown} in {where}; valid: {', '.join(sorted(by_name))}",
    )
    hints = _field_classes(cls)
    for name, value in raw.items():
        sub = hints.get(name)
        if sub is not None and isinstance(value, Mapping):
            _reject_unknown(value, sub, f"{where}.{name}")


def _field_classes(cls: type) -> dict[str, type]:
    """Dataclass-typed fields of `cls` (unwrapping `X | None`)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for name, hint in hints.items():
        candidates = [hint, *typing.get_args(hint)]
        for c in candidates:
            if dataclasses.is_dataclass(c) and isinstance(c, type):
                out[name] = c
                break
    return out
