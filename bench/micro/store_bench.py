"""Arrow store throughput against raw file copies on the same disk, in the same run.

For each segment size: `put` (checksum, encode, write, rename) and `get`
(map, verify the checksum, view the payload as numpy and touch every OS page
of it) against raw file I/O of the same size on the same disk: `shutil.copyfile`,
a plain `write` from memory and a plain `read` into memory. `read_vs_raw` is
store read over raw copy speed. Every read is warm in the page cache, for the
store and the baselines alike. Figures are medians over `repeats` rounds.

    python -m bench.micro.store_bench --json [--dir DIR] [--sizes-mib 1 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cache_store import ArrowSegmentStore, Segment
from penelope_cli import helpformat

MIB = 1 << 20
PAGE_BYTES = 2 * MIB  # about one 16-token page of Qwen3-8B KV in bf16
PAGE_TOKENS = 16
_OS_PAGE = 4096


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _segments(size: int, repeats: int) -> list[Segment]:
    payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    pages = max(1, size // PAGE_BYTES)
    tokens = tuple(tuple(range(p * PAGE_TOKENS, (p + 1) * PAGE_TOKENS)) for p in range(pages))
    positions = tuple(p * PAGE_TOKENS for p in range(pages))
    return [
        Segment(
            "bench",
            "t",
            tuple(r << 32 | p for p in range(pages)),
            positions,
            tokens,
            "bfloat16",
            (size // 2,),
            payload.data,
        )
        for r in range(repeats)
    ]


def _read_and_touch(store: ArrowSegmentStore, key: str) -> None:
    seg = store.get(key)
    if seg is None:
        raise RuntimeError(f"segment {key} vanished from the bench store")
    int(seg.to_numpy()[::_OS_PAGE].sum())


def _raw_write(path: Path, data: np.ndarray) -> None:
    with open(path, "wb", buffering=0) as f:
        f.write(data.data)


def _raw_read(path: Path, buf: bytearray) -> None:
    with open(path, "rb", buffering=0) as f:
        f.readinto(buf)


def _round(work: Path, store: ArrowSegmentStore, seg: Segment, src: Path) -> dict[str, float]:
    """Seconds of each operation on one segment; leaves the disk as it found it."""
    data, dst, copy, buf = (
        seg.to_numpy(),
        work / "raw-write",
        work / "raw-copy",
        bytearray(seg.nbytes),
    )
    times = {
        "write": _seconds(lambda: store.put(seg)),
        "read": _seconds(lambda: _read_and_touch(store, seg.key)),
        "raw_write": _seconds(lambda: _raw_write(dst, data)),
        "raw_read": _seconds(lambda: _raw_read(dst, buf)),
        "raw_copy": _seconds(lambda: shutil.copyfile(src, copy)),
    }
    store.delete(seg.key)
    dst.unlink()
    copy.unlink()
    return times


def _gbps(size: int, seconds: list[float]) -> float:
    return round(size / statistics.median(seconds) / 1e9, 3)


def _bench_size(work: Path, size: int, repeats: int) -> dict[str, float]:
    """Interleaved rounds, so that the store and the raw baselines meet the same page cache.

    Round 0 is not timed: first writes into never-used memory are much slower in a VM.
    """
    segs = _segments(size, repeats + 1)
    store = ArrowSegmentStore(str(work / f"store-{size}"), 4 * size, "bench")
    src = work / "raw-src"
    _raw_write(src, segs[0].to_numpy())
    rounds = [_round(work, store, seg, src) for seg in segs][1:]
    src.unlink()
    if store.stats().hits != repeats + 1:
        raise RuntimeError(f"bench store lost segments: {store.stats()}")
    gbps = {op: _gbps(size, [r[op] for r in rounds]) for op in rounds[0]}
    return {
        "size_mib": round(size / MIB, 3),
        "write_gbps": gbps["write"],
        "read_gbps": gbps["read"],
        "raw_copy_gbps": gbps["raw_copy"],
        "raw_write_gbps": gbps["raw_write"],
        "raw_read_gbps": gbps["raw_read"],
        "read_vs_raw": round(gbps["read"] / gbps["raw_copy"], 3),
        "read_vs_raw_read": round(gbps["read"] / gbps["raw_read"], 3),
        "write_vs_raw_write": round(gbps["write"] / gbps["raw_write"], 3),
    }


def run_store_bench(
    dir: str | Path, sizes: Sequence[int] = (MIB, 64 * MIB), repeats: int = 9
) -> dict[str, Any]:
    """Store write/read GB/s per segment size, with raw copy and read speeds of the same disk."""
    if repeats < 1 or any(s < 2 or s % 2 for s in sizes):
        raise ValueError("repeats must be >= 1 and sizes even numbers of bytes >= 2")
    work = Path(dir) / f"store-bench-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    try:
        rows = [_bench_size(work, size, repeats) for size in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"dir": str(dir), "repeats": repeats, "page_cache": "warm", "segments": rows}


def _table(result: dict[str, Any]) -> str:
    cols = [
        "size_mib",
        "write_gbps",
        "read_gbps",
        "raw_copy_gbps",
        "raw_write_gbps",
        "raw_read_gbps",
        "read_vs_raw",
    ]
    lines = ["  ".join(f"{c:>13}" for c in cols)]
    lines += ["  ".join(f"{row[c]:>13}" for c in cols) for row in result["segments"]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = helpformat.parser("penelope bench store", __doc__)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument(
        "--sizes-mib", type=float, nargs="+", default=[1, 64], help="segment sizes in MiB"
    )
    parser.add_argument("--repeats", type=int, default=9, help="rounds; figures are medians")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sizes = [int(m * MIB) // 2 * 2 for m in args.sizes_mib]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = run_store_bench(args.dir or tmp, sizes, args.repeats)
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
