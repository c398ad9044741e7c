"""Segment <-> Arrow IPC file, with every check a reader needs before trusting one.

One file holds one record batch of one row::

    page_hashes: list<uint64>        token_ids: list<list<int64>>
    positions:   list<int64>         payload:   large_binary (the KV bytes)

The schema metadata names the format, the namespace, tenant, dtype, shape, key
and a CRC32 over header and payload. A reader opening the file by key checks
the format, the schema, the key and the checksum; anything else is corrupt.
Encoding and decoding copy no payload bytes: a memory-mapped file decodes to a
view over the map.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from cache_store.segment import Segment, SegmentError, segment_key

FORMAT = b"penelope-kv-segment"
VERSION = b"1"
SCHEMA = pa.schema(
    [
        pa.field("page_hashes", pa.list_(pa.uint64()), nullable=False),
        pa.field("positions", pa.list_(pa.int64()), nullable=False),
        pa.field("token_ids", pa.list_(pa.list_(pa.int64())), nullable=False),
        pa.field("payload", pa.large_binary(), nullable=False),
    ]
)
_READ_ALL = ipc.IpcReadOptions(use_threads=False)
_READ_HASHES = ipc.IpcReadOptions(use_threads=False, included_fields=[0])
_HASHES_SCHEMA = pa.schema([SCHEMA.field(0)])
_WRITE = ipc.IpcWriteOptions(use_threads=False)


class CorruptSegmentError(ValueError):
    """A file is not a valid segment of this store: foreign, truncated or altered."""


@dataclass(frozen=True)
class SegmentHeader:
    """What the index needs about a stored segment, read without touching its payload."""

    key: str
    namespace: str
    tenant: str
    page_hashes: tuple[int, ...]


def encode(seg: Segment) -> pa.RecordBatch:
    """The one-row record batch of `seg`, its schema carrying the metadata (zero-copy payload)."""
    tokens = [list(p) for p in seg.token_ids]
    data = pa.py_buffer(seg.payload)
    offsets = pa.py_buffer(np.array([0, seg.nbytes], dtype=np.int64))
    payload = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, offsets, data])
    meta = {
        b"penelope.format": FORMAT,
        b"penelope.version": VERSION,
        b"namespace": seg.namespace.encode(),
        b"tenant": seg.tenant.encode(),
        b"dtype": seg.dtype.encode(),
        b"shape": json.dumps(list(seg.shape)).encode(),
        b"key": seg.key.encode(),
        b"checksum": seg.checksum().encode(),
    }
    columns = [
        pa.array([list(seg.page_hashes)], SCHEMA.field(0).type),
        pa.array([list(seg.positions)], SCHEMA.field(1).type),
        pa.array([tokens], SCHEMA.field(2).type),
        payload,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA.with_metadata(meta))


def write(sink: pa.NativeFile, batch: pa.RecordBatch) -> None:
    """Write `batch` as an Arrow IPC file into `sink`."""
    with ipc.new_file(sink, batch.schema, options=_WRITE) as writer:
        writer.write_batch(batch)


def encoded_size(batch: pa.RecordBatch) -> int:
    """Exact size in bytes of the file `write` produces, computed without copying."""
    sink = pa.MockOutputStream()
    write(sink, batch)
    return int(sink.size())


def _meta(schema: pa.Schema, expected: pa.Schema) -> dict[bytes, bytes]:
    meta = schema.metadata or {}
    if meta.get(b"penelope.format") != FORMAT:
        raise CorruptSegmentError("not a Penelope KV segment file (foreign schema)")
    if meta.get(b"penelope.version") != VERSION:
        raise CorruptSegmentError(f"unsupported segment version {meta.get(b'penelope.version')!r}")
    if not schema.remove_metadata().equals(expected):
        raise CorruptSegmentError("segment file has an unexpected schema")
    return meta


def _open(source: pa.NativeFile, hashes_only: bool) -> tuple[dict[bytes, bytes], pa.RecordBatch]:
    options, expected = (_READ_HASHES, _HASHES_SCHEMA) if hashes_only else (_READ_ALL, SCHEMA)
    reader = ipc.open_file(source, options=options)
    meta = _meta(reader.schema, expected)
    if reader.num_record_batches != 1:
        raise CorruptSegmentError(f"expected one record batch, found {reader.num_record_batches}")
    batch = reader.get_batch(0)
    batch.validate(full=True)
    if batch.num_rows != 1:
        raise CorruptSegmentError(f"expected one row, found {batch.num_rows}")
    if any(col.null_count for col in batch.columns):
        raise CorruptSegmentError("segment has null values")
    return meta, batch


def _payload_view(payload: pa.LargeBinaryArray) -> memoryview:
    _, offsets, data = payload.buffers()
    start, end = np.frombuffer(offsets, dtype="<i8")[payload.offset : payload.offset + 2]
    return memoryview(data)[int(start) : int(end)] if data is not None else memoryview(b"")


def read_header(source: pa.NativeFile) -> SegmentHeader:
    """The index entry of a segment file, reading its footer and page hashes only."""
    meta, batch = _open(source, hashes_only=True)
    header = SegmentHeader(
        key=meta[b"key"].decode(),
        namespace=meta[b"namespace"].decode(),
        tenant=meta[b"tenant"].decode(),
        page_hashes=tuple(batch.column(0)[0].values.to_pylist()),
    )
    if segment_key(header.namespace, header.tenant, header.page_hashes) != header.key:
        raise CorruptSegmentError("segment key does not match its pages")
    return header


def read_segment(source: pa.NativeFile) -> Segment:
    """The segment in `source`, verified against its key and checksum; payload not copied."""
    meta, batch = _open(source, hashes_only=False)
    try:
        seg = Segment(
            namespace=meta[b"namespace"].decode(),
            tenant=meta[b"tenant"].decode(),
            page_hashes=tuple(batch.column(0)[0].values.to_pylist()),
            positions=tuple(batch.column(1)[0].values.to_pylist()),
            token_ids=tuple(tuple(p) for p in batch.column(2)[0].values.to_pylist()),
            dtype=meta[b"dtype"].decode(),
            shape=tuple(json.loads(meta[b"shape"])),
            payload=_payload_view(batch.column(3)),
        )
    except (SegmentError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise CorruptSegmentError(f"malformed segment: {e}") from e
    if seg.key != meta[b"key"].decode():
        raise CorruptSegmentError("segment key does not match its pages")
    if seg.checksum() != meta[b"checksum"].decode():
        raise CorruptSegmentError("segment checksum mismatch")
    return seg
