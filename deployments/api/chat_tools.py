"""An OpenAI chat request's tools, tool choice, response format and history, checked and planned.

    body ──plan_tools──> ToolPlan(tools, choice, parser, constraint)
                          ├─ prompt: render_prompt(messages as HF dicts, tools)
                          ├─ engine: grammar, stop_reason_hint, tool_call_pattern
                          └─ reply:  parser (None: replies are plain text)

Everything wrong is a 400 naming the field, found before the engine sees the
request: duplicate or too many tools, tools over `max_tools_bytes`, a schema the
grammar cannot enforce (the feature named), a `tool_choice` naming no offered
tool, `required` without tools, a forced call together with a JSON
`response_format`, an assistant call whose arguments are no JSON object, and a
tool message whose `tool_call_id` answers no earlier call.

A forced call (`required`, a named function) is one call, or several only when
`parallel_tool_calls` is true outright (left open, a small model repeats its
call until max_tokens cuts the last one short). `tool_choice` "none" keeps the
tools in the prompt (so its prefix, and its cache, is the same as on the turns
that may call them) but parses no calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deployments.api.backend import TokenizerLike
from deployments.api.errors import invalid
from deployments.api.schemas import ChatCompletionRequest, ChatMessage, NamedToolChoice
from deployments.api.settings import ApiSettings
from deployments.api.tools import constraint as grammars
from deployments.api.tools.parsers import ReplyParser, parser_for_template
from deployments.api.tools.types import ToolChoice, ToolDef, ToolsError


@dataclass(frozen=True)
class ToolPlan:
    tools: tuple[ToolDef, ...]
    choice: ToolChoice
    parser: ReplyParser  # the model's format (renders history even when no call is parsed)
    constraint: grammars.OutputConstraint | None

    @property
    def parses_calls(self) -> bool:
        return bool(self.tools) and self.choice.mode != "none"

    @property
    def stop_reason_hint(self) -> str | None:
        """Known before the reply: a forced call is a tool turn; no callable tool, an end."""
        if self.constraint is not None and self.constraint.forces_tool_call:
            return "tool_use"
        return None if self.parses_calls else "end_turn"

    @property
    def tool_call_pattern(self) -> str | None:
        return self.parser.call_pattern if self.parses_calls else None

    @property
    def grammar(self) -> str | None:
        return self.constraint.grammar if self.constraint is not None else None


def plan_tools(
    body: ChatCompletionRequest, tokenizer: TokenizerLike, settings: ApiSettings
) -> ToolPlan:
    try:
        return _plan(body, tokenizer, settings)
    except ToolsError as exc:
        raise invalid(exc.message, param=exc.param) from exc


def _plan(body: ChatCompletionRequest, tokenizer: TokenizerLike, s: ApiSettings) -> ToolPlan:
    parser = parser_for_template(s.tool_parser, tokenizer.chat_template)
    tools = _tools(body, s)
    choice = _choice(body, tools)
    if not choice.forces_call:
        return ToolPlan(tools, choice, parser, _response_format(body))
    if body.response_format is not None and body.response_format.type != "text":
        raise ToolsError(
            "response_format json_object / json_schema cannot be combined with a forced "
            "tool_choice",
            "response_format",
        )
    constraint = grammars.tool_call(tools, choice, parser, tokenizer.added_tokens)
    return ToolPlan(tools, choice, parser, constraint)


def _tools(body: ChatCompletionRequest, s: ApiSettings) -> tuple[ToolDef, ...]:
    if not body.tools:
        return ()
    if len(body.tools) > s.max_tools:
        raise ToolsError(f"tools has {len(body.tools)} tools; at most {s.max_tools}", "tools")
    size = len(json.dumps([t.model_dump(by_alias=True) for t in body.tools]))
    if size > s.max_tools_bytes:
        raise ToolsError(
            f"tools is {size} bytes of JSON; this server takes at most {s.max_tools_bytes}",
            "tools",
        )
    seen: set[str] = set()
    out = []
    for i, tool in enumerate(body.tools):
        fn = tool.function
        if fn.name in seen:
            raise ToolsError(
                f"tools has two functions named {fn.name!r}", f"tools[{i}].function.name"
            )
        seen.add(fn.name)
        params = (
            fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}}
        )
        if params.get("type", "object") != "object":
            raise ToolsError(
                "a function's parameters must be a JSON schema of type object",
                f"tools[{i}].function.parameters",
            )
        out.append(ToolDef(fn.name, fn.description or "", params))
    grammars.check_tool_schemas(out)
    return tuple(out)


def _choice(body: ChatCompletionRequest, tools: Sequence[ToolDef]) -> ToolChoice:
    # A forced call's grammar allows several calls only when asked for outright: left
    # open, a small model repeats its call until max_tokens cuts the last one short.
    parallel = body.parallel_tool_calls is True
    raw = body.tool_choice
    if raw is None:
        return ToolChoice("auto" if tools else "none", parallel=parallel)
    if isinstance(raw, NamedToolChoice):
        name = raw.function.name
        if name not in {t.name for t in tools}:
            raise ToolsError(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
        return ToolChoice("named", name, parallel=False)
    if raw == "required" and not tools:
        raise ToolsError("tool_choice is 'required' but the request has no tools", "tool_choice")
    return ToolChoice(raw, parallel=parallel)


def _response_format(body: ChatCompletionRequest) -> grammars.OutputConstraint | None:
    rf = body.response_format
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        return grammars.json_object()
    if rf.json_schema is None or rf.json_schema.schema_ is None:
        raise ToolsError(
            "response_format of type json_schema needs json_schema.schema",
            "response_format.json_schema",
        )
    return grammars.json_schema(rf.json_schema.schema_, "response_format.json_schema.schema")


def history_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as chat templates read them; 400 for calls and results that do not pair."""
    role_of = {"developer": "system"}
    out: list[dict[str, Any]] = []
    called: dict[str, str] = {}  # call id -> function name, from earlier assistant messages
    for i, m in enumerate(messages):
        d: dict[str, Any] = {"role": role_of.get(m.role, m.role), "content": m.text()}
        if m.tool_calls:
            if m.role != "assistant":
                raise invalid(
                    "only assistant messages carry tool_calls", f"messages[{i}].tool_calls"
                )
            d["tool_calls"] = [_call_dict(i, j, c, called) for j, c in enumerate(m.tool_calls)]
        if m.role == "tool":
            if m.tool_call_id is None:
                raise invalid("a tool message needs tool_call_id", f"messages[{i}].tool_call_id")
            if m.tool_call_id not in called:
                raise invalid(
                    f"tool_call_id {m.tool_call_id!r} answers no tool call of an earlier "
                    "assistant message",
                    f"messages[{i}].tool_call_id",
                )
            d["tool_call_id"] = m.tool_call_id
            d["name"] = called[m.tool_call_id]
        out.append(d)
    return out


def _call_dict(i: int, j: int, call: Any, called: dict[str, str]) -> dict[str, Any]:
    param = f"messages[{i}].tool_calls[{j}].function.arguments"
    try:
        args = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except ValueError as exc:
        raise invalid(f"{param} is not valid JSON: {exc}", param) from exc
    if not isinstance(args, dict):
        raise invalid(f"{param} must be a JSON object", param)
    called[call.id] = call.function.name
    fn = {"name": call.function.name, "arguments": args}
    return {"id": call.id, "type": "function", "function": fn}
