"""Page copies between two KV pools, through a ring of pinned staging buffers.

The copies used to go through `KVPool.read_pages` / `write_pages`: every layer
gathered token by token, the layers stacked, pageable tensors sent over PCIe,
each byte moved three or four times on the host. On an H100 that loaded a
Qwen3-8B history from the host at 2.3-3.3 GB/s, 15-21x slower than the
simulator's PCIe charge (docs/results.md 4, two runs). `PageMover` moves whole pages (a
page's K of one layer is one contiguous row of the pool) once on each side:

- host -> device: a piece (one layer, up to `CHUNK_BYTES` of pages) is gathered
  on the CPU into a pinned ring buffer, sent with a non-blocking copy on the
  copy stream and scattered into its device pages there; the CPU gathers the
  next piece while the last ones are on the wire;
- device -> host: a piece is gathered on the GPU and sent into a pinned ring
  buffer on the copy stream; the CPU scatters it into the host pool once its
  event fires, while later pieces are on the wire;
- same device (CPU tests, a CPU-only engine): gather and scatter, once each.

The ring is allocated once (`reserve`, at the engine's start), so no request
pays for pinning memory. The copy stream first waits for the compute stream
(whatever wrote or still reads the pages is ordered before the copy), and
`copy` returns only once the copy is done, so the tree never points at bytes in
flight.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from penelope_engine.tiers.kv_pool import KVPool

CHUNK_BYTES = 8 << 20  # one ring buffer: K and V of one layer's pages, at most this
RING = 4  # buffers in flight at once


class PageMover:
    """Copies pages of one pool into pages of another (`copy`); owns the pinned ring."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self.stream = stream
        self._ring: list[torch.Tensor] = []  # RING pinned [2, pages, page elements] buffers
        self._events: list[torch.cuda.Event] = []

    def reserve(self, pool: KVPool) -> None:
        """Allocate the pinned ring for pages of `pool`'s shape (once; no-op without CUDA)."""
        if self.stream is None:
            return
        row = pool.page_rows(pool.k[0])
        if (
            self._ring
            and self._ring[0].dtype == row.dtype
            and self._ring[0].shape[2] == row.shape[1]
        ):
            return
        rows = max(1, CHUNK_BYTES // (row.shape[1] * row.element_size()))
        shape = (2, rows, row.shape[1])
        self._ring = [torch.empty(shape, dtype=row.dtype, pin_memory=True) for _ in range(RING)]
        self._events = [torch.cuda.Event() for _ in range(RING)]
        for ev in self._events:
            ev.record(self.stream)  # a fresh buffer is free: nothing before its event

    def copy(self, src: KVPool, src_pages: np.ndarray, dst: KVPool, dst_pages: np.ndarray) -> None:
        if len(src_pages) != len(dst_pages):
            raise ValueError(f"{len(src_pages)} source pages for {len(dst_pages)} destinations")
        if src.dtype != dst.dtype or src.page_size != dst.page_size:
            raise ValueError("pools of one engine share dtype and page size")
        if len(src_pages) == 0:
            return
        sp = torch.from_numpy(src_pages.astype(np.int64)).to(src.device)
        dp = torch.from_numpy(dst_pages.astype(np.int64)).to(dst.device)
        if src.device == dst.device:
            for s, d in zip((*src.k, *src.v), (*dst.k, *dst.v)):
                dst.page_rows(d).index_copy_(0, dp, src.page_rows(s).index_select(0, sp))
            return
        assert self.stream is not None, "a copy between devices needs the copy stream"
        self.reserve(src)
        gpu = dst.device if src.device.type == "cpu" else src.device
        self.stream.wait_stream(torch.cuda.current_stream(gpu))
        if src.device.type == "cpu":
            self._to_device(src, sp, dst, dp)
        else:
            self._to_host(src, sp, dst, dp)
        self.stream.synchronize()

    def _pieces(self, n: int, layers: int) -> list[tuple[int, int, int]]:
        """(layer, first page, pages) of each piece, layer by layer."""
        rows = self._ring[0].shape[1]
        return [(layer, a, min(rows, n - a)) for layer in range(layers) for a in range(0, n, rows)]

    def _to_device(self, src: KVPool, sp: torch.Tensor, dst: KVPool, dp: torch.Tensor) -> None:
        assert self.stream is not None
        for i, (layer, a, m) in enumerate(self._pieces(len(sp), src.num_layers)):
            buf, ev = self._ring[i % RING][:, :m], self._events[i % RING]
            ev.synchronize()  # the DMA that last read this buffer is done
            for side, pool in enumerate((src.k, src.v)):
                torch.index_select(src.page_rows(pool[layer]), 0, sp[a : a + m], out=buf[side])
            with torch.cuda.stream(self.stream):
                kv = buf.to(dst.device, non_blocking=True)
                for side, pool in enumerate((dst.k, dst.v)):
                    dst.page_rows(pool[layer]).index_copy_(0, dp[a : a + m], kv[side])
                ev.record(self.stream)

    def _to_host(self, src: KVPool, sp: torch.Tensor, dst: KVPool, dp: torch.Tensor) -> None:
        assert self.stream is not None
        pending: deque[tuple[int, int, int, int]] = deque()

        def land() -> None:  # the oldest piece in flight: wait for it, scatter it
            j, layer, a, m = pending.popleft()
            self._events[j].synchronize()
            buf = self._ring[j][:, :m]
            for side, pool in enumerate((dst.k, dst.v)):
                dst.page_rows(pool[layer]).index_copy_(0, dp[a : a + m], buf[side])

        for i, (layer, a, m) in enumerate(self._pieces(len(sp), src.num_layers)):
            j = i % RING
            if len(pending) == RING:
                land()
            buf = self._ring[j][:, :m]
            with torch.cuda.stream(self.stream):
                for side, pool in enumerate((src.k, src.v)):
                    rows = src.page_rows(pool[layer]).index_select(0, sp[a : a + m])
                    buf[side].copy_(rows, non_blocking=True)
                self._events[j].record(self.stream)
            pending.append((j, layer, a, m))
        while pending:
            land()
