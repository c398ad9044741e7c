"""Decode steps over fixed buffers, replayed as CUDA graphs: one per batch-size bucket.

An eager decode step of a 36-layer model launches about 2,100 kernels, a host floor
of 10-17 ms a step on a GPU whatever the batch. Here a decode step's inputs live in
buffers of fixed shape per bucket (1, 2, 4, ... up to `max_running`): token ids,
positions, write slots, and the flex backend's block lists (``[B, 1, 1, W]`` with W
the most pages a sequence can hold) and query positions. On CUDA the step over
them (`Decoder.run_step`) is captured once per bucket at start-up and replayed: a
step is then the host filling those buffers and one graph launch.

A batch of n rows runs in the smallest bucket B >= n. Rows n..B-1 write their K
and V into the pool's last page, which the cache never hands out (`parts.kv_pools`
adds it), and their block lists are empty; their logits are dropped.

Host work per step: one pass over the batch's rows, writing each row's page list
into the block-list buffer (numpy, a copy of its table), then one copy per buffer.
No Python per token of context, no device sync before the launch.

On a CPU nothing is captured (`capture=False`): the same buffers and the same
`run_step` run as they are, which is what the CPU tests hold equal to the eager path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention.flex_attention import BlockMask

from penelope_engine.model.decoder import Decoder
from penelope_engine.model.flex_paged import (
    QUERY_BLOCK,
    UNPLACED,
    FlexGroup,
    batch_bucket,
    page_bounds,
    position_mask,
)
from penelope_engine.model.paged_attention import AttentionPlan
from penelope_engine.tiers.kv_pool import KVPool
from penelope_engine.util import cdiv

log = logging.getLogger(__name__)


def buckets_up_to(max_batch: int) -> tuple[int, ...]:
    """Every `batch_bucket` a batch of 1 .. `max_batch` rows runs in."""
    return tuple(1 << i for i in range(batch_bucket(max_batch).bit_length()))


@dataclass(frozen=True)
class DecodeRow:
    """One sequence's decode query: the token at `position` and the sequence's page table."""

    token: int
    position: int
    page_table: np.ndarray


@dataclass
class _Bucket:
    """One bucket's buffers (device), their host staging, the plan over them, its graph."""

    size: int
    ids: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64
    slots: torch.Tensor  # [B] int64
    partial: torch.Tensor  # [B, 1, 1] int32: the last page, when it is not full
    partial_ids: torch.Tensor  # [B, 1, 1, W] int32
    full: torch.Tensor  # [B, 1, 1] int32: pages every query of the row sees whole
    full_ids: torch.Tensor  # [B, 1, 1, W] int32
    q_pos: torch.Tensor  # [B, 1] int32 (padding: -1)
    rows: torch.Tensor  # [B] int64: 0 .. B-1
    plan: AttentionPlan
    logits: torch.Tensor | None = None  # the captured step's output
    graph: torch.cuda.CUDAGraph | None = None


