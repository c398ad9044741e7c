"""Arrow store of spilled KV segments; imports nothing else of Penelope.

Modules:
    segment  `Segment` (pages + KV bytes + dtype name + shape) and its content key
    codec    Segment <-> one-row Arrow IPC file, with format, key and checksum checks
    files    file layout, atomic writes and memory-mapped reads over `pyarrow.fs`
    index    LRU order of segments and the (tenant, page hash) -> key index
    ledger   the index, reservations and counters under the store's one lock (no I/O)
    location `StoreLocation`: a path or URI, plus an S3 endpoint and region
    health   timeouts, retries with backoff and jitter, the degraded state and its probe
    records  path records: a session's pages and their segments, for any replica
    stats    the store's counters and `StoreStats`
    scan     what a store finds when it opens
    store    `ArrowSegmentStore`: budget, eviction, quarantine, restart, records
"""

from cache_store.location import StoreLocation
from cache_store.records import PathRecord
from cache_store.segment import DTYPE_SIZES, Segment, SegmentError, segment_key
from cache_store.stats import StoreStats
from cache_store.store import ArrowSegmentStore

__all__ = [
    "DTYPE_SIZES",
    "ArrowSegmentStore",
    "PathRecord",
    "Segment",
    "SegmentError",
    "StoreLocation",
    "StoreStats",
    "segment_key",
]
