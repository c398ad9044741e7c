"""Immutable match results and the counters of `PenelopeRadixCache` (no SGLang import).

Layout of a key that runs through a hole (positions in tokens):

    | prefix: device, in the tree | hole: recompute | suffix: cached, shelved | new |
    0                        prefix_len        holes[-1][1]            suffix[1]

With a host tier the suffix starts with a host span (`host`, to copy back),
and the hole may be empty (everything evicted is still on the host).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from penelope_sglang.shelf import ShelfHit, ShelvedSuffix


@dataclass(frozen=True)
class PenelopeMatch:
    """What the cache holds for a key: prefix, holes to recompute, cached suffix.

    ``[0, prefix_len)`` is device-resident in SGLang's tree; each hole
    ``[start, end)`` must be recomputed at its positions; ``suffix`` is the
    cached span after the last hole (None when nothing is cached past a hole).
    """

    prefix_len: int
    holes: tuple[tuple[int, int], ...] = ()
    suffix: tuple[int, int] | None = None
    record: ShelvedSuffix | None = field(default=None, compare=False, repr=False)
    host: tuple[int, int] | None = None  # the suffix's leading span held on the host

    @classmethod
    def behind(cls, prefix_len: int, hit: ShelfHit | None) -> PenelopeMatch:
        """The device prefix `[0, prefix_len)`, then what a shelf hit adds behind it: the
        hole (what of it the prefix does not cover) and the cached suffix, its host span
        first. Only the prefix when the hit adds nothing past it."""
        if hit is None or prefix_len >= hit.suffix_end:
            return cls(prefix_len)
        record = hit.record
        hole_start = min(prefix_len, hit.hole_end)
        holes = ((hole_start, hit.hole_end),) if hole_start < hit.hole_end else ()
        host_end = min(record.host_end, hit.suffix_end)
        host = (hit.hole_end, host_end) if host_end > hit.hole_end else None
        return cls(
            prefix_len,
            holes=holes,
            suffix=(hit.hole_end, hit.suffix_end),
            record=record,
            host=host,
        )

    @property
    def host_len(self) -> int:
        return 0 if self.host is None else self.host[1] - self.host[0]

    @property
    def hole_len(self) -> int:
        return sum(end - start for start, end in self.holes)

    @property
    def suffix_len(self) -> int:
        return 0 if self.suffix is None else self.suffix[1] - self.suffix[0]

    @property
    def cached_len(self) -> int:
        return self.prefix_len + self.suffix_len


@dataclass
class PenelopeCounters:
    """Cumulative token counts of what the Penelope policy did (for metrics)."""

    shelved_tokens: int = 0  # private tokens moved from the tree to the shelf
    hole_tokens: int = 0  # shelved tokens dropped from the front (holes formed), any tier
    reconnected_tokens: int = 0  # suffix tokens put back into the tree
    duplicate_tokens: int = 0  # suffix tokens freed because the tree already had them
    host_tokens: int = 0  # device tokens of a history's front copied to the host span
    host_loaded_tokens: int = 0  # host-span tokens copied back to the device


def key_tokens(key: Any) -> array:
    """The token ids of a SGLang `RadixKey` (up to its limit)."""
    return array("q", key.token_ids[: len(key)])


def key_namespace(key: Any) -> tuple[str | None, str | None]:
    """What namespaces a key in the tree: (extra_key, cache_salt)."""
    return (key.extra_key, key.cache_salt)
