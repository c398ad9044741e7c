"""ArrowSegmentStore on local disk and on a non-local filesystem: round trip, index, budget."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest
import torch

from cache_store import ArrowSegmentStore, Segment

NS = "model-a"


def make_segment(
    first: int = 1, pages: int = 2, dtype: str = "float32", tenant: str = "t", floats: int = 64
) -> Segment:
    kv = torch.randn(pages, floats, generator=torch.Generator().manual_seed(first))
    kv = kv.to(getattr(torch, dtype))
    return Segment(
        NS,
        tenant,
        tuple(range(first, first + pages)),
        tuple(range(0, 2 * pages, 2)),
        tuple((first, i) for i in range(pages)),
        dtype,
        tuple(kv.shape),
        memoryview(kv.view(torch.uint8).numpy()),
    )


def segment_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.arrow"))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_put_get_roundtrip_is_bit_exact(tmp_path: Path, dtype: str) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    seg = make_segment(dtype=dtype)
    assert store.put(seg)
    back = store.get(seg.key)
    assert back is not None and back.same_content(seg)
    got = torch.frombuffer(bytearray(back.payload), dtype=getattr(torch, dtype)).view(back.shape)
    want = torch.frombuffer(bytearray(seg.payload), dtype=getattr(torch, dtype)).view(seg.shape)
    assert torch.equal(got, want)
    s = store.stats()
    assert (s.puts, s.hits, s.misses, s.segments) == (1, 1, 0, 1)
    assert s.used_bytes == store.used_bytes == segment_files(tmp_path)[0].stat().st_size


def test_get_is_a_view_of_the_mapped_file(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    seg = make_segment()
    store.put(seg)
    back = store.get(seg.key)
    assert back is not None
    assert back.payload.readonly
    assert not back.to_numpy().flags.owndata


def test_index_queries_and_delete(tmp_path: Path) -> None:
    store = ArrowSegmentStore(f"file://{tmp_path}", 1 << 20, NS)
    a, b = make_segment(first=1, pages=3), make_segment(first=10, pages=2, tenant="u")
    assert store.put(a) and store.put(b) and store.put(a)  # a second put is a no-op
    assert store.stats().puts == 2
    assert store.lookup("t", 2) == a.key and store.lookup("u", 11) == b.key
    assert store.lookup("u", 2) is None and store.lookup("t", 99) is None
    assert store.contains(a.key) and set(store.keys()) == {a.key, b.key}
    assert store.delete(a.key) and not store.delete(a.key)
    assert not store.contains(a.key) and store.lookup("t", 2) is None
    assert store.get(a.key) is None and store.stats().misses == 1
    assert len(segment_files(tmp_path)) == 1


def test_lookup_prefers_the_newest_holder_of_a_page(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    short, long = make_segment(first=5, pages=2), make_segment(first=5, pages=4)
    assert store.put(short) and store.put(long)
    assert store.lookup("t", 6) == long.key and store.lookup("t", 8) == long.key
    store.delete(long.key)
    assert store.lookup("t", 6) == short.key and store.lookup("t", 8) is None


def test_restart_finds_spilled_segments(tmp_path: Path) -> None:
    segs = [make_segment(first=10 * i) for i in range(1, 4)]
    first = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    for seg in segs:
        assert first.put(seg)
    again = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    assert sorted(again.keys()) == sorted(s.key for s in segs)
    assert again.used_bytes == first.used_bytes
    assert again.lookup("t", 21) == segs[1].key
    for seg in segs:
        back = again.get(seg.key)
        assert back is not None and back.same_content(seg)
    other_model = ArrowSegmentStore(str(tmp_path), 1 << 20, "model-b")
    assert other_model.keys() == [] and other_model.stats().corrupt == 0


def test_budget_evicts_least_recently_used(tmp_path: Path) -> None:
    segs = [make_segment(first=10 * i) for i in range(5)]
    probe = ArrowSegmentStore(str(tmp_path / "probe"), 1 << 20, NS)
    probe.put(segs[0])
    size = probe.used_bytes
    store = ArrowSegmentStore(str(tmp_path / "s"), 3 * size + size // 2, NS)
    for seg in segs[:3]:
        assert store.put(seg)
    assert store.get(segs[0].key) is not None  # segs[1] is now the least recently used
    assert store.put(segs[3])
    assert set(store.keys()) == {segs[0].key, segs[2].key, segs[3].key}
    assert store.used_bytes == 3 * size <= store.budget_bytes
    assert len(segment_files(tmp_path / "s")) == 3
    assert store.stats().evictions == 1


def test_segment_larger_than_budget_is_rejected(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path), 4096, NS)
    assert not store.put(make_segment(floats=4096))
    s = store.stats()
    assert (s.rejected, s.write_errors, s.segments) == (1, 0, 0)


def test_restart_with_smaller_budget_trims_oldest(tmp_path: Path) -> None:
    first = ArrowSegmentStore(str(tmp_path), 1 << 20, NS)
    segs = [make_segment(first=10 * i) for i in range(3)]
    for i, seg in enumerate(segs):
        first.put(seg)
        path = next(p for p in segment_files(tmp_path) if p.stem == seg.key)
        os.utime(path, ns=(10**18 + i, 10**18 + i))  # distinct mtimes, oldest first
    size = first.used_bytes // 3
    again = ArrowSegmentStore(str(tmp_path), 2 * size, NS)
    assert set(again.keys()) == {segs[1].key, segs[2].key}
    assert len(segment_files(tmp_path)) == 2


def test_removed_directory_is_recreated(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path / "spill"), 1 << 20, NS)
    shutil.rmtree(tmp_path / "spill")
    seg = make_segment()
    assert store.put(seg)
    back = store.get(seg.key)
    assert back is not None and back.same_content(seg)


def test_non_local_filesystem_roundtrip_and_restart() -> None:
    fs, _ = pafs.FileSystem.from_uri("mock:///")
    store = ArrowSegmentStore("spill", 1 << 20, NS, filesystem=fs)
    seg = make_segment(dtype="bfloat16")
    assert store.put(seg)
    again = ArrowSegmentStore("spill", 1 << 20, NS, filesystem=fs)
    back = again.get(seg.key)
    assert back is not None and back.same_content(seg)
    assert np.array_equal(back.to_numpy(), seg.to_numpy())


def test_namespace_mismatch_is_a_caller_error(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path), 1 << 20, "model-b")
    with pytest.raises(ValueError, match="namespace"):
        store.put(make_segment())


def test_invalid_budget_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="budget_bytes"):
        ArrowSegmentStore(str(tmp_path), 0, NS)
