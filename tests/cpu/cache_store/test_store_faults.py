"""Damaged, foreign and missing files are misses; an unwritable store degrades with one warning."""

from __future__ import annotations

import logging
import resource
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from cache_store import ArrowSegmentStore, Segment

NS = "model-a"


def make_segment(first: int = 1, floats: int = 256, namespace: str = NS) -> Segment:
    kv = np.random.default_rng(first).standard_normal(floats).astype(np.float32)
    return Segment(
        namespace,
        "t",
        (first, first + 1),
        (0, 3),
        ((7, 8, 9), (10, 11, 12)),
        "float32",
        kv.shape,
        memoryview(kv),
    )


@pytest.fixture
def spilled(tmp_path: Path) -> tuple[Segment, Path]:
    """One segment written by a store that is then dropped; returns it and its file."""
    seg = make_segment()
    assert ArrowSegmentStore(str(tmp_path), 1 << 20, NS).put(seg)
    (path,) = tmp_path.glob("*/*.arrow")
    return seg, path


def quarantined(root: Path) -> list[Path]:
    return list(root.glob("*/quarantine/*"))


def assert_miss(store: ArrowSegmentStore, seg: Segment, root: Path) -> None:
    assert store.get(seg.key) is None
    s = store.stats()
    assert (s.corrupt, s.misses, s.hits, s.segments) == (1, 1, 0, 0)
    assert len(quarantined(root)) == 1 and not list(root.glob("*/*.arrow"))


def test_flipped_payload_byte_is_a_miss(spilled: tuple[Segment, Path], tmp_path: Path) -> None:
    seg, path = spilled
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)  # indexes the intact file
    raw = bytearray(path.read_bytes())
    at = raw.find(bytes(seg.payload[:64]))
    assert at > 0
    raw[at + 100] ^= 0x10
    path.write_bytes(raw)
    assert_miss(store, seg, tmp_path)


def test_flipped_bytes_anywhere_never_give_wrong_data(
    spilled: tuple[Segment, Path], tmp_path: Path
) -> None:
    seg, path = spilled
    intact = path.read_bytes()
    bad = 0
    for at in np.linspace(0, len(intact) - 1, 40).astype(int):
        raw = bytearray(intact)
        raw[at] ^= 0xFF
        path.write_bytes(raw)
        back = ArrowSegmentStore(str(tmp_path), 1 << 20, NS).get(seg.key)
        assert back is None or back.same_content(seg)
        bad += back is None
        shutil.rmtree(path.parent / "quarantine")
    assert bad > 20  # most flips land in checked bytes, not padding


def test_truncated_file_is_a_miss(spilled: tuple[Segment, Path], tmp_path: Path) -> None:
    seg, path = spilled
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    path.write_bytes(path.read_bytes()[: path.stat().st_size - 9])
    assert_miss(store, seg, tmp_path)


@pytest.mark.parametrize("cut", [0, 6, 100])
def test_truncated_file_found_at_start_is_quarantined(
    spilled: tuple[Segment, Path], tmp_path: Path, cut: int
) -> None:
    seg, path = spilled
    path.write_bytes(path.read_bytes()[:cut])
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    assert store.keys() == [] and store.stats().corrupt == 1
    assert len(quarantined(tmp_path)) == 1 and store.get(seg.key) is None


def write_foreign_arrow(path: Path) -> None:
    table = pa.table({"x": [1, 2, 3]})
    with ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)


def test_foreign_schema_file_is_a_miss(spilled: tuple[Segment, Path], tmp_path: Path) -> None:
    seg, path = spilled
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    write_foreign_arrow(path)
    assert_miss(store, seg, tmp_path)


def test_foreign_files_found_at_start_are_quarantined(
    spilled: tuple[Segment, Path], tmp_path: Path
) -> None:
    _, path = spilled
    write_foreign_arrow(path)
    other = make_segment(first=50, namespace="model-b")
    alien = path.parent / f"{other.key}.arrow"
    assert ArrowSegmentStore(str(tmp_path / "b"), 1 << 20, "model-b").put(other)
    shutil.copy(next((tmp_path / "b").glob("*/*.arrow")), alien)  # right format, wrong model
    renamed = path.parent / f"{'0' * 32}.arrow"
    shutil.copy(next((tmp_path / "b").glob("*/*.arrow")), renamed)  # content under a wrong key
    (path.parent / "notes.txt").write_text("ignored")
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    assert store.keys() == [] and store.stats().corrupt == 3
    assert (path.parent / "notes.txt").exists()


def test_file_deleted_behind_the_index_is_a_miss(
    spilled: tuple[Segment, Path], tmp_path: Path
) -> None:
    seg, path = spilled
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    path.unlink()
    assert store.get(seg.key) is None
    s = store.stats()
    assert (s.missing, s.misses, s.corrupt, s.segments, s.used_bytes) == (1, 1, 0, 0, 0)
    assert store.put(seg) and store.get(seg.key) is not None  # written again


def test_unwritable_store_degrades_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    (ns_dir,) = tmp_path.iterdir()
    shutil.rmtree(ns_dir)
    ns_dir.write_text("a file where the store's directory was")
    with caplog.at_level(logging.WARNING, logger="cache_store"):
        assert not store.put(make_segment(first=1))
        assert not store.put(make_segment(first=5))
    assert store.stats().write_errors == 2 and store.stats().segments == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "degraded" in warnings[0].getMessage()
    assert store.stats().degraded and store.stats().skipped == 1  # the second: not tried


def test_store_under_a_file_starts_degraded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "blocker").write_text("x")
    with caplog.at_level(logging.WARNING, logger="cache_store"):
        store = ArrowSegmentStore(str(tmp_path / "blocker" / "store"), 1 << 20, NS)
        assert not store.put(make_segment())
        assert store.get(make_segment().key) is None
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


@pytest.fixture
def small_file_limit() -> Iterator[int]:
    """Files larger than the limit fail to write (EFBIG), as on a full disk."""
    limit = 64 << 10
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


def test_full_disk_fails_the_put_and_leaves_no_partial_file(
    tmp_path: Path, small_file_limit: int
) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 30, NS)
    assert store.put(make_segment(first=1))  # small: fits under the limit
    assert not store.put(make_segment(first=2, floats=small_file_limit))
    s = store.stats()
    assert (s.puts, s.write_errors, s.segments) == (1, 1, 1)
    assert store.used_bytes == sum(p.stat().st_size for p in tmp_path.glob("*/*") if p.is_file())
    assert [p.name for p in tmp_path.glob("*/*.tmp-*")] == []
