"""Strict request types, as OpenAI's: a wrong JSON type is a 400 naming the field, never coerced.

Every field of the chat and text completion bodies (and of their nested
messages, content parts and stream options) gets values of the wrong JSON
type; each must be refused with OpenAI's error shape, its `param` naming the
field the way the rest of the API does (`messages[0].content`), before
anything reaches the engine. Valid requests, JSON integers where a number
belongs among them, still pass.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    PenelopeHints,
    StreamOptions,
    TextPart,
)
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest

pytestmark = pytest.mark.anyio

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
OBJECT = {"a": 1}


def chat_body(**change: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return {**body, **change}


def text_body(**change: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hi", "max_tokens": 2, **change}


def message(**change: Any) -> dict[str, Any]:
    return chat_body(messages=[{"role": "user", "content": "hi", **change}])


def parts(*items: Any) -> dict[str, Any]:
    return message(content=list(items))


class CountingBackend(LocalBackend):
    """A local backend that counts the requests handed to its engine."""

    admitted = 0

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        self.admitted += 1
        async for item in super().generate(request):
            yield item


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def rejecting(tiny_qwen3: LoadedModel) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """One app for every rejected request: its engine must never see one."""
    app = create_app(lambda: CountingBackend(AsyncEngine(TINY_ENGINE, loaded=tiny_qwen3)))
    async for client in open_client(app):
        yield app, client


# (path, body, param): one field, or one nested field, of the wrong JSON type.
SHARED = [
    ("model", [5, 1.5, True, ["tiny"], OBJECT]),
    ("max_tokens", [3.0, "5", True, [5], OBJECT]),
    ("temperature", ["1", True, [1], OBJECT]),
    ("top_p", ["0.5", False, [0.5], OBJECT]),
    ("n", [1.0, True, "1", [1], OBJECT]),
    ("stop", [5, 1.5, True, OBJECT]),
    ("seed", [1.5, "7", True, [7], OBJECT]),
    ("ignore_eos", ["true", 1, 0, [True], OBJECT]),
    ("stream", ["true", 1, 0, "false", [True], OBJECT]),
    ("stream_options", ["yes", 1, True, [{"include_usage": True}]]),
    ("user", [5, True, ["u"], OBJECT]),
    ("session_id", [5, 1.5, True, ["s"], OBJECT]),
    ("penelope", ["x", 1, True, [{"retain_s": 1}]]),
]
CHAT_ONLY = [
    ("messages", [{"role": "user", "content": "hi"}, "hi", 1, True]),
    ("max_completion_tokens", [2.0, "2", True, [2], OBJECT]),
    ("logprobs", ["false", 0, 1, [False], OBJECT]),
    ("tools", [{"type": "function"}, "f", 1, True]),
    ("tool_choice", [1, True, ["auto"], "sometimes"]),
    ("parallel_tool_calls", ["true", 0, 1, [True], OBJECT]),
    ("response_format", ["json_object", 1, True, [OBJECT]]),
]
TEXT_ONLY = [
    ("prompt", [5, 1.5, True, OBJECT]),
    ("echo", ["false", 0, [False], OBJECT]),
    ("logprobs", [1.0, "1", True, [1], OBJECT]),
    ("suffix", [5, True, ["s"], OBJECT]),
]


def _cases(path: str, make: Any, fields: list[tuple[str, list[Any]]]) -> list[Any]:
    return [
        pytest.param(path, make(**{field: v}), field, id=f"{field}={v!r}")
        for field, values in fields
        for v in values
    ]


NESTED = [
    (CHAT, chat_body(stop=[1]), "stop[0]"),
    (CHAT, chat_body(stop=["a", ["b"]]), "stop[1]"),
    (
        CHAT,
        chat_body(stream=True, stream_options={"include_usage": "true"}),
        "stream_options.include_usage",
    ),
    (
        CHAT,
        chat_body(stream=True, stream_options={"include_usage": 1}),
        "stream_options.include_usage",
    ),
    (
        TEXT,
        text_body(stream=True, stream_options={"include_usage": 0}),
        "stream_options.include_usage",
    ),
    (CHAT, chat_body(tools=[1]), "tools[0]"),
    (CHAT, message(role="assistant", tool_calls=5), "messages[0].tool_calls"),
    (CHAT, message(role="tool", tool_call_id=5), "messages[0].tool_call_id"),
    (CHAT, chat_body(tools=[["function"]]), "tools[0]"),
    (CHAT, chat_body(messages=["hi"]), "messages[0]"),
    (CHAT, chat_body(messages=[[{"role": "user"}]]), "messages[0]"),
    (CHAT, chat_body(messages=[{"role": "user", "content": "a"}, 5]), "messages[1]"),
    (CHAT, message(role=5), "messages[0].role"),
    (CHAT, message(role=True), "messages[0].role"),
    (CHAT, message(role=["user"]), "messages[0].role"),
    (CHAT, message(content=5), "messages[0].content"),
    (CHAT, message(content=1.5), "messages[0].content"),
    (CHAT, message(content=True), "messages[0].content"),
    (CHAT, message(content={"type": "text", "text": "hi"}), "messages[0].content"),
    (CHAT, message(name=5), "messages[0].name"),
    (CHAT, message(name=True), "messages[0].name"),
    (CHAT, message(name=["n"]), "messages[0].name"),
    (CHAT, parts("hi"), "messages[0].content[0]"),
    (CHAT, parts(["hi"]), "messages[0].content[0]"),
    (CHAT, parts({"type": "text", "text": "a"}, 5), "messages[0].content[1]"),
    (CHAT, parts({"type": "text", "text": 5}), "messages[0].content[0].text"),
    (CHAT, parts({"type": "text", "text": ["a"]}), "messages[0].content[0].text"),
    (CHAT, parts({"type": "text", "text": None}), "messages[0].content[0].text"),
    (CHAT, parts({"type": 5, "text": "a"}), "messages[0].content[0].type"),
    (CHAT, parts({"type": ["text"], "text": "a"}), "messages[0].content[0].type"),
    (TEXT, text_body(prompt=[1.5]), "prompt[0]"),
    (TEXT, text_body(prompt=[True]), "prompt[0]"),
    (TEXT, text_body(prompt=[1, "2"]), "prompt[1]"),
    (TEXT, text_body(prompt=[[1, 2.0]]), "prompt[0][1]"),
    (TEXT, text_body(prompt=[OBJECT]), "prompt[0]"),
    (CHAT, chat_body(penelope={"retain_s": "5"}), "penelope.retain_s"),
    (CHAT, chat_body(penelope={"retain_s": True}), "penelope.retain_s"),
    (TEXT, text_body(penelope={"expected_gap_s": [1]}), "penelope.expected_gap_s"),
    (CHAT, chat_body(penelope={"end_session": "true"}), "penelope.end_session"),
    (TEXT, text_body(penelope={"end_session": 1}), "penelope.end_session"),
    (CHAT, chat_body(penelope={"parent_session": 5}), "penelope.parent_session"),
    (CHAT, message(cache_control="ephemeral"), "messages[0].cache_control"),
    (
        CHAT,
        parts({"type": "text", "text": "a", "cache_control": 5}),
        "messages[0].content[0].cache_control",
    ),
]
CASES = (
    _cases(CHAT, chat_body, SHARED + CHAT_ONLY)
    + _cases(TEXT, text_body, SHARED + TEXT_ONLY)
    + [pytest.param(*case, id=f"{case[2]}<-{case[1]}") for case in NESTED]
)
# Literal fields: any other value, of any type, is a literal_error
LITERALS = ("role", "type", "tool_choice")


@pytest.mark.parametrize(("path", "body", "param"), CASES)
async def test_a_wrong_json_type_is_a_400_naming_the_field(
    rejecting: tuple[FastAPI, httpx.AsyncClient], path: str, body: dict[str, Any], param: str
) -> None:
    app, client = rejecting
    r = await client.post(path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert param in error["message"]
    if not param.endswith(LITERALS):
        assert error["code"] == "invalid_type", error
    backend = app.state.penelope.backend
    assert backend.admitted == 0
    stats = backend.engine.stats()
    assert stats.tokens.new_tokens == stats.pages_device_used == 0
    assert stats.queue_length == stats.running == 0


def test_every_request_field_is_covered() -> None:
    chat = {f for f, _ in SHARED + CHAT_ONLY}
    text = {f for f, _ in SHARED + TEXT_ONLY}
    assert chat == set(ChatCompletionRequest.model_fields)
    assert text == set(CompletionRequest.model_fields)
    nested = {re.sub(r"\[\d+\]", "", p).rsplit(".", 1)[-1] for _, _, p in NESTED}
    for model in (ChatMessage, TextPart, StreamOptions, PenelopeHints):
        assert set(model.model_fields) <= nested, model


async def test_the_messages_read_as_openai_s(
    rejecting: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    _, client = rejecting
    expected = [
        (chat_body(max_tokens="5"), "expected an integer, but got a string"),
        (chat_body(max_tokens=3.0), "expected an integer, but got a decimal"),
        (chat_body(stream="true"), "expected a boolean, but got a string"),
        (chat_body(temperature=True), "expected a number, but got a boolean"),
        (message(content=5), "expected a string or an array, but got an integer"),
        (chat_body(stream=True, stream_options=[]), "expected an object, but got an array"),
        (chat_body(model=None), "expected a string, but got null"),
    ]
    for body, words in expected:
        error = (await client.post(CHAT, json=body)).json()["error"]
        assert error["message"] == f"Invalid type for '{error['param']}': {words} instead.", error
    error = (await client.post(TEXT, json=text_body(prompt=OBJECT))).json()["error"]
    assert error["param"] == "prompt" and "a string or an array" in error["message"]


async def test_ranges_and_unsupported_fields_still_name_the_field(
    rejecting: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    _, client = rejecting
    for path, body, param in [
        (CHAT, chat_body(temperature=2.5), "temperature"),
        (CHAT, chat_body(top_p=0), "top_p"),
        (CHAT, chat_body(n=2), "n"),
        (CHAT, chat_body(max_tokens=0), "max_tokens"),
        (CHAT, chat_body(logprobs=True), "logprobs"),
        (CHAT, chat_body(tools=[{"type": "function"}]), "tools[0].function"),
        (CHAT, message(role="wizard"), "messages[0].role"),
        (CHAT, parts({"type": "image_url", "text": "a"}), "messages[0].content[0].type"),
        (CHAT, parts({"type": "text"}), "messages[0].content[0].text"),
        (CHAT, chat_body(messages=[{"content": "hi"}]), "messages[0].role"),
        (TEXT, text_body(echo=True), "echo"),
        (TEXT, text_body(logprobs=0), "logprobs"),
        (TEXT, text_body(suffix="x"), "suffix"),
        (TEXT, text_body(prompt=["a", "b"]), "prompt"),
        (TEXT, text_body(prompt=[]), "prompt"),
        (TEXT, {"model": MODEL}, "prompt"),
    ]:
        r = await client.post(path, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.json())
    assert rejecting[0].state.penelope.backend.admitted == 0


VALID = [
    (CHAT, chat_body(temperature=1, top_p=1)),
    (CHAT, chat_body(temperature=0, top_p=0.5, seed=7, n=1, user="u", session_id="s")),
    (CHAT, chat_body(temperature=2, max_tokens=None, max_completion_tokens=2)),
    (CHAT, chat_body(stop="x", logprobs=False, tools=None, frequency_penalty=0, extra="ok")),
    (CHAT, chat_body(stream=False, stream_options={"include_usage": False})),
    (CHAT, parts({"type": "text", "text": "a"}, {"type": "text", "text": "b", "extra": 1})),
    (
        CHAT,
        chat_body(
            messages=[
                {"role": "developer", "content": "Be brief.", "name": "ops"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None},
                {"role": "user", "content": "again"},
            ]
        ),
    ),
    (TEXT, text_body(temperature=1, top_p=1, stop=["x"], echo=False, logprobs=None)),
    (TEXT, text_body(prompt=["hi"], suffix=None)),
    (TEXT, text_body(prompt=[9707, 11])),
    (TEXT, text_body(prompt=[[9707, 11]])),
]


async def test_valid_requests_pass(client: httpx.AsyncClient) -> None:
    for path, body in VALID:
        r = await client.post(path, json=body)
        assert r.status_code == 200, (body, r.text)
    body = chat_body(stream=True, stream_options={"include_usage": True})
    async with client.stream("POST", CHAT, json=body) as r:
        assert r.status_code == 200
        lines = [line async for line in r.aiter_lines() if line]
    assert lines[-1] == "data: [DONE]" and '"usage"' in lines[-2]


class RecordingBackend(LocalBackend):
    """A local backend that keeps the requests handed to its engine."""

    seen: list[GenerateRequest]

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Any]:  # type: ignore[override]
        self.seen.append(request)
        async for item in super().generate(request):
            yield item


@pytest.mark.parametrize(("path", "make"), [(CHAT, chat_body), (TEXT, text_body)])
async def test_ignore_eos_reaches_the_engine(tiny_qwen3: LoadedModel, path: str, make: Any) -> None:
    """vLLM's and SGLang's `ignore_eos` extension: off unless asked, and then the engine's."""
    backend = RecordingBackend(AsyncEngine(TINY_ENGINE, loaded=tiny_qwen3))
    backend.seen = []
    async for client in open_client(create_app(lambda: backend)):
        for flag in (None, False, True):
            body = make(max_tokens=3) if flag is None else make(max_tokens=3, ignore_eos=flag)
            r = await client.post(path, json=body)
            assert r.status_code == 200, r.text
    assert [req.sampling.ignore_eos for req in backend.seen] == [False, False, True]
