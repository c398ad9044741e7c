"""The simulator's set-up: one replica's cache, tiers and scheduler, the fleet and its router.

`SimConfig` is what `bench.sim.loop.Simulator` runs and what every result
states (`describe`); `cache_config` is one replica's `CacheConfig`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bench.config import one_of
from bench.peers.registry import SIM_ROUTERS
from bench.sim.copyrates import COPY_RATES
from bench.sim.oracle import SIM_EVICTION_POLICIES, policy_for_config
from bench.sim.replica import SIM_NAMESPACE, TIERS
from penelope_engine.config import CacheConfig, SchedulerConfig


def default_scheduler() -> SchedulerConfig:
    return SchedulerConfig(max_batch_tokens=8192, max_running=64, prefill_chunk=8192)


@dataclass(frozen=True)
class SimConfig:
    policy: str = "lru"
    tiers: str = "gpu"  # one of TIERS: "gpu", "gpu+cpu", "gpu+cpu+store"
    # loads from the host and the store stream layer by layer, overlapped with the forward
    # (SGLang HiCache); False: whole pages before it (Penelope's tiers, vLLM with LMCache)
    layerwise_loads: bool = False
    # device-to-host copies on a stream of their own, stalling no step (SGLang HiCache's
    # write-through); False: every copy is on the step thread (`bench.sim.tiers`)
    async_writes: bool = False
    async_spills: bool = False  # host pages written to the store off the step thread
    device_budget_tokens: int = 200_000
    host_budget_tokens: int = 0  # used (and required) with a host tier
    replicas: int = 1
    router: str = "pow2"
    prefix_affinity: bool = True  # affinity router: send new sessions where their prefix is
    page_size: int = 16
    scheduler: SchedulerConfig = field(default_factory=default_scheduler)
    max_ongoing: int = 128  # Ray Serve max_ongoing_requests per replica
    digest_period_s: float = 10.0
    vocab_size: int = 151936
    fast_decode: bool = True  # run decode-only stretches as one event (same times)
    # Hint mode (`bench.sim.hints`): each request carries the harness's `SessionHints` from
    # the trace's truth, `expected_gap_s` with log-normal noise of sigma `hint_noise`
    # (seeded by the run's seed). Only for engines with a hint API (Penelope's).
    hints: bool = False
    hint_noise: float = 0.25
    # a what-if, not a product: copies between tiers take no time (`FreeCopies`)
    free_copies: bool = False
    # copies between tiers at the rates an engine was measured to make them
    # (`bench.sim.copyrates.COPY_RATES`); None: the cost model's roofline
    copy_rates: str | None = None

    def __post_init__(self) -> None:
        SIM_EVICTION_POLICIES.check(self.policy)
        if self.copy_rates is not None:
            COPY_RATES.check(self.copy_rates)
        one_of(self, "tiers", TIERS)
        one_of(self, "router", sorted(SIM_ROUTERS))
        if self.tiers != "gpu" and self.host_budget_tokens < self.page_size:
            raise ValueError(f"tiers {self.tiers!r} needs host_budget_tokens >= page_size")
        if self.device_budget_tokens < self.page_size or self.replicas < 1:
            raise ValueError("device_budget_tokens must be >= page_size and replicas >= 1")
        if self.digest_period_s <= 0 or self.max_ongoing < 1:
            raise ValueError("digest_period_s must be > 0 and max_ongoing >= 1")
        if not 0.0 <= self.hint_noise < float("inf"):
            raise ValueError(f"hint_noise must be finite and >= 0, got {self.hint_noise}")

    def cache_config(self) -> CacheConfig:
        """One replica's cache; the policy is `policy`, which `Replica.simulated` makes
        (the oracle is the simulator's own, so the config names its deployable base)."""
        host = self.host_budget_tokens // self.page_size if self.tiers != "gpu" else 0
        return CacheConfig(
            page_size=self.page_size,
            device_pages=self.device_budget_tokens // self.page_size,
            host_pages=host,
            policy=policy_for_config(self.policy)[0],
            namespace=SIM_NAMESPACE,
        )

    def describe(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "scheduler"}
        return {**d, "scheduler": dataclasses.asdict(self.scheduler)}
