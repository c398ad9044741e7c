"""Run a prepared request: streaming or not, metrics, cancellation.

The first engine output is awaited before any response starts, so errors the
engine raises up front (invalid request, no capacity) become proper HTTP
errors, and the replica that serves the request is known for the
`x-penelope-replica` header. A client that disconnects, or a request that
outlives `api.request_timeout_s`, cancels the request, which aborts it in the
engine and frees its pages; so does a stream whose client stops reading for
`api.stream_stall_timeout_s` (one write waits that long at most). The reply's
text comes from `generation`; its shape (JSON body, SSE events) from the API's
`ReplyShape` (`openai_stream`). Its slot under `api.max_pending` was taken at the
door (`admission`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any, TypeVar

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from deployments.api.backend import Backend
from deployments.api.deadline import Deadline
from deployments.api.errors import ApiError, from_engine_error
from deployments.api.generation import Generation, collect_text
from deployments.api.openai_stream import OPENAI, ReplyShape
from deployments.api.prepare import Prepared
from deployments.api.settings import ApiSettings
from deployments.metrics.series import ApiMetrics

log = logging.getLogger(__name__)
REPLICA_HEADER = "x-penelope-replica"
T = TypeVar("T")


class CompletionHandler:
    """Handles prepared requests: a JSON body or an SSE stream."""

    def __init__(self, settings: ApiSettings, metrics: ApiMetrics) -> None:
        self._metrics = metrics
        self._retry_after_s = settings.retry_after_s
        self._timeout_s = settings.request_timeout_s
        self._stall_s = settings.stream_stall_timeout_s

    async def run(
        self,
        prepared: Prepared,
        backend: Backend,
        http_request: Request,
        shape: ReplyShape = OPENAI,
    ) -> JSONResponse | StreamingResponse:
        gen = Generation(prepared, backend, self._metrics)
        deadline = Deadline.after(prepared.arrival, self._timeout_s)
        try:
            await _until_disconnect_or(gen.start(), http_request, deadline)
        except BaseException as exc:
            await gen.close()
            if isinstance(exc, Exception):
                raise self._error(exc) from exc
            raise
        if prepared.stream:
            return ClosingStream(
                shape.events(gen, prepared, deadline, self._error),
                on_close=gen.close,
                stall_s=self._stall_s,
                on_stall=self._metrics.stalled_streams.inc,
                media_type="text/event-stream",
                headers={REPLICA_HEADER: gen.replica, "Cache-Control": "no-cache"},
            )
        try:
            text = await _until_disconnect_or(collect_text(gen), http_request, deadline)
        except Exception as exc:
            raise self._error(exc) from exc
        finally:
            await gen.close()
        return JSONResponse(shape.body(prepared, gen, text), headers={REPLICA_HEADER: gen.replica})

    def _error(self, exc: Exception) -> ApiError:
        err = from_engine_error(exc, self._retry_after_s)
        if err.status == 504:
            self._metrics.timeouts.inc()
        return err


async def _until_disconnect_or(
    work: Coroutine[Any, Any, T], request: Request, deadline: Deadline
) -> T:
    """Run `work`; if the client disconnects or the deadline passes first, cancel it.

    Cancelling `work` aborts the request in the engine; this returns only once
    that abort has run.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait(
            {task, watcher}, timeout=deadline.remaining(), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    with suppress(asyncio.CancelledError, Exception):
        await task
    if watcher in done:
        raise ApiError(499, "The client closed the connection.", code="client_closed_request")
    raise deadline.error()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _Stalled(Exception):
    pass


class ClosingStream(StreamingResponse):
    """A streaming response that runs `on_close` however the stream ends, and ends it
    when one write waits `stall_s` for a client that reads nothing.

    A generator's own `finally` does not run when the client disconnects
    before its first chunk; this does.
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        on_close: Callable[[], Awaitable[None]],
        stall_s: float,
        on_stall: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self._stall_s = stall_s
        self._on_stall = on_stall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded(message: Message) -> None:
            try:  # a cancel scope, not wait_for's task per chunk: this runs per token
                with anyio.fail_after(self._stall_s):
                    await send(message)
            except TimeoutError:
                raise _Stalled from None

        try:
            await super().__call__(scope, receive, bounded)
        except _Stalled:  # the connection is dropped: its response cannot be finished
            self._on_stall()
            log.warning(
                "Penelope: a stream's client read nothing for %g s "
                "(api.stream_stall_timeout_s); its request is aborted",
                self._stall_s,
            )
        finally:
            await self._on_close()
