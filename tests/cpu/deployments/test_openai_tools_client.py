"""The `openai` SDK against a real server over SmolLM2-135M: tool round trips, forced calls
whose arguments validate, JSON outputs, and bad tool input answered with 400s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from fastapi import FastAPI
from tool_testkit import SMOLLM2, SMOLLM2_ENGINE, SYSTEM, WEATHER, WEATHER_PARAMS, wait_idle

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app

pytestmark = pytest.mark.timeout(600)
QUESTION = {"role": "user", "content": "What is the weather in Paris, in celsius?"}
TOOLS_BYTES = 4096  # max_tools_bytes of this server, to test an oversized payload


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return standalone_app(SMOLLM2_ENGINE, ApiSettings(max_tools_bytes=TOOLS_BYTES))


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[openai.OpenAI]:
    with background_server(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _ask(client: openai.OpenAI, messages: list[Any], session: str, **kw: Any) -> Any:
    return client.chat.completions.create(
        model=SMOLLM2,
        messages=messages,
        tools=[WEATHER],
        temperature=0,
        max_tokens=kw.pop("max_tokens", 60),
        extra_headers={"x-session-id": session},
        **kw,
    )


def _valid_call(call: Any) -> dict[str, Any]:
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER_PARAMS)
    return args


def test_a_tool_round_trip_call_result_answer(client: openai.OpenAI, app: FastAPI) -> None:
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, QUESTION]
    first = _ask(client, messages, "round-trip", tool_choice="required")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    _valid_call(call)
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "18 C, light rain"})
    answer = _ask(client, messages, "round-trip")
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content
    # The second call reuses the first's prompt: system, tools and question are cached.
    assert answer.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 8
    wait_idle(app)
    engine = app.state.penelope.backend.engine
    assert engine.engine.inspect().core.sessions.record("round-trip").last_stop == "end_turn"


def test_a_streamed_round_trip_sends_id_and_name_then_argument_pieces(
    client: openai.OpenAI, app: FastAPI
) -> None:
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, QUESTION]
    stream = _ask(client, messages, "streamed", tool_choice="required", stream=True)
    parts, finish = [], None
    for chunk in stream:
        delta = chunk.choices[0].delta
        parts += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
        assert not delta.content
    assert finish == "tool_calls"
    assert parts[0].id and parts[0].function.name == "get_weather" and parts[0].type == "function"
    assert all(p.id is None and p.function.name is None for p in parts[1:]) and len(parts) > 3
    arguments = "".join(p.function.arguments or "" for p in parts)
    call_id = parts[0].id
    jsonschema.validate(json.loads(arguments), WEATHER_PARAMS)
    wait_idle(app)
    engine = app.state.penelope.backend.engine
    sessions = engine.engine.inspect().core.sessions
    assert sessions.record("streamed").last_stop == "tool_use"  # learned from the reply
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "18 C, light rain"},
    ]
    text, finish = "", None
    for chunk in _ask(client, messages, "streamed", stream=True):
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop" and text


def test_a_named_tool_choice_gets_that_tool_with_valid_arguments(client: openai.OpenAI) -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    r = client.chat.completions.create(
        model=SMOLLM2,
        messages=[QUESTION],
        tools=[other, WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0.8,
        seed=11,
        max_tokens=60,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    _valid_call(r.choices[0].message.tool_calls[0])


def test_a_json_schema_response_format_validates(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=SMOLLM2,
        messages=[QUESTION],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": schema, "strict": True},
        },
        max_tokens=60,
    )
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = client.chat.completions.create(
        model=SMOLLM2, messages=[QUESTION], response_format={"type": "json_object"}, max_tokens=60
    )
    # `json_object` has no schema to close it: the model may still be inside the object
    # when max_tokens ends it, and then (as OpenAI documents) the reply is cut, not parsed.
    content = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert r.choices[0].finish_reason == "length" and content.lstrip().startswith("{")


def _fn(name: str = "f", parameters: Any = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    if parameters is not None:
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ],
}
BAD_INPUT = [
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    ({"tools": [_fn("has space")]}, "tools[0].function.name"),
    ({"tools": [_fn(parameters="object")]}, "tools[0].function.parameters"),
    ({"tools": [_fn(parameters={"type": "array"})]}, "tools[0].function.parameters"),
    ({"tools": [_fn(parameters={"type": "object", "if": {}})]}, "tools[0].function.parameters"),
    ({"tools": [_fn(parameters={"$ref": "#/missing"})]}, "tools[0].function.parameters"),
    ({"tools": [_fn(), _fn()]}, "tools[1].function.name"),
    ({"tools": [_fn(f"f{i}", {"description": "x" * 100}) for i in range(60)]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    (
        {"tools": [_fn()], "tool_choice": {"type": "function", "function": {"name": "g"}}},
        "tool_choice",
    ),
    ({"tools": [_fn()], "tool_choice": "always"}, "tool_choice"),
    (
        {"tools": [_fn()], "tool_choice": "required", "response_format": {"type": "json_object"}},
        "response_format",
    ),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"if": {}}},
            }
        },
        "response_format.json_schema.schema",
    ),
    ({"messages": [QUESTION, {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
    (
        {"messages": [QUESTION, {"role": "tool", "content": "x", "tool_call_id": "call_9"}]},
        "messages[1].tool_call_id",
    ),
    (
        {
            "messages": [
                QUESTION,
                {
                    **CALLED,
                    "tool_calls": [
                        {**CALLED["tool_calls"][0], "function": {"name": "f", "arguments": "{oops"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        {
            "messages": [
                QUESTION,
                {
                    **CALLED,
                    "tool_calls": [
                        {**CALLED["tool_calls"][0], "function": {"name": "f", "arguments": "[1]"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
    ),
    ({"messages": [{**QUESTION, "tool_calls": CALLED["tool_calls"]}]}, "messages[0].tool_calls"),
    (
        {
            "messages": [
                QUESTION,
                CALLED,
                {"role": "tool", "tool_call_id": "call_1", "content": "y" * 40000},
            ]
        },
        "messages",
    ),
]


def test_bad_tool_input_is_a_400_in_openai_s_shape_and_other_sessions_are_untouched(
    client: openai.OpenAI, app: FastAPI
) -> None:
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, QUESTION]
    first = _ask(client, messages, "bystander", max_tokens=4)
    wait_idle(app)
    engine = app.state.penelope.backend.engine
    before = engine.stats()
    for change, param in BAD_INPUT:
        body = {"model": SMOLLM2, "messages": [QUESTION], "max_tokens": 4, **change}
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(**body)
        error = err.value.body
        assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error" and error["param"] == param, (change, error)
    after = engine.stats()
    assert after.tokens.new_tokens == before.tokens.new_tokens
    assert after.session_records == before.session_records
    again = _ask(client, messages, "bystander", max_tokens=4)
    assert again.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 8
