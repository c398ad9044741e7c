"""Threads of one store, and two processes sharing a directory, writing at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

import cache_store
from cache_store import ArrowSegmentStore, Segment

NS = "model-a"
REPO = Path(cache_store.__file__).resolve().parents[1]

# A writer process: waits for the other one, puts the shared segments 0..shared-1 and its
# own ones, then reads them all back.
WRITER = """
import pathlib
import sys
import time
import numpy as np
from cache_store import ArrowSegmentStore, Segment

root, me, shared, own = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def seg(i):
    kv = np.random.default_rng(i).standard_normal(4096).astype(np.float32)
    return Segment("model-a", "t", (i, i + 1), (0, 1), ((i,), (i + 1,)), "float32", kv.shape,
                   memoryview(kv))

store = ArrowSegmentStore(root, 1 << 30, "model-a")
pathlib.Path(root, f"ready-{me}").touch()
deadline = time.monotonic() + 60
while len(list(pathlib.Path(root).glob("ready-*"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.001)  # start writing together
ids = list(range(shared)) + [1000 * (me + 1) + j for j in range(own)]
order = ids if me == 0 else ids[::-1]
assert all(store.put(seg(i)) for i in order)
for i in order:
    back = store.get(seg(i).key)
    assert back is not None and back.same_content(seg(i)), i
print(store.stats().hits)
"""


def make_segment(i: int) -> Segment:
    kv = np.random.default_rng(i).standard_normal(4096).astype(np.float32)
    return Segment(
        NS, "t", (i, i + 1), (0, 1), ((i,), (i + 1,)), "float32", kv.shape, memoryview(kv)
    )


def test_two_processes_write_same_and_different_segments(tmp_path: Path) -> None:
    shared, own = 30, 10
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(me), str(shared), str(own)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for me in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err.decode()
        assert int(out) == shared + own
    store = ArrowSegmentStore(str(tmp_path), 1 << 30, NS)
    ids = list(range(shared)) + [1000 + j for j in range(own)] + [2000 + j for j in range(own)]
    assert sorted(store.keys()) == sorted(make_segment(i).key for i in ids)
    for i in ids:
        back = store.get(make_segment(i).key)
        assert back is not None and back.same_content(make_segment(i))
    assert store.stats().corrupt == 0
    assert not list(tmp_path.glob("*/*.tmp-*"))


def test_threads_put_and_get_under_eviction(tmp_path: Path) -> None:
    segs = [make_segment(i) for i in range(24)]
    size = ArrowSegmentStore(str(tmp_path / "probe"), 1 << 30, NS)
    size.put(segs[0])
    store = ArrowSegmentStore(str(tmp_path / "s"), 6 * size.used_bytes, NS)
    errors: list[str] = []

    def worker(offset: int) -> None:
        for round_ in range(3):
            for j in range(offset, len(segs), 2):
                seg = segs[(j + round_) % len(segs)]
                store.put(seg)
                back = store.get(seg.key)
                if back is not None and not back.same_content(seg):
                    errors.append(seg.key)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    on_disk = {p.stem: p.stat().st_size for p in (tmp_path / "s").glob("*/*.arrow")}
    assert set(store.keys()) == set(on_disk)
    assert store.used_bytes == sum(on_disk.values()) <= store.budget_bytes
    s = store.stats()
    assert s.evictions > 0 and s.corrupt == 0 and s.write_errors == 0
