"""Responses API replies: the response object, usage, and the SSE event sequence.

Usage, over Penelope's breakdown (`deployments.api.openai_bodies`):

    input_tokens = the prompt's tokens; input_tokens_details.cached_tokens = device +
    host + store; output_tokens; total_tokens; penelope = tiers and the miss ledger

Output items: a `message` with one `output_text` part for the reply's text, and
a `function_call` (`call_id`, `name`, `arguments`) per call the model's tool-call
parser found. `status` is `completed`, or `incomplete` with `incomplete_details`
`{"reason": "max_output_tokens"}` when max_output_tokens cut the reply short.

A stream is `response.created`, `response.in_progress`, then per item
`response.output_item.added`, for a message `response.content_part.added`,
`response.output_text.delta`s, `response.output_text.done` and
`response.content_part.done`, for a call `response.function_call_arguments.delta`s
and `.done`, then `response.output_item.done`; last `response.completed` (or
`response.incomplete`). A failure after the stream started is `response.failed`,
which ends it. Every event has a `sequence_number`, from 0.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from deployments.api.deadline import Deadline
from deployments.api.errors import ApiError
from deployments.api.generation import Generation, timed_deltas
from deployments.api.openai_bodies import Report, usage_body
from deployments.api.openai_stream import ErrorOf
from deployments.api.prepare import Prepared
from deployments.api.responses_api.schemas import FunctionTool, ResponsesRequest
from deployments.api.tools import ArgsDelta, CallStart, ParsedReply, StreamParser, TextDelta

Finished = Callable[[dict[str, Any]], Awaitable[None]]  # a finished response, to store


def usage(report: Report) -> dict[str, Any]:
    u = report.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "penelope": usage_body(report)["penelope"],
    }


def public_id(prepared: Prepared) -> str:
    """`resp_<hex>` from the engine request's id (`resp-<hex>`)."""
    return "resp_" + prepared.meta.id.split("-", 1)[1]


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(text: str, item_id: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    content = [part] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": content}  # fmt: skip


def call_item(
    call_id: str, name: str, arguments: str, item_id: str, status: str = "completed"
) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}  # fmt: skip


def output_of(parsed: ParsedReply) -> list[dict[str, Any]]:
    out = (
        [message_item(parsed.content, _item_id("msg"))]
        if parsed.content or not parsed.calls
        else []
    )
    for c in parsed.calls:
        out.append(call_item(c.id, c.name, c.arguments, _item_id("fc")))
    return out


@dataclass(frozen=True)
class Draft:
    """What the response object repeats from the request."""

    id: str
    body: ResponsesRequest
    created_at: int

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        report: Report | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        b = self.body
        fmt = b.text.format if b.text is not None and b.text.format is not None else None
        choice = b.tool_choice
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "error": error,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "instructions": b.instructions, "max_output_tokens": b.max_output_tokens,
            "model": b.model, "output": output,
            "parallel_tool_calls": b.parallel_tool_calls is not False,
            "previous_response_id": b.previous_response_id,
            "reasoning": {"effort": None, "summary": None}, "store": b.store,
            "temperature": 1.0 if b.temperature is None else b.temperature,
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True)
                     if fmt else {"type": "text"}},
            "tool_choice": choice.model_dump() if choice is not None and not isinstance(choice, str)
            else (choice or "auto"),
            "tools": [t.model_dump() for t in b.tools or () if isinstance(t, FunctionTool)],
            "top_p": 1.0 if b.top_p is None else b.top_p, "truncation": "disabled",
            "user": b.user, "metadata": b.metadata or {}, "background": False,
            "usage": usage(report) if report is not None else None,
        }  # fmt: skip


def _status(gen: Generation, called: bool) -> str:
    return "incomplete" if gen.finish_reason == "length" and not called else "completed"