class DecodeGraphs:
    """Decode steps of `model` over `kv` in fixed buffers: `fits` says whether a step can
    run here, `run` runs it and returns its logits ``[n, vocab]``. `kv`'s last page is
    the padding rows' and no sequence's."""

    def __init__(self, model: Decoder, kv: KVPool, max_batch: int, max_pages: int,
                 capture: bool) -> None:  # fmt: skip
        self.model, self.kv, self.capture = model, kv, capture
        self.page_size = kv.page_size
        device = kv.device
        # Inductor's CPU template wants a column per page of the pool (`flex_paged`)
        self.width = kv.num_pages if device.type == "cpu" else min(kv.num_pages, max_pages)
        self.page_pos = torch.full((kv.num_pages,), UNPLACED, dtype=torch.int32, device=device)
        self.pad_slot = (kv.num_pages - 1) * self.page_size  # padding rows write here only
        self.buckets = {b: self._bucket(b) for b in buckets_up_to(max_batch)}
        self.max_batch = max(self.buckets)
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        if capture:
            for size in sorted(self.buckets, reverse=True):  # the largest first: shared pool
                self._capture(self.buckets[size])

    def fits(self, rows: list[DecodeRow]) -> bool:
        return 0 < len(rows) <= self.max_batch

    def run(self, items: list[DecodeRow]) -> torch.Tensor:
        """The step's logits, one row per decode row."""
        bucket = self.buckets[batch_bucket(len(items))]
        self._fill(bucket, items)
        if bucket.graph is not None and bucket.logits is not None:
            bucket.graph.replay()  # its output buffer is the next replay's too: a copy out
            return bucket.logits[: len(items)].clone()
        return self._step(bucket)[: len(items)]

    # -- buffers -------------------------------------------------------------------------
    def _bucket(self, size: int) -> _Bucket:
        device, width, ps = self.kv.device, self.width, self.page_size

        def zeros(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        partial, full = zeros(size, 1, 1), zeros(size, 1, 1)
        partial_ids, full_ids = zeros(size, 1, 1, width), zeros(size, 1, 1, width)
        q_pos = torch.full((size, 1), -1, dtype=torch.int32, device=device)
        mask = BlockMask.from_kv_blocks(
            partial, partial_ids, full, full_ids,
            BLOCK_SIZE=(QUERY_BLOCK, ps),
            mask_mod=position_mask(self.page_pos, q_pos, ps),
            seq_lengths=(1, self.kv.num_pages * ps),
            compute_q_blocks=False,
        )  # fmt: skip
        rows = torch.arange(size, device=device)
        group = FlexGroup(rows, rows, rows, size, 1, mask)
        return _Bucket(
            size, zeros(size, dtype=torch.int64), zeros(size, dtype=torch.int64),
            zeros(size, dtype=torch.int64), partial, partial_ids, full, full_ids, q_pos, rows,
            AttentionPlan((group,)),
        )  # fmt: skip

    def _fill(self, bucket: _Bucket, items: list[DecodeRow]) -> None:
        """Write the step's rows into the bucket's buffers (rows past the batch: padding)."""
        ps, size, n = self.page_size, bucket.size, len(items)
        ids = np.empty(size, np.int64)
        pos = np.empty(size, np.int64)
        slots = np.empty(size, np.int64)
        partial = np.zeros((size, 1, 1), np.int32)
        full = np.zeros((size, 1, 1), np.int32)
        q_pos = np.full((size, 1), -1, np.int32)
        used = cdiv(max(it.position for it in items) + 1, ps)
        full_ids = np.zeros((size, 1, 1, used), np.int32)
        partial_ids = np.zeros((size, 1, 1, 1), np.int32)
        last_pages, last_pos = [], []
        for i, it in enumerate(items):
            p, table = it.position, it.page_table
            ids[i], pos[i], q_pos[i, 0] = it.token, p, p
            slots[i] = int(table[p // ps]) * ps + p % ps
            whole, end = page_bounds(p, p, ps)
            full[i, 0, 0] = whole
            full_ids[i, 0, 0, :whole] = table[:whole]
            if end > whole:  # the last page is not full: read masked
                partial[i, 0, 0] = 1
                partial_ids[i, 0, 0, 0] = table[whole]
                last_pages.append(int(table[whole]))
                last_pos.append(whole)
        ids[n:], pos[n:], slots[n:] = 0, 0, self.pad_slot
        pages = np.array(last_pages, np.int64)
        if len(np.unique(pages)) != len(pages):
            raise ValueError("two decode rows end in one page")  # a page is one sequence's
        bucket.ids.copy_(torch.from_numpy(ids), non_blocking=True)
        bucket.positions.copy_(torch.from_numpy(pos), non_blocking=True)
        bucket.slots.copy_(torch.from_numpy(slots), non_blocking=True)
        bucket.partial.copy_(torch.from_numpy(partial), non_blocking=True)
        bucket.full.copy_(torch.from_numpy(full), non_blocking=True)
        bucket.q_pos.copy_(torch.from_numpy(q_pos), non_blocking=True)
        bucket.full_ids[..., :used].copy_(torch.from_numpy(full_ids), non_blocking=True)
        bucket.partial_ids[..., :1].copy_(torch.from_numpy(partial_ids), non_blocking=True)
        if len(pages):  # only a row's partial last page is masked, so only it needs a position
            where = torch.from_numpy(pages).to(self.kv.device)
            self.page_pos.index_copy_(0, where, torch.tensor(last_pos, dtype=torch.int32,
                                                             device=self.kv.device))  # fmt: skip

    # -- the step ------------------------------------------------------------------------
    def _step(self, bucket: _Bucket) -> torch.Tensor:
        return self.model.run_step(bucket.ids, bucket.positions, bucket.slots, bucket.rows,
                                   bucket.plan, self.kv, decode=True)  # fmt: skip

    def _capture(self, bucket: _Bucket) -> None:
        """Compile and warm the step on a side stream, then capture it; every row is
        padding then, writing only the padding page."""
        bucket.slots.fill_(self.pad_slot)
        side = torch.cuda.Stream(self.kv.device)
        side.wait_stream(torch.cuda.current_stream(self.kv.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step(bucket)
        torch.cuda.current_stream(self.kv.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            bucket.logits = self._step(bucket)
        bucket.graph = graph
        log.info("captured the decode step of batch %d", bucket.size)
