"""Request bodies of the OpenAI Responses API (pydantic, at the HTTP edge only).

Strict as the chat bodies (`deployments.api.schemas`): a JSON value of the
wrong type is a 400 naming the field, never coerced. Unknown top-level fields
are ignored (Codex sends several of its own). Items and tools are read by
their `type`:

    input item   message (the `type` may be left out), function_call,
                 function_call_output: used.
                 DROPPED_ITEM_TYPES (reasoning, web_search_call, local_shell_call,
                 custom_tool_call, ...): types the API defines but a served model
                 cannot use; left out of the prompt (`translate`), not refused.
                 Any other type: a 400 naming `input[i].type`.
    content part input_text, output_text, refusal: text. input_image, input_file,
                 input_audio: dropped the same way. Any other type: a 400.
    tool         function: used. SKIPPED_TOOL_TYPES (web_search, custom,
                 local_shell, namespace, image_generation, ...): left out of
                 the prompt. Any other type: a 400 naming `tools[i].type`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, TypeAdapter, field_validator

from deployments.api.schemas import FunctionName, PenelopeHints, _Strict
from deployments.api.sessions import ClientId

DROPPED_ITEM_TYPES = frozenset(
    {
        "reasoning", "web_search_call", "file_search_call", "computer_call",
        "computer_call_output", "local_shell_call", "local_shell_call_output",
        "image_generation_call", "code_interpreter_call", "mcp_list_tools",
        "mcp_approval_request", "mcp_approval_response", "mcp_call", "custom_tool_call",
        "custom_tool_call_output", "item_reference", "shell_call", "shell_call_output",
        "apply_patch_call", "apply_patch_call_output", "compaction", "tool_search_call",
        "tool_search_output",
    }
)  # fmt: skip
DROPPED_PART_TYPES = frozenset({"input_image", "input_file", "input_audio"})
SKIPPED_TOOL_TYPES = frozenset(
    {
        "web_search", "web_search_preview", "web_search_preview_2025_03_11",
        "web_search_2025_08_26", "file_search", "computer_use_preview", "computer_use",
        "code_interpreter", "image_generation", "local_shell", "shell", "custom", "mcp",
        "namespace", "apply_patch", "tool_search",
    }
)  # fmt: skip


class TextContent(_Strict):
    type: Literal["input_text", "output_text", "refusal"]
    text: str = ""
    refusal: str = ""

    def value(self) -> str:
        return self.refusal if self.type == "refusal" else self.text


class DroppedContent(_Strict):
    """A part the model cannot read (an image, a file, audio): left out of the prompt."""

    type: str


def _part_type(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("input_text", "output_text", "refusal"):
        return "text"
    return "dropped" if kind in DROPPED_PART_TYPES else None


ContentPart = Annotated[
    Annotated[TextContent, Tag("text")] | Annotated[DroppedContent, Tag("dropped")],
    Discriminator(
        _part_type,
        custom_error_type="invalid_part_type",
        custom_error_message="Input should be a content part of type input_text, output_text, "
        "refusal, input_image, input_file or input_audio",
    ),
]


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.value() for p in self.content if isinstance(p, TextContent))


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: ClientId
    name: FunctionName
    arguments: str


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: ClientId
    output: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(p.value() for p in self.output if isinstance(p, TextContent))


class DroppedItem(_Strict):
    """An item of a type in DROPPED_ITEM_TYPES: accepted, left out of the prompt."""

    type: str


def _item_type(value: Any) -> str | None:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("message", "function_call", "function_call_output"):
        return kind
    return "dropped" if kind in DROPPED_ITEM_TYPES else None


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[DroppedItem, Tag("dropped")],
    Discriminator(
        _item_type,
        custom_error_type="invalid_item_type",
        custom_error_message="Input should be an item of type message, function_call, "
        "function_call_output, or another type the Responses API defines",
    ),
]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class SkippedTool(_Strict):
    """A tool of a type in SKIPPED_TOOL_TYPES (run by OpenAI or by the client): skipped."""

    type: str


def _tool_type(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind == "function":
        return "function"
    return "skipped" if kind in SKIPPED_TOOL_TYPES else None


ResponseTool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[SkippedTool, Tag("skipped")],
    Discriminator(
        _tool_type,
        custom_error_type="invalid_tool_type",
        custom_error_message="Input should be a tool of type function (or a hosted tool type "
        "the Responses API defines)",
    ),
]


class NamedFunctionChoice(_Strict):
    type: Literal["function"]
    name: FunctionName


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextOptions(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted, ignored


class ResponsesRequest(_Strict):
    """`POST /v1/responses`. Accepted and ignored: include, reasoning, client_metadata,
    service_tier, truncation, prompt_cache_retention, safety_identifier, max_tool_calls,
    stream_options, text.verbosity, and `store: false`."""

    model: str
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None
    previous_response_id: ClientId | None = None
    tools: list[ResponseTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = None
    stream: bool = False
    store: bool = True
    prompt_cache_key: ClientId | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    penelope: PenelopeHints | None = None
    background: bool | None = None
    conversation: Any = None
    top_logprobs: int | None = None

    @field_validator("background")
    @classmethod
    def _no_background(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("background responses are not supported by this server")
        return v

    @field_validator("conversation")
    @classmethod
    def _no_conversation(cls, v: Any) -> Any:
        if v is not None:
            raise ValueError(
                "conversation objects are not supported by this server; "
                "use previous_response_id with store: true"
            )
        return v

    @field_validator("top_logprobs")
    @classmethod
    def _no_logprobs(cls, v: int | None) -> int | None:
        if v:
            raise ValueError("top_logprobs is not supported by this server")
        return v

    def items(self) -> list[Item]:
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | DroppedItem
ITEMS = TypeAdapter(list[InputItem])  # a stored chain's items, read back (`store`)
