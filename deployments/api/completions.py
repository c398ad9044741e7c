"""Run a prepared request: an in-flight slot, streaming or not, metrics, cancellation.

The first engine output is awaited before any response starts, so errors the
engine raises up front (invalid request, no capacity) become proper HTTP
errors, and the replica that serves the request is known for the
`x-penelope-replica` header. A client that disconnects, or a request that
outlives `api.request_timeout_s`, cancels the request, which aborts it in the
engine and frees its pages. An error after an SSE stream has started is sent
as an error event followed by `[DONE]`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing, suppress
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from deployments.api.backend import Backend, ReplicaOutput
from deployments.api.deadline import Deadline
from deployments.api.errors import ApiError, from_engine_error, overloaded
from deployments.api.prepare import Prepared
from deployments.api.responses import (
    SSE_DONE,
    Report,
    ResponseMeta,
    chunk_body,
    completion_body,
    sse,
    tool_chunk_body,
    usage_chunk_body,
)
from deployments.api.settings import ApiSettings
from deployments.api.textstream import TextStream
from deployments.api.tools.streaming import StreamParser
from deployments.api.tools.types import ParsedReply, TextDelta
from deployments.metrics.series import ApiMetrics
from penelope_engine.protocol import FinishReason, RequestOutput, TokenUsage

REPLICA_HEADER = "x-penelope-replica"
T = TypeVar("T")


class Generation:
    """One request's outputs turned into text deltas; usage at the end."""

    def __init__(self, prepared: Prepared, backend: Backend, metrics: ApiMetrics) -> None:
        self._prepared = prepared
        self._metrics = metrics
        self._text = TextStream(backend.tokenizer, prepared.stop)
        self._outputs = aiter(backend.generate(prepared.request))
        self._first: ReplicaOutput | None = None
        self._last_step: float | None = None
        self.replica = ""
        self.usage = TokenUsage()
        self.last: RequestOutput | None = None  # the engine's last output (hints, edits)
        self.finish_reason: FinishReason | None = None
        self.completion_tokens = 0

    async def start(self) -> None:
        """Wait for the first output; raises what the engine raised."""
        try:
            self._first = await anext(self._outputs)
        except StopAsyncIteration as exc:
            raise ApiError(500, "The engine returned no output.", type="server_error") from exc
        self.replica = self._first.replica

    async def deltas(self) -> AsyncGenerator[str, None]:
        assert self._first is not None, "call start() first"
        item = self._first
        while True:
            delta = self._take(item)
            if delta:
                yield delta
            if item.output.finished or self._text.stopped:
                break
            item = await anext(self._outputs)
        tail = self._text.flush()
        if tail:
            yield tail

    @property
    def final_usage(self) -> Report:
        u = self.usage
        usage = replace(
            u,
            prompt_tokens=u.prompt_tokens or len(self._prepared.request.prompt_token_ids),
            completion_tokens=self.completion_tokens,
        )
        last = self.last
        if last is None or not last.finished:
            return Report(usage)
        return Report(usage, last.hints, last.prompt_edit_at)

    @property
    def prompt_usage(self) -> TokenUsage:
        """Where the prompt's tokens came from, known from the first output on."""
        if self._first is not None and self._first.output.usage.prompt_tokens:
            return self._first.output.usage
        return replace(self.usage, prompt_tokens=len(self._prepared.request.prompt_token_ids))

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return self._text.stop_hit

    async def close(self) -> None:
        aclose = getattr(self._outputs, "aclose", None)
        if aclose is not None:
            await aclose()

    def _take(self, item: ReplicaOutput) -> str:
        out = item.output
        self.usage = out.usage if out.usage.prompt_tokens else self.usage
        self.last = out
        self.finish_reason = out.finish_reason
        if out.token_ids:
            self._observe_step()
            self.completion_tokens += len(out.token_ids)
        delta = self._text.push(out.token_ids)
        if self._text.stopped:
            self.finish_reason = "stop"
        return delta

    def _observe_step(self) -> None:
        now = time.perf_counter()
        if self._last_step is None:
            self._metrics.ttft.labels(self.replica).observe(now - self._prepared.arrival)
        else:
            self._metrics.itl.labels(self.replica).observe(now - self._last_step)
        self._last_step = now


class InflightSlots:
    """A bounded count of admitted, unfinished requests; over it, 429."""

    def __init__(self, settings: ApiSettings, metrics: ApiMetrics) -> None:
        self._limit = settings.max_pending
        self._retry_after_s = settings.retry_after_s
        self._metrics = metrics
        self._pending = 0

    def enter(self) -> None:
        if self._pending >= self._limit:
            raise overloaded(
                f"The server has {self._pending} requests in progress (limit {self._limit}); "
                "retry later.",
                self._retry_after_s,
            )
        self._pending += 1
        self._metrics.pending.set(self._pending)

    def leave(self) -> None:
        self._pending -= 1
        self._metrics.pending.set(self._pending)


ErrorOf = Callable[[Exception], ApiError]


