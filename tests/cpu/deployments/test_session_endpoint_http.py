"""The session endpoint (`POST /v1/penelope/sessions/{id}`) and fair hints, over a real tiny
engine: hints a harness learns once a reply arrived, applied to the session's record, within
the tenant's share of the device."""

from __future__ import annotations

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
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.model.registry import LoadedModel

pytestmark = pytest.mark.anyio

TEXT = "/v1/completions"
SESSIONS = "/v1/penelope/sessions/"
KEYS = {"key-alpha": "alpha", "key-beta": "beta"}


def app_over(tiny_qwen3: LoadedModel, device_pages: int = 512, **cache: Any) -> FastAPI:
    cc = CacheConfig(TINY_ENGINE.cache.page_size, device_pages, **cache)
    config = EngineConfig(model=TINY_ENGINE.model, cache=cc, scheduler=TINY_ENGINE.scheduler)
    settings = ApiSettings(api_keys=KEYS)
    return create_app(lambda: LocalBackend(AsyncEngine(config, loaded=tiny_qwen3)), settings)


def engine(app: FastAPI) -> Any:
    return app.state.penelope.backend.engine.engine


def auth(tenant: str, session: str | None = None) -> dict[str, str]:
    headers = {"authorization": f"Bearer key-{tenant}"}
    return headers | ({"x-session-id": session} if session else {})


def text(first: int, n: int, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": list(range(first, first + n)), "max_tokens": 2}
    return {**body, "temperature": 0, **extra}


async def turn(client: httpx.AsyncClient, tenant: str, sid: str, first: int, n: int, **extra: Any):
    r = await client.post(TEXT, json=text(first, n, **extra), headers=auth(tenant, sid))
    assert r.status_code == 200, r.text
    return r.json()["usage"]["penelope"]


@pytest.fixture
async def client_app(tiny_qwen3: LoadedModel) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = app_over(tiny_qwen3)
    async for c in open_client(app):
        yield c, app


async def test_a_gap_sent_after_the_reply_reaches_the_sessions_record(
    client_app: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = client_app
    await turn(client, "alpha", "s", 100, 40)
    info = engine(app).inspect().core.sessions.get("s")
    assert info.expected_gap is None and info.turn_end is not None
    r = await client.post(SESSIONS + "s", json={"expected_gap_s": 7.5}, headers=auth("alpha"))
    assert r.status_code == 200, r.text
    assert r.json() == {
        "session_id": "s",
        "hints": {"expected_gap_s": {"asked": 7.5, "granted": 7.5, "clipped_by": None}},
    }
    assert info.expected_gap == 7.5
    # the next turn starts a new gap: the hint was for this one only
    await turn(client, "alpha", "s", 100, 48)
    assert engine(app).inspect().core.sessions.get("s").expected_gap is None


async def test_end_session_after_the_last_reply_takes_its_pages_off_the_device(
    client_app: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = client_app
    await turn(client, "alpha", "done", 300, 40)
    cache = engine(app).inspect().core.cache
    used = cache._device.num_used
    assert used > 0
    r = await client.post(SESSIONS + "done", json={"end_session": True}, headers=auth("alpha"))
    assert r.json()["hints"] == {
        "end_session": {"asked": True, "granted": True, "clipped_by": None}
    }
    assert cache._device.num_used < used


async def test_another_tenant_or_an_unknown_session_changes_nothing(
    client_app: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = client_app
    await turn(client, "alpha", "mine", 500, 40)
    r = await client.post(SESSIONS + "mine", json={"expected_gap_s": 0}, headers=auth("beta"))
    assert r.json()["hints"]["expected_gap_s"] == {
        "asked": 0,
        "granted": None,
        "clipped_by": "tenant",
    }
    r = await client.post(SESSIONS + "mine", json={"end_session": True}, headers=auth("beta"))
    assert r.json()["hints"]["end_session"]["clipped_by"] == "tenant"
    assert engine(app).inspect().core.sessions.get("mine").expected_gap is None
    r = await client.post(SESSIONS + "nobody", json={"expected_gap_s": 3}, headers=auth("alpha"))
    assert r.json()["hints"]["expected_gap_s"]["clipped_by"] == "no_session"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "expected_gap_s"),
        ({"expected_gap_s": -1}, "expected_gap_s"),
        ({"expected_gap_s": "5"}, "expected_gap_s"),
        ({"retain_s": 5, "end_session": True}, "end_session"),
        ({"parent_session": "p"}, "parent_session"),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(
    client_app: tuple[httpx.AsyncClient, FastAPI], body: dict[str, Any], param: str
) -> None:
    client, _ = client_app
    r = await client.post(SESSIONS + "s", json=body, headers=auth("alpha"))
    assert r.status_code == 400, r.text
    assert param in r.text


async def test_the_endpoint_needs_a_key(client_app: tuple[httpx.AsyncClient, FastAPI]) -> None:
    client, _ = client_app
    r = await client.post(SESSIONS + "s", json={"expected_gap_s": 1})
    assert r.status_code == 401
    r = await client.post(SESSIONS + "s", json={"expected_gap_s": 1}, headers=auth("nobody"))
    assert r.status_code == 401


async def test_a_tenants_hints_stop_at_its_fair_share_of_the_device(
    tiny_qwen3: LoadedModel,
) -> None:
    """Two tenants on 64 device pages: alpha's gap hints may keep 32 of them, not more;
    the hint past it is clipped (`tenant_fair_share`), reported and not applied."""
    async for client in open_client(app_over(tiny_qwen3, device_pages=64)):
        app = client._transport.app  # type: ignore[attr-defined]
        sessions = engine(app).inspect().core.sessions
        await turn(client, "beta", "b", 1000, 40)  # beta holds device pages
        hint = {"penelope": {"expected_gap_s": 0}}
        granted = []
        for k in range(3):  # 15 pages each: 15, 30, then 45 > 64 / 2
            p = await turn(client, "alpha", f"a{k}", 2000 + 100 * k, 60, **hint)
            granted.append(p["hints"]["expected_gap_s"])
        assert [g["clipped_by"] for g in granted] == [None, None, "tenant_fair_share"]
        assert granted[2]["granted"] is None
        assert sessions.record("a2").expected_gap is None  # ranked as if no hint came
        assert sessions.record("a0").expected_gap == 0
        # the session endpoint is bounded the same way
        r = await client.post(SESSIONS + "a2", json={"expected_gap_s": 0}, headers=auth("alpha"))
        assert r.json()["hints"]["expected_gap_s"]["clipped_by"] == "tenant_fair_share"
        # and so is a pin: retain_s counts against the same share
        p = await turn(client, "alpha", "a3", 3000, 60, penelope={"retain_s": 60})
        assert p["hints"]["retain_s"]["clipped_by"] == "tenant_fair_share"
        # beta, under its share, is granted
        r = await client.post(SESSIONS + "b", json={"expected_gap_s": 0}, headers=auth("beta"))
        assert r.json()["hints"]["expected_gap_s"]["clipped_by"] is None


async def test_gap_hints_count_against_the_tenants_token_quota(tiny_qwen3: LoadedModel) -> None:
    async for client in open_client(app_over(tiny_qwen3, tenant_pin_tokens=100)):
        hint = {"penelope": {"expected_gap_s": 5}}
        first = await turn(client, "alpha", "q0", 4000, 60, **hint)  # 60 tokens: within 100
        second = await turn(client, "alpha", "q1", 4100, 60, **hint)  # 120: past it
        assert first["hints"]["expected_gap_s"]["clipped_by"] is None
        assert second["hints"]["expected_gap_s"]["clipped_by"] == "tenant_pin_tokens"
