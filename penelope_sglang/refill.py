"""Recomputing a hole before the extend: one internal prefill-only refill request.

With a host tier, a shelved suffix may start with a host span: the refill's
insert copies it back to the device before reconnecting (`host_tier`), and a
record with no hole at all is reconnected at once, without a refill, when its
head is device-resident (else a refill of the head loads SGLang's own host
nodes of the prefix first).

Why a refill request rather than "the hole as the request's own first chunk":
SGLang's request reads its KV from one contiguous `req_to_token` row whose
extend tokens are its tail, and a chunked request is never re-matched against
the tree between chunks (`init_next_round_input()` runs without the cache);
splicing the suffix's slots into the row after the hole's chunk would mean
rewriting `prefix_len`, `cache_protected_len`, the lock on `last_node` and the
chunk boundary chosen by `PrefillAdder`, all inside the scheduler's own
bookkeeping. A refill request needs none of that: it is an ordinary request
whose prompt is the prefix and the hole (`[0, hole_end)`) and which stops
after one token. SGLang matches its prefix, computes exactly the hole at its
own positions attending to the prefix, and inserts `[0, hole_end)` into the
tree when it finishes; that insert reconnects the shelved suffix
(`PenelopeRadixCache.insert`). Only then is the real request queued, so its
ordinary match reaches through the suffix: `prefix_len`, `cached_tokens` and
`cache_hit_rate` count the suffix, and its extend is only the new tokens.
The cost is one extra (batched) prefill pass per returning request with a hole;
the refill's single output token is dropped, and its output is never streamed.

This module holds the bookkeeping (plan, pin, park, release); `hooks` wires it
into SGLang's scheduler.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

from penelope_sglang.shelf import ShelvedSuffix

REFILL_RID_PREFIX = "penelope-refill-"


class HoleMatcher(Protocol):
    """The part of `PenelopeRadixCache` the coordinator uses."""

    def match_holes(self, key: Any) -> Any: ...

    def pin(self, record: ShelvedSuffix) -> None: ...

    def unpin(self, record: ShelvedSuffix) -> None: ...

    def reconnect(self, record: ShelvedSuffix) -> bool: ...


@dataclass(frozen=True)
class RefillPlan:
    """A refill request's prompt (prefix + hole) and what it unlocks."""

    rid: str
    token_ids: array  # [0, hole_end): the refill recomputes [hole_start, hole_end)
    hole: tuple[int, int]
    suffix: tuple[int, int]


@dataclass
class _Pending:
    plan: RefillPlan
    record: ShelvedSuffix
    parked: Any  # the real request, queued once the refill is released


def is_refill_rid(rid: object) -> bool:
    return isinstance(rid, str) and rid.startswith(REFILL_RID_PREFIX)


class RefillCoordinator:
    """Plans refills, parks the real requests behind them, and releases them."""

    def __init__(self, cache: HoleMatcher, min_suffix_tokens: int = 1) -> None:
        if min_suffix_tokens < 1:
            raise ValueError(f"min_suffix_tokens must be >= 1, got {min_suffix_tokens}")
        self.cache = cache
        self.min_suffix_tokens = min_suffix_tokens
        self._pending: dict[str, _Pending] = {}
        self._ready: list[Any] = []
        self._released: set[Any] = set()  # rids already refilled once: never refill twice
        self._ids = itertools.count()

    def plan(self, key: Any, request: Any) -> RefillPlan | None:
        """A refill for `request` (whose prompt is `key`) when it matches a hole with a suffix.

        A planned refill pins the shelved suffix and parks `request` until `release`.
        """
        rid = getattr(request, "rid", None)
        if rid in self._released:
            self._released.discard(rid)
            return None
        match = self.cache.match_holes(key)
        if match.record is None or match.suffix_len < self.min_suffix_tokens:
            return None
        if not match.holes and self.cache.reconnect(match.record):
            return None  # no hole: the host span is back on the device, nothing to recompute
        hole_end = match.suffix[0] if match.suffix is not None else match.prefix_len
        if hole_end == 0:
            return None  # nothing to refill: the request recomputes what could not be loaded
        plan = RefillPlan(
            rid=f"{REFILL_RID_PREFIX}{next(self._ids)}",
            token_ids=array("q", key.token_ids[:hole_end]),
            hole=match.holes[-1] if match.holes else (hole_end, hole_end),
            suffix=match.suffix,
        )
        self.cache.pin(match.record)
        # the ledger: SGLang will count the refilled hole as cached for the request
        request.penelope_refilled_tokens = plan.hole[1] - plan.hole[0]
        self._pending[plan.rid] = _Pending(plan, match.record, request)
        return plan

    def release(self, refill_rid: str) -> None:
        """The refill finished (or was aborted): unpin its suffix and free its request."""
        pending = self._pending.pop(refill_rid, None)
        if pending is None:
            return
        self.cache.unpin(pending.record)
        self._released.add(getattr(pending.parked, "rid", None))
        self._ready.append(pending.parked)

    def take_ready(self) -> list[Any]:
        """Requests whose refill is done, in release order, to be queued now."""
        ready, self._ready = self._ready, []
        return ready

    @property
    def pending(self) -> int:
        return len(self._pending)
