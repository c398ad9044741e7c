"""What a request's output must match: the per-request grammar the engine's sampler enforces.

    response_format {"type": "json_object"}          -> any JSON object
    response_format {"type": "json_schema", ...}     -> that schema (strict or not: enforced)
    tool_choice "required" / a named function        -> a call in the parser's format whose
                                                        arguments match that tool's schema
    anything else (auto, none, no format)            -> None: sampled freely

The grammar is llguidance's (`llguidance.LLMatcher`, its JSON grammar text),
checked here, before the request reaches the engine: a schema feature the
grammar cannot express raises `ToolsError` naming it (a 400). The engine
carries it as `GenerateRequest.grammar` and masks the logits of that request
alone (`penelope_engine.grammar`); the prompt and its cache are untouched.
JSON is written with ", " and ": " separators and no other whitespace (as
`json.dumps` writes it), so a small model cannot loop on spaces.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from deployments.api.tools.parsers import ReplyParser
from deployments.api.tools.types import ToolChoice, ToolDef, ToolsError

JSON_STYLE: dict[str, Any] = {
    "item_separator": ", ",
    "key_separator": ": ",
    "whitespace_flexible": False,
}
ConstraintKind = Literal["json_object", "json_schema", "tool_call"]


@dataclass(frozen=True)
class OutputConstraint:
    """One request's grammar (llguidance JSON text) and what it is for."""

    kind: ConstraintKind
    grammar: str

    @property
    def forces_tool_call(self) -> bool:
        return self.kind == "tool_call"


def _checked(grammar: str, param: str) -> str:
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    if error and not error.startswith("WARNING"):
        raise ToolsError(
            f"{param} uses a JSON-schema feature this server cannot enforce: {error}", param
        )
    return grammar


def json_object() -> OutputConstraint:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        {"type": "object"},
        overrides=JSON_STYLE,  # type: ignore[arg-type]
    )
    return OutputConstraint("json_object", grammar)


def json_schema(schema: Mapping[str, Any], param: str) -> OutputConstraint:
    """`schema` as a grammar; ToolsError naming the feature it cannot express."""
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            dict(schema),
            overrides=JSON_STYLE,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise ToolsError(f"{param} is not a valid JSON schema: {exc}", param) from exc
    return OutputConstraint("json_schema", _checked(grammar, param))


def tool_call(
    tools: Sequence[ToolDef],
    choice: ToolChoice,
    parser: ReplyParser,
    special_tokens: Collection[str] = (),
) -> OutputConstraint:
    """A call (or, with `choice.parallel`, calls) in `parser`'s format to the allowed tools.

    `special_tokens` are the vocabulary's added tokens: a tag that is one of them
    (Qwen's `<tool_call>`) must be matched as that token, not as its letters.
    """
    allowed = [t for t in tools if choice.mode != "named" or t.name == choice.name]
    bodies = [_call_schema(t, parser.args_key) for t in allowed]
    body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
    body = {**body, "x-guidance": JSON_STYLE}
    if parser.open_tag:
        one = f'{_lit(parser.open_tag, special_tokens)} "\\n" body "\\n" '
        one += _lit(parser.close_tag, special_tokens)
    else:
        one = "body"
    repeat = 'call ("\\n" call)*' if choice.parallel else "call"
    lark = f"start: {repeat}\ncall: {one}\nbody: %json {json.dumps(body)}\n"
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    return OutputConstraint("tool_call", _checked(grammar, "tools"))


def _call_schema(tool: ToolDef, args_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, args_key: dict(tool.parameters)},
        "required": ["name", args_key],
        "additionalProperties": False,
    }


def _lit(text: str, special_tokens: Collection[str]) -> str:
    """`text` in Lark: a special-token reference when the vocabulary has it as one."""
    return text if text in special_tokens else json.dumps(text)


def check_tool_schemas(tools: Sequence[ToolDef], param: str = "tools") -> None:
    """Every tool's parameters compile to a grammar; ToolsError naming the first that does not.

    Run for every request with tools, constrained or not, so that a schema the
    server could never enforce is a 400 up front, not a surprise on a later turn.
    """
    for i, tool in enumerate(tools):
        json_schema(tool.parameters, f"{param}[{i}].function.parameters")
