"""The in-memory index of a store: segments in LRU order and which segment holds a page.

Not thread-safe on its own; `ledger.StoreLedger` calls it under the store's lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class IndexEntry:
    key: str
    tenant: str
    page_hashes: tuple[int, ...]
    size: int  # bytes on disk


class SegmentIndex:
    """Segments by key, least recently used first, plus (tenant, page hash) -> keys."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, IndexEntry] = OrderedDict()
        self._pages: dict[tuple[str, int], dict[str, None]] = {}
        self.used_bytes = 0

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        return list(self._entries)

    def get(self, key: str) -> IndexEntry | None:
        return self._entries.get(key)

    def touch(self, key: str) -> None:
        """Mark `key` as just used (mutates the LRU order)."""
        self._entries.move_to_end(key)

    def add(self, entry: IndexEntry) -> None:
        """Insert or refresh `entry` as the most recently used."""
        self.remove(entry.key)
        self._entries[entry.key] = entry
        self.used_bytes += entry.size
        for h in entry.page_hashes:
            self._pages.setdefault((entry.tenant, h), {})[entry.key] = None

    def remove(self, key: str) -> IndexEntry | None:
        """Drop `key`; returns its entry, or None when it was not indexed."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self.used_bytes -= entry.size
        for h in entry.page_hashes:
            holders = self._pages.get((entry.tenant, h))
            if holders is not None:
                holders.pop(key, None)
                if not holders:
                    del self._pages[(entry.tenant, h)]
        return entry

    def lookup(self, tenant: str, page_hash: int) -> str | None:
        """Key of the most recently added segment holding the page, or None."""
        holders = self._pages.get((tenant, page_hash))
        return next(reversed(holders)) if holders else None

    def pop_lru(self) -> IndexEntry | None:
        """Remove and return the least recently used entry, or None when empty."""
        if not self._entries:
            return None
        return self.remove(next(iter(self._entries)))
