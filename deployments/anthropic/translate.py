"""An Anthropic Messages request as the OpenAI chat request the engine path takes.

`to_chat` checks what the schema cannot (a `tool_result` needs its
`tool_use` in the assistant turn just before; tool names are unique;
`tool_choice` names a tool that exists; every `input_schema` is a valid JSON
Schema; tool payloads have a bounded size), then builds:

* a `ChatCompletionRequest`, the internal request both APIs share: sampling,
  stop strings, session, the `penelope` hints and every `cache_control`
  (on system blocks, tools and content blocks) as hints, so
  `deployments.prepare` and `deployments.hints` treat it exactly as an
  OpenAI request;
* the chat-template messages and `tools`, in the Hugging Face form chat
  templates take (`deployments.tools.render`: a template without tools gets
  that module's fallback): `tool_use` blocks become an assistant message's
  `tool_calls`, `tool_result` blocks become `tool` messages;
* the model's tool-call parser, when tools may be called (not with
  `tool_choice: none`), which reads the reply's calls back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from deployments.anthropic.schemas import (
    MessagesRequest,
    PromptRequest,
    TextBlock,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from deployments.anthropic.session import SessionIds, system_blocks
from deployments.errors import invalid
from deployments.prepare import ChatPrompt
from deployments.schemas import (
    CacheControl,
    ChatCompletionRequest,
    ChatMessage,
    PenelopeHints,
    TextPart,
)
from deployments.tools import ReplyParser, ToolDef, parser_for_template
from deployments.tools.render import fallback_messages

MAX_TOOL_PAYLOAD_CHARS = 1 << 20  # one tool's schema, one tool_use input, one tool_result


@dataclass(frozen=True)
class Translated:
    chat: ChatCompletionRequest
    prompt: ChatPrompt
    cache_control: bool  # some block asked for caching (usage reports cache writes then)
    parser: ReplyParser | None  # tools may be called: the reply is parsed for calls


def to_chat(
    body: PromptRequest, session: SessionIds, chat_template: str | None = None
) -> Translated:
    """`chat_template`: the model's, which decides how tools are written (and parsed)."""
    _check_tools(body)
    _check_turns(body)
    system = system_blocks(body.system)
    messages: list[dict[str, Any]] = []
    internal: list[ChatMessage] = []
    if system:
        text = "\n\n".join(b.text for b in system)
        messages.append({"role": "system", "content": text})
        internal.append(_internal("system", [(b.text, b.cache_control) for b in system]))
    for tool in body.tools or ():
        if tool.cache_control is not None:  # the tools prefix is the system turn's
            internal.append(_internal("system", [("", tool.cache_control)]))
    for m in body.messages:
        rendered, parts = _message(m.role, m.blocks())
        messages += rendered
        internal.append(_internal(m.role, parts))
    tools = _tool_defs(body)
    chat = _internal_request(body, internal, session)
    controls = any(p.cache_control for m in chat.messages for p in _parts(m))
    parser = parser_for_template("auto", chat_template) if tools else None
    if not tools:
        prompt = ChatPrompt(messages)
    elif "tools" in (chat_template or "tools"):
        prompt = ChatPrompt(messages, {"tools": [t.as_openai() for t in tools]})
    else:
        assert parser is not None
        prompt = ChatPrompt(fallback_messages(messages, tools, parser))
    return Translated(chat, prompt, controls, parser)


def _internal(role: str, parts: list[tuple[str, CacheControl | None]]) -> ChatMessage:
    content = [TextPart(type="text", text=t, cache_control=c) for t, c in parts]
    return ChatMessage(role=role, content=content)  # type: ignore[arg-type]


def _parts(m: ChatMessage) -> list[TextPart]:
    return m.content if isinstance(m.content, list) else []


def _internal_request(
    body: PromptRequest, messages: list[ChatMessage], session: SessionIds
) -> ChatCompletionRequest:
    fields: dict[str, Any] = {"model": body.model, "messages": messages}
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


def _message(
    role: str, blocks: list[TextBlock | ToolUseBlock | ToolResultBlock]
) -> tuple[list[dict[str, Any]], list[tuple[str, CacheControl | None]]]:
    """One Anthropic message as template messages, and its parts' texts for the hints."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    parts: list[tuple[str, CacheControl | None]] = []
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            content = ("Error: " if b.is_error else "") + b.text()
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": content})
            parts.append((content, b.cache_control))
        elif isinstance(b, ToolUseBlock):
            fn = {"name": b.name, "arguments": b.input}
            calls.append({"id": b.id, "type": "function", "function": fn})
            parts.append((json.dumps(b.input), b.cache_control))
        else:
            texts.append(b.text)
            parts.append((b.text, b.cache_control))
    if texts or calls or not out:
        message: dict[str, Any] = {"role": role, "content": "".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out, parts


def _tool_defs(body: PromptRequest) -> list[ToolDef]:
    if not body.tools or isinstance(body.tool_choice, ToolChoiceNone):
        return []
    return [ToolDef(t.name, t.description or "", t.input_schema) for t in body.tools]


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
