"""The one rule for naming a request's session, which every API follows.

Each API takes its session from the first of its sources that is present:

- OpenAI chat and completions: the `x-session-id` header, else the body's
  `session_id`;
- Anthropic Messages (`anthropic.session`): `x-session-id`, Claude Code's
  `x-claude-code-session-id`, the session in `metadata.user_id`, else the
  conversation;
- the Responses API (`responses_api.translate`): `x-session-id`,
  `prompt_cache_key`, the stored chain's session, else the conversation.

`x-session-id` comes first everywhere: Ray Serve's proxy keeps a session on
one ingress replica by it. An id a client names, from any source, is stripped
of surrounding white space; a blank one counts as absent; one longer than
`MAX_SESSION_ID` characters is refused with a 400 that names its source, never
cut (two ids that share their first 256 characters are two sessions, and
cutting would merge them). An id derived from the conversation is always short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from deployments.api.errors import invalid

SESSION_HEADER = "x-session-id"
MAX_SESSION_ID = 256
# a session id (or any id a client names: a parent session, a call id) in a request body
ClientId = Annotated[str, Field(min_length=1, max_length=MAX_SESSION_ID)]


def named_session(value: str | None, source: str) -> str | None:
    """The id `value` names (None when blank), by the module's rule; `source` says where it
    came from, for the 400 an overlong one gets."""
    named = (value or "").strip()
    if not named:
        return None
    if len(named) > MAX_SESSION_ID:
        raise invalid(
            f"{source} must have at most {MAX_SESSION_ID} characters, got {len(named)}", source
        )
    return named


def header_session(headers: Mapping[str, str], name: str = SESSION_HEADER) -> str | None:
    """The session the header `name` names, by the module's rule."""
    return named_session(headers.get(name), name)
