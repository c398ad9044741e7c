"""Hints between turns (the session endpoint) on the penelope cache's session records.

A harness learns that a turn called a tool once the reply arrived; it then
sends `POST /v1/penelope/sessions/{id}` (`expected_gap_s`, `end_session`,
`retain_s`). On the SGLang backend that reaches the scheduler as an RPC
(`hint_rpc`), and `apply` runs there, on the session's `SessionEntry`, as if
the turn that just ended had carried the hints:

* unknown session, or one no finished request of which is cached here:
  every hint refused (`no_session`), as on the embedded engine; a session of
  another tenant (the request's `cache_salt`): refused (`tenant`);
* `expected_gap_s`: the session's expected return (`last_access + gap`), its
  place in the victim order (`SessionBook.victim_key`), until its next request;
* `retain_s`: `retain_until = last_access + retain_s` (from the turn's end, as
  the embedded engine's pin), and the lock on the session's tree node
  (`RetainPins`); clipped to `MAX_PIN_S` (`tenant_pin_seconds`), refused
  (`no_cached_pages`) when the node the session's history ends at is no longer
  on the device; `retain_s: 0` drops the pin;
* `end_session`: no pin, and the session is the first victim (rank 0); its
  pages leave the device when room is needed, not at once (the embedded engine
  frees them at once).

Quotas: the embedded engine's fair share is applied the same way: with more
than one tenant holding device tokens, a tenant's hinted sessions (a pin or
an expected gap) may hold at most the device's tokens over the number of such
tenants; past it a hint is refused (`tenant_fair_share`) and not applied.
`tenant_pin_tokens` has no counterpart here (Penelope's `CacheConfig` does not
reach SGLang's scheduler), and `retain_s` is capped at `MAX_PIN_S` (the
embedded engine's default `tenant_pin_seconds`). Hints carried by a request's
own `kv_hints` are applied as asked (`sessions.SessionBook.touch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from penelope_engine.hints import ClipReason, HintGrant, SessionHints, refused
from penelope_sglang.sessions import SessionEntry
from penelope_sglang.support import FULL

if TYPE_CHECKING:
    from penelope_sglang.radix_cache import PenelopeRadixCache

MAX_PIN_S = 600.0  # the longest retain_s granted (HintQuotas' default pin_seconds)


def tenant_of(entry: SessionEntry) -> str:
    """The tenant a session's requests named (SGLang's `cache_salt`, set by the adapter)."""
    salt = entry.namespace[1]
    return "default" if salt is None else str(salt)


def apply(
    cache: PenelopeRadixCache, session: str, tenant: str, hints: SessionHints, now: float
) -> list[HintGrant]:
    """Apply `hints` to `session`'s record; one grant per hint given."""
    entry = cache.book.get(session)
    if entry is None or entry.node_id is None:
        return refused(hints, "no_session")
    if tenant_of(entry) != tenant:
        return refused(hints, "tenant")
    grants: list[HintGrant] = []
    if hints.expected_gap_s is not None:
        unfair = _unfair(cache, entry, now)
        gap = None if unfair is not None else hints.expected_gap_s
        if gap is not None:
            entry.expected_gap_s = gap
        grants.append(HintGrant("expected_gap_s", hints.expected_gap_s, gap, unfair))
    if hints.retain_s is not None:
        grants.append(_retain(cache, entry, hints.retain_s, now))
    if hints.end_session:
        entry.ended, entry.retain_until = True, 0.0
        cache.pins.unpin(entry)
        grants.append(HintGrant("end_session", True, True))
    return grants


def _retain(cache: PenelopeRadixCache, entry: SessionEntry, asked: float, now: float) -> HintGrant:
    granted = asked
    clipped: ClipReason | None = None
    if asked > MAX_PIN_S:
        granted, clipped = MAX_PIN_S, "tenant_pin_seconds"
    if granted <= 0:
        entry.retain_until = 0.0
        cache.pins.unpin(entry)
        return HintGrant("retain_s", asked, 0.0, clipped)
    why: ClipReason | None = None
    if not _on_device(cache, entry.node_id):
        why = "no_cached_pages"
    else:
        why = _unfair(cache, entry, now)
    if why is not None:
        return HintGrant("retain_s", asked, 0.0, why)
    entry.ended = False
    entry.retain_until = entry.last_access + granted
    cache.pins.pin(entry, now)
    return HintGrant("retain_s", asked, granted, clipped)


def _on_device(cache: PenelopeRadixCache, node_id: int | None) -> bool:
    """The tree still holds node `node_id`, and on the device (a lock may be taken)."""
    node = cache.tree_core._node_arena.get(node_id) if node_id is not None else None  # noqa: SLF001 - SGLang: its tree's node arena
    return node is not None and node.component_data[FULL].value is not None


def _hinted(entry: SessionEntry, now: float) -> bool:
    """The entry's pages stay on the device because of a hint: a pin or an expected gap."""
    return not entry.ended and (entry.retained(now) or entry.expected_gap_s is not None)


def _unfair(cache: PenelopeRadixCache, entry: SessionEntry, now: float) -> ClipReason | None:
    """`tenant_fair_share` when `entry`'s device tokens and those of its tenant's other
    hinted sessions pass the tenant's share of the device (None: they do not)."""
    held = {e.session: cache.views.held(e)[0] for e in cache.book.entries()}
    tenant = tenant_of(entry)
    tenants = {tenant} | {tenant_of(e) for e in cache.book.entries() if held[e.session] > 0}
    if len(tenants) == 1:
        return None  # one tenant holds the device: all of it is its share
    mine = held[entry.session] + sum(
        held[e.session]
        for e in cache.book.entries()
        if e is not entry and tenant_of(e) == tenant and _hinted(e, now)
    )
    capacity = cache.token_to_kv_pool_allocator.size
    return "tenant_fair_share" if mine > capacity / len(tenants) else None
