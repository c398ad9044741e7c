"""The data the routing policies exchange: options, replica views, requests, decisions.

``RouterConfig`` holds the knobs every policy reads; ``ReplicaView`` and
``RouteRequest`` are a policy's inputs; ``RouteDecision`` (ranked candidate
groups) its output; ``pick_replica`` turns a decision into one replica the way
Ray Serve's request router does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from penelope_engine.util import require
from router.digest import EMPTY_DIGEST, ReplicaDigest


@dataclass(frozen=True)
class RouterConfig:
    """Knobs of the routing policies; validated at construction."""

    overload_ratio: float = 0.75  # home overloaded at queue_len >= ratio * max_ongoing
    device_weight: float = 1.0  # value of one retained token, per tier
    host_weight: float = 0.5
    store_weight: float = 0.25
    min_holder_tokens: int = 1  # retained tokens that make a replica a session's holder
    prefix_affinity: bool = True
    min_prefix_pages: int = 1  # leading pages a replica must cache to attract a new session
    active_window_s: float = 300.0  # a session used this recently counts toward a replica's load
    balance_slack: float = 0.1  # new sessions go to the lighter choice if lighter by this share
    assignment_ttl_s: float = 300.0  # how long an unreported assignment sticks
    max_assignments: int = 100_000
    seed: int | None = None  # random draws (sessionless requests, pow2)

    def __post_init__(self) -> None:
        require(
            0.0 < self.overload_ratio <= 1.0,
            f"overload_ratio must be in (0, 1], got {self.overload_ratio}",
        )
        require(
            self.device_weight >= self.host_weight >= self.store_weight >= 0.0
            and self.device_weight > 0.0,
            "tier weights must satisfy device > 0 and device >= host >= store >= 0, got "
            f"{self.device_weight}, {self.host_weight}, {self.store_weight}",
        )
        require(
            self.min_holder_tokens >= 1,
            f"min_holder_tokens must be >= 1, got {self.min_holder_tokens}",
        )
        require(
            self.min_prefix_pages >= 1,
            f"min_prefix_pages must be >= 1, got {self.min_prefix_pages}",
        )
        require(
            self.active_window_s > 0, f"active_window_s must be > 0, got {self.active_window_s}"
        )
        require(
            0.0 <= self.balance_slack < 1.0,
            f"balance_slack must be in [0, 1), got {self.balance_slack}",
        )
        require(
            self.assignment_ttl_s > 0, f"assignment_ttl_s must be > 0, got {self.assignment_ttl_s}"
        )
        require(
            self.max_assignments >= 1, f"max_assignments must be >= 1, got {self.max_assignments}"
        )

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> RouterConfig:
        """Build from a plain mapping (Ray's ``request_router_kwargs``), naming bad keys."""
        valid = sorted(f.name for f in fields(cls))
        unknown = sorted(set(kwargs) - set(valid))
        require(not unknown, f"unknown router option(s) {unknown}; valid: {', '.join(valid)}")
        return cls(**kwargs)


ROUTE_PREFIX_PAGES = 8  # leading page ids a request shows the router (`prefix_hashes`)


@dataclass(frozen=True)
class ReplicaView:
    """What the router knows of one replica when it routes: its queue and its digest.

    (The peers' KV-event routers read more: `bench.peers.base.PeerView`.)
    """

    replica_id: str
    queue_len: int
    max_ongoing: int
    digest: ReplicaDigest = EMPTY_DIGEST

    @property
    def full(self) -> bool:
        return self.queue_len >= self.max_ongoing


@dataclass(frozen=True)
class RouteRequest:
    """The routing-relevant part of a request."""

    session_id: str | None = None  # None: the request is its own session
    prefix_hashes: tuple[int, ...] = ()  # hashes of its first full pages, in order
    tenant: str = "default"
    request_id: str = ""


@dataclass(frozen=True)
class RouteDecision:
    """Ranked candidate groups, most preferred first, and why."""

    ranks: tuple[tuple[str, ...], ...]
    reason: str  # "assigned" | "holder" | "balance" | "prefix" | "hash" | "pow2" | "no_replicas"
    overloaded: bool = False  # the preferred home was over the threshold
    rehomed_from: str | None = None  # the vanished replica this session lived on
    home: str | None = None  # the session's home (ranked first unless overloaded)


class Choice(NamedTuple):
    replica_id: str
    decision: RouteDecision


NO_REPLICAS = RouteDecision((), "no_replicas")


def pick_replica(ranks: Sequence[Sequence[str]], views: Mapping[str, ReplicaView]) -> str:
    """The least loaded non-full replica of the first rank that has one.

    If every ranked replica is full, the least loaded non-full replica anywhere
    (Ray keeps retrying until one accepts); if all are full, the least loaded.
    """
    for rank in (*ranks, tuple(views)):
        open_ = [views[rid] for rid in rank if rid in views and not views[rid].full]
        if open_:
            return min(open_, key=lambda v: v.queue_len).replica_id
    if not views:
        raise ValueError("cannot pick a replica: there are none")
    return min(views.values(), key=lambda v: v.queue_len).replica_id
