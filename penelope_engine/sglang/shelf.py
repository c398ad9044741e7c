"""The suffix shelf: private histories whose front was evicted, kept off SGLang's tree.

SGLang's tree only holds nodes whose ancestors hold their KV too (load-back and
matching rely on it), so a hole cannot live inside it. When Penelope evicts the
front of a session's private history, the whole private chain leaves the tree
and its remaining pages go onto this shelf, still allocated on the device:

    path:  | prefix (in the tree) | hole (freed) | suffix (shelved slots) |
           0                hole_start     hole_end                 len(path)

A returning request whose tokens run through the hole and into the suffix finds
the suffix here; once the hole is recomputed and inserted, the suffix goes back
into the tree under it (see `radix_cache.PenelopeRadixCache`). Eviction keeps
taking the lowest positions first, so the hole grows and the suffix shrinks.

This module imports nothing of SGLang: slots are plain int64 tensors.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import torch

from penelope_engine.util import cdiv


@dataclass
class ShelvedSuffix:
    """One session's shelved private history (mutable: the hole grows)."""

    namespace: tuple[str | None, str | None]  # (extra_key, cache_salt) of the radix key
    path: array  # token ids from position 0 to the end of the suffix
    hole_start: int
    hole_end: int
    indices: torch.Tensor  # device slots of path[hole_end:]
    last_access: float
    anchor: int | None = None  # tree node id the prefix ends at (None: the root)
    pins: int = 0  # refills in flight that will reconnect this suffix

    @property
    def suffix_len(self) -> int:
        return len(self.path) - self.hole_end

    @property
    def hole_len(self) -> int:
        return self.hole_end - self.hole_start


@dataclass(frozen=True)
class ShelfHit:
    """What a key reuses of one shelved suffix: the hole, then `suffix_len` cached tokens."""

    record: ShelvedSuffix
    hole_start: int
    hole_end: int
    suffix_len: int

    @property
    def suffix_end(self) -> int:
        return self.hole_end + self.suffix_len


def _common_pages(a: array, b: array, start: int, end: int, page_size: int) -> int:
    """Tokens of the whole pages that a and b share from `start` (below `end`)."""
    end = start + (end - start) // page_size * page_size
    if a[start:end] == b[start:end]:
        return end - start
    pos = start
    while pos < end and a[pos : pos + page_size] == b[pos : pos + page_size]:
        pos += page_size
    return pos - start


class SuffixShelf:
    """The shelved suffixes of one cache, with their slot accounting."""

    def __init__(self, page_size: int) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.page_size = page_size
        self._records: list[ShelvedSuffix] = []

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> tuple[ShelvedSuffix, ...]:
        return tuple(self._records)

    def add(self, record: ShelvedSuffix) -> None:
        """Shelve a record whose hole is already page-aligned and non-empty."""
        self._check_record(record)
        self._records.append(record)

    def remove(self, record: ShelvedSuffix) -> None:
        self._records.remove(record)

    def find(self, namespace: tuple[str | None, str | None], tokens: array) -> ShelfHit | None:
        """The shelved suffix that `tokens` reuses most (read-only).

        `tokens` must equal the record's path up to the end of the hole (the
        request continues that history) and share at least one page of suffix.
        """
        best: ShelfHit | None = None
        for record in self._records:
            hit = self._hit(record, namespace, tokens)
            if hit is not None and (best is None or hit.suffix_len > best.suffix_len):
                best = hit
        return best

    def covered_by(
        self, namespace: tuple[str | None, str | None], tokens: array
    ) -> list[ShelvedSuffix]:
        """Records whose path up to the end of the hole is a prefix of `tokens`."""
        return [
            r
            for r in self._records
            if r.namespace == namespace
            and len(tokens) >= r.hole_end
            and tokens[: r.hole_end] == r.path[: r.hole_end]
        ]

    def drop_front(self, record: ShelvedSuffix, num_tokens: int) -> torch.Tensor:
        """Grow the hole by whole pages covering `num_tokens`; return the freed slots.

        A record left with no suffix leaves the shelf.
        """
        pages = cdiv(num_tokens, self.page_size)
        take = min(pages * self.page_size, record.suffix_len)
        freed, record.indices = record.indices[:take], record.indices[take:]
        record.hole_end += take
        if record.suffix_len == 0:
            self._records.remove(record)
        return freed

    def evictable_tokens(self) -> int:
        return sum(r.suffix_len for r in self._records if r.pins == 0)

    def anchors(self) -> frozenset[int]:
        return frozenset(r.anchor for r in self._records if r.anchor is not None)

    def pinned_tokens(self) -> int:
        return sum(r.suffix_len for r in self._records if r.pins > 0)

    def all_indices(self) -> torch.Tensor:
        if not self._records:
            return torch.empty(0, dtype=torch.int64)
        return torch.cat([r.indices.to(torch.int64).cpu() for r in self._records])

    def check(self) -> None:
        """Integrity: every record is page-aligned, holed, and holds one slot per token."""
        for record in self._records:
            self._check_record(record)
        slots = self.all_indices()
        assert len(torch.unique(slots)) == len(slots), "a slot is shelved twice"

    def _hit(
        self, record: ShelvedSuffix, namespace: tuple[str | None, str | None], tokens: array
    ) -> ShelfHit | None:
        if record.namespace != namespace or len(tokens) < record.hole_end + self.page_size:
            return None
        if tokens[: record.hole_end] != record.path[: record.hole_end]:
            return None
        end = min(len(tokens), len(record.path))
        reuse = _common_pages(tokens, record.path, record.hole_end, end, self.page_size)
        if reuse == 0:
            return None
        return ShelfHit(record, record.hole_start, record.hole_end, reuse)

    def _check_record(self, record: ShelvedSuffix) -> None:
        ps = self.page_size
        assert 0 <= record.hole_start < record.hole_end < len(record.path), (
            f"bad hole [{record.hole_start}, {record.hole_end}) in a path of {len(record.path)}"
        )
        assert record.hole_start % ps == 0 and record.hole_end % ps == 0, "hole not page-aligned"
        assert len(record.indices) == record.suffix_len, (
            f"{len(record.indices)} slots for a suffix of {record.suffix_len} tokens"
        )
        assert record.pins >= 0, "negative pin count"
