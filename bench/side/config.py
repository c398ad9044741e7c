"""The side-by-side bench's settings (`SideConfig`) and each router set-up's Serve options.

Set-ups, in the order they run:

    ray-pow2     Ray Serve's default router (its own `PowerOfTwoChoicesRequestRouter`:
                 the engine deployment gets no `request_router_config`)
    ray-prefix   Ray Serve LLM's `PrefixCacheAffinityRouter`, the real class, with its
                 defaults; it reads the prompt text from `GenerateRequest.prompt`
    penelope     ours, `router.ray_router:PenelopeRequestRouter` with policy `affinity`
                 (what `make run` uses), configured as `deployments.ray.builder` does
    sgl-router   sgl-router's `cache_aware` in front of two `penelope serve` processes
                 (needs `--sglang-router-python`; skipped without it)

Every Ray set-up serves the same application: tiny Qwen3, a fixed fleet of
`replicas` engine replicas (half a CPU each, no autoscaling), `device_pages`
pages of `page_size` tokens each, no host tier and no store, so a set-up
starts cold and nothing of an earlier one survives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """One `penelope bench side` option per field; its help is the field's `help` metadata."""

    sessions: int = field(
        default=8, metadata={"help": "agent sessions drawn from the trace (seeded)"}
    )
    turns: int = field(default=6, metadata={"help": "each session's first turns"})
    seed: int = field(default=0, metadata={"help": "seed of the draw and of the start times"})
    mean_interarrival_s: float = field(
        default=4.0, metadata={"help": "mean gap between session starts (Poisson)"}
    )
    time_scale: float = field(default=0.25, metadata={"help": "tool times x this"})
    max_think_s: float = field(default=10.0, metadata={"help": "cap on each scaled tool time"})
    window_tokens: int = field(
        default=4096,
        metadata={"help": "only sessions whose first turns all fit in this many tokens are drawn"},
    )
    max_tokens: int = field(default=16, metadata={"help": "cap on each request's output tokens"})
    replicas: int = field(
        default=2, metadata={"help": "engine replicas (sgl-router: penelope serve workers)"}
    )
    device_pages: int = field(  # ours fits its sessions, a spread one does not
        default=256, metadata={"help": "KV pages per replica"}
    )
    page_size: int = field(default=16, metadata={"help": "tokens per KV page"})
    max_ongoing_requests: int = field(
        default=8, metadata={"help": "requests one Ray engine replica runs at once"}
    )
    stats_period_s: float = field(
        default=0.5,
        metadata={"help": "how often Ray engine replicas publish their session digests"},
    )
    setups: tuple[str, ...] = field(
        default=SETUPS, metadata={"help": "comma-separated set-ups, run in this order"}
    )
    startup_timeout_s: float = field(
        default=300.0, metadata={"help": "a set-up must serve within this"}
    )
    run_timeout_s: float = field(
        default=600.0, metadata={"help": "a set-up's sessions must finish within this"}
    )
    sglang_router_python: str | None = field(
        default=None,
        metadata={"help": "python of a venv with sglang-router==0.3.2 (none: skip sgl-router)"},
    )
    trace: str = field(default=str(DEFAULT_TRACE), metadata={"help": "Claude Code trace file"})

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
