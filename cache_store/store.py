"""`ArrowSegmentStore`: a byte-budgeted, content-addressed, restart-safe store of KV segments.

Reads never fail loudly: a segment that is missing, truncated, altered or
foreign is a miss (the caller recomputes), is counted, and its file is moved to
`quarantine/`. Writes never fail loudly either: an unwritable or full store
makes `put` return False, counts it and logs one warning.

Thread safety: one lock guards the index, the reservation and the counters
(`ledger.StoreLedger`, which does no I/O); file I/O runs here, outside it.
Several processes may share a directory: files appear atomically under
content-addressed names, so two writers of the same segment write the same
bytes, and a reader holding a memory map keeps its data when another process
replaces or deletes the file. Each process keeps its own index and budget; a
file another process evicted reads as a miss.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from cache_store import codec, records
from cache_store.files import SegmentFiles
from cache_store.health import StoreDegraded, StoreHealth, StoreTuning
from cache_store.index import IndexEntry
from cache_store.ledger import LostReason, StoreLedger
from cache_store.location import StoreLocation
from cache_store.records import PathRecord
from cache_store.scan import CORRUPT, scan
from cache_store.segment import Segment
from cache_store.stats import StoreStats

logger = logging.getLogger(__name__)

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
        self.tuning = tuning or StoreTuning()
        self._files = SegmentFiles(where, namespace, filesystem, self.tuning)
        retries = 0 if self._files.fs.type_name == "s3" else None  # the S3 SDK retries
        self.reads = StoreHealth(self.tuning, self._files.dir, retries, "reads")
        self.writes = StoreHealth(self.tuning, self._files.dir, retries, "writes")
        self._ledger = StoreLedger(budget_bytes)
        try:
            self.writes.call(self._files.ensure_dirs, "opening the store")
            found, corrupt = scan(self._files, namespace)
            for victim in self._ledger.opened(found, corrupt):
                self._files.delete(victim.key)
        except OSError as e:
            self._warn(e)

    # --- queries (no I/O) ---------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return self._ledger.used_bytes

    @property
    def budget_bytes(self) -> int:
        """The configured budget, or less once the volume was found full (`fit_volume`)."""
        return self._ledger.budget_bytes

    def contains(self, key: str) -> bool:
        return self._ledger.contains(key)

    def keys(self) -> list[str]:
        """Keys of the indexed segments, least recently used first."""
        return self._ledger.keys()

    def lookup(self, tenant: str, page_hash: int) -> str | None:
        """Key of a stored segment holding the page `page_hash` of `tenant`, or None."""
        return self._ledger.lookup(tenant, page_hash)

    @property
    def degraded(self) -> bool:
        """Its reads or its writes failed after their retries (`cache_store.health`)."""
        return self.reads.degraded or self.writes.degraded

    def stats(self) -> StoreStats:
        r, w = self.reads.stats(), self.writes.stats()
        return StoreStats(
            **self._ledger.snapshot(),
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
        if self._ledger.touch(key):
            return True
        if not self.writes.admits():  # degraded: evict nothing for a write that won't run
            self._ledger.write_failed(0)  # counted as a failed write, as before
            return False
        batch = codec.encode(seg)
        size = codec.encoded_size(batch)
        victims = self._ledger.reserve(key, size)
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
        self._ledger.stored(IndexEntry(key, seg.tenant, seg.page_hashes, size))
        return True

    def get(self, key: str) -> Segment | None:
        """The segment stored under `key`, verified, its payload a view of the file; or None."""
        entry = self._ledger.checkout(key)
        if entry is None:
            return None
        try:  # the I/O (retried, may fail) apart from the checks (any failure: corrupt)
            data = self.reads.call(lambda: self._files.read_all(key), "a segment read")
        except FileNotFoundError:
            self._lost(entry, "missing")
            return None
        except OSError as e:  # the store did not answer: the segment may still be there
            logger.debug("reading KV segment %s failed: %s", key, e)
            self._ledger.read_error()
            return None
        try:
            seg = codec.read_segment(pa.BufferReader(data))  # a mapped payload outlives it
            if seg.key != key or (seg.namespace, seg.tenant) != (self.namespace, entry.tenant):
                raise codec.CorruptSegmentError("segment does not match its file name")
        except (*CORRUPT, OSError) as e:  # bytes in hand: an error decoding them is damage
            logger.info("quarantining corrupt KV segment %s: %s", key, e)
            self._lost(entry, "corrupt")
            return None
        self._ledger.hit(entry)
        return seg

    def delete(self, key: str) -> bool:
        """Remove the segment `key`; True if it was indexed."""
        entry = self._ledger.remove(key)
        if entry is not None:
            self._files.delete(key)
        return entry is not None

    # --- path records (`cache_store.records`) -------------------------------

    def put_record(self, tenant: str, name: str, pages: Sequence[tuple[str, int]]) -> bool:
        """Record session `name`'s path, `pages` as (owner tenant, page hash), and the
        segments that hold those pages now. False when it cannot be written."""
        segments = self._ledger.held(pages)
        owners, hashes = tuple(o for o, _ in pages), tuple(h for _, h in pages)
        data = records.encode(self.namespace, PathRecord(tenant, name, owners, hashes, segments))
        try:
            self.writes.call(
                lambda: self._files.write_record(records.record_name(tenant, name), data),
                "a record write",
            )
        except OSError as e:
            self._ledger.record_write_failed()
            self._warn(e)
            return False
        sweep = self._ledger.record_written() % RECORD_SWEEP_EVERY == 0
        if sweep:  # records are never read again after their TTL: bound their number
            with contextlib.suppress(OSError):
                swept = self._files.sweep_records(self.record_ttl_s)  # I/O, outside the lock
                self._ledger.swept(swept)
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
            self._ledger.record_read_error()
            return None
        except codec.CorruptSegmentError as e:
            logger.info("ignoring the corrupt path record of %s: %s", name, e)
            self._ledger.corrupt_record()
            return None
        if not record:
            return None
        for victim in self._ledger.adopt(record):  # its segments indexed, within the budget
            self._files.delete(victim.key)
        return record

    # --- internals ----------------------------------------------------------

    def _write_failed(self, size: int, err: OSError) -> bool:
        self._ledger.write_failed(size)
        if _volume_full(err):
            was = self._ledger.budget_bytes
            budget = self._ledger.fit_volume()
            if budget is not None:
                logger.warning(
                    "Arrow KV store at %s: its volume is full at %d bytes stored; the store's "
                    "budget is now that (was %d), so least recently used segments make room",
                    self._files.dir, budget, was,
                )  # fmt: skip
        self._warn(err)
        return False

    def _warn(self, err: OSError) -> None:
        if isinstance(err, StoreDegraded) or self.writes.degraded:
            return  # said once, by `StoreHealth`
        log = logger.warning if self._ledger.first_warning() else logger.debug
        why = "KV that does not fit in memory will be recomputed instead of spilled"
        log("Arrow KV store at %s is not usable (%s); %s", self._files.dir, err, why)

    def _lost(self, entry: IndexEntry, reason: LostReason) -> None:
        self._ledger.lost(entry, reason)
        if reason == "corrupt":
            self._files.quarantine(entry.key)


def _volume_full(err: OSError) -> bool:
    """ENOSPC or EDQUOT, as the OS or pyarrow (which puts it in the message) reports it."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "No space left on device" in text or "Disk quota exceeded" in text
