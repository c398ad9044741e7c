"""OpenAI response bodies and SSE chunks for chat and text completions.

`usage.prompt_tokens_details.cached_tokens` is what OpenAI defines: prompt
tokens whose KV was reused instead of computed. Penelope adds
`usage.penelope` with where every prompt token's KV came from:

    prompt_tokens = device + host + store + recomputed + new
    cached_tokens = device + host + store
    recomputed + new = sum of miss_tokens (computed tokens by cause, the miss ledger)

and, when the request had hints, what each got (`hints`), and where the prompt
left the session's last one (`prompt_edit_at`, in tokens) when it did.

A chat reply that made tool calls has `message.tool_calls` (content null when
there is no text) and `finish_reason: "tool_calls"`; streamed, each call's
chunks carry its index, id and name first, then its arguments in pieces.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from deployments.api.hints import grants_body
from deployments.api.tools.types import ArgsDelta, CallStart, ToolCall
from penelope_engine.hints import HintGrant
from penelope_engine.protocol import TokenUsage

Kind = Literal["chat", "text"]


@dataclass(frozen=True)
class Report:
    """A request's usage and what else its last output said."""

    usage: TokenUsage
    hints: tuple[HintGrant, ...] = ()
    prompt_edit_at: int | None = None


@dataclass(frozen=True)
class ResponseMeta:
    """What every body and chunk of one response repeats."""

    kind: Kind
    id: str
    model: str
    created: int

    @property
    def object_name(self) -> str:
        return "chat.completion" if self.kind == "chat" else "text_completion"

    @property
    def chunk_object_name(self) -> str:
        return "chat.completion.chunk" if self.kind == "chat" else "text_completion"


def usage_body(report: Report) -> dict[str, Any]:
    u = report.usage
    penelope: dict[str, Any] = {
        "device_tokens": u.device_tokens,
        "host_tokens": u.host_tokens,
        "store_tokens": u.store_tokens,
        "recomputed_tokens": u.recomputed_tokens,
        "new_tokens": u.new_tokens,
        "miss_tokens": u.misses.as_dict(),
    }
    if report.prompt_edit_at is not None:
        penelope["prompt_edit_at"] = report.prompt_edit_at
    if report.hints:
        penelope["hints"] = grants_body(report.hints)
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "penelope": penelope,
    }


def _choice(
    meta: ResponseMeta, text: str, finish_reason: str | None, calls: Sequence[ToolCall]
) -> dict[str, Any]:
    if meta.kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:  # as OpenAI: content null when the reply is only calls
            message["content"] = text or None
            message["tool_calls"] = [c.as_openai() for c in calls]
        return {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
    return {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}


def completion_body(
    meta: ResponseMeta,
    text: str,
    finish_reason: str | None,
    usage: Report,
    calls: Sequence[ToolCall] = (),
) -> dict[str, Any]:
    return {
        "id": meta.id,
        "object": meta.object_name,
        "created": meta.created,
        "model": meta.model,
        "choices": [_choice(meta, text, finish_reason, calls)],
        "usage": usage_body(usage),
    }


def _chunk_choice(
    meta: ResponseMeta, text: str, finish_reason: str | None, first: bool
) -> dict[str, Any]:
    if meta.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if text or first:
            delta["content"] = text
        return {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    return {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}


def chunk_body(
    meta: ResponseMeta, text: str, finish_reason: str | None = None, *, first: bool = False
) -> dict[str, Any]:
    return {
        "id": meta.id,
        "object": meta.chunk_object_name,
        "created": meta.created,
        "model": meta.model,
        "choices": [_chunk_choice(meta, text, finish_reason, first)],
    }


def tool_chunk_body(meta: ResponseMeta, event: CallStart | ArgsDelta) -> dict[str, Any]:
    """A streamed call: its id, type and name first (`CallStart`), then argument pieces."""
    part: dict[str, Any]
    if isinstance(event, CallStart):
        fn = {"name": event.name, "arguments": ""}
        part = {"index": event.index, "id": event.id, "type": "function", "function": fn}
    else:
        part = {"index": event.index, "function": {"arguments": event.text}}
    choice = {"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None, "logprobs": None}
    return {
        "id": meta.id,
        "object": meta.chunk_object_name,
        "created": meta.created,
        "model": meta.model,
        "choices": [choice],
    }


def usage_chunk_body(meta: ResponseMeta, usage: Report) -> dict[str, Any]:
    """The extra last chunk of `stream_options.include_usage`: no choices, only usage."""
    return {
        "id": meta.id,
        "object": meta.chunk_object_name,
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": usage_body(usage),
    }


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")
