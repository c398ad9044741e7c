"""Copies between the tiers at the rates an engine was measured to make them.

The roofline charges every copy at PCIe's rate x `pcie_eff`, both ways. A set-up
whose engine was measured (`CacheSpec.copy_rates`) is charged what its engine
took instead: `MeasuredCopies` wraps the cost model so that host loads and
device-to-host copies (demotions, write-through) cost ``latency + bytes / rate``
of the named `CopyRates`; store loads and compute are the inner model's.

`torch-tiers-h100` is Penelope's `TorchTiers` through `PageMover` on one H100
(docs/results.md 4, `penelope bench copies`, Qwen3-8B's KV, bf16,
16-token pages): each direction's two-point fit of the warm medians, host ->
device over 4,096 and 16,384 tokens (13.2 and 50.5 ms; the 1,024-token point,
20.7 ms, was the first size timed and is left out), device -> host over 1,024
and 16,384 (11.2 and 123.4 ms; the 4,096 point, 32.4 ms, is 1 ms off the fit).
The H200 has the same PCIe Gen5 x16 link (the roofline's 64 GB/s for both).
`torch-tiers-h100-cold` charges host loads at the rate of the one load measured
inside the engine's step (7,680 tokens in 75.7 ms), 3.2x the warm fit: the
what-if that the warm bench flatters the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.sim.costmodel import CostModel, OtherCopies
from penelope_engine.cache.tier import Tier
from penelope_engine.registry import Registry


@dataclass(frozen=True)
class CopyRates:
    h2d_latency_s: float
    h2d_bytes_per_s: float
    d2h_latency_s: float
    d2h_bytes_per_s: float

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 0 or (name.endswith("bytes_per_s") and value == 0):
                raise ValueError(f"{name} must be positive, got {value}")


COPY_RATES: Registry[CopyRates] = Registry(
    "copy rates",
    {
        "torch-tiers-h100": CopyRates(0.76e-3, 48.6e9, 3.7e-3, 20.2e9),
        "torch-tiers-h100-cold": CopyRates(0.0, 14.6e9, 3.7e-3, 20.2e9),
    },
)


class MeasuredCopies(OtherCopies):
    """`inner` with host loads and device-to-host copies at `rates`; all else is `inner`'s."""

    def __init__(self, inner: CostModel, rates: CopyRates, name: str) -> None:
        super().__init__(inner)
        self.rates, self.name = rates, name

    def load_time(self, tokens: int, tier: Tier) -> float:
        if tier != Tier.HOST:
            return self.inner.load_time(tokens, tier)
        r = self.rates
        return r.h2d_latency_s + tokens * self.kv_bytes_per_token / r.h2d_bytes_per_s

    def offload_time(self, tokens: int) -> float:
        r = self.rates
        return r.d2h_latency_s + tokens * self.kv_bytes_per_token / r.d2h_bytes_per_s

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "copy_rates": {"name": self.name, **vars(self.rates)}}
