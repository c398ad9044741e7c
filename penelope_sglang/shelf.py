"""The suffix shelf: private histories whose front was evicted, kept off SGLang's tree.

SGLang's tree only holds nodes whose ancestors hold their KV too (load-back and
matching rely on it), so a hole cannot live inside it. When Penelope evicts the
front of a session's private history, the whole private chain leaves the tree
and its remaining pages go onto this shelf. With SGLang's host tier (HiCache)
attached, the front pages are first copied to host slots (the *host span*) and
only dropped once the host has no room:

    path:  | prefix (in the tree) | hole (freed) | host span | device suffix |
           0                hole_start     hole_end     host_end        len(path)

Without a host tier the host span is empty (host_end == hole_end); with one,
the hole may be empty (every evicted page still on the host).

A returning request whose tokens run through the hole and into the suffix finds
the suffix here; once the hole is recomputed and inserted, the suffix goes back
into the tree under it (see `radix_cache.PenelopeRadixCache`); a host span is
copied back to device slots first. Eviction keeps taking the lowest positions
first: device pages move to the host span (or are dropped), host pages are
dropped from the span's front, so the hole grows and the suffix shrinks.

This module imports nothing of SGLang: slots are plain int64 tensors.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import torch

from penelope_engine.util import cdiv


@dataclass
class ShelvedSuffix:
    """One session's shelved private history (mutable: the hole grows)."""

    namespace: tuple[str | None, str | None]  # (extra_key, cache_salt) of the radix key
    path: array  # token ids from position 0 to the end of the suffix
    hole_start: int
    hole_end: int
    indices: torch.Tensor  # device slots of path[host_end:]
    last_access: float
    anchor: int | None = None  # tree node id the prefix ends at (None: the root)
    pins: int = 0  # refills in flight that will reconnect this suffix
    host_end: int = -1  # end of the host span path[hole_end:host_end]; -1: hole_end
    host_indices: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    session: str | None = None  # the session id the adapter passed for this history

    def __post_init__(self) -> None:
        if self.host_end < 0:
            self.host_end = self.hole_end

    @property
    def suffix_len(self) -> int:
        """Cached tokens past the hole: the host span and the device suffix."""
        return len(self.path) - self.hole_end

    @property
    def host_len(self) -> int:
        return self.host_end - self.hole_end

    @property
    def device_len(self) -> int:
        return len(self.path) - self.host_end

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

    def holds(self, record: ShelvedSuffix) -> bool:
        return any(r is record for r in self._records)

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

    def take_device_front(self, record: ShelvedSuffix, num_tokens: int) -> torch.Tensor:
        """Remove whole device pages covering `num_tokens` from the device suffix's front.

        Returns their slots; the caller moves them to the host span (`extend_host`)
        or drops them (`drop_through`). The record's layout is updated by those.
        """
        pages = cdiv(num_tokens, self.page_size)
        take = min(pages * self.page_size, record.device_len)
        return record.indices[:take]

    def extend_host(self, record: ShelvedSuffix, host_slots: torch.Tensor) -> None:
        """The device suffix's first `len(host_slots)` tokens now live on the host."""
        n = len(host_slots)
        record.indices = record.indices[n:]
        record.host_indices = torch.cat([record.host_indices, host_slots.to(torch.int64).cpu()])
        record.host_end += n
        self._drop_if_empty(record)

    def drop_through(self, record: ShelvedSuffix, num_device: int) -> torch.Tensor:
        """Drop the host span and the first `num_device` device tokens: the hole grows
        over both (one hole per record). Returns the host slots to free."""
        host = record.host_indices
        record.indices = record.indices[num_device:]
        record.host_indices = torch.empty(0, dtype=torch.int64)
        record.host_end += num_device
        record.hole_end = record.host_end
        self._drop_if_empty(record)
        return host

    def drop_host_front(self, record: ShelvedSuffix, num_tokens: int) -> torch.Tensor:
        """Grow the hole by whole host pages covering `num_tokens`; return the host slots."""
        pages = cdiv(num_tokens, self.page_size)
        take = min(pages * self.page_size, record.host_len)
        freed, record.host_indices = record.host_indices[:take], record.host_indices[take:]
        record.hole_end += take
        self._drop_if_empty(record)
        return freed

    def drop_front(self, record: ShelvedSuffix, num_tokens: int) -> torch.Tensor:
        """Without a host span: grow the hole by whole device pages; return the freed slots."""
        assert record.host_len == 0, "drop_front on a record with a host span"
        freed = self.take_device_front(record, num_tokens)
        self.drop_through(record, len(freed))
        return freed

    def _drop_if_empty(self, record: ShelvedSuffix) -> None:
        if record.suffix_len == 0 and record in self._records:
            self._records.remove(record)

    def host_records(self) -> tuple[ShelvedSuffix, ...]:
        return tuple(r for r in self._records if r.host_len > 0)

    def host_tokens(self) -> int:
        return sum(r.host_len for r in self._records)

    def all_host_indices(self) -> torch.Tensor:
        parts = [r.host_indices for r in self._records if r.host_len]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)

    def evictable_tokens(self) -> int:
        """Device tokens on the shelf that eviction may take (unpinned records)."""
        return sum(r.device_len for r in self._records if r.pins == 0)

    def anchors(self) -> frozenset[int]:
        return frozenset(r.anchor for r in self._records if r.anchor is not None)

    def pinned_tokens(self) -> int:
        return sum(r.device_len for r in self._records if r.pins > 0)

    def all_indices(self) -> torch.Tensor:
        """The device slots the shelf holds."""
        if not self._records:
            return torch.empty(0, dtype=torch.int64)
        return torch.cat([r.indices.to(torch.int64).cpu() for r in self._records])

    def check(self) -> None:
        """Integrity: every record is page-aligned, holed, and holds one slot per token."""
        for record in self._records:
            self._check_record(record)
        slots = self.all_indices()
        assert len(torch.unique(slots)) == len(slots), "a slot is shelved twice"
        host = self.all_host_indices()
        assert len(torch.unique(host)) == len(host), "a host slot is shelved twice"

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
        assert 0 <= record.hole_start <= record.hole_end <= record.host_end, (
            f"bad hole [{record.hole_start}, {record.hole_end}) / host end {record.host_end}"
        )
        assert record.hole_end < len(record.path), "a shelved record with nothing cached"
        assert record.hole_len > 0 or record.host_len > 0, "a record with neither hole nor host"
        aligned = (record.hole_start, record.hole_end, record.host_end)
        assert all(x % ps == 0 for x in aligned), "hole or host span not page-aligned"
        assert len(record.indices) == record.device_len, (
            f"{len(record.indices)} slots for a device suffix of {record.device_len} tokens"
        )
        assert len(record.host_indices) == record.host_len, (
            f"{len(record.host_indices)} host slots for a host span of {record.host_len}"
        )
        assert record.pins >= 0, "negative pin count"
