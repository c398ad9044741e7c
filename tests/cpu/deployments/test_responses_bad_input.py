"""Bad Responses requests: each a 400 in OpenAI's error shape naming the field (413 for a
body over the limit), nothing reaches the engine, other sessions keep their cache, and the
server stays healthy. Item and tool types the API defines but the model cannot use are
dropped, not refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, open_client
from fastapi import FastAPI

from deployments.api.settings import ApiSettings

pytestmark = pytest.mark.anyio
ROUTE = "/v1/responses"
TOOL = {"type": "function", "name": "grep", "parameters": {"type": "object",
        "properties": {"q": {"type": "string"}}}}  # fmt: skip
CALL = {"type": "function_call", "call_id": "call_9", "name": "grep", "arguments": '{"q": "x"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_9", "output": "found"}
INSTRUCTIONS = "You are a careful coding agent. " * 10


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_output_tokens": 2,
        "instructions": INSTRUCTIONS,
        "tools": [TOOL],
        "input": [{"role": "user", "content": "Find the bug."}],
    }
    return body | over


def _user(*more: Any) -> list[Any]:
    return [{"role": "user", "content": "Find the bug."}, *more]


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown item type", _body(input=_user({"type": "telepathy", "x": 1})), "input[1]"),
    ("item without role", _body(input=[{"type": "message", "content": "hi"}]), "input[0].role"),
    ("item role unknown", _body(input=[{"role": "robot", "content": "hi"}]), "input[0].role"),
    (
        "unknown content part",
        _body(input=[{"role": "user", "content": [{"type": "input_x"}]}]),
        "input[0].content[0]",
    ),  # fmt: skip
    ("orphan function_call_output", _body(input=_user(OUTPUT)), "input[1].call_id"),
    ("output before its call", _body(input=_user(OUTPUT, CALL)), "input[1].call_id"),
    (
        "call arguments not JSON",
        _body(input=_user({**CALL, "arguments": "{oops"}, OUTPUT)),
        "input[1].arguments",
    ),  # fmt: skip
    (
        "call arguments a list",
        _body(input=_user({**CALL, "arguments": "[1]"})),
        "input[1].arguments",
    ),  # fmt: skip
    (
        "call without call_id",
        _body(input=_user({k: v for k, v in CALL.items() if k != "call_id"})),
        "input[1].call_id",
    ),  # fmt: skip
    (
        "only dropped items",
        _body(input=[{"type": "reasoning", "summary": []}], instructions=None),
        "input",
    ),  # fmt: skip
    ("empty input list", _body(input=[]), "input"),
    ("unknown tool type", _body(tools=[{"type": "teleport"}]), "tools[0]"),
    ("tool without name", _body(tools=[{"type": "function", "parameters": {}}]), "tools[0].name"),
    ("tool name invalid", _body(tools=[{**TOOL, "name": "has space"}]), "tools[0].name"),
    (
        "parameters not an object schema",
        _body(tools=[{**TOOL, "parameters": {"type": "string"}}]),
        "tools[0].parameters",
    ),  # fmt: skip
    ("parameters not a dict", _body(tools=[{**TOOL, "parameters": "x"}]), "tools[0].parameters"),
    (
        "a schema feature the grammar lacks",
        _body(
            tools=[
                {"type": "web_search"},
                {**TOOL, "parameters": {"type": "object", "properties": {"q": {"type": "strung"}}}},
            ]
        ),
        "tools[1].parameters",
    ),  # fmt: skip
    ("tool twice", _body(tools=[TOOL, TOOL]), "tools[1].name"),
    (
        "tool_choice unknown tool",
        _body(tool_choice={"type": "function", "name": "nope"}),
        "tool_choice",
    ),  # fmt: skip
    ("tool_choice unknown", _body(tool_choice="sometimes"), "tool_choice"),
    ("required without tools", _body(tools=None, tool_choice="required"), "tool_choice"),
    (
        "json_schema without schema",
        _body(text={"format": {"type": "json_schema", "name": "x"}}),
        "text.format.schema",
    ),  # fmt: skip
    ("text.format unknown", _body(text={"format": {"type": "yaml"}}), "text.format.type"),
    ("max_output_tokens a string", _body(max_output_tokens="5"), "max_output_tokens"),
    ("max_output_tokens 0", _body(max_output_tokens=0), "max_output_tokens"),
    ("max_output_tokens a float", _body(max_output_tokens=5.0), "max_output_tokens"),
    ("temperature over 2", _body(temperature=2.5), "temperature"),
    ("stream a string", _body(stream="true"), "stream"),
    ("store a number", _body(store=1), "store"),
    ("input a number", _body(input=5), "input"),
    ("instructions a list", _body(instructions=["x"]), "instructions"),
    ("metadata values not strings", _body(metadata={"a": 1}), "metadata.a"),
    ("background", _body(background=True), "background"),
    ("conversation", _body(conversation="conv_1"), "conversation"),
    ("prompt_cache_key empty", _body(prompt_cache_key=""), "prompt_cache_key"),
    ("penelope hint unknown", _body(penelope={"retain": 5}), "penelope.retain"),
    (
        "unknown previous_response_id",
        _body(previous_response_id="resp_" + "0" * 32),
        "previous_response_id",
    ),  # fmt: skip
    (
        "malformed previous_response_id",
        _body(previous_response_id="../../etc"),
        "previous_response_id",
    ),  # fmt: skip
    ("window exceeded", _body(input="word " * 3000), "input"),
    ("max_output_tokens past the limit", _body(max_output_tokens=100_000), "max_output_tokens"),
]


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(make_app(ApiSettings(max_body_bytes=3 << 20))):
        yield c


def _engine(client: httpx.AsyncClient) -> Any:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app.state.penelope.backend.engine  # type: ignore[attr-defined]


async def test_bad_requests_are_400s_naming_the_field_and_touch_no_session(
    client: httpx.AsyncClient,
) -> None:
    other = _body(input="A long question. " * 20)
    headers = {"x-session-id": "bystander"}
    first = await client.post(ROUTE, json=other, headers=headers)
    assert first.status_code == 200, first.text
    engine = _engine(client)
    before = engine.stats()
    for why, body, param in BAD:
        r = await client.post(ROUTE, json=body, headers={"x-session-id": "bad"})
        assert r.status_code == 400, (why, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error", why
        assert err["param"] == param, (why, err)
        assert param.split("[")[0] in err["message"] or err["code"] == "invalid_type", (why, err)
    after = engine.stats()
    assert after.running == 0 and after.queue_length == 0
    assert after.pages_device_used == before.pages_device_used  # nothing admitted or evicted
    assert after.tokens.new_tokens == before.tokens.new_tokens
    assert after.session_records == before.session_records
    engine.check_integrity()
    assert (await client.get("/health")).status_code == 200
    again = (await client.post(ROUTE, json=other, headers=headers)).json()["usage"]
    assert again["input_tokens_details"]["cached_tokens"] >= again["input_tokens"] - 4


async def test_an_oversized_body_is_413_and_the_server_stays_healthy(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(ROUTE, json=_body(input="y" * (3 << 20)))
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
    assert (await client.get("/health")).status_code == 200


async def test_item_and_tool_types_the_model_cannot_use_are_dropped_not_refused(
    client: httpx.AsyncClient,
) -> None:
    plain = (await client.post(ROUTE, json=_body(), headers={"x-session-id": "a"})).json()
    dropped = _body(
        input=[
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "..."},
            {"role": "user", "content": [{"type": "input_text", "text": "Find the bug."},
                                         {"type": "input_image", "image_url": "data:,"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],  # fmt: skip
        tools=[{"type": "web_search"}, TOOL, {"type": "custom", "name": "apply_patch"},
               {"type": "namespace", "name": "agents", "tools": []}, {"type": "local_shell"}],
        include=["reasoning.encrypted_content"], reasoning={"summary": "auto"},
        client_metadata={"x": "y"}, store=False, service_tier="auto", truncation="auto",
    )  # fmt: skip
    r = await client.post(ROUTE, json=dropped, headers={"x-session-id": "b"})
    assert r.status_code == 200, r.text
    body = r.json()
    # The same prompt: dropped items, parts and tools leave no trace in it.
    assert body["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    assert [t["name"] for t in body["tools"]] == ["grep"]
    assert (await client.get(f"{ROUTE}/{body['id']}")).status_code == 404  # store: false
