"""Tool calling and structured outputs, for every API the server speaks (OpenAI, Anthropic).

Each piece is API-neutral (an API module translates its own JSON to and from them).

Modules:
    types        ToolDef(name, description, parameters: JSON schema dict)
                 ToolCall(name, arguments: JSON text of an object, id="call_...")
                 ToolChoice(mode: auto | none | required | named, name, parallel)
                 ParsedReply(content, calls); its finish_reason is "tool_calls" with calls
                 stream events: TextDelta(text), CallStart(index, id, name), ArgsDelta(index, text)
                 ToolsError(message, param): anything wrong with tools, choice or schema
    parsers      ReplyParser per model format, registry PARSERS: "hermes" (Hermes/Qwen
                 <tool_call>{...}</tool_call>) and "llama3_json"; get_parser(name),
                 parser_for_template("auto" | name, chat_template).
                 parser.parse(text) -> ParsedReply never raises: bad JSON comes back as content.
                 parser.call_pattern: regex for "this completion made a call" (the engine's
                 turn end: tool_use vs end_turn).
    streaming    StreamParser(parser): feed(delta) -> [events], finish() -> [events];
                 a call's CallStart (id, name) comes before its ArgsDelta pieces.
    render       render_prompt(tokenizer, messages, tools, parser) -> token ids: HF dicts
                 (assistant `tool_calls` with dict arguments, content None allowed; role
                 "tool" with `tool_call_id`) through the chat template with `tools=`; a
                 template without tools gets the documented fallback (`render` module doc).
    constraint   OutputConstraint(kind, grammar): json_object(), json_schema(schema, param),
                 tool_call(tools, choice, parser, special_tokens), check_tool_schemas(tools);
                 an unsupported schema feature raises ToolsError naming it.

How a request uses them (`deployments.api.chat_tools.plan_tools` does this for the OpenAI API):

    1. validate: tool names unique and known to tool_choice; check_tool_schemas(tools)
    2. prompt:   render_prompt(tokenizer, messages, tools, parser)
    3. engine:   GenerateRequest(grammar=constraint.grammar or None,
                     stop_reason_hint="tool_use" if the constraint forces a call,
                                      "end_turn" if no tools can be called, else None,
                     tool_call_pattern=parser.call_pattern when tools may be called)
                 The engine's sampler masks that request's logits with the grammar
                 (`penelope_engine.grammar`), in a batch with unconstrained requests;
                 at the turn's end it records `tool_use` when the completion matches
                 tool_call_pattern, else `end_turn` (the signal retention reads).
    4. reply:    parser.parse(text) (whole) or StreamParser(parser) (streaming).
"""

from deployments.api.tools.constraint import OutputConstraint, check_tool_schemas
from deployments.api.tools.parsers import (
    PARSER_CHOICES,
    PARSERS,
    ReplyParser,
    get_parser,
    parser_for_template,
)
from deployments.api.tools.render import render_prompt
from deployments.api.tools.streaming import StreamParser
from deployments.api.tools.types import (
    ArgsDelta,
    CallStart,
    ParsedReply,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolChoice,
    ToolDef,
    ToolsError,
)

__all__ = [
    "PARSERS",
    "PARSER_CHOICES",
    "ArgsDelta",
    "CallStart",
    "OutputConstraint",
    "ParsedReply",
    "ReplyParser",
    "StreamEvent",
    "StreamParser",
    "TextDelta",
    "ToolCall",
    "ToolChoice",
    "ToolDef",
    "ToolsError",
    "check_tool_schemas",
    "get_parser",
    "parser_for_template",
    "render_prompt",
]
