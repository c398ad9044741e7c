"""Calls through Ray Serve handles: the failures that mean "no replica served it", and a
cancel that never raises.

Ray 2.60's `DeploymentResponse(Generator).cancel()` fetches the call's assignment
and raises again whatever failed it (backpressure, no replica): an `except` that
answers the failure and then cancels in `finally` would have its answer replaced
by the raw exception (a 429 became a 500; a stats reporter's task died).
"""

from __future__ import annotations

from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.exceptions import (
    BackPressureError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)
from ray.serve.handle import DeploymentResponse, DeploymentResponseGenerator

# A call whose replica died or could not be reached: the caller answers 503.
REPLICA_FAILURES = (
    RayActorError,
    ActorUnavailableError,
    ReplicaUnavailableError,
    DeploymentUnavailableError,
)


def cancel_call(response: DeploymentResponse | DeploymentResponseGenerator) -> None:
    """Cancel a call that did not finish (its caller left, or it failed). A call whose
    assignment to a replica failed holds nothing to cancel; its failure was answered."""
    try:
        response.cancel()
    except (BackPressureError, *REPLICA_FAILURES):
        pass
