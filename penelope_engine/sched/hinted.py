"""A harness's hints in the scheduling core: applied within the tenant's quotas. No torch.

`HintedSessions` is what the `Scheduler` asks when a request arrives and when
its turn ends; each hint the request carries (`penelope_engine.hints`) gets a
`HintGrant` on the sequence, which the last output reports:

* `parent_session` (on arrival): the parent's cached history (its longest
  path) becomes the sub-agent's own, so what it computes again of it counts
  as evicted rather than new. Its pages are found by content anyway: page ids
  are chained over tokens and namespaced by tenant, so a prompt that starts
  with the parent's history matches the parent's pages in the same tenant
  only; a parent of another tenant is refused (`tenant`).
* `expected_gap_s` (turn end): the session's expected return for the
  return-aware eviction policy (`SessionInfo.expected_gap`) and, with
  retention on, the tool time its pin is sized for (`Retention.on_turn_end`).
* `retain_s` (turn end): pins the session's path for up to that long,
  clipped to `tenant_pin_seconds`; refused when the tenant's pinned tokens
  would pass `tenant_pin_tokens` or pins would hold more of the device than
  `max_pinned_fraction`. The pin yields when a queued request does not fit
  (`Retention.yield_one`) and ends when the session's next turn arrives.
* `end_session` (turn end): drops the session's pin and takes its private
  pages off the device now (demoted to the host tier when there is one,
  dropped otherwise); shared pages and pages a running request uses stay.

A harness learns that a turn called a tool only when its reply arrives, so the
same hints may also come between turns (`between_turns`, the session endpoint
`POST /v1/penelope/sessions/{id}`): they apply to the session's record as if
the turn that just ended had carried them.

Fair hints: `expected_gap_s` keeps a session's pages on the device under
return-aware eviction as surely as a pin does, so both count against the
tenant (`hinted_pages`): a hint is clipped (`tenant_pin_tokens`) when the
tenant's hinted sessions would hold more than its token quota, and
(`tenant_fair_share`) when, with more than one tenant holding device pages,
they would hold more than the device's pages over the number of such tenants.
A clipped `expected_gap_s` is not applied (the session is ranked as if no hint
came) and is reported so in `usage.penelope.hints`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tier import Tier
from penelope_engine.hints import ClipReason, HintGrant, SessionHints, refused
from penelope_engine.sched.agent import Retention
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tiers.planner import PlannerCost
from penelope_engine.util import require


@dataclass(frozen=True)
class HintQuotas:
    """Per-tenant bounds on `retain_s` (from `CacheConfig.tenant_pin_*`)."""

    pin_seconds: float = 600.0
    pin_tokens: int | None = None  # None: only the device share bounds pins

    def __post_init__(self) -> None:
        require(self.pin_seconds >= 0, f"pin_seconds must be >= 0, got {self.pin_seconds}")
        require(
            self.pin_tokens is None or self.pin_tokens >= 0,
            f"pin_tokens must be >= 0, got {self.pin_tokens}",
        )


class HintedSessions:
    def __init__(
        self, quotas: HintQuotas, cache: PrefixCache, sessions: Sessions, retention: Retention
    ) -> None:
        self.quotas = quotas
        self.cache = cache
        self.sessions = sessions
        self.retention = retention
        self.gapped: dict[str, str] = {}  # session -> tenant: a granted `expected_gap_s`

    def arrived(self, seq: Sequence) -> None:
        """A request was queued: its session's gap is over; adopt its parent's history when
        it names a parent."""
        self.gapped.pop(seq.req.engine_session_id, None)
        parent = seq.req.hints.parent_session
        if parent is not None:
            seq.hint_grants.append(self._adopt(seq, parent))

    def forget(self, session_ids: list[str]) -> None:
        """The sessions' records are gone."""
        for sid in session_ids:
            self.gapped.pop(sid, None)

    def _adopt(self, seq: Sequence, parent: str) -> HintGrant:
        info = self.sessions.get(parent)
        if (
            info is None or info.tenant is None or parent == seq.req.engine_session_id
        ):  # never admitted
            return HintGrant("parent_session", parent, None, "unknown_parent")
        if info.tenant != seq.req.tenant:
            return HintGrant("parent_session", parent, None, "tenant")
        self.sessions.record(seq.req.engine_session_id).held_elsewhere(info.seen_hashes)
        return HintGrant("parent_session", parent, parent)

    def turn_ended(
        self, seq: Sequence, stop: str | None, cost: Callable[[], PlannerCost], now: float
    ) -> float | None:
        """`seq`'s turn ended (not aborted): learned retention, then its hints; returns
        the `expected_gap_s` granted (None: none, or clipped)."""
        req, h = seq.req, seq.req.hints
        if req.session_id is None:  # it never returns: nothing to keep or to expect
            seq.hint_grants.extend(refused(h, "no_session"))
            return None
        grants, gap = self._apply(
            req.engine_session_id, req.tenant, h, len(seq.tokens) - 1, stop, cost, now
        )
        seq.hint_grants.extend(grants)
        return gap

    def between_turns(
        self, session_id: str, tenant: str, hints: SessionHints, cost: Callable[[], PlannerCost]
    ) -> tuple[list[HintGrant], float | None]:
        """Hints a harness sent after the session's turn ended (the session endpoint):
        applied as if that turn had carried them. Refused (`no_session`) unless the session
        is between turns here with a cached path, and (`tenant`) unless it is `tenant`'s."""
        info = self.sessions.get(session_id)
        if info is None or info.turn_end is None or info.leaf is None:
            return refused(hints, "no_session"), None
        if info.tenant != tenant:
            return refused(hints, "tenant"), None
        context = (info.leaf.start + len(info.leaf.hashes)) * self.cache.page_size
        return self._apply(session_id, tenant, hints, context, info.last_stop, cost, info.turn_end)

    def _apply(
        self,
        sid: str,
        tenant: str,
        h: SessionHints,
        context: int,
        stop: str | None,
        cost: Callable[[], PlannerCost],
        now: float,
    ) -> tuple[list[HintGrant], float | None]:
        grants: list[HintGrant] = []
        gap = None
        if h.expected_gap_s is not None:
            clipped = self._unfair(sid, tenant, self._pages(self.sessions.record(sid)))
            if clipped is None:
                gap = h.expected_gap_s
                self.sessions.set_expected_gap(sid, gap)
                self.gapped[sid] = tenant
            grants.append(HintGrant("expected_gap_s", h.expected_gap_s, gap, clipped))
        if self.retention.enabled:  # cost() only when a learned pin may be set
            self.retention.on_turn_end(sid, stop, context, cost(), now, gap)
        if h.retain_s is not None:
            grants.append(self._retain(sid, tenant, h.retain_s, context, now))
        if h.end_session:
            self.retention.release(sid)
            self.cache.release_session(sid)
            self.gapped.pop(sid, None)
            grants.append(HintGrant("end_session", True, True))
        return grants, gap

    def _retain(self, sid: str, tenant: str, asked: float, context: int, now: float) -> HintGrant:
        clipped: ClipReason | None = None
        granted = asked
        if asked > self.quotas.pin_seconds:
            granted, clipped = self.quotas.pin_seconds, "tenant_pin_seconds"
        if asked == 0:  # keep nothing past this turn, not even a learned pin
            self.retention.release(sid)
        refused = self._refusal(sid, tenant, context) if granted > 0 else None
        if refused is not None or granted <= 0:  # a learned pin, if any, stays
            return HintGrant("retain_s", asked, 0.0, refused or clipped)
        pages = context // self.cache.page_size
        self.retention.pin(sid, pages, now + granted, tenant, hinted=True)
        return HintGrant("retain_s", asked, granted, clipped)

    def _refusal(self, sid: str, tenant: str, context: int) -> ClipReason | None:
        """Why the session's path cannot be pinned now (None: it can)."""
        pages = context // self.cache.page_size
        if self.sessions.record(sid).leaf is None or pages == 0:
            return "no_cached_pages"
        unfair = self._unfair(sid, tenant, pages)
        if unfair is not None:
            return unfair
        own = self.retention.pins.get(sid)
        others = self.retention.pinned_pages - (own.pages if own is not None else 0)
        share = self.retention.cfg.max_pinned_fraction * self.cache.capacity(Tier.DEVICE)
        if others + pages > share:
            return "device_pin_share"
        return None

    # -- fair shares ----------------------------------------------------------------------
    def _pages(self, info: SessionInfo) -> int:
        """Device pages on the session's private path (what a hint of it keeps there)."""
        n, node = 0, info.leaf
        while node is not None and node.parent is not None:
            if not node.shared:
                n += node.n_device
            node = node.parent
        return n

    def hinted_pages(self, tenant: str, but: str) -> int:
        """Device pages `tenant`'s hinted sessions other than `but` hold: a granted
        `expected_gap_s` (its private path) or a hinted pin (its pinned pages)."""
        n = 0
        for sid, t in self.gapped.items():
            info = self.sessions.get(sid)
            if t == tenant and sid != but and info is not None and info.expected_gap is not None:
                if sid not in self.retention.pins:
                    n += self._pages(info)
        pins = self.retention.pins.items()
        return n + sum(p.pages for s, p in pins if p.hinted and p.tenant == tenant and s != but)

    def _unfair(self, sid: str, tenant: str, pages: int) -> ClipReason | None:
        """Why `pages` more hinted pages of `tenant` (for `sid`) are past its quota or its
        fair share of the device (None: they are not)."""
        tenants = {tenant}
        for info in self.sessions.records():
            if info.tenant is not None and info.tenant not in tenants and self._pages(info):
                tenants.add(info.tenant)
        quota = self.quotas.pin_tokens
        if quota is None and len(tenants) == 1:
            return None  # one tenant, no quota: the whole device is its share
        held = self.hinted_pages(tenant, sid) + pages
        if quota is not None and held * self.cache.page_size > quota:
            return "tenant_pin_tokens"
        if len(tenants) > 1 and held > self.cache.capacity(Tier.DEVICE) / len(tenants):
            return "tenant_fair_share"
        return None
