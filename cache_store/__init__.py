"""Arrow store of spilled KV segments; imports nothing else of Penelope.

Modules:
    segment  `Segment` (pages + KV bytes + dtype name + shape) and its content key
    codec    Segment <-> one-row Arrow IPC file, with format, key and checksum checks
    files    file layout, atomic writes and memory-mapped reads over `pyarrow.fs`
    index    LRU order of segments and the (tenant, page hash) -> key index
    store    `ArrowSegmentStore`: budget, eviction, quarantine, restart, counters
"""

from cache_store.segment import DTYPE_SIZES, Segment, SegmentError, segment_key
from cache_store.store import ArrowSegmentStore, StoreStats

__all__ = [
    "DTYPE_SIZES",
    "ArrowSegmentStore",
    "Segment",
    "SegmentError",
    "StoreStats",
    "segment_key",
]
