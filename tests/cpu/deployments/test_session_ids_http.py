"""One session-id rule for every API (`deployments.api.sessions`): an id a client names is
stripped, a blank one is absent, and one past 256 characters is a 400 naming its source,
on OpenAI chat, Anthropic Messages and the Responses API alike, never cut to 256 (which
would merge two sessions sharing their first 256 characters)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL

pytestmark = pytest.mark.anyio
LONG = "s" * 257
CHAT = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi."}]}
MESSAGES = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi."}]}
RESPONSES = {"model": MODEL, "max_output_tokens": 1, "input": "Hi."}
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", CHAT),
    ("/v1/messages", MESSAGES),
    ("/v1/responses", RESPONSES),
]


def _param(r: httpx.Response) -> str:
    body = r.json()
    return str(body["error"]["param"])


@pytest.mark.parametrize(("route", "body"), ROUTES)
async def test_an_overlong_session_header_is_a_400_on_every_api(
    client: httpx.AsyncClient, route: str, body: dict[str, Any]
) -> None:
    r = await client.post(route, json=body, headers={"x-session-id": LONG})
    assert r.status_code == 400, r.text
    assert _param(r) == "x-session-id" and "256" in r.text
    ok = await client.post(route, json=body, headers={"x-session-id": "  s  "})
    assert ok.status_code == 200, ok.text


async def test_each_api_s_own_sources_follow_the_same_rule(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/messages", json=MESSAGES,
                          headers={"x-claude-code-session-id": LONG})  # fmt: skip
    assert r.status_code == 400 and _param(r) == "x-claude-code-session-id", r.text
    r = await client.post("/v1/responses", json={**RESPONSES, "prompt_cache_key": LONG})
    assert r.status_code == 400 and "prompt_cache_key" in _param(r), r.text
    blank = await client.post("/v1/messages", json=MESSAGES,
                              headers={"x-claude-code-session-id": "   "})  # fmt: skip
    assert blank.status_code == 200, blank.text  # blank: absent, the conversation names it
    named = await client.post("/v1/chat/completions", json=CHAT, headers={"x-session-id": " a "})
    assert named.status_code == 200, named.text
    engine = client._transport.app.state.penelope.backend.engine  # type: ignore[attr-defined]
    assert "a" in {d.session_id for d in engine.session_digests(64)}  # stripped
