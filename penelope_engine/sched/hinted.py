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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.hints import ClipReason, HintGrant
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
    def __init__(self, quotas: HintQuotas, cache: PrefixCache, retention: Retention) -> None:
        self.quotas = quotas
        self.cache = cache
        self.retention = retention

    def arrived(self, seq: Sequence) -> None:
        """A request was queued: adopt its parent's history when it names a parent."""
        parent = seq.req.hints.parent_session
        if parent is not None:
            seq.hint_grants.append(self._adopt(seq, parent))

    def _adopt(self, seq: Sequence, parent: str) -> HintGrant:
        info = self.cache.session_info(parent)
        if info is None or info.tenant is None or parent == seq.req.session:  # never admitted
            return HintGrant("parent_session", parent, None, "unknown_parent")
        if info.tenant != seq.req.tenant:
            return HintGrant("parent_session", parent, None, "tenant")
        self.cache.session(seq.req.session).held_elsewhere(info.seen_hashes)
        return HintGrant("parent_session", parent, parent)

    def turn_ended(
        self, seq: Sequence, stop: str | None, cost: Callable[[], PlannerCost], now: float
    ) -> None:
        """`seq`'s turn ended (not aborted): learned retention, then its hints."""
        req, h = seq.req, seq.req.hints
        sid, context = req.session, len(seq.tokens) - 1
        if req.session_id is None:  # it never returns: nothing to keep or to expect
            given = {"retain_s": h.retain_s, "expected_gap_s": h.expected_gap_s}
            given["end_session"] = h.end_session or None
            for name, asked in given.items():
                if asked is not None:
                    seq.hint_grants.append(HintGrant(name, asked, None, "no_session"))
            return
        gap = h.expected_gap_s  # the cache has it already (`PrefixCache.on_turn_end`)
        if gap is not None:
            seq.hint_grants.append(HintGrant("expected_gap_s", gap, gap))
        if self.retention.enabled:  # cost() only when a learned pin may be set
            self.retention.on_turn_end(sid, stop, context, cost(), now, gap)
        if h.retain_s is not None:
            seq.hint_grants.append(self._retain(seq, h.retain_s, context, now))
        if h.end_session:
            self.retention.release(sid)
            self.cache.release_session(sid)
            seq.hint_grants.append(HintGrant("end_session", True, True))

    def _retain(self, seq: Sequence, asked: float, context: int, now: float) -> HintGrant:
        sid, tenant = seq.req.session, seq.req.tenant
        clipped: ClipReason | None = None
        granted = asked
        if asked > self.quotas.pin_seconds:
            granted, clipped = self.quotas.pin_seconds, "tenant_pin_seconds"
        if asked == 0:  # keep nothing past this turn, not even a learned pin
            self.retention.release(sid)
        refused = self._refusal(seq, context) if granted > 0 else None
        if refused is not None or granted <= 0:  # a learned pin, if any, stays
            return HintGrant("retain_s", asked, 0.0, refused or clipped)
        pages = context // self.cache.page_size
        self.retention.pin(sid, pages, now + granted, tenant, hinted=True)
        return HintGrant("retain_s", asked, granted, clipped)

    def _refusal(self, seq: Sequence, context: int) -> ClipReason | None:
        """Why the session's path cannot be pinned now (None: it can)."""
        sid, tenant = seq.req.session, seq.req.tenant
        ps = self.cache.page_size
        pages = context // ps
        if self.cache.session(sid).leaf is None or pages == 0:
            return "no_cached_pages"
        quota = self.quotas.pin_tokens
        if quota is not None and self.retention.pinned_tokens(tenant, sid) + pages * ps > quota:
            return "tenant_pin_tokens"
        own = self.retention.pins.get(sid)
        others = self.retention.pinned_pages - (own.pages if own is not None else 0)
        share = self.retention.cfg.max_pinned_fraction * self.cache.device.capacity
        if others + pages > share:
            return "device_pin_share"
        return None
