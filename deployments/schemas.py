"""Request bodies of the OpenAI-compatible API (pydantic, at the HTTP edge only).

Ranges follow OpenAI's: temperature in [0, 2], top_p in (0, 1]. Fields
Penelope cannot honour (n > 1, logprobs, tools, echo, suffix) are rejected
with a 400 naming the field rather than silently ignored; unknown fields are
ignored, as OpenAI's SDKs send a few.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "developer", "user", "assistant", "tool"]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Role
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _SamplingFields(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = None
    n: Literal[1] = 1
    stop: str | list[str] | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None  # int64, as OpenAI
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    session_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None

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
    tools: list[dict[str, Any]] | None = None

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: bool | None) -> bool | None:
        return _reject_if_set(v, "logprobs")

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return _reject_if_set(v, "tools")

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(_SamplingFields):
    prompt: (
        str
        | TokenIds
        | Annotated[list[str], Field(min_length=1, max_length=1)]
        | Annotated[list[TokenIds], Field(min_length=1, max_length=1)]
    )
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
