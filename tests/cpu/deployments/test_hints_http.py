"""A harness's hints and the miss ledger through the HTTP API, over a real tiny engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.settings import ApiSettings
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.config import CacheConfig
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import MISS_CAUSES

pytestmark = pytest.mark.anyio

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
SETTINGS = ApiSettings(tenant_header="x-tenant")


def app_over(tiny_qwen3: LoadedModel, **cache: Any) -> FastAPI:
    base = TINY_ENGINE.cache
    cc = CacheConfig(base.page_size, base.device_pages, **cache)
    config = TINY_ENGINE.__class__(
        model=TINY_ENGINE.model, cache=cc, scheduler=TINY_ENGINE.scheduler
    )
    return create_app(lambda: LocalBackend(AsyncEngine(config, loaded=tiny_qwen3)), SETTINGS)


@pytest.fixture
def happ(tiny_qwen3: LoadedModel) -> FastAPI:
    return app_over(tiny_qwen3, tenant_pin_seconds=600.0)


@pytest.fixture
async def hclient(happ: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(happ):
        yield c


def chat(content: str = "Run the tests.", **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    return {**body, "max_tokens": 2, "temperature": 0, **extra}


def text(tokens: list[int], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": tokens, "max_tokens": 2, "temperature": 0, **extra}


def penelope(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    p = usage["penelope"]
    assert set(p["miss_tokens"]) == set(MISS_CAUSES)
    assert sum(p["miss_tokens"].values()) == p["recomputed_tokens"] + p["new_tokens"]
    return p


def engine(app: FastAPI) -> Any:
    return app.state.penelope.backend.engine.engine


def pins(app: FastAPI) -> dict[str, Any]:
    return engine(app).inspect().core.scheduler._retention.pins


async def test_no_hints_is_todays_behaviour(hclient: httpx.AsyncClient, happ: FastAPI) -> None:
    p = penelope(await hclient.post(CHAT, json=chat(), headers={"x-session-id": "s"}))
    assert "hints" not in p and "prompt_edit_at" not in p
    assert not pins(happ)


async def test_retain_s_in_the_body_is_granted_and_clipped(
    hclient: httpx.AsyncClient, happ: FastAPI
) -> None:
    r = await hclient.post(
        CHAT, json=chat(penelope={"retain_s": 30}), headers={"x-session-id": "a"}
    )
    assert penelope(r)["hints"] == {"retain_s": {"asked": 30, "granted": 30, "clipped_by": None}}
    assert set(pins(happ)) == {"a"}
    r = await hclient.post(
        CHAT, json=chat(penelope={"retain_s": 3600}), headers={"x-session-id": "b"}
    )
    assert penelope(r)["hints"]["retain_s"] == {
        "asked": 3600,
        "granted": 600.0,
        "clipped_by": "tenant_pin_seconds",
    }


async def test_cache_control_maps_to_retain_s(hclient: httpx.AsyncClient) -> None:
    messages = [
        {"role": "system", "content": "You are an agent.", "cache_control": {"type": "ephemeral"}},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Go.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        },
    ]
    r = await hclient.post(CHAT, json=chat(messages=messages), headers={"x-session-id": "cc"})
    assert penelope(r)["hints"]["retain_s"]["asked"] == 3600.0
    five = [{**messages[0], "content": "Other."}]
    r = await hclient.post(CHAT, json=chat(messages=five), headers={"x-session-id": "c5"})
    assert penelope(r)["hints"]["retain_s"]["granted"] == 300.0


async def test_hint_headers_for_clients_without_body_fields(
    hclient: httpx.AsyncClient, happ: FastAPI
) -> None:
    headers = {"x-session-id": "h", "x-penelope-retain-s": "20", "x-penelope-expected-gap-s": "4"}
    p = penelope(await hclient.post(CHAT, json=chat(), headers=headers))
    assert p["hints"]["retain_s"]["granted"] == 20.0
    assert p["hints"]["expected_gap_s"]["granted"] == 4.0
    end = {"x-session-id": "h", "x-penelope-end-session": "true"}
    p = penelope(await hclient.post(CHAT, json=chat("Done."), headers=end))
    assert p["hints"] == {"end_session": {"asked": True, "granted": True, "clipped_by": None}}
    assert "h" not in pins(happ)
    # the body wins over a header
    both = {"x-session-id": "w", "x-penelope-retain-s": "20"}
    r = await hclient.post(CHAT, json=chat(penelope={"retain_s": 7}), headers=both)
    assert penelope(r)["hints"]["retain_s"]["granted"] == 7


async def test_a_tenants_pinned_tokens_are_bounded(tiny_qwen3: LoadedModel) -> None:
    async for client in open_client(app_over(tiny_qwen3, tenant_pin_tokens=30)):
        body = text(list(range(100, 120)), penelope={"retain_s": 60})
        first = penelope(await client.post(TEXT, json=body, headers={"x-session-id": "t1"}))
        assert first["hints"]["retain_s"]["granted"] == 60
        body = text(list(range(200, 220)), penelope={"retain_s": 60})
        second = penelope(await client.post(TEXT, json=body, headers={"x-session-id": "t2"}))
        assert second["hints"]["retain_s"] == {
            "asked": 60,
            "granted": 0.0,
            "clipped_by": "tenant_pin_tokens",
        }
        other = {"x-session-id": "t3", "x-tenant": "beta"}
        third = penelope(await client.post(TEXT, json=body, headers=other))
        assert third["hints"]["retain_s"]["granted"] == 60


BAD = [
    (CHAT, chat(penelope={"retain_s": -1}), {}, "penelope.retain_s"),
    (CHAT, chat(penelope={"expected_gap_s": -0.5}), {}, "penelope.expected_gap_s"),
    (TEXT, text([1, 2, 3], penelope={"retain": 5}), {}, "penelope.retain"),
    (CHAT, chat(penelope={"parent_session": ""}), {}, "penelope.parent_session"),
    (CHAT, chat(penelope={"retain_s": 5, "end_session": True}), {}, "penelope"),
    (
        CHAT,
        chat(
            messages=[
                {
                    "role": "user",
                    "content": "x",
                    "cache_control": {"type": "ephemeral", "ttl": "2h"},
                }
            ]
        ),
        {},
        "messages[0].cache_control.ttl",
    ),
    (
        CHAT,
        chat(messages=[{"role": "user", "content": "x", "cache_control": {"type": "persistent"}}]),
        {},
        "messages[0].cache_control.type",
    ),
    (
        CHAT,
        chat(
            messages=[
                {"role": "user", "content": "x", "cache_control": {"type": "ephemeral", "x": 1}}
            ]
        ),
        {},
        "messages[0].cache_control.x",
    ),
    (CHAT, chat(), {"x-penelope-retain-s": "abc"}, "x-penelope-retain-s"),
    (CHAT, chat(), {"x-penelope-retain-s": "-3"}, "x-penelope-retain-s"),
    (CHAT, chat(), {"x-penelope-expected-gap-s": "inf"}, "x-penelope-expected-gap-s"),
    (CHAT, chat(), {"x-penelope-end-session": "maybe"}, "x-penelope-end-session"),
]


@pytest.mark.parametrize(("path", "body", "headers", "param"), BAD)
async def test_bad_hints_are_a_400_naming_the_field_and_change_nothing(
    hclient: httpx.AsyncClient,
    happ: FastAPI,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    param: str,
) -> None:
    r = await hclient.post(path, json=body, headers={"x-session-id": "bad", **headers})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
    stats = engine(happ).stats()
    assert stats.tokens.new_tokens == stats.pages_device_used == stats.session_records == 0


async def test_the_ledger_names_moves_and_edits(hclient: httpx.AsyncClient) -> None:
    history = [
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "I ran the tests."},
        {"role": "user", "content": "Tool result: 3 passed."},
    ]
    # a session this replica never saw, with history: its last turn ran elsewhere
    p = penelope(
        await hclient.post(CHAT, json=chat(messages=history), headers={"x-session-id": "m"})
    )
    assert p["miss_tokens"]["moved_replica"] > 0 and p["miss_tokens"]["new"] < p["new_tokens"]
    first = list(range(300, 340))
    penelope(await hclient.post(TEXT, json=text(first), headers={"x-session-id": "e"}))
    edited = first[:20] + list(range(900, 930))
    p = penelope(await hclient.post(TEXT, json=text(edited), headers={"x-session-id": "e"}))
    assert p["prompt_edit_at"] == 20 and p["miss_tokens"]["prompt_edit"] == 20
    assert p["device_tokens"] == 20
    metrics = (await hclient.get("/metrics")).text
    lines = [x for x in metrics.splitlines() if x.startswith("penelope_miss_tokens_total{")]
    assert {x.split('cause="')[1].split('"')[0] for x in lines} == set(MISS_CAUSES)
    moved = next(x for x in lines if 'cause="moved_replica"' in x)
    assert float(moved.split()[-1]) > 0


async def test_a_streams_usage_chunk_reports_the_hints(
    hclient: httpx.AsyncClient, happ: FastAPI
) -> None:
    body = chat(stream=True, stream_options={"include_usage": True}, penelope={"retain_s": 45})
    r = await hclient.post(CHAT, json=body, headers={"x-session-id": "st"})
    assert r.status_code == 200, r.text
    data = [x[len("data: ") :] for x in r.text.splitlines() if x.startswith("data: ")]
    usage = json.loads(data[-2])["usage"]["penelope"]
    assert usage["hints"]["retain_s"] == {"asked": 45, "granted": 45, "clipped_by": None}
    assert sum(usage["miss_tokens"].values()) == usage["new_tokens"] + usage["recomputed_tokens"]
    assert set(pins(happ)) == {"st"}
