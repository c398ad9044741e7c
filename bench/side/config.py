"""The side-by-side bench's settings (`SideConfig`) and each router set-up's Serve options.

Set-ups, in the order they run:

    ray-pow2     Ray Serve's default router (its own `PowerOfTwoChoicesRequestRouter`:
                 the engine deployment gets no `request_router_config`)
    ray-prefix   Ray Serve LLM's `PrefixCacheAffinityRouter`, the real class, with its
                 defaults; it reads the prompt text from `GenerateRequest.prompt`
    penelope     ours, `router.ray_router:PenelopeRequestRouter` with policy `affinity`
                 (what `make run` uses), configured as `deployments.builder` does
    sgl-router   sgl-router's `cache_aware` in front of two `penelope serve` processes
                 (needs `--sglang-router-python`; skipped without it)

Every Ray set-up serves the same application: tiny Qwen3, a fixed fleet of
`replicas` engine replicas (half a CPU each, no autoscaling), `device_pages`
pages of `page_size` tokens each, no host tier and no store, so a set-up
starts cold and nothing of an earlier one survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.traces import DEFAULT_TRACE

MODEL = "tiny-qwen3"
POW2, RAY_PREFIX, PENELOPE, SGL_ROUTER = "ray-pow2", "ray-prefix", "penelope", "sgl-router"
SETUPS = (POW2, RAY_PREFIX, PENELOPE, SGL_ROUTER)
RAY_SETUPS = (POW2, RAY_PREFIX, PENELOPE)
RAY_PREFIX_ROUTER_CLASS = (
    "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router"
    ":PrefixCacheAffinityRouter"
)
REPLICA_CPUS = 0.5
INGRESS_CPUS = 0.25


@dataclass(frozen=True)
class SideConfig:
    sessions: int = 8
    turns: int = 6  # each session's first turns
    seed: int = 0
    mean_interarrival_s: float = 4.0  # Poisson session starts
    time_scale: float = 0.25  # tool times x this ...
    max_think_s: float = 10.0  # ... and capped at this
    window_tokens: int = 4096  # only sessions whose first turns all fit are drawn
    max_tokens: int = 16  # cap on each request's output tokens
    replicas: int = 2
    device_pages: int = 256  # per replica: ours fits its sessions, a spread one does not
    page_size: int = 16
    max_ongoing_requests: int = 8
    stats_period_s: float = 0.5  # our router's digest period
    setups: tuple[str, ...] = SETUPS
    startup_timeout_s: float = 300.0  # a set-up must serve within this
    run_timeout_s: float = 600.0  # a set-up's client must finish within this
    sglang_router_python: str | None = None
    trace: str = str(DEFAULT_TRACE)

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.turns < 1 or self.max_tokens < 1 or self.replicas < 1:
            raise ValueError("sessions, turns, max_tokens and replicas must be positive")
        if self.time_scale <= 0 or self.max_think_s < 0 or self.mean_interarrival_s < 0:
            raise ValueError("time_scale must be positive, max_think_s and interarrival >= 0")
        unknown = [s for s in self.setups if s not in SETUPS]
        if unknown or not self.setups:
            raise ValueError(f"unknown set-up(s) {unknown}; valid: {', '.join(SETUPS)}")
        if min(self.startup_timeout_s, self.run_timeout_s) <= 0:
            raise ValueError("timeouts must be positive")


def serve_args(cfg: SideConfig) -> dict[str, Any]:
    """`serve_config.yaml`-style `args` of the application every Ray set-up serves."""
    return {
        "engine": {
            "model": MODEL,
            "cache": {"page_size": cfg.page_size, "device_pages": cfg.device_pages},
        },
        "engine_deployment": {
            "num_cpus": REPLICA_CPUS,
            "num_replicas": cfg.replicas,
            "max_ongoing_requests": cfg.max_ongoing_requests,
            "autoscaling": None,
        },
        "ingress": {"num_cpus": INGRESS_CPUS},
        "router": {"policy": "affinity", "stats_period_s": cfg.stats_period_s},
    }


def serve_command_args(cfg: SideConfig) -> list[str]:
    """`penelope serve` options giving each sgl-router worker the Ray replicas' engine."""
    return [
        "--model", MODEL,
        "--page-size", str(cfg.page_size),
        "--device-pages", str(cfg.device_pages),
        "--host-pages", "0",
    ]  # fmt: skip
