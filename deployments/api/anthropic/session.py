"""Which session an Anthropic request belongs to, and Claude Code's attribution block.

The session id, first that is present:

1. the `x-session-id` header (as on the OpenAI routes; Ray Serve routes on it);
2. Claude Code's `x-claude-code-session-id` header, with
   `x-claude-code-parent-agent-id` (a subagent's parent) as the
   `parent_session` hint;
3. the session in `metadata.user_id` (Claude Code writes
   `user_<hash>_account_<uuid>_session_<uuid>`, or a JSON object with a
   `session_id`);
4. the conversation itself: `conv-` and a digest of the system prompt and
   the first message, which every later turn of that conversation repeats.

Claude Code puts a per-request attribution block at the top of the system
prompt (a text block starting `x-anthropic-billing-header:`, whose hash
changes with every request). It is stripped before the prompt is rendered,
so the system prompt's tokens, and every token after them, stay the same
from one request of a session to the next. (`CLAUDE_CODE_ATTRIBUTION_HEADER=0`
stops Claude Code sending it at all.)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from deployments.api.anthropic.schemas import Message, PromptRequest, TextBlock
from deployments.api.sessions import MAX_SESSION_ID, header_session, named_session

CLAUDE_SESSION_HEADER = "x-claude-code-session-id"
CLAUDE_PARENT_HEADER = "x-claude-code-parent-agent-id"
ATTRIBUTION_PREFIX = "x-anthropic-billing-header:"
_USER_ID_SESSION = re.compile(rf"_session_([A-Za-z0-9_.:-]{{1,{MAX_SESSION_ID}}})$")


@dataclass(frozen=True)
class SessionIds:
    session: str
    parent: str | None = None
    source: str = "conversation"  # which rule named it (header, claude-code, metadata, ...)


def session_of(body: PromptRequest, headers: Mapping[str, str]) -> SessionIds:
    """The request's session, by the rule in the module doc (ids as `api.sessions` says)."""
    explicit = header_session(headers)
    parent = header_session(headers, CLAUDE_PARENT_HEADER)
    if explicit:
        return SessionIds(explicit, parent, "header")
    claude = header_session(headers, CLAUDE_SESSION_HEADER)
    if claude:
        return SessionIds(claude, parent, "claude-code")
    from_user = _user_id_session(getattr(body, "metadata", None))
    if from_user:
        return SessionIds(from_user, parent, "metadata")
    return SessionIds(_conversation_id(body), parent, "conversation")


def _user_id_session(metadata: object) -> str | None:
    user_id = getattr(metadata, "user_id", None)
    if not user_id:
        return None
    try:
        parsed = json.loads(user_id)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("session_id"), str):
        return named_session(parsed["session_id"], "metadata.user_id session_id")
    found = _USER_ID_SESSION.search(user_id)
    return found.group(1) if found else None


def _conversation_id(body: PromptRequest) -> str:
    digest = hashlib.sha256()
    for block in system_blocks(body.system):
        digest.update(block.text.encode())
    digest.update(b"\x00")
    digest.update(_first_message_text(body.messages[0]).encode())
    return "conv-" + digest.hexdigest()[:24]


def _first_message_text(message: Message) -> str:
    return json.dumps([b.model_dump(mode="json") for b in message.blocks()], sort_keys=True)


def system_blocks(system: str | list[TextBlock] | None) -> list[TextBlock]:
    """The system prompt's text blocks, without Claude Code's attribution block."""
    if system is None:
        return []
    blocks = [TextBlock(type="text", text=system)] if isinstance(system, str) else list(system)
    return [_without_attribution(b) for b in blocks if not _is_attribution(b.text)]


def _is_attribution(text: str) -> bool:
    return text.lstrip().startswith(ATTRIBUTION_PREFIX) and "\n" not in text.strip()


def _without_attribution(block: TextBlock) -> TextBlock:
    """A block that starts with an attribution line (a string system prompt) loses that line."""
    if not block.text.lstrip().startswith(ATTRIBUTION_PREFIX):
        return block
    rest = block.text.lstrip().split("\n", 1)[1] if "\n" in block.text.strip() else ""
    return block.model_copy(update={"text": rest.lstrip("\n")})
