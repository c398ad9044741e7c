"""Validated HTTP bodies to engine requests: tokens, sampling, session, tenant.

Everything that can be wrong with a request is found here, before anything
reaches the engine, so a rejected request changes no cache state.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from deployments.api.backend import Backend, TokenizerLike
from deployments.api.chat_tools import history_dicts, plan_tools
from deployments.api.errors import ApiError, invalid
from deployments.api.hints import has_history, session_hints
from deployments.api.openai_bodies import Kind, ResponseMeta
from deployments.api.schemas import ChatCompletionRequest, CompletionRequest
from deployments.api.settings import ApiSettings
from deployments.api.tools.parsers import ReplyParser
from deployments.api.tools.render import render_prompt
from penelope_engine.errors import InvalidRequestError
from penelope_engine.protocol import GREEDY_BELOW_TEMPERATURE, GenerateRequest, SamplingParams

# Sampling edges the engine's float32 arithmetic cannot take: logits divided by a
# temperature near zero overflow to inf (NaN probabilities), and a top_p below
# float32's range keeps no token. Both limits mean "the most likely token", so
# such values are mapped to exactly that: greedy decoding (below the engine's
# GREEDY_BELOW_TEMPERATURE), or a top_p that still keeps only the top token (any
# top_p <= 1 / vocabulary size does).
MIN_TOP_P = 1e-6


@dataclass(frozen=True)
class Caller:
    """Who sent the request: the tenant (from the API key), the session id (the
    `x-session-id` header, or what the API's own session rule found) and the hint
    headers (`deployments.api.hints.hint_headers`)."""

    tenant: str
    session_id: str | None
    hint_headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    meta: ResponseMeta
    request: GenerateRequest
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    arrival: float  # time.perf_counter() when the request reached the API
    parser: ReplyParser | None = None  # replies are parsed for tool calls with it; None: text


@dataclass(frozen=True)
class EngineExtras:
    """What a chat's tools and format add to its engine request (`deployments.api.tools`)."""

    grammar: str | None = None
    stop_reason_hint: str | None = None
    tool_call_pattern: str | None = None
    parser: ReplyParser | None = None


def render_chat(
    body: ChatCompletionRequest, tokenizer: TokenizerLike, settings: ApiSettings
) -> tuple[list[int], EngineExtras]:
    """The chat's prompt token ids (its tools planned and rendered) and its engine extras."""
    plan = plan_tools(body, tokenizer, settings)
    ids = render_prompt(tokenizer, history_dicts(body.messages), plan.tools, plan.parser)
    extras = EngineExtras(
        plan.grammar,
        plan.stop_reason_hint,
        plan.tool_call_pattern,
        plan.parser if plan.parses_calls else None,
    )
    return list(ids), extras


async def chat_prompt_ids(
    body: ChatCompletionRequest, backend: Backend, settings: ApiSettings
) -> tuple[list[int], EngineExtras]:
    """`render_chat` off the event loop."""
    return await asyncio.to_thread(render_chat, body, backend.tokenizer, settings)


async def prepare_chat(
    body: ChatCompletionRequest,
    caller: Caller,
    backend: Backend,
    settings: ApiSettings,
    id_prefix: str = "chatcmpl",
    max_tokens_is_ceiling: bool = False,
) -> Prepared:
    """`body`'s engine request. `max_tokens_is_ceiling` (the Anthropic API): a `max_tokens`
    over the server's limit or the room left in the window is lowered to fit instead of
    refused (Anthropic's clients ask for 32K)."""
    arrival = time.perf_counter()
    check_model(body.model, backend)
    ids, extras = await chat_prompt_ids(body, backend, settings)
    return _prepared(
        "chat",
        body,
        ids,
        caller,
        backend,
        settings,
        arrival,
        extras,
        id_prefix,
        max_tokens_is_ceiling,
    )


async def prepare_text(
    body: CompletionRequest, caller: Caller, backend: Backend, settings: ApiSettings
) -> Prepared:
    arrival = time.perf_counter()
    check_model(body.model, backend)
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        ids = await asyncio.to_thread(backend.tokenizer.encode, prompt)
    else:
        ids = list(prompt)
    return _prepared("text", body, ids, caller, backend, settings, arrival)


def check_model(model: str, backend: Backend) -> None:
    if model != backend.model_name:
        raise ApiError(
            404,
            f"The model '{model}' does not exist; this server serves '{backend.model_name}'.",
            param="model",
            code="model_not_found",
        )


def _prepared(
    kind: Kind,
    body: ChatCompletionRequest | CompletionRequest,
    ids: list[int],
    caller: Caller,
    backend: Backend,
    settings: ApiSettings,
    arrival: float,
    extras: EngineExtras = EngineExtras(),
    id_prefix: str | None = None,
    ceiling: bool = False,
) -> Prepared:
    param = "messages" if kind == "chat" else "prompt"
    if not ids:
        raise invalid(f"{param} is empty after tokenization", param=param)
    requested = body.requested_max_tokens()
    if ceiling and requested is not None:
        room = max(1, backend.max_model_len - len(ids))
        requested = min(requested, settings.max_tokens_limit, room)
    max_tokens = _max_tokens(requested, len(ids), param, backend, settings)
    stop = _stop_strings(body.stop_list(), settings)
    hints = session_hints(body, caller.hint_headers)
    try:
        sampling = SamplingParams(
            max_tokens=max_tokens,
            temperature=_temperature(body.temperature, settings.default_temperature),
            top_p=1.0 if body.top_p is None else max(body.top_p, MIN_TOP_P),
            seed=body.seed,
            ignore_eos=body.ignore_eos,
        )
    except InvalidRequestError as exc:
        raise invalid(str(exc)) from exc
    prefix = id_prefix or ("chatcmpl" if kind == "chat" else "cmpl")
    request_id = f"{prefix}-{uuid.uuid4().hex}"
    request = GenerateRequest(
        request_id=request_id,
        prompt_token_ids=tuple(ids),
        sampling=sampling,
        session_id=caller.session_id or body.session_id,
        tenant=caller.tenant,
        hints=hints,
        has_history=has_history(body),
        grammar=extras.grammar,
        stop_reason_hint=extras.stop_reason_hint,
        tool_call_pattern=extras.tool_call_pattern,
    )
    meta = ResponseMeta(kind, request_id, backend.model_name, int(time.time()))
    return Prepared(meta, request, stop, body.stream, body.include_usage, arrival, extras.parser)


def _temperature(requested: float | None, default: float) -> float:
    t = default if requested is None else requested
    return 0.0 if t < GREEDY_BELOW_TEMPERATURE else t


def _max_tokens(
    requested: int | None, prompt_len: int, param: str, backend: Backend, s: ApiSettings
) -> int:
    room = backend.max_model_len - prompt_len
    if room < 1:
        raise invalid(
            f"The prompt has {prompt_len} tokens; this model's context is "
            f"{backend.max_model_len} tokens, which leaves no room for a completion.",
            param=param,
            code="context_length_exceeded",
        )
    if requested is None:
        return min(s.default_max_tokens, room)
    if requested > s.max_tokens_limit:
        raise invalid(
            f"max_tokens is {requested}; this server allows at most {s.max_tokens_limit}.",
            param="max_tokens",
        )
    if requested > room:
        raise invalid(
            f"The prompt ({prompt_len} tokens) plus max_tokens ({requested}) exceeds the "
            f"model's context of {backend.max_model_len} tokens.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return requested


def _stop_strings(stop: list[str], s: ApiSettings) -> tuple[str, ...]:
    if len(stop) > s.max_stop_sequences:
        raise invalid(f"stop has {len(stop)} sequences; at most {s.max_stop_sequences}", "stop")
    for seq in stop:
        if not seq or len(seq) > s.max_stop_chars:
            raise invalid(
                f"each stop sequence must have 1 to {s.max_stop_chars} characters", "stop"
            )
    return tuple(stop)
