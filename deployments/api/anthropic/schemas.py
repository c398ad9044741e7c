"""Request bodies of the Anthropic Messages API (pydantic, at the HTTP edge only).

Strict as the OpenAI ones (`deployments.api.schemas`): a JSON value of the wrong
type is a 400 naming the field, never coerced. Unknown top-level fields are
ignored (clients send betas Penelope has no use for), but a content block,
a tool or a `tool_choice` of an unknown `type` is a 400 naming it: such a
block would otherwise vanish from the prompt. Ranges follow Anthropic's:
temperature in [0, 1], top_p in (0, 1].
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from deployments.api.schemas import CacheControl, PenelopeHints, _Closed, _Strict
from deployments.api.sessions import ClientId

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_-]+$")]


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: ClientId
    name: Name
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: ClientId
    content: str | list[TextBlock] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content)


def _block_type(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("text", "tool_use", "tool_result") else None


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")],
    Discriminator(
        _block_type,
        custom_error_type="invalid_block_type",
        custom_error_message="Input should be a content block of type text, tool_use or "
        "tool_result",
    ),
]


class Message(_Strict):
    # "system" mid-conversation: Claude Code sends such turns; they render as system turns.
    role: Literal["user", "assistant", "system"]
    content: str | Annotated[list[ContentBlock], Field(min_length=1)]

    def blocks(self) -> list[TextBlock | ToolUseBlock | ToolResultBlock]:
        if isinstance(self.content, str):
            return [TextBlock(type="text", text=self.content)]
        return list(self.content)


class Tool(_Strict):
    """A client tool; server tools (`web_search_...`) have a `type` and are refused."""

    type: Literal["custom"] | None = None
    name: Name
    description: str | None = None
    input_schema: dict[str, Any]
    cache_control: CacheControl | None = None

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError('input_schema must be a JSON Schema with "type": "object"')
        return v


class ToolChoiceAuto(_Closed):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(_Closed):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(_Closed):
    type: Literal["tool"]
    name: Name
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(_Closed):
    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class Metadata(_Strict):
    user_id: Annotated[str, Field(max_length=512)] | None = None


class Thinking(_Strict):
    """Accepted; the reply has no thinking blocks (the model's template decides what it
    thinks, and that text comes back as text)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Field(ge=0)] | None = None


class PromptRequest(_Strict):
    """What count_tokens and messages share: the prompt."""

    model: str
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None


class CountTokensRequest(PromptRequest):
    pass


class MessagesRequest(PromptRequest):
    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = None
    top_k: int | None = None
    metadata: Metadata | None = None
    stream: bool = False
    thinking: Thinking | None = None
    penelope: PenelopeHints | None = None

    @field_validator("top_k")
    @classmethod
    def _no_top_k(cls, v: int | None) -> int | None:
        if v is not None:
            raise ValueError("top_k is not supported by this server")
        return v
