"""Moves KV bytes between the device pool, the host pool and the Arrow store.

Implements the cache's `TierIO` with torch copies. Only the scheduler thread
calls it, and each copy completes before it returns (on CUDA the copy runs on
a side stream and is synchronized), so the tree never points at bytes in
flight. A failed copy returns False and the cache treats the page as missing.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from penelope_engine.kv_pool import KVPool
from penelope_engine.tree import Node

log = logging.getLogger(__name__)


class TorchTiers:
    def __init__(
        self, device_pool: KVPool, host_pool: KVPool | None, store=None, tenant_of=None
    ) -> None:
        self.device = device_pool
        self.host = host_pool
        self.store = store
        self.stream = torch.cuda.Stream() if device_pool.device.type == "cuda" else None
        self.failures = 0

    def _copy(self, src: KVPool, src_pages: np.ndarray, dst: KVPool, dst_pages: np.ndarray) -> bool:
        try:
            if self.stream is not None:
                with torch.cuda.stream(self.stream):
                    k, v = src.read_pages(torch.from_numpy(src_pages.astype(np.int64)))
                    dst.write_pages(torch.from_numpy(dst_pages.astype(np.int64)), k, v)
                self.stream.synchronize()
            else:
                k, v = src.read_pages(torch.from_numpy(src_pages.astype(np.int64)))
                dst.write_pages(torch.from_numpy(dst_pages.astype(np.int64)), k, v)
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
        return self._copy(self.host, host_pages, self.device, device_pages)

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        if self.store is None or self.host is None:
            return False
        return bool(self.store.spill(node.hashes[idx], node.start + idx, self.host, node.host[idx]))

    def load_store(self, hashes: np.ndarray, device_pages: np.ndarray) -> np.ndarray:
        """Load pages from the store; a bool mask of the pages that loaded."""
        if self.store is None:
            return np.zeros(len(hashes), dtype=bool)
        return self.store.load(hashes, self.device, device_pages)
