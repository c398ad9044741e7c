"""What a harness may tell the engine about a session's next turn, and what it was granted.

A harness (the program that runs an agent's tool calls) knows things the
engine can only learn: how long the tool call will take, that the session is
over, that a sub-agent continues its parent's history. `SessionHints` carries
them on a `GenerateRequest`; all are optional, and without them the engine
behaves exactly as it does with none. The HTTP edge (`deployments.api.hints`)
parses them; the scheduling core (`sched.hinted`) applies them, clipped by the
tenant's quotas (`CacheConfig.tenant_pin_tokens`, `tenant_pin_seconds`), and
reports each as a `HintGrant`: a hint past a quota is clipped, never an error.

    retain_s         keep the session's KV on the device up to N s after this turn
    expected_gap_s   the harness's estimate of the tool time before the next turn
    end_session      release the session's private device pages after this turn
    parent_session   a sub-agent: the parent's cached history counts as its own
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from penelope_engine.errors import InvalidRequestError

# Why a hint was granted less than asked (None: granted in full).
ClipReason = Literal[
    "tenant_pin_seconds",  # retain_s above the tenant's longest pin
    "tenant_pin_tokens",  # the tenant's hinted tokens (pins, expected gaps) would pass its quota
    "tenant_fair_share",  # the tenant's hinted pages would pass its share of the device
    "device_pin_share",  # pins would hold more of the device than `max_pinned_fraction`
    "no_session",  # no session id, or (between turns) no idle session with cached pages here
    "no_cached_pages",  # the turn left no full page on the device to keep
    "tenant",  # parent_session belongs to another tenant (pages are never shared)
    "unknown_parent",  # parent_session has no record on this replica
]


@dataclass(frozen=True)
class SessionHints:
    """A harness's hints for one request (None / False: not given)."""

    retain_s: float | None = None
    expected_gap_s: float | None = None
    end_session: bool = False
    parent_session: str | None = None

    def __post_init__(self) -> None:
        for name in ("retain_s", "expected_gap_s"):
            v = getattr(self, name)
            if v is not None and not (0.0 <= v < math.inf):
                raise InvalidRequestError(f"{name} must be a finite number >= 0, got {v}")
        if self.parent_session is not None and not self.parent_session:
            raise InvalidRequestError("parent_session must not be empty")
        if self.end_session and self.retain_s:
            raise InvalidRequestError("end_session and retain_s > 0 contradict each other")


NO_HINTS = SessionHints()


@dataclass(frozen=True)
class HintGrant:
    """What the engine did with one hint: `granted` is `asked` unless clipped."""

    hint: str
    asked: float | bool | str
    granted: float | bool | str | None
    clipped_by: ClipReason | None = None


def refused(h: SessionHints, why: ClipReason) -> list[HintGrant]:
    """A grant of nothing, for `why`, for each turn-end hint `h` gives (`parent_session`
    is granted on arrival, not here)."""
    given = {"retain_s": h.retain_s, "expected_gap_s": h.expected_gap_s}
    given["end_session"] = h.end_session or None
    return [HintGrant(name, asked, None, why) for name, asked in given.items() if asked is not None]
