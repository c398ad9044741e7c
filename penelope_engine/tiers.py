"""Moves KV bytes between the device pool, the host pool and the Arrow store.

Implements the cache's `TierIO` with torch copies. Only the scheduler thread
calls it, and each copy completes before it returns (on CUDA the copy runs on
a side stream and is synchronized), so the tree never points at bytes in
flight. A failed copy returns False and the cache treats the page as missing.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from cache_store import ArrowSegmentStore, Segment
from penelope_engine.kv_pool import DTYPES, KVPool
from penelope_engine.tier import Tier
from penelope_engine.tree import Node

log = logging.getLogger(__name__)
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class TorchTiers:
    def __init__(
        self,
        device_pool: KVPool,
        host_pool: KVPool | None,
        store: ArrowSegmentStore | None = None,
        on_copy: Callable[[Tier, int, float], None] | None = None,
    ) -> None:
        self.device = device_pool
        self.host = host_pool
        self.store = store
        self.on_copy = on_copy  # (tier, bytes, seconds) of each load, for the planner
        self.stream = torch.cuda.Stream() if device_pool.device.type == "cuda" else None
        self.failures = 0

    def _copy(self, src: KVPool, src_pages: np.ndarray, dst: KVPool, dst_pages: np.ndarray) -> bool:
        src_idx = torch.from_numpy(src_pages.astype(np.int64))
        dst_idx = torch.from_numpy(dst_pages.astype(np.int64))
        try:
            if self.stream is not None:
                with torch.cuda.stream(self.stream):
                    dst.write_pages(dst_idx, *src.read_pages(src_idx))
                self.stream.synchronize()
            else:
                dst.write_pages(dst_idx, *src.read_pages(src_idx))
            return True
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # pragma: no cover - hw faults
            self.failures += 1
            log.warning("KV copy failed (%s); the pages will be recomputed", exc)
            return False

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        assert self.host is not None
        return self._copy(self.device, device_pages, self.host, host_pages)

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        assert self.host is not None
        t0 = time.perf_counter()
        ok = self._copy(self.host, host_pages, self.device, device_pages)
        if ok and self.on_copy is not None:
            nbytes = len(host_pages) * self.host.bytes_per_page
            self.on_copy(Tier.HOST, nbytes, time.perf_counter() - t0)
        return ok

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        """Write host pages `idx` of `node` to the store (host eviction)."""
        if self.host is None:
            return False
        return self.write_segments(self.host, node.host, node, idx)

    def write_segments(self, pool: KVPool, slots: np.ndarray, node: Node, idx: np.ndarray) -> bool:
        """Write pages `idx` of `node`, held at `slots[idx]` of `pool`, to the store.

        One segment per run of consecutive pages; each carries its tokens so a
        reader can check identity before using the KV.
        """
        if self.store is None or node.tokens is None or len(idx) == 0:
            return False
        runs = np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)
        ok = True
        ps = pool.page_size
        for run in runs:
            k, v = pool.read_pages(torch.from_numpy(slots[run].astype(np.int64)))
            kv = torch.stack([k, v]).cpu().contiguous()
            seg = Segment(
                namespace=self.store.namespace,
                tenant=node.tenant,
                page_hashes=tuple(int(h) for h in node.hashes[run]),
                positions=tuple(int(p) * ps for p in node.start + run),
                token_ids=tuple(tuple(t) for t in node.tokens[run].tolist()),
                dtype=DTYPE_NAMES[kv.dtype],
                shape=tuple(kv.shape),
                payload=memoryview(kv.view(torch.uint8).numpy().data).cast("B"),
            )
            ok = self.store.put(seg) and ok
        return ok

    def begin(self) -> None:
        """`SchedulerTiers`: nothing to mark, copies here finish before they return."""

    def ready_at(self, now: float) -> float:
        return now

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        """How many of `hashes`, from the first, the store's index holds (no I/O)."""
        if self.store is None:
            return 0
        n = 0
        while n < len(hashes) and self.store.lookup(tenant, int(hashes[n])) is not None:
            n += 1
        return n

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        """Load pages from the store into `device_pages`; a mask of the pages that loaded.

        A page loads only when its segment is intact and holds the very tokens
        of the request at that page; anything else is a miss (recomputed).
        """
        loaded = np.zeros(len(hashes), dtype=bool)
        if self.store is None:
            return loaded
        segments: dict[str, Segment | None] = {}
        for i, h in enumerate(hashes):
            key = self.store.lookup(tenant, int(h))
            if key is None:
                continue
            if key not in segments:
                segments[key] = self.store.get(key)
            seg = segments[key]
            if seg is None:
                continue
            j = seg.page_index(int(h))
            if seg.token_ids[j] != tuple(int(t) for t in tokens[i]):
                continue
            with warnings.catch_warnings():  # read-only mapped bytes: we only read them
                warnings.simplefilter("ignore", UserWarning)
                kv = torch.frombuffer(seg.payload, dtype=torch.uint8).view(DTYPES[seg.dtype])
            kv = kv.reshape(seg.shape)
            ps = self.device.page_size
            page = kv[:, :, j * ps : (j + 1) * ps]
            self.device.write_pages(torch.tensor([int(device_pages[i])]), page[0], page[1])
            loaded[i] = True
        return loaded
