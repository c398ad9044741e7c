"""Cache-aware autoscaling: scale on the queue *or* on KV pressure.

Ray Serve's default policy scales on ongoing requests only. For agent
sessions that is not enough: a fleet can have short queues while its KV
caches thrash, every returning session recomputing history that was evicted
while it waited for a tool. More replicas (with sticky routing) means more KV
memory for the same sessions, so KV pressure is a reason to scale up too.

Each engine replica reports three numbers through `record_autoscaling_stats`
(`KvSignals.sample`), which Ray averages over `look_back_period_s`:

    kv_occupancy        device pages in use / device pages
    kv_working_set      device tokens of sessions used within the window /
                        device token capacity (the live set, not idle leftovers)
    kv_recompute_ratio  recomputed / prompt tokens since the previous sample

and `deployments.metrics.autoscaling_policy.KvAwarePolicy` asks for

    max( total ongoing requests / target_ongoing_requests,      # the queue
         sum(kv_working_set) / working_set_target,              # the live KV
         current + 1 if occupancy and recompute are both high ) # thrashing

Ray then applies min/max replicas, scaling factors and the up/down delays.
A full cache alone is not pressure (caches always fill up); recomputation of
evicted history while full is, and so is a live set larger than the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from penelope_engine.errors import ConfigError
from penelope_engine.protocol import EngineStats, SessionDigest

OCCUPANCY = "kv_occupancy"
WORKING_SET = "kv_working_set"
RECOMPUTE = "kv_recompute_ratio"


@dataclass(frozen=True)
class KvPressureSettings:
    """When the KV cache, not the queue, asks for another replica."""

    working_set_window_s: float = 180.0  # a session used this recently is live (tool gaps p90)
    working_set_target: float = 0.8  # live device tokens per replica, as a share of capacity
    occupancy_threshold: float = 0.9  # device pages in use above which recompute is pressure
    recompute_threshold: float = 0.2  # recomputed / prompt tokens over the last interval

    def __post_init__(self) -> None:
        if self.working_set_window_s <= 0:
            raise ConfigError("working_set_window_s must be positive")
        for name in ("working_set_target", "occupancy_threshold", "recompute_threshold"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"{name} must be in (0, 1], got {value}")


def _prompt_tokens(s: EngineStats) -> int:
    return s.tokens.sourced_tokens


class KvSignals:
    """Per-replica KV pressure samples; keeps the previous counters for the interval ratio."""

    def __init__(self, page_size: int, window_s: float) -> None:
        self._page_size = page_size
        self._window_s = window_s
        self._prev: EngineStats | None = None

    def sample(
        self, stats: EngineStats, digests: Sequence[SessionDigest], now: float
    ) -> dict[str, float]:
        """`now` is in the clock of the digests' `last_access` (the engine's `clock()`)."""
        capacity_pages = max(stats.pages_device_total, 1)
        live = sum(d.device_tokens for d in digests if now - d.last_access <= self._window_s)
        prev, self._prev = self._prev, stats
        return {
            OCCUPANCY: stats.pages_device_used / capacity_pages,
            WORKING_SET: live / (capacity_pages * self._page_size),
            RECOMPUTE: _interval_recompute(prev, stats),
        }


def _interval_recompute(prev: EngineStats | None, now: EngineStats) -> float:
    base_total = _prompt_tokens(prev) if prev else 0
    base_recomputed = prev.tokens.recomputed_tokens if prev else 0
    total = _prompt_tokens(now) - base_total
    return (now.tokens.recomputed_tokens - base_recomputed) / total if total > 0 else 0.0


def _mean(values: Mapping[Any, float]) -> float:
    return sum(values.values()) / len(values) if values else 0.0


def kv_desired_replicas(
    metrics: Mapping[str, Mapping[Any, float]], current: int, settings: KvPressureSettings
) -> float:
    """Replicas the KV signals ask for (0 when they ask for nothing)."""
    live = sum(metrics.get(WORKING_SET, {}).values())
    desired = live / settings.working_set_target
    thrashing = (
        _mean(metrics.get(OCCUPANCY, {})) >= settings.occupancy_threshold
        and _mean(metrics.get(RECOMPUTE, {})) >= settings.recompute_threshold
    )
    return max(desired, current + 1.0) if thrashing else desired
