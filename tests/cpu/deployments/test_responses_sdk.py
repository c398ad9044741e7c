"""The `openai` SDK's Responses client against a real standalone server over SmolLM2-135M.

`responses.create` and `responses.stream` (the full event sequence, numbered), a
function-call round trip (stateless, then through `previous_response_id`), a strict
`json_schema` answer that validates, and `store=True` chains: served from cache, readable
and deletable by id, invisible to another tenant, counted on /metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from fastapi import FastAPI
from tool_testkit import SMOLLM2, SMOLLM2_ENGINE, SYSTEM, WEATHER_PARAMS, wait_idle

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app

pytestmark = pytest.mark.timeout(600)
KEY_A, KEY_B = "sk-responses-team-a", "sk-responses-team-b"
TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": "The current weather of a city.",
     "parameters": WEATHER_PARAMS, "strict": True},
    {"type": "web_search"},  # skipped: run by OpenAI, not by this server
]  # fmt: skip
PAGE = SMOLLM2_ENGINE.cache.page_size


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FastAPI, str]]:
    settings = ApiSettings(api_keys={KEY_A: "team-a", KEY_B: "team-b"})
    app = standalone_app(SMOLLM2_ENGINE, settings)
    with background_server(app) as url:
        yield app, url


def _client(url: str, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_create_and_stream_give_the_same_answer_through_the_full_event_sequence(
    served: tuple[FastAPI, str],
) -> None:
    app, url = served
    client = _client(url)
    ask: dict[str, Any] = {"model": SMOLLM2, "instructions": SYSTEM, "input": "Say hello.",
                           "max_output_tokens": 24, "temperature": 0, "store": False}  # fmt: skip
    made = client.responses.create(**ask)
    assert made.status in ("completed", "incomplete") and made.output_text
    assert made.usage is not None and made.usage.input_tokens > 10
    kinds, numbers, deltas = [], [], []
    with client.responses.stream(**ask) as stream:
        for event in stream:
            kinds.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    end = "response.completed" if made.status == "completed" else "response.incomplete"
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", end]  # fmt: skip
    assert "".join(deltas) == final.output_text == made.output_text
    assert final.usage is not None
    assert final.usage.input_tokens_details.cached_tokens >= made.usage.input_tokens - PAGE
    wait_idle(app)


def test_a_function_call_round_trip_stateless_and_through_previous_response_id(
    served: tuple[FastAPI, str],
) -> None:
    app, url = served
    client = _client(url)
    ask: dict[str, Any] = {"model": SMOLLM2, "instructions": SYSTEM, "tools": TOOLS,
                           "max_output_tokens": 48, "temperature": 0}  # fmt: skip
    first = client.responses.create(**ask, input="What is the weather in Paris?",
                                    tool_choice="required")  # fmt: skip
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER_PARAMS)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, rain"}
    # Stateless: the whole conversation again, the call as the model wrote it.
    history = [{"role": "user", "content": "What is the weather in Paris?"},
               call.model_dump(exclude_none=True), result]  # fmt: skip
    stateless = client.responses.create(**ask, input=history, store=False)
    # Stateful: only the new item, after the stored first response.
    chained = client.responses.create(**ask, input=[result], previous_response_id=first.id)
    assert first.usage is not None and stateless.usage is not None and chained.usage is not None
    assert stateless.usage.input_tokens == chained.usage.input_tokens  # the same prompt
    for second in (stateless, chained):
        assert second.usage is not None
        assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - PAGE
    wait_idle(app)


def test_a_strict_json_schema_answer_validates(served: tuple[FastAPI, str]) -> None:
    _, url = served
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
              "rain": {"type": "boolean"}}, "required": ["city", "rain"],
              "additionalProperties": False}  # fmt: skip
    made = _client(url).responses.create(
        model=SMOLLM2, input="Is it raining in Paris? Answer in JSON.", max_output_tokens=60,
        temperature=0, store=False,
        text={"format": {"type": "json_schema", "name": "rain", "schema": schema, "strict": True}},
    )  # fmt: skip
    assert made.status == "completed", made
    jsonschema.validate(json.loads(made.output_text), schema)


def test_a_stored_chain_is_cached_readable_deletable_and_private_to_its_tenant(
    served: tuple[FastAPI, str],
) -> None:
    app, url = served
    a, b = _client(url, KEY_A), _client(url, KEY_B)
    ask: dict[str, Any] = {"model": SMOLLM2, "instructions": SYSTEM, "max_output_tokens": 16,
                           "temperature": 0, "store": True}  # fmt: skip
    first = a.responses.create(**ask, input="Name a city in France.")
    second = a.responses.create(**ask, input="And one in Spain?", previous_response_id=first.id)
    assert first.usage is not None and second.usage is not None
    prior = first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= prior - 2 * PAGE
    assert second.previous_response_id == first.id
    got = a.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text
    # Another tenant's id is an unknown id: the same 404, the same 400.
    with pytest.raises(openai.NotFoundError) as theirs:
        b.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        b.responses.retrieve("resp_" + "f" * 32)
    assert str(theirs.value).replace(second.id, "ID") == str(unknown.value).replace(
        "resp_" + "f" * 32, "ID"
    )
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        b.responses.create(**ask, input="Go on.", previous_response_id=second.id)
    a.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(second.id)
    with pytest.raises(openai.BadRequestError, match="not found"):
        a.responses.create(**ask, input="Go on.", previous_response_id=second.id)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'penelope_response_store_operations_total{op="put",replica="standalone"}' in metrics
    assert 'penelope_response_store_operations_total{op="delete",replica="standalone"} 1.0' in (
        metrics
    )
    wait_idle(app)


def test_models_lists_codex_catalogue_metadata(served: tuple[FastAPI, str]) -> None:
    _, url = served
    body = httpx.get(f"{url}/v1/models?client_version=0.171.0",
                     headers={"authorization": f"Bearer {KEY_A}"}).json()  # fmt: skip
    assert body["data"][0]["id"] == SMOLLM2
    entry = body["models"][0]
    assert entry["slug"] == SMOLLM2 and entry["context_window"] > 1000
