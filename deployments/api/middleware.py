"""ASGI middleware of the API: body-size limit and request counting.

Both are plain ASGI wrappers (no buffering), so they work the same under
uvicorn and under Ray Serve's ingress.
"""

from __future__ import annotations

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


class BodySizeLimit:
    """Refuse bodies over `max_bytes` with 413, by header or while reading.

    The body is read here (FastAPI would buffer it anyway) and replayed to the
    app, so an oversized chunked body is refused before any parsing.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, shapes: ErrorShapes | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.shapes = shapes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        too_large = declared is not None and declared.isdigit() and int(declared) > self.max_bytes
        body = None if too_large else await self._read(receive)
        if body is None:
            shape = shape_for(scope.get("path", ""), self.shapes)
            await BodyTooLarge(self.max_bytes).response(shape)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
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
