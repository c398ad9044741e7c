"""Path records: what a store knows of one session's history, for any replica to read.

A store's index lives in its process; a replica that did not write a segment
cannot name it. A *path record* closes that gap for one session: the pages of
the longest history the fleet held for it (each with the tenant that owns the
page: the session's own, or the public one of a declared prefix), and the
segments that held them when it was written. A replica that gets the session
reads the record (one small object), indexes its segments and so loads the
history; the page list also tells it which pages the fleet had, so what it
must rebuild counts as recomputed, not new.

    <namespace dir>/records/<blake2b(tenant, name)>.json

Written after the segments it names, so a reader never finds a record ahead of
its data; a segment evicted since reads as a miss (recomputed). A record that
is corrupt, foreign or of another tenant or name is a miss too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from cache_store.codec import CorruptSegmentError
from cache_store.index import IndexEntry

FORMAT = "penelope-path-record"
VERSION = 1
RECORDS = "records"


def record_name(tenant: str, name: str) -> str:
    """The file name of the record `name` of `tenant` (any session id is safe in it)."""
    digest = hashlib.blake2b(f"{tenant}\x1f{name}".encode(), digest_size=16).hexdigest()
    return f"{digest}.json"


@dataclass(frozen=True)
class PathRecord:
    """A session's history as the fleet held it: its pages and the segments holding them."""

    tenant: str
    name: str
    owners: tuple[str, ...]  # the tenant owning each page (the session's, or a public one)
    page_hashes: tuple[int, ...]
    segments: tuple[IndexEntry, ...]

    def __post_init__(self) -> None:
        if len(self.owners) != len(self.page_hashes):
            raise ValueError(
                f"a record needs one owner per page; got {len(self.owners)} owners for "
                f"{len(self.page_hashes)} pages"
            )


def encode(namespace: str, record: PathRecord) -> bytes:
    tenants = sorted({*record.owners, *(s.tenant for s in record.segments)})
    ids = {t: i for i, t in enumerate(tenants)}
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "namespace": namespace,
        "tenant": record.tenant,
        "name": record.name,
        "tenants": tenants,
        "pages": [[ids[o], h] for o, h in zip(record.owners, record.page_hashes)],
        "segments": [[s.key, ids[s.tenant], s.size, list(s.page_hashes)] for s in record.segments],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes, namespace: str, tenant: str, name: str) -> PathRecord:
    """The record in `data`, checked to be the one asked for; CorruptSegmentError if not."""
    try:
        doc = json.loads(data)
        if doc["format"] != FORMAT or doc["version"] != VERSION:
            raise CorruptSegmentError("not a Penelope path record")
        if (doc["namespace"], doc["tenant"], doc["name"]) != (namespace, tenant, name):
            raise CorruptSegmentError("path record of another namespace, tenant or session")
        tenants = [str(t) for t in doc["tenants"]]
        segments = tuple(
            IndexEntry(str(key), tenants[t], tuple(int(h) for h in hashes), int(size))
            for key, t, size, hashes in doc["segments"]
        )
        return PathRecord(
            tenant,
            name,
            tuple(tenants[o] for o, _ in doc["pages"]),
            tuple(int(h) for _, h in doc["pages"]),
            segments,
        )
    except (ValueError, KeyError, TypeError, IndexError) as e:
        if isinstance(e, CorruptSegmentError):
            raise
        raise CorruptSegmentError(f"malformed path record: {e}") from e
