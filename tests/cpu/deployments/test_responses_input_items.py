"""`GET /v1/responses/{id}/input_items`: what the model read for a stored response, the chain
it continued included, in OpenAI's paged list shape (newest first by default), each item
with an id that stays the same along the chain; the `openai` SDK reads it; a bad page is a
400 naming the parameter; an unknown, unstored or other tenant's id a 404."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest
from deploy_testkit import MODEL, open_client
from fastapi import FastAPI

from deployments.api.settings import ApiSettings

pytestmark = pytest.mark.anyio
KEY_A, KEY_B = "sk-items-team-a", "sk-items-team-b"
TOOL = {"type": "function", "name": "grep", "parameters": {"type": "object",
        "properties": {"q": {"type": "string"}}}}  # fmt: skip
CALL = {"type": "function_call", "call_id": "call_9", "name": "grep", "arguments": '{"q": "x"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_9", "output": "found"}


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    settings = ApiSettings(api_keys={KEY_A: "team-a", KEY_B: "team-b"})
    async for c in open_client(make_app(settings)):
        c.headers["authorization"] = f"Bearer {KEY_A}"
        yield c


async def _create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    ask = {"model": MODEL, "max_output_tokens": 2, "tools": [TOOL], **body}
    r = await client.post("/v1/responses", json=ask)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _items(client: httpx.AsyncClient, rid: str, query: str = "") -> httpx.Response:
    return await client.get(f"/v1/responses/{rid}/input_items{query}")


async def _chain(client: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
    first = await _create(client, input=[{"role": "user", "content": "Find the bug."},
                                         CALL, OUTPUT])  # fmt: skip
    second = await _create(client, input="Go on.", previous_response_id=first["id"])
    return first, second


async def test_the_list_is_what_the_model_read_newest_first_with_ids_kept_along_the_chain(
    client: httpx.AsyncClient,
) -> None:
    first, second = await _chain(client)
    r = await _items(client, second["id"])
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["object"] == "list" and page["has_more"] is False
    data = page["data"][::-1]  # oldest first
    kinds = [(i["type"], i.get("role")) for i in data]
    assert kinds == [("message", "user"), ("function_call", None),
                     ("function_call_output", None),
                     *[(i["type"], i.get("role")) for i in first["output"]],
                     ("message", "user")]  # fmt: skip
    assert data[0]["content"] == [{"type": "input_text", "text": "Find the bug."}]
    assert data[-1]["content"] == [{"type": "input_text", "text": "Go on."}]
    assert data[1]["call_id"] == "call_9" and data[2]["output"] == "found"
    assert all(i["status"] == "completed" for i in data)
    ids = [i["id"] for i in data]
    assert len(set(ids)) == len(ids)
    assert [i[:3] for i in ids[:3]] == ["msg", "fc_", "fco"]
    assert (page["first_id"], page["last_id"]) == (ids[-1], ids[0])
    # The first response's own input items keep their ids in the chain that continues it;
    # its output items are listed under the ids its reply gave them.
    own = (await _items(client, first["id"], "?order=asc")).json()["data"]
    assert [i["id"] for i in own] == ids[:3]
    assert ids[3:-1] == [i["id"] for i in first["output"]]


async def test_pages_follow_limit_order_and_after(client: httpx.AsyncClient) -> None:
    _, second = await _chain(client)
    rid = second["id"]
    every = (await _items(client, rid, "?order=asc&limit=100")).json()["data"]
    ids = [i["id"] for i in every]
    head = (await _items(client, rid, "?order=asc&limit=2")).json()
    assert [i["id"] for i in head["data"]] == ids[:2] and head["has_more"] is True
    rest = (await _items(client, rid, f"?order=asc&limit=2&after={head['last_id']}")).json()
    assert [i["id"] for i in rest["data"]] == ids[2:4]
    newest = (await _items(client, rid, "?limit=1&include=message.output_text.logprobs")).json()
    assert [i["id"] for i in newest["data"]] == ids[-1:]
    for query, param in (("?limit=0", "limit"), ("?limit=101", "limit"), ("?limit=x", "limit"),
                         ("?order=up", "order"), ("?after=msg_nope", "after")):  # fmt: skip
        bad = await _items(client, rid, query)
        assert bad.status_code == 400, (query, bad.text)
        assert bad.json()["error"]["param"] == param


async def test_the_openai_sdk_lists_them(client: httpx.AsyncClient) -> None:
    _, second = await _chain(client)
    sdk = openai.AsyncOpenAI(base_url="http://penelope/v1", api_key=KEY_A, http_client=client)
    listed = [item async for item in sdk.responses.input_items.list(second["id"], order="asc")]
    assert [item.type for item in listed][:3] == ["message", "function_call",
                                                  "function_call_output"]  # fmt: skip
    last = listed[-1].model_dump()
    assert last["type"] == "message" and last["content"][0]["text"] == "Go on."


async def test_unknown_unstored_and_other_tenants_responses_are_404(
    client: httpx.AsyncClient,
) -> None:
    _, second = await _chain(client)
    unstored = await _create(client, input="Hi.", store=False)
    for rid in ("resp_" + "f" * 32, "nonsense", unstored["id"]):
        r = await _items(client, rid)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    theirs = await client.get(
        f"/v1/responses/{second['id']}/input_items", headers={"authorization": f"Bearer {KEY_B}"}
    )
    assert theirs.status_code == 404
