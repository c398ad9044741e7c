"""What operators read and what scales the fleet: Prometheus series and KV-aware autoscaling.

Modules:
    series              Prometheus: engine stats per replica, TTFT/ITL histograms, the
                        store's health and the write-behind queue
    autoscaling         KV pressure signals; ``autoscaling_policy`` the Ray policy class
    autoscaling_policy  the Ray Serve custom autoscaling policy:
                        `deployments.metrics.autoscaling_policy:KvAwarePolicy`
"""
