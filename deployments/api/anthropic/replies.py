"""Anthropic Messages replies: the message body, usage, and the SSE event sequence.

Usage, in Anthropic's terms over Penelope's breakdown (`deployments.api.openai_bodies`):

    cache_read_input_tokens = device + host + store        (KV reused)
    cache_creation_input_tokens = recomputed + new          when a block had cache_control
    input_tokens = recomputed + new                         when none had
    input_tokens + cache_read + cache_creation = the prompt's tokens

Penelope keeps every computed page, asked or not; a request that asked
(`cache_control`) is told its computed tokens were written to the cache, one
that did not is told they were plain input. `usage.penelope` carries the
tier breakdown and the miss ledger, as on the OpenAI routes.

With tools offered, the reply's text goes through the model's tool-call
parser (`deployments.api.tools`): calls become `tool_use` blocks and the stop
reason `tool_use`; text that only looks like a call stays text.

A stream is `message_start`, `ping`, then per content block
`content_block_start`, `content_block_delta`s (`text_delta`, or
`input_json_delta` pieces of a tool_use's input), and
`content_block_stop`, then `message_delta` (stop_reason, stop_sequence,
usage) and `message_stop`. A failure after the stream started is an `error`
event, which ends it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from deployments.api.anthropic.errors import error_body
from deployments.api.deadline import Deadline
from deployments.api.generation import Generation, timed_deltas
from deployments.api.openai_bodies import Report, usage_body
from deployments.api.openai_stream import ErrorOf
from deployments.api.prepare import Prepared
from deployments.api.tools import (
    ArgsDelta,
    CallStart,
    ParsedReply,
    StreamEvent,
    StreamParser,
    TextDelta,
)
from penelope_engine.protocol import TokenUsage

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def usage(report: Report, cache_control: bool) -> dict[str, Any]:
    u = report.usage
    computed = u.prompt_tokens - u.cached_tokens
    return {
        "input_tokens": 0 if cache_control else computed,
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": computed if cache_control else 0,
        "penelope": usage_body(report)["penelope"],
    }


def stop_reason(gen: Generation, called: bool = False) -> str | None:
    if called:
        return "tool_use"
    if gen.stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(gen.finish_reason or "", gen.finish_reason)


def content_of(parsed: ParsedReply) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if parsed.content:
        content.append({"type": "text", "text": parsed.content})
    for call in parsed.calls:
        tool_input = json.loads(call.arguments)
        content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input})
    return content


@dataclass(frozen=True)
class AnthropicReplies:
    """A `deployments.api.openai_stream.ReplyShape` for `/v1/messages`; the reply is parsed for
    tool calls when the prepared request has a parser (tools may be called)."""

    cache_control: bool

    def body(self, prepared: Prepared, gen: Generation, text: str) -> dict[str, Any]:
        parsed = prepared.parser.parse(text) if prepared.parser else ParsedReply(text)
        return {
            **_message(prepared, content_of(parsed)),
            "stop_reason": stop_reason(gen, bool(parsed.calls)),
            "stop_sequence": None if parsed.calls else gen.stop_sequence,
            "usage": usage(gen.final_usage, self.cache_control),
        }

    async def events(
        self, gen: Generation, prepared: Prepared, deadline: Deadline, to_error: ErrorOf
    ) -> AsyncIterator[bytes]:
        try:
            start = _message(prepared, [])
            start["usage"] = usage(Report(_only_prompt(gen.prompt_usage)), self.cache_control)
            yield event("message_start", {"type": "message_start", "message": start})
            yield event("ping", {"type": "ping"})
            blocks = _Blocks()
            parser = StreamParser(prepared.parser) if prepared.parser else None
            async with aclosing(timed_deltas(gen, deadline)) as deltas:
                async for text in deltas:
                    for piece in parser.feed(text) if parser else [TextDelta(text)]:
                        for out in blocks.on(piece):
                            yield out
            for piece in parser.finish() if parser else []:
                for out in blocks.on(piece):
                    yield out
            for out in blocks.close():
                yield out
            final = usage(gen.final_usage, self.cache_control)
            end = {
                "stop_reason": stop_reason(gen, blocks.called),
                "stop_sequence": None if blocks.called else gen.stop_sequence,
            }
            yield event("message_delta", {"type": "message_delta", "delta": end, "usage": final})
            yield event("message_stop", {"type": "message_stop"})
        except Exception as exc:
            yield event("error", error_body(to_error(exc)))


def _message(prepared: Prepared, content: list[dict[str, Any]]) -> dict[str, Any]:
    meta = prepared.meta
    return {
        "id": meta.id,
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
    }


def _only_prompt(u: TokenUsage) -> TokenUsage:
    return replace(u, completion_tokens=0)


class _Blocks:
    """Parser events to content-block events: one block open at a time, indexed from 0."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None  # "text" or "tool_use"
        self.called = False

    def on(self, piece: StreamEvent) -> list[bytes]:
        out: list[bytes] = []
        if isinstance(piece, TextDelta):
            if not piece.text:
                return out
            if self.open != "text":
                out += self._start({"type": "text", "text": ""})
            delta: dict[str, Any] = {"type": "text_delta", "text": piece.text}
        elif isinstance(piece, CallStart):
            self.called = True
            block = {"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}}
            return self._start(block)
        else:
            assert isinstance(piece, ArgsDelta)
            delta = {"type": "input_json_delta", "partial_json": piece.text}
        body = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return [*out, event("content_block_delta", body)]

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.index += 1
        self.open = block["type"]
        body = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*out, event("content_block_start", body)]

    def close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        body = {"type": "content_block_stop", "index": self.index}
        return [event("content_block_stop", body)]


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
