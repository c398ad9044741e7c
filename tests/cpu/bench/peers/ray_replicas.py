"""In-memory stand-ins for Ray Serve's `RunningReplica`, to drive Ray's real router classes
without a cluster (the peers' models are checked against them choice by choice)."""

from __future__ import annotations

from typing import Any


def fake_replica_class(max_ongoing: int) -> type:
    """A `RunningReplica` subclass of deployment llm/app whose queue length a test sets."""
    from ray.serve._private.common import DeploymentID
    from ray.serve.request_router import ReplicaID, RunningReplica

    deployment = DeploymentID(name="llm", app_name="app")

    class FakeReplica(RunningReplica):
        def __init__(self, unique_id: str) -> None:
            self._replica_id = ReplicaID(unique_id=unique_id, deployment_id=deployment)
            self.queue_len = 0

        replica_id = property(lambda self: self._replica_id)
        node_id = property(lambda self: "")
        availability_zone = property(lambda self: None)
        multiplexed_model_ids = property(lambda self: set())
        max_ongoing_requests = property(lambda self: max_ongoing)
        routing_stats = property(lambda self: {})

        def push_proxy_handle(self, handle: Any) -> None:
            pass

        async def get_queue_len(self, *, deadline_s: float) -> int:
            return self.queue_len

    return FakeReplica
