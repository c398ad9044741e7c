"""The adapter's side of the backend's view: snapshot -> router digests, usage -> ledger.

The penelope cache answers SGLang's `get_internal_state` with a plain-data
snapshot (`views.SessionViews.snapshot`, under `views.VIEW_KEY`); this module
turns it into what `EngineProtocol` returns (`SessionDigest`s, page hashes
named by Penelope's `PageHasher`, so the ingress names a prompt's first pages
the same way) and turns a request's `meta_info` into `TokenUsage` with the
ledger's causes. No SGLang import: it runs in the adapter's process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from penelope_engine.cache.pages import PageHasher
from penelope_engine.protocol import DIGEST_LIMITS, MissTokens, SessionDigest, TokenUsage

EVICTED_KEY = "penelope_evicted"  # added to SGLang's cached_tokens_details by the hook
REFILLED_KEY = "penelope_refilled"  # hole tokens a refill request recomputed (SGLang: cached)


def session_digests(
    snapshot: Mapping[str, Any], limit: int = DIGEST_LIMITS.sessions
) -> list[SessionDigest]:
    """The snapshot's sessions (most recent first), as the router's `SessionDigest`s."""
    rows = snapshot.get("sessions", ())[:limit]
    return [
        SessionDigest(str(sid), int(device), int(host), 0, float(last_access))
        for sid, device, host, last_access in rows
    ]


def shared_prefix_hashes(
    snapshot: Mapping[str, Any], hasher: PageHasher, limit: int = DIGEST_LIMITS.prefix_pages
) -> list[int]:
    """Page ids of the snapshot's shared device prefixes (tenant = the key's cache salt)."""
    out: list[int] = []
    seen: set[int] = set()
    for _extra_key, cache_salt, tokens in snapshot.get("shared_prefixes", ()):
        tenant = cache_salt if cache_salt is not None else "default"
        for h in hasher.hashes(tokens, tenant):
            if int(h) not in seen and len(out) < limit:
                seen.add(int(h))
                out.append(int(h))
    return out


def usage_of(meta: Mapping[str, Any], completion_tokens: int) -> TokenUsage:
    """Usage of one SGLang reply: device/host hits from `cached_tokens_details`, and the
    miss ledger's causes from the tree (`evicted_device`: the session had those tokens
    cached once; `new`: it never had them)."""
    prompt = int(meta.get("prompt_tokens", 0))
    details = meta.get("cached_tokens_details") or {}
    refilled = int(details.get(REFILLED_KEY, 0) or 0)
    cached = max(0, min(int(meta.get("cached_tokens", 0)) - refilled, prompt))
    host = min(int(details.get("host", 0) or 0), cached)
    evicted = min(int(details.get(EVICTED_KEY, 0) or 0), prompt - cached)
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion_tokens,
        device_tokens=cached - host,
        host_tokens=host,
        recomputed_tokens=evicted,
        new_tokens=prompt - cached - evicted,
        misses=MissTokens(new=prompt - cached - evicted, evicted_device=evicted),
    )
