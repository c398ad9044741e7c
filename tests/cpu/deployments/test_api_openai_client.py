"""A real standalone server (uvicorn, 127.0.0.1, a free port) driven by the `openai` client.

Also what needs a real socket: backpressure (429 with Retry-After) and
client disconnects freeing the request's pages at once.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from deploy_testkit import LONG_ANSWER, MODEL, TINY_ENGINE
from fastapi import FastAPI
from tool_testkit import wait_idle

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app

SYSTEM = "You are a coding agent. Tools: read_file, write_file, run_tests. " * 4
LONG = LONG_ANSWER  # a generation that runs for seconds on the tiny model


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return standalone_app(
        TINY_ENGINE,
        ApiSettings(
            max_pending=1, retry_after_s=2, connect_idle_timeout_s=1.0, stream_stall_timeout_s=1.0
        ),
    )


@pytest.fixture(scope="module")
def base_url(app: FastAPI) -> Iterator[str]:
    with background_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)


def test_three_turn_session_gets_cached_tokens(client: openai.OpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing test."},
    ]
    cached = []
    for turn in range(3):
        resp = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=6,
            temperature=0,
            extra_headers={"x-session-id": "openai-session"},
        )
        assert resp.choices[0].message.role == "assistant"
        assert resp.usage is not None and resp.usage.prompt_tokens_details is not None
        cached.append(resp.usage.prompt_tokens_details.cached_tokens)
        breakdown = resp.usage.model_extra["penelope"]
        sources = ("device", "host", "store", "recomputed", "new")
        assert sum(breakdown[f"{k}_tokens"] for k in sources) == resp.usage.prompt_tokens
        computed = breakdown["recomputed_tokens"] + breakdown["new_tokens"]
        assert sum(breakdown["miss_tokens"].values()) == computed
        messages += [
            {"role": "assistant", "content": resp.choices[0].message.content},
            {"role": "user", "content": f"Tool result {turn}: 3 passed."},
        ]
    assert cached[0] == 0 and cached[1] > 0 and cached[2] > 0


def test_streaming_chat_and_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Stream please."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish in (["length"], ["stop"])
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 8
    plain = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Stream please."}],
        max_tokens=8,
        temperature=0,
    )
    assert text == plain.choices[0].message.content


def test_completions_and_models(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt="def fib(n):", max_tokens=5, temperature=0)
    assert resp.object == "text_completion" and resp.usage is not None
    assert resp.usage.completion_tokens <= 5
    assert [m.id for m in client.models.list()] == [MODEL]


def test_errors_raise_the_openai_exceptions(client: openai.OpenAI) -> None:
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=user, temperature=5)  # type: ignore[arg-type]
    assert bad.value.param == "temperature"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=user)  # type: ignore[arg-type]
    assert missing.value.code == "model_not_found"


def test_full_server_answers_429_and_a_closed_stream_frees_its_pages(
    app: FastAPI, base_url: str
) -> None:
    body = {"model": MODEL, "prompt": "Write a long story.", "max_tokens": LONG, "stream": True}
    with httpx.Client(base_url=base_url, timeout=30) as http:
        with http.stream("POST", "/v1/completions", json=body) as running:
            assert running.status_code == 200
            lines = running.iter_lines()
            next(lines)
            r = http.post("/v1/completions", json={**body, "stream": False, "max_tokens": 1})
            if r.status_code != 429:  # the stream ended early: show how
                pytest.fail(f"{r.status_code} {r.text}; the stream ended with {list(lines)[-3:]}")
            assert r.headers["retry-after"] == "2"
            assert r.json()["error"]["type"] == "rate_limit_error"
        wait_idle(app)
        r = http.post("/v1/completions", json={**body, "stream": False, "max_tokens": 1})
        assert r.status_code == 200, r.text


def _head_only(base_url: str, path: str) -> tuple[bytes, dict]:
    """POST `path` with a declared body that never comes: the answer's head and JSON body."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):  # the server answers, then closes
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, json.loads(body)


def test_a_full_server_refuses_before_reading_the_body(app: FastAPI, base_url: str) -> None:
    """While every slot is taken, a generation request is refused on its head alone (a burst
    then costs no body, parse or tokenization each), in its API's error shape."""
    body = {"model": MODEL, "prompt": "Write a long story.", "max_tokens": LONG, "stream": True}
    with httpx.Client(base_url=base_url, timeout=30) as http:
        with http.stream("POST", "/v1/completions", json=body) as running:
            assert running.status_code == 200
            next(running.iter_lines())
            head, error = _head_only(base_url, "/v1/completions")
            assert head.startswith(b"HTTP/1.1 429") and b"retry-after: 2" in head.lower()
            assert error["error"]["code"] == "overloaded"
            head, error = _head_only(base_url, "/v1/messages")
            assert head.startswith(b"HTTP/1.1 429"), head
            assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
        wait_idle(app)
        metrics = http.get("/metrics").text
        assert "penelope_api_pending_requests 0.0" in metrics
        assert 'penelope_requests_total{route="/v1/completions",status="429"}' in metrics
        r = http.post("/v1/completions", json={**body, "stream": False, "max_tokens": 1})
        assert r.status_code == 200, r.text


def test_a_connection_that_sends_nothing_is_closed_and_a_slow_starter_is_served(
    base_url: str,
) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as silent:
        start = time.monotonic()
        assert silent.recv(1) == b""  # closed by the server, not by this timeout
        assert 0.9 < time.monotonic() - start < 5
    with socket.create_connection((host, int(port)), timeout=10) as late:
        time.sleep(0.5)  # under the deadline: the first byte cancels it
        late.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert late.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(1.5)  # past it, kept alive after a response: uvicorn's keep-alive (5 s)
        late.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        assert late.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_client_that_gives_up_aborts_its_request(app: FastAPI, base_url: str) -> None:
    body = {"model": MODEL, "prompt": "Write a long story.", "max_tokens": LONG}
    with httpx.Client(base_url=base_url, timeout=0.5) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/completions", json=body)
    wait_idle(app)
    metrics = httpx.get(f"{base_url}/metrics").text
    assert "penelope_api_pending_requests 0.0" in metrics