class ReplyShape(Protocol):
    """How one API writes a finished reply and a stream (OpenAI's here; Anthropic's in
    `deployments.api.anthropic.replies`)."""

    def body(self, prepared: Prepared, gen: Generation, text: str) -> dict[str, Any]: ...

    def events(
        self, gen: Generation, prepared: Prepared, deadline: Deadline, to_error: ErrorOf
    ) -> AsyncIterator[bytes]: ...


class OpenAIReplies:
    """Chat and text completions, as OpenAI writes them."""

    def body(self, prepared: Prepared, gen: Generation, text: str) -> dict[str, Any]:
        reply = prepared.parser.parse(text) if prepared.parser else ParsedReply(text)
        finish = reply.finish_reason or gen.finish_reason
        return completion_body(prepared.meta, reply.content, finish, gen.final_usage, reply.calls)

    def events(
        self, gen: Generation, prepared: Prepared, deadline: Deadline, to_error: ErrorOf
    ) -> AsyncIterator[bytes]:
        return _sse_events(gen, prepared, deadline, to_error)


OPENAI = OpenAIReplies()


class CompletionHandler:
    """Handles prepared requests: a slot (or a 429), then a JSON body or an SSE stream."""

    def __init__(self, settings: ApiSettings, metrics: ApiMetrics) -> None:
        self._metrics = metrics
        self._slots = InflightSlots(settings, metrics)
        self._retry_after_s = settings.retry_after_s
        self._timeout_s = settings.request_timeout_s

    async def run(
        self,
        prepared: Prepared,
        backend: Backend,
        http_request: Request,
        shape: ReplyShape = OPENAI,
    ) -> JSONResponse | StreamingResponse:
        self._slots.enter()
        gen = Generation(prepared, backend, self._metrics)
        deadline = Deadline.after(prepared.arrival, self._timeout_s)
        try:
            await _until_disconnect_or(gen.start(), http_request, deadline)
        except BaseException as exc:
            await self._release(gen)
            if isinstance(exc, Exception):
                raise self._error(exc) from exc
            raise
        if prepared.stream:
            return _ClosingStream(
                shape.events(gen, prepared, deadline, self._error),
                on_close=lambda: self._release(gen),
                media_type="text/event-stream",
                headers={REPLICA_HEADER: gen.replica, "Cache-Control": "no-cache"},
            )
        try:
            text = await _until_disconnect_or(_collect(gen), http_request, deadline)
        except Exception as exc:
            raise self._error(exc) from exc
        finally:
            await self._release(gen)
        return JSONResponse(shape.body(prepared, gen, text), headers={REPLICA_HEADER: gen.replica})

    async def _release(self, gen: Generation) -> None:
        await gen.close()
        self._slots.leave()

    def _error(self, exc: Exception) -> ApiError:
        err = from_engine_error(exc, self._retry_after_s)
        if err.status == 504:
            self._metrics.timeouts.inc()
        return err


async def _collect(gen: Generation) -> str:
    async with aclosing(gen.deltas()) as deltas:
        return "".join([d async for d in deltas])


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


class _ClosingStream(StreamingResponse):
    """A streaming response that runs `on_close` however the stream ends.

    A generator's own `finally` does not run when the client disconnects
    before its first chunk; this does.
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        on_close: Callable[[], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


async def timed_deltas(gen: Generation, deadline: Deadline) -> AsyncGenerator[str, None]:
    """The generation's text deltas; each wait for one is bounded by the deadline."""
    async with aclosing(gen.deltas()) as deltas:
        while True:
            try:
                with deadline.enforced():
                    delta = await anext(deltas)
            except StopAsyncIteration:
                return
            yield delta


def _delta_chunks(
    meta: ResponseMeta, delta: str | None, calls: StreamParser | None
) -> list[dict[str, Any]]:
    """The chunks of one text delta (None: the reply's end), tool calls parsed out."""
    if calls is None:
        return [chunk_body(meta, delta)] if delta else []
    events = calls.feed(delta) if delta is not None else calls.finish()
    return [
        chunk_body(meta, e.text) if isinstance(e, TextDelta) else tool_chunk_body(meta, e)
        for e in events
    ]


async def _sse_events(
    gen: Generation,
    prepared: Prepared,
    deadline: Deadline,
    to_error: Callable[[Exception], ApiError],
) -> AsyncIterator[bytes]:
    """The SSE body; a failure or a passed deadline ends it with an error event and [DONE]."""
    meta = prepared.meta
    calls = StreamParser(prepared.parser) if prepared.parser else None
    try:
        yield sse(chunk_body(meta, "", first=True))
        async with aclosing(timed_deltas(gen, deadline)) as deltas:
            async for delta in deltas:
                for body in _delta_chunks(meta, delta, calls):
                    yield sse(body)
        for body in _delta_chunks(meta, None, calls):
            yield sse(body)
        called = calls is not None and calls.made_call
        yield sse(chunk_body(meta, "", "tool_calls" if called else gen.finish_reason))
        if prepared.include_usage:
            yield sse(usage_chunk_body(meta, gen.final_usage))
    except Exception as exc:
        yield sse(to_error(exc).body())
    yield SSE_DONE