class ResponsesReplies:
    """A `deployments.api.openai_stream.ReplyShape` for `/v1/responses`. `on_finished` runs with
    the finished response before the stream's last event (the route runs it after a
    reply that is not streamed, from `finished`)."""

    def __init__(self, draft: Draft, on_finished: Finished) -> None:
        self._draft = draft
        self._on_finished = on_finished
        self.finished: dict[str, Any] | None = None

    def body(self, prepared: Prepared, gen: Generation, text: str) -> dict[str, Any]:
        parsed = prepared.parser.parse(text) if prepared.parser else ParsedReply(text)
        status = _status(gen, bool(parsed.calls))
        self.finished = self._draft.response(status, output_of(parsed), gen.final_usage)
        return self.finished

    async def events(
        self, gen: Generation, prepared: Prepared, deadline: Deadline, to_error: ErrorOf
    ) -> AsyncIterator[bytes]:
        items = _Items()
        try:
            start = self._draft.response("in_progress", [])
            yield items.event("response.created", response=start)
            yield items.event("response.in_progress", response=start)
            parser = StreamParser(prepared.parser) if prepared.parser else None
            async with aclosing(timed_deltas(gen, deadline)) as deltas:
                async for text in deltas:
                    for piece in parser.feed(text) if parser else [TextDelta(text)]:
                        for out in items.on(piece):
                            yield out
            for piece in parser.finish() if parser else []:
                for out in items.on(piece):
                    yield out
            for out in items.close(final=True):
                yield out
            status = _status(gen, items.called)
            final = self._draft.response(status, items.done, gen.final_usage)
            await self._on_finished(final)
            name = "response.completed" if status == "completed" else "response.incomplete"
            yield items.event(name, response=final)
        except Exception as exc:
            err = to_error(exc)
            failed = self._draft.response("failed", items.done, error=_error(err))
            yield items.event("response.failed", response=failed)


def _error(err: ApiError) -> dict[str, Any]:
    return {"code": err.code or err.type, "message": err.message}


class _Items:
    """Parser events to output-item events: one item open at a time, indexed from 0."""

    def __init__(self) -> None:
        self.seq = 0
        self.done: list[dict[str, Any]] = []  # finished items, in order
        self.open: dict[str, Any] | None = None
        self.text = ""  # the open message's text, or the open call's arguments
        self.called = False

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    def on(self, piece: TextDelta | CallStart | ArgsDelta) -> list[bytes]:
        if isinstance(piece, CallStart):
            self.called = True
            item = call_item(piece.id, piece.name, "", _item_id("fc"), "in_progress")
            return [*self.close(), *self._add(item)]
        if not piece.text:
            return []
        out: list[bytes] = []
        if isinstance(piece, TextDelta) and (self.open is None or self.open["type"] != "message"):
            out += [*self.close(), *self._add_message()]
        self.text += piece.text
        kind = "output_text" if isinstance(piece, TextDelta) else "function_call_arguments"
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        delta = self.event(f"response.{kind}.delta", **self._where(), delta=piece.text, **extra)
        return [*out, delta]

    def _add(self, item: dict[str, Any]) -> list[bytes]:
        self.open, self.text = item, ""
        return [self.event("response.output_item.added", output_index=len(self.done), item=item)]

    def _add_message(self) -> list[bytes]:
        out = self._add(message_item("", _item_id("msg"), "in_progress"))
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [*out, self.event("response.content_part.added", **self._where(), part=part)]

    def _where(self) -> dict[str, Any]:
        assert self.open is not None
        where = {"item_id": self.open["id"], "output_index": len(self.done)}
        return where | ({"content_index": 0} if self.open["type"] == "message" else {})

    def close(self, final: bool = False) -> list[bytes]:
        """End the open item; at the end, a reply with no item gets an empty message."""
        if self.open is None:
            if not final or self.done:
                return []
            return [*self._add_message(), *self._close_open("")]
        return self._close_open(self.text)

    def _close_open(self, text: str) -> list[bytes]:
        assert self.open is not None
        item, where = self.open, self._where()
        if item["type"] == "message":
            done = message_item(text, item["id"])
            part = done["content"][0]
            out = [
                self.event("response.output_text.done", **where, text=text, logprobs=[]),
                self.event("response.content_part.done", **where, part=part),
            ]
        else:
            done = call_item(item["call_id"], item["name"], text, item["id"])
            out = [
                self.event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=text,
                )  # fmt: skip
            ]
        out.append(self.event("response.output_item.done", output_index=where["output_index"],
                              item=done))  # fmt: skip
        self.done.append(done)
        self.open, self.text = None, ""
        return out
