"""Admission: the bounded count of generation requests in flight, taken at the door.

A generation request (`GENERATION_ROUTES`) takes a slot in `InflightSlots` as
soon as its head arrives, before its body is read, and holds it until its
reply ends (a stream's last byte, an error, or the client going). Past
`api.max_pending` it is answered 429 with Retry-After at once, in its API's
error shape. Counting at the door, not after parsing, is what bounds a burst:
the requests of a burst all arrive before any reaches the engine, so a count
taken after parsing lets every one of them be read, parsed and tokenized
first, and the allocator keeps that peak after the burst. A body that
trickles in holds its slot, so its read has deadlines (`middleware`).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from deployments.api.errors import ApiError, ErrorShapes, overloaded, shape_for
from deployments.api.settings import ApiSettings
from deployments.metrics.series import ApiMetrics

GENERATION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages"})


class InflightSlots:
    """A bounded count of generation requests in flight; `pending` on /metrics."""

    def __init__(self, settings: ApiSettings, metrics: ApiMetrics) -> None:
        self._limit = settings.max_pending
        self._retry_after_s = settings.retry_after_s
        self._metrics = metrics
        self._pending = 0

    def try_enter(self) -> ApiError | None:
        """Take a slot; or, when none is free, the 429 to answer."""
        if self._pending >= self._limit:
            return overloaded(
                f"The server has {self._pending} requests in progress (limit {self._limit}); "
                "retry later.",
                self._retry_after_s,
            )
        self._pending += 1
        self._metrics.pending.set(self._pending)
        return None

    def leave(self) -> None:
        self._pending -= 1
        self._metrics.pending.set(self._pending)


class Admission:
    """ASGI middleware: a slot for each generation request's whole call, or 429."""

    def __init__(self, app: ASGIApp, slots: InflightSlots, shapes: ErrorShapes) -> None:
        self.app = app
        self.slots = slots
        self.shapes = shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in GENERATION_ROUTES
        ):
            await self.app(scope, receive, send)
            return
        refused = self.slots.try_enter()
        if refused is not None:
            await refused.response(shape_for(scope["path"], self.shapes))(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.leave()
