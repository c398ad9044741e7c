"""An Anthropic Messages request as the OpenAI chat request the engine path takes.

`to_chat` checks what the schema cannot (a `tool_result` needs its
`tool_use` in the assistant turn just before; tool names are unique;
`tool_choice` names a tool that exists; every `input_schema` is a valid JSON
Schema; tool payloads have a bounded size), then builds:

a `ChatCompletionRequest`, the internal request both APIs share, so
`deployments.api.prepare`, `deployments.api.chat_tools` and `deployments.api.hints`
treat it exactly as an OpenAI request: sampling, stop strings, the session,
the `penelope` hints, every `cache_control` (on system blocks, tools and
content blocks) on a message part (a tool's on an empty part of the first
message: a mark never adds or moves a token), `tools` as functions (`input_schema` ->
`parameters`), `tool_choice` (auto -> auto, any -> required, tool -> named,
none -> none; `disable_parallel_tool_use` -> `parallel_tool_calls: false`),
`tool_use` blocks as the assistant message's `tool_calls` and `tool_result`
blocks as `tool` messages (before the user's text, as Anthropic orders them).
Claude Code's attribution block is left out of the system prompt
(`session.system_blocks`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from deployments.api.anthropic.schemas import (
    MessagesRequest,
    PromptRequest,
    TextBlock,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from deployments.api.anthropic.session import SessionIds, system_blocks
from deployments.api.errors import invalid
from deployments.api.schemas import (
    CacheControl,
    ChatCompletionRequest,
    ChatMessage,
    FunctionCall,
    FunctionDef,
    NamedFunction,
    NamedToolChoice,
    PenelopeHints,
    TextPart,
    Tool,
    ToolCallPart,
)

MAX_TOOL_PAYLOAD_CHARS = 1 << 20  # one tool's schema, one tool_use input, one tool_result


@dataclass(frozen=True)
class Translated:
    chat: ChatCompletionRequest
    cache_control: bool  # some block asked for caching (usage reports cache writes then)


def to_chat(body: PromptRequest, session: SessionIds) -> Translated:
    _check_tools(body)
    _check_turns(body)
    messages: list[ChatMessage] = []
    system = system_blocks(body.system)
    if system:
        messages.append(_message("system", [(b.text, b.cache_control) for b in system]))
    for m in body.messages:
        messages += _turn(m.role, m.blocks())
    tool_controls = [("", t.cache_control) for t in body.tools or () if t.cache_control]
    if tool_controls:  # as empty parts of the first message: a mark adds no token
        first = messages[0]
        marks = _message(first.role, tool_controls).content
        messages[0] = first.model_copy(update={"content": [*_parts(first), *(marks or [])]})
    chat = _internal_request(body, messages, session)
    controls = any(p.cache_control for m in chat.messages for p in _parts(m))
    return Translated(chat, controls)


def _message(
    role: str, parts: Sequence[tuple[str, CacheControl | None]], **fields: Any
) -> ChatMessage:
    content = [TextPart(type="text", text=t, cache_control=c) for t, c in parts]
    return ChatMessage(role=role, content=content, **fields)  # type: ignore[arg-type]


def _parts(m: ChatMessage) -> list[TextPart]:
    return m.content if isinstance(m.content, list) else []


def _turn(role: str, blocks: list[TextBlock | ToolUseBlock | ToolResultBlock]) -> list[ChatMessage]:
    """One Anthropic message as chat messages: tool results, then the text and calls."""
    out: list[ChatMessage] = []
    texts: list[tuple[str, CacheControl | None]] = []
    calls: list[ToolCallPart] = []
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            content = ("Error: " if b.is_error else "") + b.text()
            out.append(_message("tool", [(content, b.cache_control)], tool_call_id=b.tool_use_id))
        elif isinstance(b, ToolUseBlock):
            fn = FunctionCall(name=b.name, arguments=json.dumps(b.input, ensure_ascii=False))
            calls.append(ToolCallPart(id=b.id, type="function", function=fn))
            if b.cache_control is not None:
                texts.append(("", b.cache_control))
        else:
            texts.append((b.text, b.cache_control))
    if texts or calls or not out:
        out.append(_message(role, texts or [("", None)], tool_calls=calls or None))
    return out


def _internal_request(
    body: PromptRequest, messages: list[ChatMessage], session: SessionIds
) -> ChatCompletionRequest:
    fields: dict[str, Any] = {"model": body.model, "messages": messages}
    if body.tools:
        fields["tools"] = [
            Tool(
                type="function",
                function=FunctionDef(
                    name=t.name, description=t.description, parameters=t.input_schema
                ),
            )
            for t in body.tools
        ]
    fields |= _choice(body)
    hints = PenelopeHints()
    if isinstance(body, MessagesRequest):
        hints = body.penelope or hints
        fields |= {
            "max_tokens": body.max_tokens,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "stop": body.stop_sequences,
            "stream": body.stream,
        }
    if session.parent and hints.parent_session is None:
        hints = hints.model_copy(update={"parent_session": session.parent})
    if hints.model_fields_set or hints.parent_session:
        fields["penelope"] = hints
    return ChatCompletionRequest(session_id=session.session, **fields)


def _choice(body: PromptRequest) -> dict[str, Any]:
    c = body.tool_choice
    if c is None:
        return {}
    if isinstance(c, ToolChoiceNone):
        return {"tool_choice": "none"}
    out: dict[str, Any] = {"parallel_tool_calls": False} if c.disable_parallel_tool_use else {}
    if isinstance(c, ToolChoiceTool):
        named = NamedToolChoice(type="function", function=NamedFunction(name=c.name))
        return out | {"tool_choice": named}
    return out | {"tool_choice": "required" if c.type == "any" else "auto"}


def _check_tools(body: PromptRequest) -> None:
    names: set[str] = set()
    for i, tool in enumerate(body.tools or ()):
        param = f"tools[{i}]"
        if tool.name in names:
            raise invalid(f"{param}.name: the tool name {tool.name!r} is used twice", param)
        names.add(tool.name)
        _check_size(tool.input_schema, f"{param}.input_schema")
        try:
            validator_for(tool.input_schema).check_schema(tool.input_schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise invalid(
                f"{param}.input_schema is not a valid JSON Schema"
                f"{f' at {where}' if where else ''}: {exc.message}",
                f"{param}.input_schema",
            ) from exc
    choice = body.tool_choice
    if choice is not None and choice.type in ("any", "tool") and not names:
        raise invalid(f"tool_choice {choice.type!r} needs tools", "tool_choice")
    if isinstance(choice, ToolChoiceTool) and choice.name not in names:
        raise invalid(f"tool_choice.name: no tool is named {choice.name!r}", "tool_choice.name")


def _check_turns(body: PromptRequest) -> None:
    """tool_use only from the assistant, each tool_result answering the turn before."""
    offered: set[str] = set()
    for i, m in enumerate(body.messages):
        answered: set[str] = set()
        for j, b in enumerate(m.blocks()):
            param = f"messages[{i}].content[{j}]"
            if isinstance(b, ToolUseBlock):
                if m.role != "assistant":
                    raise invalid(f"{param}: tool_use blocks belong to assistant messages", param)
                _check_size(b.input, f"{param}.input")
            elif isinstance(b, ToolResultBlock):
                if m.role != "user":
                    raise invalid(f"{param}: tool_result blocks belong to user messages", param)
                if b.tool_use_id not in offered or b.tool_use_id in answered:
                    raise invalid(
                        f"{param}.tool_use_id: no tool_use block with id {b.tool_use_id!r} "
                        "in the assistant message just before (or it was answered already)",
                        f"{param}.tool_use_id",
                    )
                answered.add(b.tool_use_id)
                _check_size(b.text(), f"{param}.content")
        offered = {b.id for b in m.blocks() if isinstance(b, ToolUseBlock)}


def _check_size(value: object, param: str) -> None:
    size = len(value) if isinstance(value, str) else len(json.dumps(value))
    if size > MAX_TOOL_PAYLOAD_CHARS:
        raise invalid(
            f"{param} has {size} characters; a tool payload may have at most "
            f"{MAX_TOOL_PAYLOAD_CHARS}",
            param,
            code="tool_payload_too_large",
        )
