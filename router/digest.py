"""The compact digest an engine replica publishes for the router.

A replica returns it from ``record_routing_stats``; Ray Serve pulls it every
``request_routing_stats_period_s`` and hands it to every router as
``RunningReplica.routing_stats``. It must therefore be plain data (msgpack- and
JSON-friendly) and small. The wire format, version 1::

    {
      "v": 1,
      "ts": 81234.5,                   # when the replica built it, in the clock of
                                       # last_access (the engine's monotonic clock):
                                       # only differences within one digest mean anything
      "queue_len": 3,                  # optional: ongoing requests at that time
      "sessions": {                    # the `limit` most recently used sessions
        "<session id>": [device_tokens, host_tokens, store_tokens, last_access],
      },
      "prefix_hashes": [123, ...],     # uint64 page hashes of cached shared prefixes
    }

An empty dict (what Ray reports before the first call returns) decodes to an
empty digest. Anything else that does not match raises ``DigestError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from penelope_engine.errors import PenelopeError
from penelope_engine.protocol import DIGEST_LIMITS

if TYPE_CHECKING:
    from penelope_engine.protocol import SessionDigest

DIGEST_VERSION = 1
_U64_LIMIT = 1 << 64


class DigestError(PenelopeError, ValueError):
    """A routing-stats payload is not a valid digest."""


@dataclass(frozen=True)
class SessionHolding:
    """What one replica retains of one session, in tokens per tier."""

    device_tokens: int
    host_tokens: int
    store_tokens: int
    last_access: float

    @property
    def total_tokens(self) -> int:
        return self.device_tokens + self.host_tokens + self.store_tokens


@dataclass(frozen=True)
class ReplicaDigest:
    """Decoded digest of one replica."""

    sessions: Mapping[str, SessionHolding] = field(default_factory=dict)
    prefix_hashes: frozenset[int] = frozenset()
    ts: float = 0.0
    queue_len: int | None = None


EMPTY_DIGEST = ReplicaDigest()


def build_digest(
    digests: Iterable[SessionDigest],
    prefix_hashes: Iterable[int] = (),
    limit: int = DIGEST_LIMITS.sessions,
    *,
    prefix_limit: int = DIGEST_LIMITS.prefix_pages,
    queue_len: int | None = None,
    now: float,
) -> dict[str, Any]:
    """The wire digest of a replica, from the engine's ``SessionDigest`` objects.

    ``now`` is in the clock of their ``last_access`` (the engine's ``clock()``):
    the router compares the two to tell active sessions from idle ones.

    Keeps the ``limit`` most recently used sessions that retain any tokens, and
    the first ``prefix_limit`` prefix hashes in the order given.
    """
    if limit < 0 or prefix_limit < 0:
        raise DigestError(f"limits must be >= 0, got limit={limit}, prefix_limit={prefix_limit}")
    held = [d for d in digests if d.device_tokens + d.host_tokens + d.store_tokens > 0]
    held.sort(key=lambda d: d.last_access, reverse=True)
    sessions = {
        d.session_id: SessionHolding(d.device_tokens, d.host_tokens, d.store_tokens, d.last_access)
        for d in held[:limit]
    }
    hashes: list[int] = []
    for h in prefix_hashes:
        if len(hashes) >= prefix_limit:
            break
        hashes.append(int(h))
    digest = ReplicaDigest(
        sessions=sessions,
        prefix_hashes=frozenset(hashes),
        ts=now,
        queue_len=queue_len,
    )
    return encode_digest(digest)


def encode_digest(digest: ReplicaDigest) -> dict[str, Any]:
    """The plain-data wire form of ``digest``."""
    out: dict[str, Any] = {
        "v": DIGEST_VERSION,
        "ts": float(digest.ts),
        "sessions": {
            sid: [h.device_tokens, h.host_tokens, h.store_tokens, float(h.last_access)]
            for sid, h in digest.sessions.items()
        },
        "prefix_hashes": sorted(_check_hash(h) for h in digest.prefix_hashes),
    }
    if digest.queue_len is not None:
        out["queue_len"] = int(digest.queue_len)
    return out


def decode_digest(payload: Mapping[str, Any] | None) -> ReplicaDigest:
    """Parse a wire digest. ``{}`` and ``None`` (no report yet) give an empty digest."""
    if not payload:
        return EMPTY_DIGEST
    if not isinstance(payload, Mapping):
        raise DigestError(f"digest must be a mapping, got {type(payload).__name__}")
    version = payload.get("v")
    if version != DIGEST_VERSION:
        raise DigestError(f"unsupported digest version {version!r} (expected {DIGEST_VERSION})")
    queue_len = payload.get("queue_len")
    if queue_len is not None and (not isinstance(queue_len, int) or queue_len < 0):
        raise DigestError(f"queue_len must be a non-negative int, got {queue_len!r}")
    return ReplicaDigest(
        sessions=_decode_sessions(payload.get("sessions", {})),
        prefix_hashes=frozenset(_check_hash(h) for h in payload.get("prefix_hashes", ())),
        ts=_as_float(payload.get("ts", 0.0), "ts"),
        queue_len=queue_len,
    )


def _decode_sessions(raw: Any) -> dict[str, SessionHolding]:
    if not isinstance(raw, Mapping):
        raise DigestError(f"'sessions' must be a mapping, got {type(raw).__name__}")
    sessions: dict[str, SessionHolding] = {}
    for sid, row in raw.items():
        if not isinstance(sid, str) or not isinstance(row, (list, tuple)) or len(row) != 4:
            raise DigestError(f"session entry {sid!r}: expected [device, host, store, last_access]")
        device, host, store, last = row
        counts = (device, host, store)
        if not all(isinstance(c, int) and c >= 0 for c in counts):
            raise DigestError(f"session {sid!r}: token counts must be ints >= 0, got {counts}")
        sessions[sid] = SessionHolding(device, host, store, _as_float(last, "last_access"))
    return sessions


def _check_hash(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64_LIMIT:
        raise DigestError(f"prefix hash must be a uint64 int, got {value!r}")
    return value


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DigestError(f"{name} must be a number, got {value!r}")
    return float(value)
