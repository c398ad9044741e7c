"""ASGI middleware of the API: the request body's limits, and request counting.

Both are plain ASGI wrappers, so they work the same under uvicorn and under
Ray Serve's ingress.
"""

from __future__ import annotations

import time

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deployments.api.errors import ApiError, ErrorShapes, shape_for
from deployments.metrics.series import ApiMetrics

COUNTED_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/health",
        "/metrics",
    }
)


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"The request body exceeds {limit} bytes.",
            code="request_too_large",
        )


class BodyTimeout(ApiError):
    def __init__(self, what: str) -> None:
        message = f"The request body did not arrive in time ({what})."
        super().__init__(408, message, code="request_body_timeout")


class BodyLimits:
    """Refuse bodies over `max_bytes` with 413, by header or while reading, and bodies
    that stall (no byte for `idle_s`) or outlast `total_s` with 408.

    The body is read here (FastAPI would buffer it anyway) and replayed to the
    app, so an oversized chunked body is refused before any parsing, and a
    client that stops sending mid-body cannot hold its connection (and its
    admission slot) forever.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        idle_s: float,
        total_s: float,
        shapes: ErrorShapes | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.idle_s = idle_s
        self.total_s = total_s
        self.shapes = shapes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        too_large = declared is not None and declared.isdigit() and int(declared) > self.max_bytes
        refused: ApiError | None = BodyTooLarge(self.max_bytes) if too_large else None
        body = b""
        if refused is None:
            try:
                body = await self._read(receive)
            except ApiError as err:
                refused = err
        if refused is not None:
            shape = shape_for(scope.get("path", ""), self.shapes)
            await refused.response(shape)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        """The whole body; BodyTooLarge once it passes the limit, BodyTimeout if it stalls."""
        chunks: list[bytes] = []
        size = 0
        end = time.monotonic() + self.total_s
        while True:
            wait_s = min(self.idle_s, end - time.monotonic())
            try:  # a cancel scope: no task per message, as wait_for would make
                with anyio.fail_after(max(wait_s, 0.0)):
                    message = await receive()
            except TimeoutError:
                stalled = wait_s == self.idle_s
                raise BodyTimeout(
                    f"no byte for {self.idle_s:g} s, api.body_idle_timeout_s" if stalled
                    else f"{self.total_s:g} s in all, api.request_timeout_s"
                ) from None  # fmt: skip
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that yields `body` once, then defers to the real one (disconnects)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


class RequestCounter:
    """Count finished requests by route and status in `penelope_requests_total`."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope["path"] if scope["path"] in COUNTED_ROUTES else "other"
            self.metrics.requests.labels(route, str(status)).inc()
