"""Request bodies of the OpenAI-compatible API (pydantic, at the HTTP edge only).

Ranges follow OpenAI's: temperature in [0, 2], top_p in (0, 1]. Fields
Penelope cannot honour (n > 1, logprobs, echo, suffix) are rejected
with a 400 naming the field rather than silently ignored; unknown fields are
ignored, as OpenAI's SDKs send a few, except inside Penelope's own objects
(`penelope`, `cache_control`), where an unknown field is a 400 naming it.

Types are strict, as OpenAI's are: a JSON value of the wrong type is a 400
naming the field, never coerced ("true" is not a boolean, 3.0 and "5" are not
integers). The one widening is JSON's own: an integer is a number, so
`"temperature": 1` is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
)
from pydantic_core import PydanticCustomError

from deployments.api.sessions import ClientId

Role = Literal["system", "developer", "user", "assistant", "tool"]


class _Strict(BaseModel):
    """Every request model: unknown fields ignored, no type coercion."""

    model_config = ConfigDict(extra="ignore", strict=True)


def _int_only(value: Any) -> Any:
    """Literal ints compare equal to True and 1.0; strictly, only an int is one."""
    if type(value) is not int:
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


class _Closed(_Strict):
    """Penelope's own objects: an unknown field is an error, not ignored."""

    model_config = ConfigDict(extra="forbid", strict=True)


Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class CacheControl(_Closed):
    """Anthropic's prompt-caching marker: keep this prefix for 5 minutes or an hour."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class PenelopeHints(_Closed):
    """A harness's hints (`deployments.api.hints`, docs/hints.md); every field optional."""

    retain_s: Seconds | None = None
    expected_gap_s: Seconds | None = None
    end_session: bool = False
    parent_session: ClientId | None = None


class SessionHintsRequest(_Closed):
    """`POST /v1/penelope/sessions/{id}`: what a harness learned once the turn's reply
    arrived (`deployments.api.hints.session_endpoint_hints`); every field optional."""

    expected_gap_s: Seconds | None = None
    end_session: bool = False
    retain_s: Seconds | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


FunctionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class FunctionCall(_Strict):
    name: FunctionName
    arguments: str  # JSON text of an object, as the model wrote it


class ToolCallPart(_Strict):
    """An assistant message's `tool_calls[i]`."""

    id: ClientId
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDef(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; None: no arguments
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: FunctionName


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


ToolChoiceField = Literal["auto", "none", "required"] | NamedToolChoice


class JsonSchemaFormat(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatMessage(_Strict):
    role: Role
    content: str | list[TextPart] | None = None
    name: str | None = None
    cache_control: CacheControl | None = None
    tool_calls: list[ToolCallPart] | None = None  # role "assistant"
    tool_call_id: ClientId | None = None  # "tool"

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(_Strict):
    include_usage: bool = False


class _SamplingFields(_Strict):
    """Fields shared by chat and text completions."""

    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = None
    n: Annotated[Literal[1], BeforeValidator(_int_only)] = 1
    stop: str | list[str] | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None  # int64, as OpenAI
    # vLLM's and SGLang's extension: generate max_tokens tokens even past EOS (benchmarks).
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    session_id: ClientId | None = None
    penelope: PenelopeHints | None = None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


def _reject_if_set(value: Any, what: str) -> Any:
    if value:
        raise ValueError(f"{what} is not supported by this server")
    return value


class ChatCompletionRequest(_SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoiceField | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: bool | None) -> bool | None:
        return _reject_if_set(v, "logprobs")

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def _prompt_kind(value: Any) -> str | None:
    """Which form of prompt this is, so errors come from that form alone."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    if value and isinstance(value[0], str):
        return "texts"
    if value and isinstance(value[0], list):
        return "token_lists"
    return "tokens"


Prompt = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[TokenIds, Tag("tokens")]
    | Annotated[list[str], Field(min_length=1, max_length=1), Tag("texts")]
    | Annotated[list[TokenIds], Field(min_length=1, max_length=1), Tag("token_lists")],
    Discriminator(
        _prompt_kind,
        custom_error_type="invalid_type",
        custom_error_message="Input should be a string or an array",
        custom_error_context={"expected_type": "a string or an array"},
    ),
]


class CompletionRequest(_SamplingFields):
    prompt: Prompt
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v: bool) -> bool:
        return _reject_if_set(v, "echo")

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: int | None) -> int | None:
        if v is not None:
            raise ValueError("logprobs is not supported by this server")
        return v

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: str | None) -> str | None:
        return _reject_if_set(v, "suffix")

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def single_prompt(self) -> str | list[int]:
        """The one prompt, as text or token ids (batches of one are unwrapped)."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], str | list):
            return p[0]  # type: ignore[return-value]
        return p  # type: ignore[return-value]
