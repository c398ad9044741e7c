"""The routers of this process, so that the process can say what they route to.

Ray pickles a request router's class by value, so a registry kept in the
router's own module would be a copy in each process; this module is imported
by reference. `PenelopeRequestRouter` registers each instance here; the
ingress serves `views()` at `GET /v1/penelope/router` and reads the engine
replicas' stats from `routing_stats()` (`deployments.ray.replica_stats`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, Protocol


class Describable(Protocol):
    def describe(self) -> dict[str, Any]: ...

    def routing_stats(self) -> dict[str, Mapping[str, Any]]: ...


_ROUTERS: weakref.WeakSet[Any] = weakref.WeakSet()


def register(router: Describable) -> None:
    _ROUTERS.add(router)


def views() -> list[dict[str, Any]]:
    """Each registered router's `describe()`."""
    return [r.describe() for r in list(_ROUTERS)]


def routing_stats() -> dict[str, Mapping[str, Any]]:
    """The routing stats Ray gave this process's routers, by replica id."""
    out: dict[str, Mapping[str, Any]] = {}
    for r in list(_ROUTERS):
        out.update(r.routing_stats())
    return out
