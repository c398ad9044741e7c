"""The Ray Serve custom autoscaling policy: `deployments.metrics.autoscaling_policy:KvAwarePolicy`.

Ray pickles a policy's module *by value* and unpickles it in the controller,
so this module holds the policy class alone; the settings and the arithmetic
live in `deployments.metrics.autoscaling` and travel by reference.
"""

from __future__ import annotations

from typing import Any

from deployments.metrics.autoscaling import KvPressureSettings, kv_desired_replicas


class KvAwarePolicy:
    """Ray Serve custom autoscaling policy (class form; kwargs from `policy_kwargs`)."""

    def __init__(self, **kwargs: float) -> None:
        self.settings = KvPressureSettings(**kwargs)

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        """`ctx` is a `ray.serve.config.AutoscalingContext`; returns (replicas, state)."""
        current = ctx.current_num_replicas
        if current == 0:
            return ctx.target_num_replicas, {}
        queue = ctx.total_num_requests / ctx.config.get_target_ongoing_requests()
        kv = kv_desired_replicas(ctx.aggregated_metrics or {}, current, self.settings)
        return max(queue, kv), {"queue_desired": queue, "kv_desired": kv}
