"""Tools over HTTP on the tiny Qwen3 (its template reads `tools`; its random weights write
no calls): streams of every kind still end well, and forced calls parse."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL

pytestmark = pytest.mark.anyio
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "maxLength": 16}},
            "required": ["path"],
            "additionalProperties": False,  # else random weights write keys until max_tokens
        },
    },
}


async def _events(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    async with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        lines = [line[6:] async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


async def test_a_streamed_text_completion_is_untouched_by_tool_parsing(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": MODEL, "prompt": [300, 400, 500], "max_tokens": 4, "stream": True}
    events = await _events(client, "/v1/completions", {**body, "ignore_eos": True})
    assert all("error" not in e for e in events)
    assert sum(len(e["choices"][0]["text"]) > 0 for e in events) >= 1
    assert events[-1]["choices"][0]["finish_reason"] == "length"


async def test_a_streamed_chat_with_tools_and_no_call_is_content(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [TOOL],
        "max_tokens": 6,
        "stream": True,
    }
    events = await _events(client, "/v1/chat/completions", body)
    assert all("error" not in e for e in events)
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")


async def test_a_forced_call_on_random_weights_parses_streamed_and_not(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "open a.py"}],
        "tools": [TOOL],
        "tool_choice": "required",
        "max_tokens": 64,
    }
    r = await client.post("/v1/chat/completions", json=body)
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "read_file"
    assert set(json.loads(call["function"]["arguments"])) >= {"path"}
    events = await _events(client, "/v1/chat/completions", {**body, "stream": True})
    parts = [p for e in events for p in e["choices"][0]["delta"].get("tool_calls", [])]
    assert parts[0]["function"]["name"] == "read_file" and parts[0]["id"].startswith("call_")
    assert "path" in json.loads("".join(p["function"]["arguments"] for p in parts))
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
