"""A store volume that fills (a real tmpfs), and a writer killed between its write and rename."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cache_store import ArrowSegmentStore, Segment
from cache_store.files import SegmentFiles
from cache_store.health import StoreTuning

NS = "model-a"
FAST = StoreTuning(retries=1, backoff_s=0.0, probe_s=0.2)


def segment(first: int, floats: int = 16 << 10) -> Segment:
    kv = np.random.default_rng(first).standard_normal(floats).astype(np.float32)
    return Segment(NS, "t", (first,), (0,), ((first, 2, 3),), "float32", kv.shape, memoryview(kv))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a volume that really fills (ENOSPC)."""
    where = tmp_path / "volume"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_volume_refuses_writes_serves_what_it_holds_and_recovers(tmpfs: Path) -> None:
    store = ArrowSegmentStore(str(tmpfs), 1 << 30, NS, tuning=FAST)  # budget > the volume
    kept = segment(1)
    assert store.put(kept)
    written = [store.put(segment(i)) for i in range(2, 40)]  # 64 KiB each: the volume fills
    assert not all(written) and store.stats().write_errors >= 1 and store.degraded
    assert not list(tmpfs.glob("*/*.tmp-*"))  # a failed write leaves no partial file
    got = store.get(kept.key)
    assert got is not None and bytes(got.payload) == bytes(kept.payload)
    for key in store.keys()[1:]:  # room again (an operator, or the budget, freed it)
        store.delete(key)
    deadline = time.monotonic() + 5.0
    while not store.put(segment(100)):
        assert time.monotonic() < deadline, "writes did not resume"
        time.sleep(0.05)
    assert not store.degraded


def test_a_full_volume_becomes_the_budget_and_writes_resume_by_eviction(tmpfs: Path) -> None:
    """Nobody frees the volume: the store takes the bytes it holds as its budget, so once
    its writes probe again, least recently used segments make room and writes go on."""
    store = ArrowSegmentStore(str(tmpfs), 1 << 30, NS, tuning=FAST)  # budget > the volume
    written = [store.put(segment(i)) for i in range(1, 40)]  # 64 KiB each: the volume fills
    assert not all(written) and store.degraded
    budget = store.budget_bytes
    assert 0 < budget == store.used_bytes < 1 << 20  # what the volume held, not 1 GiB
    oldest = store.keys()[0]
    deadline = time.monotonic() + 5.0
    while not store.put(segment(100)):  # refused at once until the probe, then it evicts
        assert time.monotonic() < deadline, "writes did not resume"
        time.sleep(0.05)
    assert not store.degraded and store.contains(segment(100).key)
    assert not store.contains(oldest) and store.used_bytes <= budget
    assert store.stats().evictions >= 1
    got = store.get(segment(100).key)
    assert got is not None and bytes(got.payload) == bytes(segment(100).payload)


def _killed_writer(root: str, mode: str) -> None:
    """Write a segment's file as the store does, then die (SIGKILL) before the rename
    (`complete`) or halfway through the bytes (`half`)."""
    from cache_store import codec

    files = SegmentFiles(root, NS)
    files.ensure_dirs()
    batch = codec.encode(segment(9))

    whole = pa.BufferOutputStream()
    codec.write(whole, batch)
    data = whole.getvalue().to_pybytes()

    def fill(sink: pa.NativeFile) -> None:
        sink.write(data if mode == "complete" else data[: len(data) // 2])
        sink.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # the rename never runs

    files._atomic(files.path(segment(9).key), fill)


@pytest.mark.parametrize("mode", ["complete", "half"])
def test_a_writer_killed_before_its_rename_leaves_nothing_readable(
    tmp_path: Path, mode: str
) -> None:
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_killed_writer, args=(str(tmp_path), mode))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert list(tmp_path.glob("*/*.tmp-*"))  # the temporary file it left
    store = ArrowSegmentStore(str(tmp_path), 1 << 30, NS)  # a restart over what it left
    assert store.get(segment(9).key) is None and store.stats().segments == 0
    assert not list(tmp_path.glob("*/*.arrow"))
    assert store.put(segment(9))  # written again, whole
    got = store.get(segment(9).key)
    assert got is not None and bytes(got.payload) == bytes(segment(9).payload)
