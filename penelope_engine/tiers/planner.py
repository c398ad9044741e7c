"""Load or recompute: for each missing segment, the cheaper way back to the device.

The planner asks a `PlannerCost` what recomputing a segment and loading it
from a tier cost; whatever answers both (the engine's `CalibratedCost`, or the
simulator's cost models) drives the same decision.

In the engine's `CalibratedCost`, recomputing m tokens at offset a costs
``m*c_lin + c_attn*(m*a + m*m/2)`` (linear layers plus attention over earlier
keys); loading them costs their bytes over the tier's bandwidth plus a fixed
latency. `CostCalibrator` refines the constants from observed step times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from penelope_engine.cache.tier import Tier
from penelope_engine.costs import C_ATTN, C_LIN
from penelope_engine.fit import nonneg_lstsq


class PlannerCost(Protocol):
    """What the planner needs to know: seconds to recompute a segment, or to load it."""

    def recompute_s(self, start: int, length: int) -> float:
        """Prefill of `length` tokens at positions start, start + 1, ..."""
        ...

    def load_s(self, length: int, tier: Tier) -> float:
        """Copy of `length` tokens' KV from `tier` (HOST or STORE) to the device."""
        ...


@dataclass(frozen=True)
class CalibratedCost:
    """The engine's `PlannerCost`: prefill constants and tier bandwidths, refined live."""

    c_lin: float = C_LIN  # seconds per prefilled token, position-independent part
    c_attn: float = C_ATTN  # seconds per token per earlier key
    host_bytes_per_s: float = 10e9
    store_bytes_per_s: float = 1e9
    load_latency_s: float = 50e-6
    kv_bytes_per_token: int = 2 * 4 * 2 * 64 * 4  # tiny Qwen3 fp32

    def recompute_s(self, start: int, length: int) -> float:
        m, a = length, start
        return m * self.c_lin + self.c_attn * (m * a + m * m / 2)

    def load_s(self, length: int, tier: Tier) -> float:
        bw = self.host_bytes_per_s if tier == Tier.HOST else self.store_bytes_per_s
        return self.load_latency_s + length * self.kv_bytes_per_token / bw

    def with_prefill_fit(self, c_lin: float, c_attn: float) -> CalibratedCost:
        return replace(self, c_lin=max(c_lin, 0.0), c_attn=max(c_attn, 0.0))


def choose(cost: PlannerCost, tier: Tier, start: int, length: int) -> str:
    """'load' or 'recompute' for a segment of `length` tokens at `start` held by `tier`."""
    return "load" if cost.load_s(length, tier) <= cost.recompute_s(start, length) else "recompute"


def fit_prefill(samples: list[tuple[int, int, float]]) -> tuple[float, float]:
    """(c_lin, c_attn) >= 0 by least squares from (start, length, seconds) prefill timings."""
    if not samples:
        return (0.0, 0.0)
    x = np.array([(float(m), m * a + m * m / 2.0) for a, m, _ in samples])
    y = np.array([t for _, _, t in samples], dtype=float)
    c_lin, c_attn = nonneg_lstsq(x, y)
    return (float(c_lin), float(c_attn))


class CostCalibrator:
    """Refines a `CalibratedCost` from what the running engine observes.

    Prefill steps give (start, length, seconds) samples, refit by
    non-negative least squares every `refit_every` samples over a sliding
    window; tier copies give bytes/second, smoothed.
    """

    def __init__(self, cost: CalibratedCost, window: int = 256, refit_every: int = 16) -> None:
        self.cost = cost
        self.window = window
        self.refit_every = refit_every
        self._samples: list[tuple[int, int, float]] = []
        self._since = 0

    def observe_prefill(self, start: int, length: int, seconds: float) -> None:
        self._samples.append((start, length, seconds))
        del self._samples[: -self.window]
        self._since += 1
        if self._since >= self.refit_every and len({a for a, _, _ in self._samples}) > 1:
            self._since = 0
            self.cost = self.cost.with_prefill_fit(*fit_prefill(self._samples))

    def observe_copy(self, tier: Tier, nbytes: int, seconds: float) -> None:
        if seconds <= 0 or nbytes <= 0:
            return
        field = "host_bytes_per_s" if tier == Tier.HOST else "store_bytes_per_s"
        old = getattr(self.cost, field)
        self.cost = replace(self.cost, **{field: 0.8 * old + 0.2 * nbytes / seconds})
