"""One store shared by several processes, on a local path and on S3 (moto's server).

Each store instance stands for one replica: it keeps its own index, so what
another replica wrote after it opened reaches it through a path record.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_store_basic import NS, make_segment

from cache_store import ArrowSegmentStore, StoreLocation

BUDGET = 1 << 20


@pytest.fixture(params=["local", "s3"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    if request.param == "local":
        return StoreLocation(str(tmp_path / "shared"))
    return request.getfixturevalue("s3_store")


def test_a_store_opened_later_finds_what_another_wrote(shared: StoreLocation) -> None:
    writer = ArrowSegmentStore(shared, BUDGET, NS)
    seg = make_segment(first=10, pages=3)
    t0 = time.perf_counter()
    assert writer.put(seg)
    reader = ArrowSegmentStore(shared, BUDGET, NS)  # a replica that starts afterwards
    back = reader.get(seg.key)
    elapsed = time.perf_counter() - t0
    assert back is not None and back.same_content(seg)
    assert reader.lookup("t", 11) == seg.key
    assert elapsed < 10.0  # a put, a listing and a get: bounded, even on S3


def test_a_running_replica_finds_new_segments_through_the_sessions_record(
    shared: StoreLocation,
) -> None:
    reader = ArrowSegmentStore(shared, BUDGET, NS)  # already running: its index is empty
    writer = ArrowSegmentStore(shared, BUDGET, NS)
    a, b = make_segment(first=10, pages=2), make_segment(first=12, pages=2)
    assert writer.put(a) and writer.put(b)
    pages = [("t", h) for h in (10, 11, 12, 13)]
    assert writer.put_record("t", "session-1", pages)
    assert reader.lookup("t", 12) is None
    record = reader.get_record("t", "session-1")
    assert record is not None and record.page_hashes == (10, 11, 12, 13)
    assert {s.key for s in record.segments} == {a.key, b.key}
    got = reader.get(reader.lookup("t", 12) or "")
    assert got is not None and got.same_content(b)
    assert reader.stats().records_read == 1 and writer.stats().records_written == 1


def test_a_record_is_private_to_its_tenant_and_session(shared: StoreLocation) -> None:
    store = ArrowSegmentStore(shared, BUDGET, NS)
    assert store.put(make_segment(first=10, pages=2, tenant="alice"))
    assert store.put_record("alice", "s", [("alice", 10), ("alice", 11)])
    assert store.get_record("bob", "s") is None
    assert store.get_record("alice", "other") is None
    assert store.get_record("alice", "s") is not None


def test_a_record_cannot_lend_one_tenant_another_tenants_pages(tmp_path: Path) -> None:
    """Even a record naming alice's segment among bob's pages indexes it as alice's."""
    store = ArrowSegmentStore(str(tmp_path), BUDGET, NS)
    seg = make_segment(first=10, pages=2, tenant="alice")
    assert store.put(seg)
    assert store.put_record("bob", "s", [("alice", 10), ("alice", 11)])
    other = ArrowSegmentStore(str(tmp_path / "elsewhere"), BUDGET, NS)
    assert other.lookup("bob", 10) is None
    fresh = ArrowSegmentStore(str(tmp_path), BUDGET, NS)
    fresh.get_record("bob", "s")
    assert fresh.lookup("bob", 10) is None and fresh.lookup("alice", 10) == seg.key


def test_a_corrupt_record_is_a_miss_not_a_crash(tmp_path: Path) -> None:
    store = ArrowSegmentStore(str(tmp_path), BUDGET, NS)
    assert store.put(make_segment(first=10, pages=2))
    assert store.put_record("t", "s", [("t", 10), ("t", 11)])
    (record,) = tmp_path.glob("*/records/*.json")
    record.write_bytes(record.read_bytes()[:-7])
    assert store.get_record("t", "s") is None
    assert store.stats().corrupt == 1


def test_a_record_written_after_its_segments_were_evicted_reads_as_misses(tmp_path: Path) -> None:
    writer = ArrowSegmentStore(str(tmp_path), BUDGET, NS)
    seg = make_segment(first=10, pages=2)
    assert writer.put(seg) and writer.put_record("t", "s", [("t", 10), ("t", 11)])
    reader = ArrowSegmentStore(str(tmp_path), BUDGET, NS)
    writer.delete(seg.key)  # another replica's budget evicted it
    assert reader.get_record("t", "s") is not None
    assert reader.get(seg.key) is None and reader.stats().missing == 1


def test_records_past_their_ttl_are_swept_and_fresh_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from cache_store import store as store_module

    monkeypatch.setattr(store_module, "RECORD_SWEEP_EVERY", 3)
    store = ArrowSegmentStore(str(tmp_path), BUDGET, NS, record_ttl_s=60.0)
    assert store.put_record("t", "old", [("t", 10)]) and store.put_record("t", "new", [("t", 11)])
    old = next(p for p in tmp_path.glob("*/records/*.json") if b'"old"' in p.read_bytes())
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    assert store.stats().records_swept == 0
    assert store.put_record("t", "third", [("t", 12)])  # the third write sweeps
    assert store.stats().records_swept == 1 and not old.exists()
    assert store.get_record("t", "old") is None
    assert store.get_record("t", "new") is not None and store.get_record("t", "third") is not None
    with pytest.raises(ValueError, match="record_ttl_s"):
        ArrowSegmentStore(str(tmp_path), BUDGET, NS, record_ttl_s=0)
