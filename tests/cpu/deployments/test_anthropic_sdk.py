"""The `anthropic` SDK against a real standalone server (uvicorn, 127.0.0.1, a free port).

`messages.create` and `messages.stream` with tools, `tool_result` turns and
`cache_control`; turn 2's `cache_read_input_tokens` covers the system prompt
and the tools; x-api-key maps to the tenant; usage adds up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from deploy_testkit import MODEL, TINY_ENGINE
from fastapi import FastAPI

from deployments.api.anthropic.schemas import MessagesRequest
from deployments.api.anthropic.session import session_of
from deployments.api.anthropic.translate import to_chat
from deployments.api.prepare import render_chat
from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app

KEY = "sk-anthropic-test-key"
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0; cch=1a2b3;"},
    {
        "type": "text",
        "text": "You are a coding agent working in a repository. " * 6,
        "cache_control": {"type": "ephemeral"},
    },
]
TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "run_tests",
        "description": "Run the test suite.",
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    },
]
TOOL_TURN: list[Any] = [
    {"role": "user", "content": "Why does the test fail?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me read it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "t.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "assert 1 == 2"},
        ],
    },
]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return standalone_app(TINY_ENGINE, ApiSettings(api_keys={KEY: "team-a"}))


@pytest.fixture(scope="module")
def base_url(app: FastAPI) -> Iterator[str]:
    with background_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)


def _system_and_tools_tokens(app: FastAPI) -> int:
    """Tokens of the rendered system prompt and tools, the prefix every turn shares."""
    body = MessagesRequest.model_validate(
        {
            "model": MODEL,
            "max_tokens": 1,
            "system": SYSTEM,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    tokenizer = app.state.penelope.backend.tokenizer
    chat = to_chat(body, session_of(body, {})).chat
    system_only = chat.model_copy(
        update={"messages": [m for m in chat.messages if m.role == "system"]}
    )
    ids, _ = render_chat(system_only, tokenizer, ApiSettings())
    return len(ids) - len(tokenizer.encode("<|im_start|>assistant\n"))


def _check_usage(usage: Any) -> None:
    extra = usage.model_extra or {}
    penelope = extra["penelope"]
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    sources = ("device", "host", "store", "recomputed", "new")
    assert sum(penelope[f"{k}_tokens"] for k in sources) == prompt
    assert usage.cache_read_input_tokens == sum(
        penelope[f"{k}_tokens"] for k in ("device", "host", "store")
    )
    assert sum(penelope["miss_tokens"].values()) == prompt - usage.cache_read_input_tokens


def test_create_then_tool_result_turn_reads_system_and_tools_from_cache(
    client: anthropic.Anthropic, app: FastAPI
) -> None:
    headers = {"x-claude-code-session-id": "sdk-session-1"}
    first = client.messages.create(
        model=MODEL,
        max_tokens=4,
        extra_body={"temperature": 0},
        system=SYSTEM,
        tools=TOOLS,
        messages=TOOL_TURN[:1],
        extra_headers=headers,
    )
    assert first.type == "message" and first.role == "assistant"
    assert first.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens > 0  # cache_control asked: written
    _check_usage(first.usage)
    retain = (first.usage.model_extra or {})["penelope"]["hints"]["retain_s"]
    assert retain["asked"] == 3600.0  # the longest cache_control ttl (the tool's 1h)

    second = client.messages.create(
        model=MODEL,
        max_tokens=4,
        extra_body={"temperature": 0},
        system=SYSTEM,
        tools=TOOLS,
        messages=TOOL_TURN,
        extra_headers=headers,
    )
    _check_usage(second.usage)
    prefix = _system_and_tools_tokens(app)
    assert prefix > 100
    assert second.usage.cache_read_input_tokens >= prefix
    assert app.state.penelope.backend.engine.stats().running == 0


def test_stream_emits_anthropic_events_and_final_usage(client: anthropic.Anthropic) -> None:
    headers = {"x-session-id": "sdk-stream"}
    kinds: list[str] = []
    with client.messages.stream(
        model=MODEL,
        max_tokens=6,
        system=SYSTEM,
        tools=TOOLS,
        messages=TOOL_TURN,
        extra_headers=headers,
    ) as stream:
        for ev in stream:
            kinds.append(ev.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.usage.output_tokens >= 1
    text = "".join(b.text for b in final.content if b.type == "text")
    calls = [b for b in final.content if b.type == "tool_use"]
    assert text or calls
    # The same turn again: served from the cache, by the stream's own usage.
    with client.messages.stream(
        model=MODEL,
        max_tokens=2,
        system=SYSTEM,
        tools=TOOLS,
        messages=TOOL_TURN,
        extra_headers=headers,
    ) as stream:
        again = stream.get_final_message()
    _check_usage(again.usage)
    assert again.usage.cache_read_input_tokens > 0.9 * (
        again.usage.cache_read_input_tokens + again.usage.cache_creation_input_tokens
    )


def test_count_tokens_matches_the_prompt_the_engine_saw(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(
        model=MODEL, system=SYSTEM, tools=TOOLS, messages=TOOL_TURN
    )
    reply = client.messages.create(
        model=MODEL, max_tokens=1, system=SYSTEM, tools=TOOLS, messages=TOOL_TURN
    )
    u = reply.usage
    assert counted.input_tokens == (
        u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    )


def test_keys_bearer_or_x_api_key_and_errors_in_anthropic_shape(base_url: str) -> None:
    bad = anthropic.Anthropic(base_url=base_url, api_key="sk-wrong-key-0000", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        bad.messages.create(model=MODEL, max_tokens=1, messages=TOOL_TURN[:1])
    assert err.value.body["type"] == "error"  # type: ignore[index]
    assert err.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    bearer = anthropic.Anthropic(base_url=base_url, auth_token=KEY, max_retries=0)
    ok = bearer.messages.create(model=MODEL, max_tokens=1, messages=TOOL_TURN[:1])
    assert ok.usage.output_tokens == 1
    good = anthropic.Anthropic(base_url=base_url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        good.messages.create(model="claude-x", max_tokens=1, messages=TOOL_TURN[:1])


def test_a_forced_tool_comes_back_as_tool_use_whose_input_validates(
    client: anthropic.Anthropic,
) -> None:
    """tool_choice `tool` (and `any`) is enforced by the grammar of the one chat path: the
    reply is a tool_use block, whole or streamed as input_json_delta pieces."""
    import jsonschema

    # Bounded arguments: a random model would write a free string until max_tokens.
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string", "enum": ["t.py", "setup.py"]}},
        "required": ["path"],
        "additionalProperties": False,  # else the grammar lets it write a key without end
    }
    closed = {"type": "object", "properties": {}, "additionalProperties": False}
    tools: Any = [{**TOOLS[0], "input_schema": schema}, {**TOOLS[1], "input_schema": closed}]
    forced: Any = {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True}
    reply = client.messages.create(
        model=MODEL, max_tokens=64, tools=tools, tool_choice=forced, messages=TOOL_TURN[:1]
    )
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and len(calls) == 1, reply
    assert calls[0].name == "read_file"
    jsonschema.validate(calls[0].input, schema)
    pieces: list[str] = []
    with client.messages.stream(
        model=MODEL,
        max_tokens=64,
        tools=tools,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=TOOL_TURN[:1],
    ) as stream:
        for ev in stream:
            if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
                pieces.append(ev.delta.partial_json)
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed and pieces
    tool = next(t for t in tools if t["name"] == streamed[0].name)
    jsonschema.validate(streamed[0].input, tool["input_schema"])
