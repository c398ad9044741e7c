"""Claude Code's moving `cache_control` markers never change the token prefix.

Claude Code marks different blocks each turn (the system prompt's last block, the last
tool, the newest message's last block; the marker of the turn before moves on). A server
that keys its cache on the marked blocks sees a different prefix each turn (SGLang #36877:
100 % / 0 % hits, alternating). Penelope renders a marker as a retention hint only: the
prompt's tokens with markers anywhere equal the tokens with none, every turn's prompt
extends the one before, and the engine serves each turn's whole earlier prompt from cache.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.api.anthropic.schemas import MessagesRequest
from deployments.api.anthropic.session import session_of
from deployments.api.anthropic.translate import to_chat
from deployments.api.prepare import render_chat
from deployments.api.settings import ApiSettings
from penelope_engine.model.registry import qwen3_tokenizer

MARK = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are a coding agent. " * 8},
          {"type": "text", "text": "Work in the repository."}]  # fmt: skip
TOOLS = [{"name": n, "description": f"The {n} tool.",
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
         for n in ("grep", "read", "bash")]  # fmt: skip
TOKENIZER = qwen3_tokenizer()


def conversation(turns: int) -> list[dict[str, Any]]:
    """A tool loop of `turns` rounds: user asks, assistant calls, user returns the result."""
    out: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix it."}]}]
    for t in range(turns):
        use = {"type": "tool_use", "id": f"toolu_{t}", "name": "grep", "input": {"q": f"x{t}"}}
        out.append({"role": "assistant", "content": [{"type": "text", "text": "Looking."}, use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": f"hit {t}"}
        out.append({"role": "user", "content": [result, {"type": "text", "text": "Go on."}]})
    return out


def body(turns: int, marks: list[tuple[str, int, int]] | None = None) -> dict[str, Any]:
    """The request of turn `turns`, with `cache_control` on the blocks `marks` names."""
    b: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "system": copy.deepcopy(SYSTEM),
                         "tools": copy.deepcopy(TOOLS),
                         "messages": conversation(turns)}  # fmt: skip
    for where, i, j in marks or []:
        if where == "system":
            b["system"][i % len(SYSTEM)]["cache_control"] = MARK
        elif where == "tool":
            b["tools"][i % len(TOOLS)]["cache_control"] = MARK
        else:
            message = b["messages"][i % len(b["messages"])]
            message["content"][j % len(message["content"])]["cache_control"] = MARK
    return b


def claude_code_marks(turns: int) -> list[tuple[str, int, int]]:
    """Where Claude Code puts its markers on turn `turns`: they move with the newest turn."""
    newest = len(conversation(turns)) - 1
    return [("system", -1, 0), ("tool", -1, 0), ("message", newest, -1),
            ("message", newest - 2, -1)]  # fmt: skip


def prompt(b: dict[str, Any]) -> list[int]:
    request = MessagesRequest.model_validate(b)
    ids, _ = render_chat(to_chat(request, session_of(request, {})).chat, TOKENIZER, ApiSettings())
    return ids


def test_every_turn_extends_the_last_while_the_markers_move() -> None:
    before: list[int] = []
    for turns in range(1, 5):
        ids = prompt(body(turns, claude_code_marks(turns)))
        assert ids == prompt(body(turns))  # the markers leave no token
        kept = max(0, len(before) - 3)  # less "<|im_start|>assistant\n", every prompt's end
        assert kept == 0 or (kept > 100 and ids[:kept] == before[:kept])
        before = ids


@settings(max_examples=40, deadline=None)
@given(
    turns=st.integers(1, 4),
    marks=st.lists(
        st.tuples(
            st.sampled_from(["system", "tool", "message"]), st.integers(0, 20), st.integers(0, 3)
        ),
        max_size=6,
    ),  # fmt: skip
)
def test_markers_anywhere_render_the_same_tokens_as_none(
    turns: int, marks: list[tuple[str, int, int]]
) -> None:
    assert prompt(body(turns, marks)) == prompt(body(turns))


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(make_app()):
        yield c


@pytest.mark.anyio
async def test_each_turn_is_served_from_cache_however_the_markers_moved(
    client: httpx.AsyncClient,
) -> None:
    headers = {"x-session-id": "claude-code-session"}
    last_prompt = 0
    for turns in range(1, 5):
        r = await client.post("/v1/messages", json=body(turns, claude_code_marks(turns)),
                              headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        prompt_tokens = usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        if last_prompt:  # everything the last turn sent (less its reply and a partial page)
            assert usage["cache_read_input_tokens"] >= last_prompt - TINY_ENGINE.cache.page_size
        last_prompt = prompt_tokens
