"""Stable hashing for routing decisions that several routers must share.

Python's built-in ``hash`` of a string is salted per process, so two router
instances (one per calling process) would disagree. Everything here hashes
with BLAKE2b instead, which gives the same 64-bit value in every process.

Rendezvous (highest random weight) hashing: each replica gets the weight
``h(key, replica_id)`` and the key goes to the replica with the highest weight.
Removing a replica moves only the keys that lived on it; adding one moves only
the keys it now wins, about ``1/n`` of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_SEP = b"\x1f"


def stable_hash64(*parts: str) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process."""
    data = _SEP.join(p.encode() for p in parts)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def rendezvous_order(key: str, replica_ids: Iterable[str], salt: str = "") -> list[str]:
    """``replica_ids`` sorted by their rendezvous weight for ``key``, highest first.

    Ties (astronomically rare) break by replica id so the order is total.
    A different ``salt`` gives an independent order for the same key.
    """
    return sorted(
        replica_ids,
        key=lambda rid: (stable_hash64(salt, key, rid), rid),
        reverse=True,
    )


def rendezvous_pick(key: str, replica_ids: Iterable[str], salt: str = "") -> str | None:
    """The replica with the highest rendezvous weight for ``key``; None if there is none."""
    best: tuple[int, str] | None = None
    for rid in replica_ids:
        weight = (stable_hash64(salt, key, rid), rid)
        if best is None or weight > best:
            best = weight
    return best[1] if best is not None else None
