"""Attention straight over the pool through the page table, by FlexAttention.

The pool of one layer, ``[slots, kv_heads, D]``, is the key sequence of one
FlexAttention call, viewed as ``[1, kv_heads, slots, D]`` (no copy). A
`BlockMask` built from the page tables (`BlockMask.from_kv_blocks`, one KV
block per page) lists, for each block of queries, the pages it may read; the
compiled kernel visits those pages and no others, so nothing is gathered and
no dense ``[Q, ctx]`` mask exists. Inside a listed page the mask function
compares positions: slot ``s`` of page ``p`` holds position
``page_pos[p] * page_size + s % page_size``, visible to a query at position
``q`` when it is ``<= q``. A page's position is the tree's (every sequence
that shares a page holds it at the same position; `page_positions` refuses a
step where two sequences disagree), so one ``[pages]`` table serves the step.

Groups:
- the step's decode rows: batch = sequences (padded to a power of two so
  the compiled kernel is reused), one query each, over the pages up to its
  position;
- each sequence with several queries (holes plus new tokens, a later prefill
  chunk): batch 1, its queries in blocks of `QUERY_BLOCK` rows, each block
  over the pages up to the block's last position (a piece of `run_attention`,
  but read in place).

A first prefill chunk keeps SDPA's causal kernel (`causal_attention`): its
keys are its own, so there is nothing to skip.

The kernel is `torch.compile(flex_attention)`: on CUDA a Triton kernel (the
flex-decoding kernel for the single-query group), on a CPU Inductor's C++
template. Uncompiled, flex_attention ignores the block lists and reads the
whole pool, so this path always compiles. Measured on a CPU (AMD EPYC, AVX2,
one thread, SmolLM2 in float32, docs/results.md 3.8): a 2,048-token hole plus
64 new tokens over 6,208 keys 22.5 s against 14.1 s for `run_attention`'s
pieces, a decode step of 8 x 6K 0.81 s against 0.42 s for the C kernel, so
the CPU keeps those; `flex` is what `attention: auto` picks on CUDA
(`backends`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from penelope_engine.model.attention import AttentionMetadata
from penelope_engine.util import cdiv

QUERY_BLOCK = 128  # query rows per block of the mask (FlexAttention's default block)
UNPLACED = 1 << 24  # page position of a page no sequence of the step holds: never visible
MAX_COMPILES = 256  # compiled shapes kept: batch buckets and query-block counts


@dataclass(frozen=True)
class FlexGroup:
    """Rows of the flat batch attended in one FlexAttention call."""

    rows: torch.Tensor  # [R] int64 rows of the flat batch this group answers, in order
    take: torch.Tensor  # [B * Q] int64 rows of q fed to the call (padding repeats a row)
    real: torch.Tensor  # [R] int64 rows of the call's flat output that are `rows`
    batch: int
    queries: int  # query rows per batch element, padding included
    mask: BlockMask


def page_positions(meta: AttentionMetadata, page_size: int, num_pages: int) -> np.ndarray:
    """``[num_pages]`` int32: each page's position in the sequences of the step (in pages),
    `UNPLACED` for pages none of them holds. Raises ValueError if two sequences hold one
    page at two positions."""
    pos = np.full(num_pages, UNPLACED, dtype=np.int32)
    for s, ctx in enumerate(meta.context_lens):
        pages = meta.table_on_host(s)[: cdiv(ctx, page_size)]
        order = np.arange(len(pages), dtype=np.int32)
        seen = pos[pages]
        if np.any((seen != UNPLACED) & (seen != order)):
            raise ValueError(f"sequence {s} holds a page at another position than a sibling")
        pos[pages] = order
    return pos


def flex_groups(
    meta: AttentionMetadata,
    singles: list[int],
    multis: list[int],
    page_size: int,
    num_pages: int,
) -> list[FlexGroup]:
    """The decode rows of `singles` as one group, and one group per sequence of `multis`."""
    device = meta.positions.device
    page_pos = torch.from_numpy(page_positions(meta, page_size, num_pages)).to(device)
    positions = meta.positions_on_host()
    groups = []
    if singles:
        groups.append(_decode_group(meta, singles, positions, page_size, num_pages, page_pos))
    for s in multis:
        groups.append(_runs_group(meta, s, positions, page_size, num_pages, page_pos))
    return groups


def _decode_group(
    meta: AttentionMetadata,
    seqs: list[int],
    positions: np.ndarray,
    page_size: int,
    num_pages: int,
    page_pos: torch.Tensor,
) -> FlexGroup:
    batch = batch_bucket(len(seqs))
    rows = np.array([meta.query_starts[s] for s in seqs], dtype=np.int64)
    q_pos = np.full((batch, 1), -1, dtype=np.int32)
    q_pos[: len(seqs), 0] = positions[rows]
    tables = [meta.table_on_host(s) for s in seqs]
    take = np.concatenate([rows, np.full(batch - len(seqs), rows[0], dtype=np.int64)])
    return _group(rows, take, np.arange(len(seqs)), q_pos, tables, page_size, num_pages,
                  page_pos)  # fmt: skip


def _runs_group(
    meta: AttentionMetadata,
    s: int,
    positions: np.ndarray,
    page_size: int,
    num_pages: int,
    page_pos: torch.Tensor,
) -> FlexGroup:
    start, end = meta.query_starts[s], meta.query_starts[s + 1]
    n = end - start
    padded = cdiv(n, QUERY_BLOCK) * QUERY_BLOCK
    rows = np.arange(start, end, dtype=np.int64)
    q_pos = np.full((1, padded), -1, dtype=np.int32)
    q_pos[0, :n] = positions[start:end]
    take = np.concatenate([rows, np.full(padded - n, start, dtype=np.int64)])
    return _group(rows, take, np.arange(n), q_pos, [meta.table_on_host(s)], page_size,
                  num_pages, page_pos)  # fmt: skip


def _group(
    rows: np.ndarray,
    take: np.ndarray,
    real: np.ndarray,
    q_pos: np.ndarray,
    tables: list[np.ndarray],
    page_size: int,
    num_pages: int,
    page_pos: torch.Tensor,
) -> FlexGroup:
    """Block lists: batch element b's query block j reads the pages of its table up to the
    block's last position. Pages that end at or before the block's first position are
    visible to every query in it: listed as full, the kernel skips the mask there."""
    batch, queries = q_pos.shape
    q_blocks = cdiv(queries, QUERY_BLOCK)
    full = np.zeros((batch, 1, q_blocks), dtype=np.int32)  # pages 0 .. full-1 of the table
    ends = np.zeros((batch, 1, q_blocks), dtype=np.int32)  # partial: pages full .. ends-1
    for b in range(len(tables)):
        for j in range(q_blocks):
            block = q_pos[b, j * QUERY_BLOCK : (j + 1) * QUERY_BLOCK]
            real_pos = block[block >= 0]
            if len(real_pos):
                full[b, 0, j], ends[b, 0, j] = page_bounds(
                    int(real_pos.min()), int(real_pos.max()), page_size
                )
    device = page_pos.device
    # one column per page of the pool: Inductor's CPU template requires it, and one width
    # keeps the compiled kernels to one per (batch bucket, query blocks) (`MAX_COMPILES`)
    width = num_pages
    partial_ids = np.zeros((batch, 1, q_blocks, width), dtype=np.int32)
    full_ids = np.zeros((batch, 1, q_blocks, width), dtype=np.int32)
    for b, table in enumerate(tables):
        for j in range(q_blocks):
            lo, hi = int(full[b, 0, j]), int(ends[b, 0, j])
            full_ids[b, 0, j, :lo] = table[:lo]
            partial_ids[b, 0, j, : hi - lo] = table[lo:hi]
    on = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    mask = BlockMask.from_kv_blocks(
        on(ends - full),
        on(partial_ids),
        on(full),
        on(full_ids),
        BLOCK_SIZE=(QUERY_BLOCK, page_size),
        mask_mod=position_mask(page_pos, on(q_pos), page_size),
        seq_lengths=(queries, num_pages * page_size),
        compute_q_blocks=False,  # forward only: the transposed lists serve the backward
    )
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    return FlexGroup(to(rows), to(take), to(real), batch, queries, mask)


def page_bounds(first: int, last: int, page_size: int) -> tuple[int, int]:
    """For queries at positions ``first .. last``: the pages ``0 .. full-1`` every one of
    them sees whole (no mask), and ``end``, so pages ``full .. end-1`` are read masked."""
    return (first + 1) // page_size, last // page_size + 1


def position_mask(
    page_pos: torch.Tensor, q_pos: torch.Tensor, page_size: int
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    def visible(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return page_pos[kv // page_size] * page_size + kv % page_size <= q_pos[b, q]

    return visible


def batch_bucket(n: int) -> int:
    """The power of two at or above `n`: compiled shapes are reused across steps."""
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _compiled() -> Callable[..., torch.Tensor]:
    import torch._dynamo.config as dynamo_config

    # one compiled kernel per (batch bucket, query blocks): more than dynamo's default 8.
    # Past the limit dynamo would run flex uncompiled, which ignores the block lists and
    # scores every slot of the pool: an error is the better outcome
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, MAX_COMPILES)
    dynamo_config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention, dynamic=False, fullgraph=True)  # type: ignore[return-value]


def attend_flex(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, group: FlexGroup
) -> torch.Tensor:
    """The group's rows of `q` ``[T, heads, D]`` over the pool; returns ``[R, heads, D]``
    in the order of `group.rows`. Query head h reads KV head ``h // ratio``."""
    heads, dim = q.shape[1], q.shape[2]
    queries = q.index_select(0, group.take).view(group.batch, group.queries, heads, dim)
    keys = k_cache.permute(1, 0, 2).unsqueeze(0)  # [1, Hkv, slots, D]: a view of the pool
    values = v_cache.permute(1, 0, 2).unsqueeze(0)
    options = _kernel_options(q.device, group.mask.BLOCK_SIZE[1])
    out = _compiled()(queries.transpose(1, 2), keys, values, block_mask=group.mask,
                      enable_gqa=True, kernel_options=options)  # fmt: skip
    flat = out.transpose(1, 2).reshape(group.batch * group.queries, heads, dim)
    return flat.index_select(0, group.real)


def _kernel_options(device: torch.device, page_size: int) -> dict[str, int] | None:
    # a Triton tile may not straddle two pages: KV tiles no wider than a page
    if device.type == "cuda" and page_size < 64:
        return {"BLOCK_N": page_size}
    return None
