"""Reply parsers: a model's tool-call text format to (content, calls), whole or streamed.

One parser per format, chosen per model (`ApiSettings.tool_parser`, `penelope serve
--tool-parser`; `auto` reads the chat template, `parser_for_template`):

    hermes       Hermes / Qwen:  text? <tool_call>{"name": N, "arguments": {...}}</tool_call> ...
    llama3_json  Llama 3.x:      <|python_tag|>? {"name": N, "parameters": {...}} (; {...})*

`parse` never raises: a reply whose call text is not valid JSON (or lacks a name)
comes back whole as content, with no calls. `stream()` returns a fresh
incremental parser (`deployments.api.tools.streaming`). `call_pattern` is a regex that
finds a call in the decoded completion: the engine uses it to record the turn as
`tool_use` or `end_turn` (`GenerateRequest.tool_call_pattern`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from deployments.api.tools.types import ParsedReply, ToolCall, ToolDef, ToolsError


class ReplyParser(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def call_pattern(self) -> str:
        """A regex that finds a call in a decoded completion."""
        ...

    @property
    def open_tag(self) -> str:
        """The text that opens a call ("" for formats without tags)."""
        ...

    @property
    def close_tag(self) -> str: ...

    @property
    def args_key(self) -> str:
        """The key the format writes the arguments under."""
        ...

    def parse(self, text: str) -> ParsedReply: ...

    def format_call(self, call: ToolCall) -> str:
        """The call as this model writes it (for history in the fallback rendering)."""
        ...


def _call_of(obj: Any, args_keys: Sequence[str]) -> ToolCall | None:
    """A ToolCall from a decoded JSON object, or None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args: Any = next((obj[k] for k in args_keys if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class HermesParser:
    name: str = "hermes"
    open_tag: str = "<tool_call>"
    close_tag: str = "</tool_call>"
    args_key: str = "arguments"
    call_pattern: str = re.escape("<tool_call>")

    def parse(self, text: str) -> ParsedReply:
        if self.open_tag not in text:
            return ParsedReply(text)
        calls, pieces, rest = [], [], text
        while self.open_tag in rest:
            before, _, after = rest.partition(self.open_tag)
            body, closed, rest = after.partition(self.close_tag)
            call = _call_of(_loads(body.strip()), ("arguments", "parameters"))
            if call is None:
                return ParsedReply(text)
            pieces.append(before)
            calls.append(call)
            if not closed:
                rest = ""
        pieces.append(rest)
        return ParsedReply("".join(pieces).strip(), tuple(calls))

    def format_call(self, call: ToolCall) -> str:
        body = {"name": call.name, "arguments": _loads(call.arguments) or {}}
        return f"{self.open_tag}\n{json.dumps(body, ensure_ascii=False)}\n{self.close_tag}"


@dataclass(frozen=True)
class Llama3JsonParser:
    name: str = "llama3_json"
    open_tag: str = ""
    close_tag: str = ""
    args_key: str = "parameters"
    call_pattern: str = r'^\s*(<\|python_tag\|>)?\s*\{\s*"name"'
    python_tag: str = "<|python_tag|>"

    def parse(self, text: str) -> ParsedReply:
        body = text.strip().removeprefix(self.python_tag).lstrip()
        if not body.startswith("{"):
            return ParsedReply(text)
        decoder, calls, at = json.JSONDecoder(), [], 0
        while at < len(body):
            try:
                obj, end = decoder.raw_decode(body, at)
            except ValueError:
                return ParsedReply(text)
            call = _call_of(obj, ("parameters", "arguments"))
            if call is None:
                return ParsedReply(text)
            calls.append(call)
            at = end
            while at < len(body) and body[at] in " \t\r\n;":
                at += 1
        return ParsedReply("", tuple(calls))

    def format_call(self, call: ToolCall) -> str:
        body = {"name": call.name, "parameters": _loads(call.arguments) or {}}
        return json.dumps(body, ensure_ascii=False)


PARSERS: dict[str, Callable[[], ReplyParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
}
PARSER_CHOICES = ("auto", *PARSERS)


def get_parser(name: str) -> ReplyParser:
    """The parser registered as `name`; ToolsError listing the valid names otherwise."""
    if name not in PARSERS:
        raise ToolsError(f"unknown tool parser {name!r}; valid: {', '.join(PARSERS)}")
    return PARSERS[name]()


def parser_for_template(name: str, chat_template: str | None) -> ReplyParser:
    """`name`, or for `auto` the format the chat template writes (hermes by default)."""
    if name != "auto":
        return get_parser(name)
    if chat_template and "<|python_tag|>" in chat_template:
        return Llama3JsonParser()
    return HermesParser()


def tool_names(tools: Sequence[ToolDef]) -> set[str]:
    return {t.name for t in tools}
