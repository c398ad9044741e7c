"""The values every tool-calling piece speaks, whichever API (OpenAI, Anthropic) they came in by.

All frozen. A tool's `parameters` and a call's `arguments` are JSON: the
schema as a dict, the arguments as the JSON text the model wrote (OpenAI's
shape; Anthropic's `input` is `json.loads(arguments)`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


class ToolsError(ValueError):
    """A request's tools, tool choice, history or schema cannot be served.

    `param` names the field (OpenAI's `error.param`, dotted: `tools[0].function.parameters`);
    each API turns it into its own 400.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ToolDef:
    """A function the model may call: its name, what it does, its JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def as_openai(self) -> dict[str, Any]:
        """The `{"type": "function", "function": {...}}` form chat templates read as `tools`."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: `arguments` is JSON text (an object)."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


ChoiceMode = Literal["auto", "none", "required", "named"]


@dataclass(frozen=True)
class ToolChoice:
    """OpenAI's `tool_choice` (Anthropic's `auto`/`any`/`tool`/`none` map onto it)."""

    mode: ChoiceMode = "auto"
    name: str | None = None  # the function, when mode is "named"
    parallel: bool = True  # parallel_tool_calls (Anthropic: not disable_parallel_tool_use)

    @property
    def forces_call(self) -> bool:
        return self.mode in ("required", "named")


@dataclass(frozen=True)
class ParsedReply:
    """A whole reply split into text and calls; `content` is "" when only calls came."""

    content: str
    calls: tuple[ToolCall, ...] = ()

    @property
    def finish_reason(self) -> str | None:
        """ "tool_calls" when the reply made calls, else None (keep the engine's reason)."""
        return "tool_calls" if self.calls else None


@dataclass(frozen=True)
class TextDelta:
    """Streaming: text to show as content."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """Streaming: call number `index` begins (sent once, before its arguments)."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgsDelta:
    """Streaming: the next piece of call `index`'s arguments JSON text."""

    index: int
    text: str


StreamEvent = TextDelta | CallStart | ArgsDelta
