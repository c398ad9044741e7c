"""The KV-aware autoscaling policy on Ray's real AutoscalingContext, and the replica signals."""

from __future__ import annotations

from typing import Any

import pytest
from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from deployments.metrics.autoscaling import OCCUPANCY, RECOMPUTE, WORKING_SET, KvSignals
from deployments.metrics.autoscaling_policy import KvAwarePolicy
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import EngineStats, SessionDigest, TokenUsage

DEPLOYMENT = DeploymentID(name="PenelopeEngine", app_name="penelope")
REPLICAS = [ReplicaID(unique_id=f"r{i}", deployment_id=DEPLOYMENT) for i in range(2)]


def context(ongoing: float, per_replica: dict[str, list[float]]) -> AutoscalingContext:
    metrics = {
        name: dict(zip(REPLICAS, values, strict=True)) for name, values in per_replica.items()
    }
    return AutoscalingContext(
        deployment_id=DEPLOYMENT,
        deployment_name="PenelopeEngine",
        app_name="penelope",
        current_num_replicas=2,
        target_num_replicas=2,
        running_replicas=REPLICAS,
        total_num_requests=ongoing,
        total_queued_requests=0.0,
        aggregated_metrics=metrics,
        raw_metrics={},
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=8,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=0.0,
        config=AutoscalingConfig(target_ongoing_requests=4, max_replicas=8),
    )


def calm(**overrides: Any) -> dict[str, list[float]]:
    return {OCCUPANCY: [0.5, 0.5], WORKING_SET: [0.2, 0.2], RECOMPUTE: [0.0, 0.0], **overrides}


def test_queue_alone_drives_scaling_when_the_cache_is_calm() -> None:
    policy = KvAwarePolicy()
    assert policy(context(16, calm()))[0] == pytest.approx(4.0)
    assert policy(context(2, calm()))[0] == pytest.approx(0.5)


def test_a_live_working_set_beyond_the_fleet_scales_up_with_a_short_queue() -> None:
    desired, state = KvAwarePolicy()(context(2, calm(**{WORKING_SET: [0.9, 0.9]})))
    assert desired == pytest.approx(1.8 / 0.8)
    assert state["kv_desired"] > state["queue_desired"]


def test_a_full_cache_that_recomputes_asks_for_one_more_replica() -> None:
    thrash = calm(**{OCCUPANCY: [0.97, 0.95], RECOMPUTE: [0.4, 0.3]})
    assert KvAwarePolicy()(context(2, thrash))[0] == pytest.approx(3.0)
    full_but_fine = calm(**{OCCUPANCY: [0.97, 0.95], RECOMPUTE: [0.05, 0.0]})
    assert KvAwarePolicy()(context(2, full_but_fine))[0] < 2


def test_policy_kwargs_are_validated() -> None:
    with pytest.raises(ConfigError):
        KvAwarePolicy(recompute_threshold=0)
    with pytest.raises(TypeError):
        KvAwarePolicy(bogus=1)


def stats(recomputed: int, new: int, device: int = 0, used: int = 10) -> EngineStats:
    return EngineStats(
        tokens=TokenUsage(device_tokens=device, recomputed_tokens=recomputed, new_tokens=new),
        pages_device_used=used,
        pages_device_total=100,
    )


def test_signals_use_the_interval_and_only_live_sessions() -> None:
    signals = KvSignals(page_size=16, window_s=60)
    live = SessionDigest("a", device_tokens=320, host_tokens=0, store_tokens=0, last_access=950)
    idle = SessionDigest("b", device_tokens=800, host_tokens=0, store_tokens=0, last_access=100)
    first = signals.sample(stats(recomputed=50, new=50), [live, idle], now=1000)
    assert first == {OCCUPANCY: 0.1, WORKING_SET: 320 / 1600, RECOMPUTE: 0.5}
    second = signals.sample(stats(recomputed=50, new=150, device=100, used=90), [live], now=1000)
    assert second[RECOMPUTE] == 0.0 and second[OCCUPANCY] == 0.9
    assert signals.sample(stats(recomputed=50, new=150, device=100), [], now=1000)[RECOMPUTE] == 0
