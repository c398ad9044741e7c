"""Anthropic Messages replies: the message body, usage, and the SSE event sequence.

Usage, in Anthropic's terms over Penelope's breakdown (`deployments.responses`):

    cache_read_input_tokens = device + host + store        (KV reused)
    cache_creation_input_tokens = recomputed + new          when a block had cache_control
    input_tokens = recomputed + new                         when none had
    input_tokens + cache_read + cache_creation = the prompt's tokens

Penelope keeps every computed page, asked or not; a request that asked
(`cache_control`) is told its computed tokens were written to the cache, one
that did not is told they were plain input. `usage.penelope` carries the
tier breakdown and the miss ledger, as on the OpenAI routes.

A stream is `message_start`, `ping`, then per content block
`content_block_start`, `content_block_delta`s (`text_delta`), and
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

from deployments.anthropic.errors import error_body
from deployments.completions import ErrorOf, Generation, timed_deltas
from deployments.deadline import Deadline
from deployments.prepare import Prepared
from deployments.responses import Report, usage_body
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


def stop_reason(gen: Generation) -> str | None:
    if gen.stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(gen.finish_reason or "", gen.finish_reason)


@dataclass(frozen=True)
class AnthropicReplies:
    """A `deployments.completions.ReplyShape` for `/v1/messages`."""

    cache_control: bool

    def body(self, prepared: Prepared, gen: Generation, text: str) -> dict[str, Any]:
        content = [{"type": "text", "text": text}] if text else []
        return {
            **_message(prepared, content),
            "stop_reason": stop_reason(gen),
            "stop_sequence": gen.stop_sequence,
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
            opened = False
            async with aclosing(timed_deltas(gen, deadline)) as deltas:
                async for text in deltas:
                    if not opened:
                        yield _block_start(0)
                        opened = True
                    delta = {"type": "text_delta", "text": text}
                    yield event(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": delta},
                    )
            if opened:
                yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
            final = usage(gen.final_usage, self.cache_control)
            end = {"stop_reason": stop_reason(gen), "stop_sequence": gen.stop_sequence}
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


def _block_start(index: int) -> bytes:
    block = {"type": "text", "text": ""}
    return event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
