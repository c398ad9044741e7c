"""Segment files on any `pyarrow.fs` filesystem: layout, atomic writes, mapped reads.

Layout under the store's URI::

    <uri>/<namespace dir>/<key>.arrow               one segment per file
    <uri>/<namespace dir>/<key>.arrow.tmp-<id>      being written (renamed when complete)
    <uri>/<namespace dir>/quarantine/<key>.<id>     files found corrupt, kept for inspection
    <uri>/<namespace dir>/records/<name>.json       path records (`cache_store.records`)

A file appears under its final name only complete: it is written under a
temporary name and renamed, except on object stores, where an object becomes
visible only when its upload completes. Local files are read through a memory
map, so a reader's payload is a view of the page cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from cache_store import codec
from cache_store.health import StoreTuning
from cache_store.location import StoreLocation, resolve_uri
from cache_store.records import RECORDS

__all__ = ["FileEntry", "SegmentFiles", "namespace_dir", "resolve_uri"]

SUFFIX = ".arrow"
QUARANTINE = "quarantine"
_KEY = re.compile(r"^[0-9a-f]{32}$")
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
_STALE_TEMP_S = 3600.0


def namespace_dir(namespace: str) -> str:
    """A filesystem-safe directory name for a namespace (readable prefix + hash)."""
    digest = hashlib.blake2b(namespace.encode(), digest_size=6).hexdigest()
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", namespace)[:40].strip("._") or "ns"
    return f"{readable}-{digest}"


@dataclass(frozen=True)
class FileEntry:
    key: str
    size: int
    mtime_ns: int


class SegmentFiles:
    """The files of one namespace of a store; it knows paths, not what they mean."""

    def __init__(
        self,
        where: str | StoreLocation,
        namespace: str,
        filesystem: pafs.FileSystem | None = None,
        tuning: StoreTuning | None = None,
    ):
        location = where if isinstance(where, StoreLocation) else StoreLocation(where)
        if filesystem is None:
            filesystem, root = location.open(tuning or StoreTuning())
        else:
            root = location.uri
        self.fs: pafs.FileSystem = filesystem
        self.dir = f"{root.rstrip('/')}/{namespace_dir(namespace)}"
        self.local = isinstance(filesystem, pafs.LocalFileSystem)
        self._direct_write = filesystem.type_name in _OBJECT_STORES

    def path(self, key: str) -> str:
        return f"{self.dir}/{key}{SUFFIX}"

    def ensure_dirs(self) -> None:
        self.fs.create_dir(f"{self.dir}/{QUARANTINE}", recursive=True)
        self.fs.create_dir(f"{self.dir}/{RECORDS}", recursive=True)

    def record_path(self, name: str) -> str:
        return f"{self.dir}/{RECORDS}/{name}"

    def write(self, key: str, batch: pa.RecordBatch) -> None:
        """Write `batch` as the file of `key`, visible under its name only when complete."""
        self._atomic(self.path(key), lambda sink: codec.write(sink, batch))

    def write_record(self, name: str, data: bytes) -> None:
        """Write (or replace) the record file `name`, visible only when complete."""
        self._atomic(self.record_path(name), lambda sink: sink.write(data))

    def read_record(self, name: str) -> bytes | None:
        """The bytes of the record file `name`, or None when there is none."""
        try:
            with self.fs.open_input_stream(self.record_path(name)) as f:
                return bytes(f.read())
        except FileNotFoundError:
            return None

    def sweep_records(self, max_age_s: float) -> int:
        """Delete the record files last written more than `max_age_s` ago; how many went.
        A session that comes back after that finds no record: its history counts as new."""
        selector = pafs.FileSelector(f"{self.dir}/{RECORDS}", allow_not_found=True)
        cutoff_ns, swept = time.time_ns() - int(max_age_s * 1e9), 0
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File and (info.mtime_ns or cutoff_ns) < cutoff_ns:
                self._remove_quietly(info.path)
                swept += 1
        return swept

    def _atomic(self, final: str, fill: Callable[[pa.NativeFile], object]) -> None:
        try:
            self._write(final, fill)
        except FileNotFoundError:  # the directory was removed (or never created): once more
            self.ensure_dirs()
            self._write(final, fill)

    def _write(self, final: str, fill: Callable[[pa.NativeFile], object]) -> None:
        if self._direct_write:
            with self.fs.open_output_stream(final) as sink:
                fill(sink)
            return
        temp = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open_output_stream(temp) as sink:
                fill(sink)
            self.fs.move(temp, final)
        except BaseException:
            self._remove_quietly(temp)
            raise

    def open(self, key: str) -> pa.NativeFile:
        """A random-access handle on the file of `key` (memory-mapped when local).

        A local file is served as a reader over one buffer of the whole map: its
        reads are zero-copy slices, and synchronous (a reader over the mapped file
        itself hands each read to Arrow's I/O threads, which costs milliseconds on
        a busy machine). The map lives as long as any slice of it.
        """
        if self.local:
            with pa.memory_map(self.path(key), "r") as mapped:
                return pa.BufferReader(mapped.read_buffer())
        return self.fs.open_input_file(self.path(key))

    def read_all(self, key: str) -> pa.Buffer:
        """The whole file of `key`: a map of it when local, its bytes read when remote
        (so every I/O error is raised here, none while the bytes are decoded)."""
        if self.local:
            with pa.memory_map(self.path(key), "r") as mapped:
                return mapped.read_buffer()
        with self.fs.open_input_file(self.path(key)) as f:
            return f.read_buffer()

    def size(self, key: str) -> int | None:
        """Size of the file of `key`, or None when there is none."""
        info = self.fs.get_file_info(self.path(key))
        return info.size if info.type == pafs.FileType.File else None

    def listing(self) -> list[FileEntry]:
        """Every segment file, oldest first; removes temporary files left by dead writers."""
        selector = pafs.FileSelector(self.dir, allow_not_found=True, recursive=False)
        entries, now_ns = [], time.time_ns()
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            name = info.base_name
            if ".tmp-" in name:
                if now_ns - (info.mtime_ns or now_ns) > _STALE_TEMP_S * 1e9:
                    self._remove_quietly(info.path)
            elif name.endswith(SUFFIX) and _KEY.match(name[: -len(SUFFIX)]):
                entries.append(FileEntry(name[: -len(SUFFIX)], info.size, info.mtime_ns or 0))
        return sorted(entries, key=lambda e: e.mtime_ns)

    def delete(self, key: str) -> None:
        self._remove_quietly(self.path(key))

    def quarantine(self, key: str) -> None:
        """Move the file of `key` aside for inspection; delete it if it cannot be moved."""
        target = f"{self.dir}/{QUARANTINE}/{key}.{time.time_ns()}-{uuid.uuid4().hex[:6]}"
        try:
            self.fs.create_dir(f"{self.dir}/{QUARANTINE}", recursive=True)
            self.fs.move(self.path(key), target)
        except OSError:
            self.delete(key)

    def _remove_quietly(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.delete_file(path)
