"""Stored responses (`store: true`), on the Arrow store's filesystem, bounded per tenant.

A stored response is one Arrow IPC file (one row: the record's JSON) written
atomically through `cache_store.files.SegmentFiles`, so the same code reaches
a local path, S3 or any `pyarrow.fs` URI, and every replica and ingress that
shares the URI reads what the others wrote, after restarts too:

    <store uri>/responses/<tenant dir>/<32 hex of resp_...>.arrow

A record is self-contained: the response as `GET /v1/responses/{id}` returns
it, its session, and the whole chain of items up to it (every earlier input
and output item, this request's input, its output). Continuing a chain reads
one file, and evicting an old record never breaks a newer one.

Bounds, per tenant: `budget_bytes` and `ttl_s`. After each write the tenant's
directory is listed; records older than the TTL are deleted, then the oldest
until the tenant fits its budget. A read of an expired record is a miss even
before the sweep removes it. A record larger than the budget is not written
(`rejected`). Without a store URI the records live in this process's memory
(pyarrow's mock filesystem), with the same bounds.

Failures degrade as KV writes do: a write that fails is counted and logged and
the reply still succeeds; a read that fails is a miss. A tenant's records sit
under its own directory, so another tenant's id is indistinguishable from an
unknown one. Counts are on /metrics (`penelope_response_store_*`,
`ResponseStoreCollector`). Every method does I/O: call it off the event loop.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cache_store.files import SegmentFiles
from cache_store.location import StoreLocation

log = logging.getLogger(__name__)
ID_PREFIX = "resp_"
_ID = re.compile(r"^resp_([0-9a-f]{32})$")
_SCHEMA = pa.schema([("record", pa.large_binary())], metadata={"penelope": "response/1"})
MEMORY_URI = "mock://"


@dataclass(frozen=True)
class StoredResponse:
    id: str
    session: str
    items: list[dict[str, Any]]  # the chain up to and with this response, oldest first
    response: dict[str, Any]  # the response object as GET returns it

    def encode(self) -> pa.RecordBatch:
        data: dict[str, Any] = {"id": self.id, "session": self.session, "items": self.items}
        data["response"] = self.response
        return pa.record_batch([pa.array([json.dumps(data).encode()], pa.large_binary())],
                               schema=_SCHEMA)  # fmt: skip

    @staticmethod
    def decode(buffer: pa.Buffer) -> StoredResponse:
        table = ipc.open_file(pa.BufferReader(buffer)).read_all()
        data = json.loads(table.column("record")[0].as_py())
        return StoredResponse(data["id"], data["session"], data["items"], data["response"])

    @property
    def created_at(self) -> float:
        return float(self.response.get("created_at", 0))


@dataclass
class ResponseStoreStats:
    """Counts since start (this process) and what the last listing of each tenant found."""

    ops: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("put", "hit", "miss", "delete", "evicted", "expired", "rejected"), 0
        )
    )
    errors: dict[str, int] = field(default_factory=lambda: {"write": 0, "read": 0})
    bytes_by_tenant: dict[str, int] = field(default_factory=dict)
    objects_by_tenant: dict[str, int] = field(default_factory=dict)


class ResponseStore:
    """Stored responses per tenant, bounded by `budget_bytes` and `ttl_s` (module doc)."""

    def __init__(
        self,
        location: StoreLocation | None,
        budget_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.location = location or StoreLocation(MEMORY_URI)
        self.budget_bytes = budget_bytes
        self.ttl_s = ttl_s
        self.stats = ResponseStoreStats()
        self._clock = clock
        self._lock = threading.Lock()
        self._opened: tuple[Any, str] | None = None
        self._tenants: dict[str, SegmentFiles] = {}

    def put(self, tenant: str, record: StoredResponse) -> bool:
        """Write `record`, then bound the tenant's records; False when it was not written."""
        key = key_of(record.id)
        assert key is not None, record.id
        batch = record.encode()
        if batch.nbytes > self.budget_bytes:
            self._count("rejected")
            return False
        try:
            files = self._files(tenant)
            files.write(key, batch)
            self._count("put")
            self._bound(tenant, files)
        except OSError as exc:
            self._error("write", exc)
            return False
        return True

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The record of `response_id` for this tenant; None when unknown, expired or unreadable."""
        key = key_of(response_id)
        if key is None:
            self._count("miss")
            return None
        try:
            record = StoredResponse.decode(self._files(tenant).read_all(key))
        except FileNotFoundError:
            record = None
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            self._error("read", exc)
            record = None
        if record is None or record.id != response_id or self._expired(record.created_at):
            self._count("miss")
            return None
        self._count("hit")
        return record

    def delete(self, tenant: str, response_id: str) -> bool:
        """Delete it; False when this tenant has no such (unexpired) record."""
        if self.get(tenant, response_id) is None:
            return False
        key = key_of(response_id)
        assert key is not None
        self._files(tenant).delete(key)
        self._count("delete")
        return True

    def _bound(self, tenant: str, files: SegmentFiles) -> None:
        entries = files.listing()  # oldest first
        now_ns = self._clock() * 1e9
        kept = []
        for e in entries:
            if now_ns - e.mtime_ns > self.ttl_s * 1e9:
                files.delete(e.key)
                self._count("expired")
            else:
                kept.append(e)
        total = sum(e.size for e in kept)
        while kept and total > self.budget_bytes:
            oldest = kept.pop(0)
            files.delete(oldest.key)
            total -= oldest.size
            self._count("evicted")
        with self._lock:
            self.stats.bytes_by_tenant[tenant] = total
            self.stats.objects_by_tenant[tenant] = len(kept)

    def _expired(self, created_at: float) -> bool:
        return self._clock() - created_at > self.ttl_s

    def _files(self, tenant: str) -> SegmentFiles:
        with self._lock:
            if tenant not in self._tenants:
                if self._opened is None:
                    self._opened = self.location.open()
                fs, root = self._opened
                where = StoreLocation(f"{root.rstrip('/')}/responses")
                self._tenants[tenant] = SegmentFiles(where, f"tenant-{tenant}", filesystem=fs)
            return self._tenants[tenant]

    def _count(self, op: str) -> None:
        with self._lock:
            self.stats.ops[op] += 1

    def _error(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            self.stats.errors[kind] += 1
        log.warning("Penelope: the response store could not %s a record: %s", kind, exc)


def key_of(response_id: str) -> str | None:
    found = _ID.match(response_id)
    return found.group(1) if found else None


class ResponseStoreCollector(Collector):
    """The response store's counts, as `penelope_response_store_*` series."""

    def __init__(self, store: ResponseStore, replica: str) -> None:
        self._store = store
        self._replica = replica

    def collect(self) -> Iterator[Metric]:
        s, r = self._store.stats, self._replica
        ops = CounterMetricFamily(
            "penelope_response_store_operations",
            "Stored responses (store: true): put, hit, miss, delete, evicted (budget), "
            "expired (TTL), rejected (larger than the budget).",
            labels=["replica", "op"],
        )
        errors = CounterMetricFamily(
            "penelope_response_store_errors",
            "Response store failures (a failed write: the reply still succeeds; a failed "
            "read: a miss).",
            labels=["replica", "kind"],
        )
        for op, n in s.ops.items():
            ops.add_metric([r, op], n)
        for kind, n in s.errors.items():
            errors.add_metric([r, kind], n)
        used = GaugeMetricFamily(
            "penelope_response_store_bytes",
            "Bytes of stored responses, all tenants, as last listed.",
            labels=["replica"],
        )
        used.add_metric([r], sum(s.bytes_by_tenant.values()))
        count = GaugeMetricFamily(
            "penelope_response_store_objects",
            "Stored responses, all tenants, as last listed.",
            labels=["replica"],
        )
        count.add_metric([r], sum(s.objects_by_tenant.values()))
        budget = GaugeMetricFamily(
            "penelope_response_store_budget_bytes",
            "Bytes of stored responses each tenant may keep.",
            labels=["replica"],
        )
        budget.add_metric([r], self._store.budget_bytes)
        yield from (ops, errors, used, count, budget)
