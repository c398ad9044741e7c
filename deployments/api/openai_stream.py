"""OpenAI's reply shapes: a finished completion's body and the SSE stream of chunks.

`ReplyShape` is how one API writes a reply from a `Generation`; `OPENAI` writes
chat and text completions (tool calls parsed out of the text, whole or while
streaming), the Anthropic API its own (`deployments.api.anthropic.replies`).
An error after an SSE stream has started is sent as an error event followed by
`[DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Protocol

from deployments.api.deadline import Deadline
from deployments.api.errors import ApiError
from deployments.api.generation import Generation, timed_deltas
from deployments.api.openai_bodies import (
    SSE_DONE,
    ResponseMeta,
    chunk_body,
    completion_body,
    sse,
    tool_chunk_body,
    usage_chunk_body,
)
from deployments.api.prepare import Prepared
from deployments.api.tools.streaming import StreamParser
from deployments.api.tools.types import ParsedReply, TextDelta

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
