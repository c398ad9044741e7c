"""A store's counters and the snapshot `ArrowSegmentStore.stats()` returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    puts: int = 0  # segments written
    hits: int = 0
    misses: int = 0  # every failed get, whatever the reason
    corrupt: int = 0  # files quarantined (on read or at start)
    missing: int = 0  # indexed files that had disappeared
    read_errors: int = 0  # I/O errors of a remote filesystem (file kept)
    evictions: int = 0
    write_errors: int = 0
    rejected: int = 0  # segments larger than the whole budget
    bytes_written: int = 0
    bytes_read: int = 0
    records_written: int = 0  # path records (`cache_store.records`)
    records_read: int = 0
    records_swept: int = 0  # records past the store's record TTL, deleted


@dataclass(frozen=True)
class StoreStats:
    """A snapshot of a store's counters (see `_Counters`) and occupancy."""

    puts: int
    hits: int
    misses: int
    corrupt: int
    missing: int
    read_errors: int
    evictions: int
    write_errors: int
    rejected: int
    bytes_written: int
    bytes_read: int
    records_written: int
    records_read: int
    records_swept: int
    segments: int
    used_bytes: int
    budget_bytes: int
    # `cache_store.health`: whether the store is degraded now, for how long, how often
    # it was, retried attempts, and calls not attempted while degraded
    degraded: bool = False
    degraded_s: float = 0.0
    degraded_episodes: int = 0
    retries: int = 0
    skipped: int = 0
