"""The OpenAI-compatible app over a real tiny-Qwen3 engine, through httpx's ASGI transport."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.settings import ApiSettings
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.model.registry import LoadedModel

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]

HISTORY = "You are a careful agent. The repository has three modules and a test suite. " * 3


def chat(content: str, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    return {**body, "max_tokens": 4, "temperature": 0, **extra}


def check_usage(usage: dict[str, Any]) -> None:
    p = usage["penelope"]
    parts = ("device_tokens", "host_tokens", "store_tokens", "recomputed_tokens", "new_tokens")
    assert sum(p[k] for k in parts) == usage["prompt_tokens"]
    cached = p["device_tokens"] + p["host_tokens"] + p["store_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == cached
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_chat_completion_has_openai_shape(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json=chat("Say hello."))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    assert 1 <= body["usage"]["completion_tokens"] <= 4
    check_usage(body["usage"])
    assert r.headers["x-penelope-replica"] == "standalone"


@pytest.mark.parametrize("where", ["header", "body"])
async def test_second_turn_of_a_session_reports_cached_tokens(
    client: httpx.AsyncClient, where: str
) -> None:
    headers = {"x-session-id": "agent-1"} if where == "header" else {}
    extra = {"session_id": "agent-1"} if where == "body" else {}
    messages = [{"role": "system", "content": HISTORY}, {"role": "user", "content": "List them."}]
    usages = []
    for turn in range(3):
        body = {"model": MODEL, "messages": messages, "max_tokens": 6, "temperature": 0, **extra}
        r = await client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        reply = r.json()["choices"][0]["message"]["content"]
        usages.append(r.json()["usage"])
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f"Now turn {turn + 2}."},
        ]
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    for usage in usages[1:]:
        check_usage(usage)
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0
        assert usage["penelope"]["device_tokens"] > 0


async def test_streaming_chat_matches_the_non_streaming_answer(client: httpx.AsyncClient) -> None:
    plain = (await client.post("/v1/chat/completions", json=chat("Count.", max_tokens=8))).json()
    body = chat("Count.", max_tokens=8, stream=True, stream_options={"include_usage": True})
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in r.aiter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk, finish_chunk = chunks[-1], chunks[-2]
    assert usage_chunk["choices"] == []
    check_usage(usage_chunk["usage"])
    assert finish_chunk["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == plain["choices"][0]["message"]["content"]


async def test_text_completion_from_text_and_from_token_ids(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "The capital of", "max_tokens": 5, "temperature": 0}
    by_text = (await client.post("/v1/completions", json=body)).json()
    assert by_text["object"] == "text_completion"
    assert by_text["id"].startswith("cmpl-")
    check_usage(by_text["usage"])
    ids = [9707, 11, 1879, 0]
    r = await client.post("/v1/completions", json={**body, "prompt": [ids]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(ids)


async def test_stop_string_cuts_the_text_and_reports_stop(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}
    full = (await client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    assert len(full) > 6, full
    stop = full[3:6]
    cut = (await client.post("/v1/completions", json={**body, "stop": [stop]})).json()
    assert cut["choices"][0]["text"] == full[: full.find(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


async def test_models_health_and_metrics(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    assert (await client.get("/health")).json() == {"status": "ok"}
    for _ in range(2):
        await client.post("/v1/chat/completions", json=chat(HISTORY), headers={"x-session-id": "m"})
    text = (await client.get("/metrics")).text
    for needle in (
        'penelope_tokens_total{replica="standalone",source="device"}',
        'penelope_tokens_total{replica="standalone",source="new"}',
        'penelope_cache_hit_ratio{replica="standalone"}',
        'penelope_recompute_ratio{replica="standalone"}',
        'penelope_pages{replica="standalone",tier="device"}',
        'penelope_queue_length{replica="standalone"}',
        'penelope_ttft_seconds_bucket{le="0.01",replica="standalone"}',
        "penelope_itl_seconds_count",
        'penelope_requests_total{route="/v1/chat/completions",status="200"} 2.0',
    ):
        assert needle in text, needle
    hit = next(ln for ln in text.splitlines() if ln.startswith("penelope_cache_hit_ratio{"))
    assert float(hit.split()[-1]) > 0


async def test_metrics_export_the_stores_counters_through_the_engine(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    cache = dataclasses.replace(TINY_ENGINE.cache, store_uri=str(tmp_path))
    config = dataclasses.replace(TINY_ENGINE, cache=cache)
    app = create_app(lambda: LocalBackend(AsyncEngine(config, loaded=tiny_qwen3)))
    async for client in open_client(app):
        await client.post("/v1/chat/completions", json=chat(HISTORY))
        assert list(app.state.penelope.backend.store_stats()) == ["standalone"]
        text = (await client.get("/metrics")).text
        assert 'penelope_store_used_bytes{replica="standalone"}' in text
        budget = re.search(r'penelope_store_budget_bytes\{replica="standalone"\} (\S+)', text)
        assert budget is not None and float(budget.group(1)) == cache.store_bytes
        for op in ("put", "hit", "miss", "record_write", "record_read", "record_swept"):
            assert f'penelope_store_operations_total{{op="{op}",replica="standalone"}}' in text


BAD_REQUESTS = [
    ({"model": "gpt-4o"}, 404, "model"),
    ({"temperature": 3}, 400, "temperature"),
    ({"top_p": 0}, 400, "top_p"),
    ({"n": 2}, 400, "n"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"max_tokens": 10**6}, 400, "max_tokens"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"tools": [{"type": "function"}]}, 400, "tools[0].function"),
    ({"logprobs": True}, 400, "logprobs"),
]


async def test_invalid_requests_get_openai_errors_and_touch_no_cache(make_app: Any) -> None:
    app = make_app()
    async for client in open_client(app):
        for change, status, param in BAD_REQUESTS:
            r = await client.post("/v1/chat/completions", json={**chat("hi"), **change})
            assert r.status_code == status, (change, r.text)
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["param"] == param, (change, error)
        r = await client.post("/v1/chat/completions", content=b"{not json")
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": [10**7]})
        assert r.status_code == 400 and "token ids" in r.json()["error"]["message"]
        long_prompt = {"model": MODEL, "prompt": [1] * 32768}
        r = await client.post("/v1/completions", json=long_prompt)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        stats = app.state.penelope.backend.engine.stats()
        assert stats.tokens.new_tokens == 0 and stats.pages_device_used == 0


async def test_body_size_limit_gives_413_with_and_without_content_length(make_app: Any) -> None:
    async for client in open_client(make_app(ApiSettings(max_body_bytes=2000))):
        r = await client.post("/v1/chat/completions", json=chat("x" * 3000))
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

        async def chunks() -> Any:
            for _ in range(4):
                yield b" " * 1000

        r = await client.post("/v1/chat/completions", content=chunks())
        assert r.status_code == 413
        assert (await client.post("/v1/chat/completions", json=chat("small"))).status_code == 200


async def test_a_body_that_stalls_gets_408_and_frees_its_slot(make_app: Any) -> None:
    """No byte for `body_idle_timeout_s` mid-body: 408, and the admission slot is free again
    (with one slot, the next request is served)."""
    settings = ApiSettings(body_idle_timeout_s=0.3, max_pending=1)
    body = json.dumps(chat("hello")).encode()

    async def stalling() -> Any:
        yield body[:10]
        await anyio.sleep(30)  # the deadline, not this, must end the request
        yield body[10:]

    async for client in open_client(make_app(settings)):
        with anyio.fail_after(10):
            r = await client.post("/v1/chat/completions", content=stalling())
        assert r.status_code == 408 and r.json()["error"]["code"] == "request_body_timeout"
        assert "api.body_idle_timeout_s" in r.json()["error"]["message"]
        assert (await client.post("/v1/chat/completions", json=chat("small"))).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert "penelope_api_pending_requests 0.0" in metrics


async def test_bearer_keys_and_tenant_isolation(make_app: Any) -> None:
    keys = {"key-tenant-a-0001": "a", "key-tenant-b-0001": "b"}
    settings = ApiSettings(api_keys=keys, metrics_require_auth=True)
    async for client in open_client(make_app(settings)):
        assert (await client.get("/health")).status_code == 200
        for headers in ({}, {"authorization": "Bearer wrong-key-000"}, {"authorization": "x"}):
            r = await client.post("/v1/chat/completions", json=chat("hi"), headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert r.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/metrics")).status_code == 401

        def as_tenant(t: str) -> dict[str, str]:
            return {"authorization": f"Bearer key-tenant-{t}-0001", "x-session-id": "same"}

        async def cached(t: str, client: httpx.AsyncClient = client) -> int:
            r = await client.post("/v1/chat/completions", json=chat(HISTORY), headers=as_tenant(t))
            assert r.status_code == 200, r.text
            return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

        assert await cached("a") == 0
        assert await cached("a") > 0
        assert await cached("b") == 0
        assert (await client.get("/metrics", headers=as_tenant("a"))).status_code == 200


async def test_grafana_dashboard_queries_only_exported_metrics(client: httpx.AsyncClient) -> None:
    dashboard = json.loads((ROOT / "grafana" / "penelope_dashboard.json").read_text())
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Cache hit ratio", "Recompute ratio"} <= titles
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_bucket$", "", m) for e in exprs for m in re.findall(r"penelope_\w+", e)}
    text = (await client.get("/metrics")).text
    exported = set(re.findall(r"^# TYPE (\w+) ", text, flags=re.MULTILINE))
    assert used and used <= exported, used - exported
