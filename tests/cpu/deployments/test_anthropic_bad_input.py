"""Bad Anthropic requests: each a 400 (413 for a body over the limit) in Anthropic's error
shape, naming the field, and the cache of other sessions is untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, open_client
from fastapi import FastAPI

from deployments.api.anthropic.translate import MAX_TOOL_PAYLOAD_CHARS
from deployments.api.settings import ApiSettings

pytestmark = pytest.mark.anyio
TOOL = {"name": "grep", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
SYSTEM = "You are a careful coding agent. " * 10
USE = {"type": "tool_use", "id": "toolu_9", "name": "grep", "input": {"q": "x"}}


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2,
        "system": SYSTEM,
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "Find the bug."}],
    }
    return body | over


def _turn(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Find the bug."},
        {"role": "assistant", "content": [USE]},
        {"role": "user", "content": [result]},
    ]


BIG = "x" * (MAX_TOOL_PAYLOAD_CHARS + 1)
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("tools not a list", _body(tools={"name": "grep"}), "tools"),
    ("tool without input_schema", _body(tools=[{"name": "grep"}]), "tools[0].input_schema"),
    (
        "schema not an object",
        _body(tools=[{**TOOL, "input_schema": {"type": "string"}}]),
        "tools[0].input_schema",
    ),
    (
        "schema malformed",
        _body(
            tools=[
                {
                    **TOOL,
                    "input_schema": {"type": "object", "properties": {"q": {"type": "strung"}}},
                }
            ]
        ),
        "tools[0].input_schema",
    ),
    ("tool name invalid", _body(tools=[{**TOOL, "name": "has space"}]), "tools[0].name"),
    ("server tool", _body(tools=[{**TOOL, "type": "web_search_20250305"}]), "tools[0].type"),
    ("tool twice", _body(tools=[TOOL, TOOL]), "tools[1]"),
    (
        "tool_choice unknown tool",
        _body(tool_choice={"type": "tool", "name": "nope"}),
        "tool_choice.name",
    ),
    ("tool_choice unknown type", _body(tool_choice={"type": "sometimes"}), "tool_choice"),
    (
        "tool_result without tool_use",
        _body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "ok"}],
                }
            ]
        ),
        "messages[0].content[0].tool_use_id",
    ),
    (
        "tool_result for another id",
        _body(messages=_turn({"type": "tool_result", "tool_use_id": "toolu_8", "content": "ok"})),
        "messages[2].content[0].tool_use_id",
    ),
    (
        "tool_use from the user",
        _body(messages=[{"role": "user", "content": [USE]}]),
        "messages[0].content[0]",
    ),
    (
        "unknown block type",
        _body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "base64", "data": ""}}],
                }
            ]
        ),
        "messages[0].content[0]",
    ),
    (
        "block without type",
        _body(messages=[{"role": "user", "content": [{"text": "hi"}]}]),
        "messages[0].content[0]",
    ),
    (
        "oversized tool_result",
        _body(messages=_turn({"type": "tool_result", "tool_use_id": "toolu_9", "content": BIG})),
        "messages[2].content[0].content",
    ),
    (
        "oversized tool_use input",
        _body(
            messages=[
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{**USE, "input": {"q": BIG}}]},
            ]
        ),
        "messages[1].content[0].input",
    ),
    ("wrong type", _body(max_tokens="5"), "max_tokens"),
    ("temperature over 1", _body(temperature=1.5), "temperature"),
    ("top_k", _body(top_k=5), "top_k"),
    ("no max_tokens", {k: v for k, v in _body().items() if k != "max_tokens"}, "max_tokens"),
]


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(make_app(ApiSettings(max_body_bytes=3 << 20))):
        yield c


def _engine(client: httpx.AsyncClient) -> Any:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app.state.penelope.backend.engine  # type: ignore[attr-defined]


async def test_bad_requests_are_400s_naming_the_field_and_other_sessions_keep_their_cache(
    client: httpx.AsyncClient,
) -> None:
    other = _body(messages=[{"role": "user", "content": "A long question. " * 20}])
    headers = {"x-session-id": "bystander"}
    first = await client.post("/v1/messages", json=other, headers=headers)
    assert first.status_code == 200, first.text
    engine = _engine(client)
    before = engine.stats()
    for why, body, param in BAD:
        r = await client.post("/v1/messages", json=body, headers={"x-session-id": "bad"})
        assert r.status_code == 400, (why, r.text)
        err = r.json()
        assert err["type"] == "error", why
        assert err["error"]["type"] == "invalid_request_error", why
        assert err["error"].get("param") == param, (why, err)
        assert param in err["error"]["message"], (why, err)
    after = engine.stats()
    assert after.running == 0 and after.queue_length == 0
    assert after.pages_device_used == before.pages_device_used  # nothing admitted or evicted
    assert after.tokens.new_tokens == before.tokens.new_tokens
    assert after.session_records == before.session_records
    engine.check_integrity()
    again = await client.post("/v1/messages", json=other, headers=headers)
    usage = again.json()["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert usage["cache_read_input_tokens"] >= prompt - 8  # all but the last, partial page


async def test_oversized_body_is_413_in_anthropic_shape(client: httpx.AsyncClient) -> None:
    body = _body(messages=[{"role": "user", "content": "y" * (3 << 20)}])
    r = await client.post("/v1/messages", json=body)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "request_too_large"


async def test_unknown_model_and_openai_routes_keep_their_shape(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/messages", json=_body(model="claude-opus"))
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert r.status_code == 400 and "type" not in r.json()  # OpenAI's {"error": {...}}
    r = await client.post(
        "/v1/messages/count_tokens",
        json={
            "model": MODEL,
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}
            ],
        },
    )
    assert r.status_code == 400 and r.json()["error"]["param"].endswith("tool_use_id")
