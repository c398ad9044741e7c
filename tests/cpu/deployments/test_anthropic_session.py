"""Which session an Anthropic request is (the rule in `deployments.api.anthropic.session`), and
Claude Code's attribution block kept out of the prompt."""

from __future__ import annotations

import json
from typing import Any

from deployments.api.anthropic.schemas import MessagesRequest
from deployments.api.anthropic.session import session_of, system_blocks
from deployments.api.anthropic.translate import to_chat

USER_ID = "user_abc123_account_0f0e_session_5b3c1d2e-aaaa-4bbb-8ccc-0123456789ab"


def _req(**over: Any) -> MessagesRequest:
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    return MessagesRequest.model_validate(body | over)


def test_the_rule_in_order() -> None:
    body = _req(metadata={"user_id": USER_ID}, system="S")
    both = {"x-session-id": "explicit", "x-claude-code-session-id": "cc"}
    assert session_of(body, both).session == "explicit"
    cc = session_of(body, {"x-claude-code-session-id": "cc", "x-claude-code-parent-agent-id": "p"})
    assert (cc.session, cc.parent, cc.source) == ("cc", "p", "claude-code")
    meta = session_of(body, {})
    assert (meta.session, meta.source) == ("5b3c1d2e-aaaa-4bbb-8ccc-0123456789ab", "metadata")
    as_json = _req(metadata={"user_id": json.dumps({"device_id": "d", "session_id": "js"})})
    assert session_of(as_json, {}).session == "js"


def test_without_ids_a_conversation_is_its_own_session_across_turns() -> None:
    turn1 = _req(system="S")
    turn2 = _req(
        system="S",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ],
    )
    other = _req(system="S", messages=[{"role": "user", "content": "bye"}])
    a, b, c = (session_of(r, {}) for r in (turn1, turn2, other))
    assert a.source == "conversation" and a.session.startswith("conv-")
    assert a.session == b.session != c.session


def test_parent_agent_becomes_the_parent_session_hint() -> None:
    ids = session_of(
        _req(), {"x-claude-code-session-id": "sub", "x-claude-code-parent-agent-id": "p"}
    )
    chat = to_chat(_req(), ids).chat
    assert chat.session_id == "sub"
    assert chat.penelope is not None and chat.penelope.parent_session == "p"


def test_the_attribution_block_is_stripped_so_prompts_match() -> None:
    def system(cch: str) -> list[dict[str, Any]]:
        header = f"x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli; cch={cch};"
        return [{"type": "text", "text": header}, {"type": "text", "text": "You are Claude Code."}]

    one, two = (to_chat(_req(system=system(h)), session_of(_req(), {})) for h in ("a1", "b2"))
    assert one.chat.messages == two.chat.messages
    assert "billing" not in one.chat.model_dump_json()
    as_string = system_blocks("x-anthropic-billing-header: cch=1;\nYou are Claude Code.")
    assert [b.text for b in as_string] == ["You are Claude Code."]
    kept = system_blocks("Talk about x-anthropic-billing-header: values.")
    assert kept[0].text.startswith("Talk about")
