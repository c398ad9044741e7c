"""A store's in-memory side, under one lock: the index, the bytes reserved, the counters.

`ArrowSegmentStore` runs file I/O outside the lock and calls one `StoreLedger`
method per step, each atomic; no method here does I/O:

    put         touch (stored already?) -> reserve (victims) -> [write] -> stored | write_failed
    get         checkout (touch, or a miss) -> [read] -> hit | lost | read_error
    put_record  held (segments of its pages) -> [write] -> record_written (-> swept)
    get_record  [read] -> adopt (index its segments; victims)

Victims are unindexed here and returned: the store deletes their files.
Bytes reserved by writes in flight count against the budget, so two writers
never both take the last room.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

from cache_store.index import IndexEntry, SegmentIndex
from cache_store.records import PathRecord
from cache_store.stats import Counters

LostReason = Literal["missing", "corrupt"]  # the counter a failed get bumps


class StoreLedger:
    """The LRU index of segments within `budget_bytes`, reservations, counters; thread-safe."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._index = SegmentIndex()
        self._reserved = 0
        self._counters = Counters()
        self._warned = False

    # --- queries ------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._index.used_bytes

    def contains(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def keys(self) -> list[str]:
        with self._lock:
            return self._index.keys()

    def lookup(self, tenant: str, page_hash: int) -> str | None:
        with self._lock:
            return self._index.lookup(tenant, page_hash)

    def snapshot(self) -> dict[str, Any]:
        """The counters, `segments` and `used_bytes`, as `StoreStats` fields."""
        with self._lock:
            return {
                **asdict(self._counters),
                "segments": len(self._index),
                "used_bytes": self._index.used_bytes,
            }

    def held(self, pages: Sequence[tuple[str, int]]) -> tuple[IndexEntry, ...]:
        """The indexed segments holding `pages` (owner tenant, page hash), each once."""
        with self._lock:
            held = {}
            for owner, h in pages:
                key = self._index.lookup(owner, h)
                if key is not None and key not in held:
                    held[key] = self._index.get(key)
        return tuple(e for e in held.values() if e is not None)

    # --- segments -----------------------------------------------------------

    def opened(self, found: list[IndexEntry], corrupt: int) -> list[IndexEntry]:
        """What the opening scan found, indexed; the victims over the budget."""
        with self._lock:
            self._counters.corrupt = corrupt
            for entry in found:
                self._index.add(entry)
            return self._over_budget()

    def touch(self, key: str) -> bool:
        """Mark `key` used; False when it is not indexed."""
        with self._lock:
            if key in self._index:
                self._index.touch(key)
                return True
            return False

    def reserve(self, key: str, size: int) -> bool | list[IndexEntry]:
        """Room for `size` bytes: the evicted entries; True if `key` is stored, False if too big."""
        with self._lock:
            if key in self._index:
                self._index.touch(key)
                return True
            if size > self.budget_bytes:
                self._counters.rejected += 1
                return False
            victims = self._over_budget(size)
            self._reserved += size
            return victims

    def stored(self, entry: IndexEntry) -> None:
        """A reserved write of `entry` landed: index it (a later failure warns again)."""
        with self._lock:
            self._reserved -= entry.size
            self._index.add(entry)
            self._counters.puts += 1
            self._counters.bytes_written += entry.size
            self._warned = False

    def fit_volume(self) -> int | None:
        """The volume is full: the budget becomes the bytes stored, so the next write
        evicts to make room. The new budget, or None when that would not lower it (or
        nothing is stored to evict)."""
        with self._lock:
            used = self._index.used_bytes
            if not 0 < used < self.budget_bytes:
                return None
            self.budget_bytes = used
            return used

    def write_failed(self, size: int) -> None:
        """A reserved write of `size` bytes failed: its room goes back."""
        with self._lock:
            self._reserved -= size
            self._counters.write_errors += 1

    def checkout(self, key: str) -> IndexEntry | None:
        """The entry to read for `key`, marked used; None (a miss) when not indexed."""
        with self._lock:
            entry = self._index.get(key)
            if entry is None:
                self._counters.misses += 1
                return None
            self._index.touch(key)
            return entry

    def hit(self, entry: IndexEntry) -> None:
        with self._lock:
            self._counters.hits += 1
            self._counters.bytes_read += entry.size

    def read_error(self) -> None:
        """A segment read the store did not answer: a miss, the segment kept."""
        with self._lock:
            self._counters.misses += 1
            self._counters.read_errors += 1

    def lost(self, entry: IndexEntry, reason: LostReason) -> None:
        """`entry`'s file is gone or damaged: unindexed (unless rewritten since), a miss."""
        with self._lock:
            if self._index.get(entry.key) == entry:
                self._index.remove(entry.key)
            self._counters.misses += 1
            setattr(self._counters, reason, getattr(self._counters, reason) + 1)

    def remove(self, key: str) -> IndexEntry | None:
        with self._lock:
            return self._index.remove(key)

    # --- path records -------------------------------------------------------

    def record_written(self) -> int:
        """Count a record written; the records written so far."""
        with self._lock:
            self._counters.records_written += 1
            return self._counters.records_written

    def record_write_failed(self) -> None:
        with self._lock:
            self._counters.write_errors += 1

    def swept(self, records: int) -> None:
        with self._lock:
            self._counters.records_swept += records

    def record_read_error(self) -> None:
        with self._lock:
            self._counters.read_errors += 1

    def corrupt_record(self) -> None:
        with self._lock:
            self._counters.corrupt += 1

    def adopt(self, record: PathRecord) -> list[IndexEntry]:
        """Index the segments of `record` (written by any process); the victims over budget."""
        owners = set(record.owners)
        with self._lock:
            for entry in record.segments:
                fits = entry.size <= self.budget_bytes and entry.tenant in owners
                if fits and entry.key not in self._index:
                    self._index.add(entry)
            victims = self._over_budget()
            self._counters.records_read += 1
        return victims

    # --- warnings -----------------------------------------------------------

    def first_warning(self) -> bool:
        """True once after each stretch of successful writes: whether to warn loudly."""
        with self._lock:
            first, self._warned = not self._warned, True
        return first

    # --- internals (the lock held) ------------------------------------------

    def _over_budget(self, extra: int = 0) -> list[IndexEntry]:
        """Unindex least recently used segments until the rest and `extra` bytes fit (the
        caller deletes the files); fewer when the rest is reserved by writes in flight."""
        victims = []
        while self._index.used_bytes + self._reserved + extra > self.budget_bytes:
            victim = self._index.pop_lru()
            if victim is None:
                break
            victims.append(victim)
        self._counters.evictions += len(victims)
        return victims
