"""`ArrowSegmentStore`: a byte-budgeted, content-addressed, restart-safe store of KV segments.

Reads never fail loudly: a segment that is missing, truncated, altered or
foreign is a miss (the caller recomputes), is counted, and its file is moved to
`quarantine/`. Writes never fail loudly either: an unwritable or full store
makes `put` return False, counts it and logs one warning.

Thread safety: one lock guards the index, the reservation and the counters;
file I/O runs outside it. Several processes may share a directory: files
appear atomically under content-addressed names, so two writers of the same
segment write the same bytes, and a reader holding a memory map keeps its data
when another process replaces or deletes the file. Each process keeps its own
index and budget; a file another process evicted reads as a miss.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import Literal

import pyarrow as pa
import pyarrow.fs as pafs

from cache_store import codec, records
from cache_store.files import SegmentFiles
from cache_store.health import StoreDegraded, StoreHealth, StoreTuning
from cache_store.index import IndexEntry, SegmentIndex
from cache_store.location import StoreLocation
from cache_store.records import PathRecord
from cache_store.scan import CORRUPT, scan
from cache_store.segment import Segment
from cache_store.stats import Counters, StoreStats

logger = logging.getLogger(__name__)

LostReason = Literal["missing", "corrupt"]  # the counter a failed get bumps
RECORD_TTL_S = 24 * 3600.0  # a path record not rewritten for this long is deleted
RECORD_SWEEP_EVERY = 256  # record writes between two sweeps of the records directory


class ArrowSegmentStore:
    """KV segments as Arrow IPC files under `where` (a local path, a `pyarrow.fs` URI, or a
    `StoreLocation` with an S3 endpoint and region).

    `filesystem`, when given, is used as is and `where` is a path inside it (tests).
    """

    def __init__(
        self,
        where: str | StoreLocation,
        budget_bytes: int,
        namespace: str,
        filesystem: pafs.FileSystem | None = None,
        record_ttl_s: float = RECORD_TTL_S,
        tuning: StoreTuning | None = None,
    ) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
        if record_ttl_s <= 0:
            raise ValueError(f"record_ttl_s must be positive, got {record_ttl_s}")
        self.namespace, self.record_ttl_s = namespace, record_ttl_s
        if not namespace:
            raise ValueError("namespace must be a non-empty model fingerprint")
        self.budget_bytes = budget_bytes
        self.tuning = tuning or StoreTuning()
        self._files = SegmentFiles(where, namespace, filesystem, self.tuning)
        retries = 0 if self._files.fs.type_name == "s3" else None  # the S3 SDK retries
        self.reads = StoreHealth(self.tuning, self._files.dir, retries, "reads")
        self.writes = StoreHealth(self.tuning, self._files.dir, retries, "writes")
        self._lock = threading.Lock()
        self._index = SegmentIndex()
        self._reserved = 0
        self._counters = Counters()
        self._warned = False
        try:
            self.writes.call(self._files.ensure_dirs, "opening the store")
            found, self._counters.corrupt = scan(self._files, namespace)
            for entry in found:
                self._index.add(entry)
            for victim in self._over_budget():
                self._files.delete(victim.key)
        except OSError as e:
            self._warn(e)

    # --- queries (no I/O) ---------------------------------------------------

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._index.used_bytes

    def contains(self, key: str) -> bool:
        with self._lock:
            return key in self._index

    def keys(self) -> list[str]:
        """Keys of the indexed segments, least recently used first."""
        with self._lock:
            return self._index.keys()

    def lookup(self, tenant: str, page_hash: int) -> str | None:
        """Key of a stored segment holding the page `page_hash` of `tenant`, or None."""
        with self._lock:
            return self._index.lookup(tenant, page_hash)

    @property
    def degraded(self) -> bool:
        """Its reads or its writes failed after their retries (`cache_store.health`)."""
        return self.reads.degraded or self.writes.degraded

    def stats(self) -> StoreStats:
        r, w = self.reads.stats(), self.writes.stats()
        with self._lock:
            return StoreStats(
                **asdict(self._counters),
                segments=len(self._index),
                used_bytes=self._index.used_bytes,
                budget_bytes=self.budget_bytes,
                degraded=r.degraded or w.degraded,
                degraded_s=max(r.degraded_s, w.degraded_s),
                degraded_episodes=r.episodes + w.episodes,
                retries=r.retries + w.retries,
                skipped=r.skipped + w.skipped,
            )

    # --- mutations ----------------------------------------------------------

    def put(self, seg: Segment) -> bool:
        """Store `seg`, evicting least recently used segments to fit; False if it cannot."""
        if seg.namespace != self.namespace:
            raise ValueError(
                f"segment of namespace {seg.namespace!r} put into a store of {self.namespace!r}"
            )
        key = seg.key
        if self._touch(key):
            return True
        batch = codec.encode(seg)
        size = codec.encoded_size(batch)
        victims = self._reserve(key, size)
        if isinstance(victims, bool):
            return victims
        for victim in victims:
            self._files.delete(victim.key)

        def write() -> None:
            if self._files.size(key) != size:  # another writer may have stored it already
                self._files.write(key, batch)

        try:
            self.writes.call(write, "a segment write")
        except OSError as e:
            return self._write_failed(size, e)
        with self._lock:
            self._reserved -= size
            self._index.add(IndexEntry(key, seg.tenant, seg.page_hashes, size))
            self._counters.puts += 1
            self._counters.bytes_written += size
            self._warned = False
        return True

    def get(self, key: str) -> Segment | None:
        """The segment stored under `key`, verified, its payload a view of the file; or None."""
        with self._lock:
            entry = self._index.get(key)
            if entry is None:
                self._counters.misses += 1
                return None
            self._index.touch(key)
        try:  # the I/O (retried, may fail) apart from the checks (any failure: corrupt)
            data = self.reads.call(lambda: self._files.read_all(key), "a segment read")
        except FileNotFoundError:
            self._lost(entry, "missing")
            return None
        except OSError as e:  # the store did not answer: the segment may still be there
            logger.debug("reading KV segment %s failed: %s", key, e)
            with self._lock:
                self._counters.misses += 1
                self._counters.read_errors += 1
            return None
        try:
            seg = codec.read_segment(pa.BufferReader(data))  # a mapped payload outlives it
            if seg.key != key or (seg.namespace, seg.tenant) != (self.namespace, entry.tenant):
                raise codec.CorruptSegmentError("segment does not match its file name")
        except (*CORRUPT, OSError) as e:  # bytes in hand: an error decoding them is damage
            logger.info("quarantining corrupt KV segment %s: %s", key, e)
            self._lost(entry, "corrupt")
            return None
        with self._lock:
            self._counters.hits += 1
            self._counters.bytes_read += entry.size
        return seg

    def delete(self, key: str) -> bool:
        """Remove the segment `key`; True if it was indexed."""
        with self._lock:
            entry = self._index.remove(key)
        if entry is not None:
            self._files.delete(key)
        return entry is not None

    # --- path records (`cache_store.records`) -------------------------------

    def put_record(self, tenant: str, name: str, pages: Sequence[tuple[str, int]]) -> bool:
        """Record session `name`'s path, `pages` as (owner tenant, page hash), and the
        segments that hold those pages now. False when it cannot be written."""
        with self._lock:
            held = {}
            for owner, h in pages:
                key = self._index.lookup(owner, h)
                if key is not None and key not in held:
                    held[key] = self._index.get(key)
        segments = tuple(e for e in held.values() if e is not None)
        owners, hashes = tuple(o for o, _ in pages), tuple(h for _, h in pages)
        data = records.encode(self.namespace, PathRecord(tenant, name, owners, hashes, segments))
        try:
            self.writes.call(
                lambda: self._files.write_record(records.record_name(tenant, name), data),
                "a record write",
            )
        except OSError as e:
            with self._lock:
                self._counters.write_errors += 1
            self._warn(e)
            return False
        with self._lock:
            self._counters.records_written += 1
            sweep = self._counters.records_written % RECORD_SWEEP_EVERY == 0
        if sweep:  # records are never read again after their TTL: bound their number
            with contextlib.suppress(OSError):
                swept = self._files.sweep_records(self.record_ttl_s)  # I/O, outside the lock
                with self._lock:
                    self._counters.records_swept += swept
        return True

    def get_record(self, tenant: str, name: str) -> PathRecord | None:
        """Session `name`'s record, its segments now indexed here; None when there is none."""
        try:
            data = self.reads.call(
                lambda: self._files.read_record(records.record_name(tenant, name)),
                "a record read",
            )
            record = data and records.decode(data, self.namespace, tenant, name)
        except OSError as e:
            logger.debug("reading the path record of %s failed: %s", name, e)
            with self._lock:
                self._counters.read_errors += 1
            return None
        except codec.CorruptSegmentError as e:
            logger.info("ignoring the corrupt path record of %s: %s", name, e)
            with self._lock:
                self._counters.corrupt += 1
            return None
        if not record:
            return None
        self._adopt(record)
        return record

    def _adopt(self, record: PathRecord) -> None:
        """Index the segments of `record` (written by any process), evicting to the budget."""
        owners = set(record.owners)
        with self._lock:
            for entry in record.segments:
                fits = entry.size <= self.budget_bytes and entry.tenant in owners
                if fits and entry.key not in self._index:
                    self._index.add(entry)
            victims = self._over_budget()
            self._counters.records_read += 1
        for victim in victims:
            self._files.delete(victim.key)

    # --- internals ----------------------------------------------------------

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

    def _touch(self, key: str) -> bool:
        with self._lock:
            if key in self._index:
                self._index.touch(key)
                return True
            return False

    def _reserve(self, key: str, size: int) -> bool | list[IndexEntry]:
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

    def _write_failed(self, size: int, err: OSError) -> bool:
        with self._lock:
            self._reserved -= size
            self._counters.write_errors += 1
        self._warn(err)
        return False

    def _warn(self, err: OSError) -> None:
        if isinstance(err, StoreDegraded) or self.writes.degraded:
            return  # said once, by `StoreHealth`
        with self._lock:
            first, self._warned = not self._warned, True
        log = logger.warning if first else logger.debug
        why = "KV that does not fit in memory will be recomputed instead of spilled"
        log("Arrow KV store at %s is not usable (%s); %s", self._files.dir, err, why)

    def _lost(self, entry: IndexEntry, reason: LostReason) -> None:
        with self._lock:
            if self._index.get(entry.key) == entry:
                self._index.remove(entry.key)
            self._counters.misses += 1
            setattr(self._counters, reason, getattr(self._counters, reason) + 1)
        if reason == "corrupt":
            self._files.quarantine(entry.key)
