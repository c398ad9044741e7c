"""Chat messages with tools to prompt tokens, through the model's own chat template.

Messages are Hugging Face's dicts: an assistant message may carry
`tool_calls` ([{"id", "type": "function", "function": {"name", "arguments": dict}}],
arguments decoded from JSON as HF templates expect) and `content` may be None;
a tool result is {"role": "tool", "content", "tool_call_id", "name"}. A None
content is rendered as "" (templates test `in content`).

A template that reads `tools` (Qwen, Hermes, Llama 3.1+) gets `tools=[...]` in
OpenAI's function form, as `transformers.apply_chat_template(tools=...)` passes it.

Fallback, for a template that never mentions `tools` (SmolLM2's, say): the tool
list and the parser's call format are written into the system message (a new
first message when there is none), an assistant's calls become its text in the
parser's format (`ReplyParser.format_call`), and a tool result becomes a user
message `<tool_response>{content}</tool_response>`. The tool block comes first
and does not change between turns, so it is a shared, cached prefix either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from deployments.api.tools.parsers import ReplyParser
from deployments.api.tools.types import ToolCall, ToolDef


class ChatTokenizer(Protocol):
    chat_template: str | None

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> list[int]: ...


def template_reads_tools(tokenizer: ChatTokenizer) -> bool:
    return "tools" in (tokenizer.chat_template or "")


def render_prompt(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolDef],
    parser: ReplyParser,
) -> list[int]:
    """Prompt token ids of `messages` (HF dicts) offered `tools` (none: a plain chat)."""
    if template_reads_tools(tokenizer):
        extra = {"tools": [t.as_openai() for t in tools]} if tools else {}
        texts = [{**m, "content": m.get("content") or ""} for m in messages]  # None: ""
        return tokenizer.apply_chat_template(texts, True, **extra)
    return tokenizer.apply_chat_template(fallback_messages(messages, tools, parser), True)


def fallback_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDef], parser: ReplyParser
) -> list[dict[str, Any]]:
    """`messages` as plain text turns, for a template without tools (see the module doc)."""
    out = [_plain(m, parser) for m in messages]
    if not tools:
        return out
    block = tool_instructions(tools, parser)
    if out and out[0]["role"] == "system":
        out[0] = {"role": "system", "content": f"{block}\n\n{out[0]['content']}"}
    else:
        out.insert(0, {"role": "system", "content": block})
    return out


def tool_instructions(tools: Sequence[ToolDef], parser: ReplyParser) -> str:
    listed = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools)
    example = parser.format_call(ToolCall("function_name", '{"argument": "value"}', id=""))
    return (
        "You may call one or more functions to assist with the user query.\n"
        f"The functions you can call:\n<tools>\n{listed}\n</tools>\n"
        f"To call a function, reply with:\n{example}"
    )


def _plain(m: Mapping[str, Any], parser: ReplyParser) -> dict[str, Any]:
    role, content = m["role"], m.get("content") or ""
    if role == "assistant" and m.get("tool_calls"):
        calls = [
            parser.format_call(
                ToolCall(c["function"]["name"], json.dumps(c["function"]["arguments"]), c["id"])
            )
            for c in m["tool_calls"]
        ]
        return {"role": "assistant", "content": "\n".join([content, *calls]).strip()}
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
    return {"role": role, "content": content}
