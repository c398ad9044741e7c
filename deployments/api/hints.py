"""A harness's hints at the HTTP edge: the `penelope` body object, headers, cache_control.

Three ways to send the same hints (`penelope_engine.hints.SessionHints`),
all optional; without any, a request runs exactly as before:

* the body's `penelope` object (`schemas.PenelopeHints`, strict: an unknown
  field or a wrong type is a 400 naming it), which the `openai` client sends
  with `extra_body={"penelope": {...}}`;
* headers, for clients that cannot add body fields: `x-penelope-retain-s`,
  `x-penelope-expected-gap-s` (seconds, finite, >= 0), `x-penelope-end-session`
  (`true` / `false`), `x-penelope-parent-session`; a field the body sets wins;
* Anthropic's `cache_control: {"type": "ephemeral", "ttl": "5m" | "1h"}` on a
  message or a text part: `retain_s` of 300 or 3600 s (the longest one given),
  unless `retain_s` is set otherwise.

The engine reports what each hint got in `usage.penelope.hints` (`grants_body`).

A harness learns that a turn called a tool only when the reply arrives, after
the request went out; it then sends what it knows to the session endpoint,
`POST /v1/penelope/sessions/{id}` with `expected_gap_s`, `end_session` or
`retain_s` (`session_endpoint_hints`; same auth and tenant as the completions
endpoints). The reply's `hints` is the same `grants_body`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from deployments.api.errors import invalid
from deployments.api.schemas import ChatCompletionRequest, CompletionRequest, SessionHintsRequest
from deployments.api.sessions import named_session
from penelope_engine.errors import InvalidRequestError
from penelope_engine.hints import NO_HINTS, HintGrant, SessionHints

HEADER_PREFIX = "x-penelope-"
CACHE_TTL_S = {"5m": 300.0, "1h": 3600.0}  # Anthropic's ephemeral cache lifetimes
HINT_NAMES = tuple(f.name for f in dataclasses.fields(SessionHints))  # one header each


def hint_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's hint headers, by field name (`x-penelope-retain-s` -> `retain_s`)."""
    out = {}
    for name in HINT_NAMES:
        value = headers.get(HEADER_PREFIX + name.replace("_", "-"))
        if value is not None:
            out[name] = value
    return out


def _seconds(value: str, header: str) -> float:
    try:
        s = float(value)
    except ValueError:
        s = math.nan
    if not (0.0 <= s < math.inf):
        raise invalid(f"{header} must be a finite number of seconds >= 0, got {value!r}", header)
    return s


def _flag(value: str, header: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false", "1", "0"):
        raise invalid(f"{header} must be true or false, got {value!r}", header)
    return v in ("true", "1")


def _from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in headers.items():
        header = HEADER_PREFIX + name.replace("_", "-")
        if name in ("retain_s", "expected_gap_s"):
            out[name] = _seconds(value, header)
        elif name == "end_session":
            out[name] = _flag(value, header)
        elif (named := named_session(value, header)) is None:
            raise invalid(f"{header} must not be blank", header)
        else:
            out[name] = named
    return out


def _cache_control_s(body: ChatCompletionRequest | CompletionRequest) -> float | None:
    """The longest `cache_control` lifetime on the chat's messages and parts; None: none."""
    if not isinstance(body, ChatCompletionRequest):
        return None
    found = []
    for m in body.messages:
        controls = [m.cache_control]
        if isinstance(m.content, list):
            controls += [part.cache_control for part in m.content]
        found += [CACHE_TTL_S[c.ttl] for c in controls if c is not None]
    return max(found, default=None)


def session_hints(
    body: ChatCompletionRequest | CompletionRequest, headers: Mapping[str, str]
) -> SessionHints:
    """The request's hints: body fields, then headers, then `cache_control` for retain_s."""
    fields = _from_headers(headers)
    if body.penelope is not None:
        fields |= body.penelope.model_dump(exclude_unset=True)
    if "retain_s" not in fields:
        ttl = _cache_control_s(body)
        if ttl is not None:
            fields["retain_s"] = ttl
    if not fields:
        return NO_HINTS
    try:
        return SessionHints(**fields)
    except InvalidRequestError as exc:
        raise invalid(str(exc), param="penelope") from exc


def session_endpoint_hints(body: SessionHintsRequest) -> SessionHints:
    """The session endpoint's body as `SessionHints` (400 naming the field when they
    contradict each other, or when none is given)."""
    fields = body.model_dump(exclude_unset=True)
    if not fields:
        raise invalid("give expected_gap_s, end_session or retain_s", param="expected_gap_s")
    try:
        return SessionHints(**fields)
    except InvalidRequestError as exc:
        raise invalid(str(exc), param="end_session") from exc


def has_history(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """The prompt continues earlier turns: a chat with an assistant message."""
    if not isinstance(body, ChatCompletionRequest):
        return False
    return any(m.role == "assistant" for m in body.messages)


def grants_body(grants: tuple[HintGrant, ...]) -> dict[str, dict[str, Any]]:
    """`usage.penelope.hints`: hint -> {asked, granted, clipped_by}."""
    return {
        g.hint: {"asked": g.asked, "granted": g.granted, "clipped_by": g.clipped_by} for g in grants
    }
