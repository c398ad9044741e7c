"""Attention of a flat batch over paged KV.

`AttentionPlan.build` turns one step's `AttentionMetadata` into groups of
sequences attended together; every layer reuses the plan:

- all sequences with a single query (decode steps) form one group: on a CPU
  in float32 the paged kernel reads their keys where they live (`cpu_kernels`);
  otherwise their keys are padded to the longest context and masked per row;
- a sequence whose queries are all of its positions ``0 .. ctx-1`` (a fresh
  prompt's first chunk) is a `CausalGroup`: SDPA's causal kernel, no mask
  (`causal_attention`);
- every other sequence with several queries (fused recompute of holes plus
  new tokens, a later prefill chunk) is a `RunsGroup`: its queries in pieces,
  each over the keys up to its last position (`run_attention`).

That is the `pieces` backend, the CPU's. The `flex` backend (`flex_paged`,
what CUDA runs) answers the decode rows and each multi-query sequence with one
FlexAttention call straight over the pool, through a block mask built from
the page tables: no gather and no dense mask. `sdpa` is `pieces` without the
C kernel: the reference the others are tested against (`backends` names them).

Grouped-query attention folds the query heads that share a KV head into the
query axis (``[G, kv_heads, ratio * Q, D]``), so no kernel sees repeated keys
and any SDPA backend that takes a mask can run it. Masks are built once per
step as additive float masks (0 or -inf) in the dtype the group is computed in
(the model's, or float32 for a multi-query group where `widen` says so), so no
layer converts them again.

A query at position p attends to the keys at positions ``0..p`` of its own
sequence. Keys come from the page table: position ``i`` lives in slot
``page_table[i // page_size] * page_size + i % page_size``, and a group's
keys are gathered a whole page at a time (`KeyPages`), into buffers the plan owns
and every layer of the step reuses (`GatherScratch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from penelope_engine.model import cpu_kernels
from penelope_engine.model.attention import (
    AttentionMetadata,
    GatherScratch,
    KeyPages,
    context_slots,
)
from penelope_engine.model.causal_attention import CausalGroup, attend_causal, causal_group
from penelope_engine.model.flex_paged import FlexGroup, attend_flex, flex_groups
from penelope_engine.model.run_attention import MaskFolder, RunsGroup, attend_runs, runs_group
from penelope_engine.model.widen import compute_dtype

__all__ = ["AttentionPlan", "context_slots", "paged_attention"]


@dataclass(frozen=True)
class AttentionGroup:
    """The step's decode rows, one query per sequence: their rows, key pages and mask."""

    rows: torch.Tensor  # [G] int64 rows of the flat batch
    keys: KeyPages  # the pages of key positions 0 .. C-1 of each sequence (padding: page 0)
    mask: torch.Tensor  # [G, 1, ratio, C] additive: 0 where the key is visible, else -inf
    lens: torch.Tensor  # [G] keys each row sees (its position + 1): the kernel's bound
    all_rows: bool = False  # rows are 0 .. T-1 in order: the queries need no gather


@dataclass(frozen=True)
class AttentionPlan:
    """The groups of one step. A `RunsGroup`'s masks take at most ``ratio * Q * C`` elements
    (its pieces drop the keys past their ends), which the scheduler bounds by chunking
    prefills (`prefill_chunk`, or `solo_prefill_chunk` for a prefill alone in its step; a
    fresh prompt's first chunk is causal and has no mask)."""

    groups: tuple[AttentionGroup | CausalGroup | RunsGroup | FlexGroup, ...]
    # every layer's gathers reuse these buffers: the plan lives for one step (`GatherScratch`)
    scratch: GatherScratch = field(default_factory=GatherScratch, compare=False, repr=False)

    @staticmethod
    def build(
        meta: AttentionMetadata,
        page_size: int,
        gqa_ratio: int,
        dtype: torch.dtype,
        backend: str = "pieces",
        num_pages: int = 0,
    ) -> AttentionPlan:
        """Plan one step; `gqa_ratio` is query heads per KV head, `dtype` the queries' dtype.
        `backend` is resolved (`backends.resolve_backend`); `flex` needs the pool's
        `num_pages`."""
        _check_metadata(meta, page_size)
        if backend == "flex":
            return AttentionPlan._build_flex(meta, page_size, num_pages)
        fold = MaskFolder(gqa_ratio, dtype)
        # several queries of one sequence: a product widened to float32 where `widen` says so
        wide_fold = MaskFolder(gqa_ratio, compute_dtype(dtype, meta.positions.device))
        singles = [s for s in range(meta.num_seqs) if _num_queries(meta, s) == 1]
        groups: list[AttentionGroup | CausalGroup | RunsGroup] = []
        if singles:
            groups.append(_single_query_group(meta, singles, page_size, fold))
        for s in range(meta.num_seqs):
            if _num_queries(meta, s) > 1:
                causal = causal_group(meta, s, page_size)
                groups.append(causal or runs_group(meta, s, page_size, wide_fold))
        return AttentionPlan(tuple(groups))

    @staticmethod
    def _build_flex(meta: AttentionMetadata, page_size: int, num_pages: int) -> AttentionPlan:
        if num_pages < 1:
            raise ValueError("the flex backend needs the pool's page count")
        singles, multis, causal = [], [], []
        for s in range(meta.num_seqs):
            if _num_queries(meta, s) == 1:
                singles.append(s)
            elif (group := causal_group(meta, s, page_size)) is not None:
                causal.append(group)
            else:
                multis.append(s)
        flex = flex_groups(meta, singles, multis, page_size, num_pages)
        return AttentionPlan((*flex, *causal))


def _num_queries(meta: AttentionMetadata, s: int) -> int:
    return meta.query_starts[s + 1] - meta.query_starts[s]


def _check_metadata(meta: AttentionMetadata, page_size: int) -> None:
    num_tokens = int(meta.positions.shape[0])
    if len(meta.query_starts) != meta.num_seqs + 1 or len(meta.page_tables) != meta.num_seqs:
        raise ValueError("query_starts needs num_seqs + 1 entries and page_tables num_seqs")
    if meta.query_starts[0] != 0 or meta.query_starts[-1] != num_tokens:
        raise ValueError(f"query_starts must run from 0 to the {num_tokens} query tokens")
    if int(meta.slot_mapping.shape[0]) != num_tokens:
        raise ValueError("slot_mapping needs one slot per query token")
    for s, (ctx, table) in enumerate(zip(meta.context_lens, meta.page_tables)):
        if _num_queries(meta, s) < 1:
            raise ValueError(f"sequence {s} has no query token")
        if table.shape[0] * page_size < ctx:
            raise ValueError(f"sequence {s}: {table.shape[0]} pages cannot hold {ctx} tokens")


def _single_query_group(
    meta: AttentionMetadata, seqs: list[int], page_size: int, fold: MaskFolder
) -> AttentionGroup:
    device = meta.positions.device
    rows = torch.tensor([meta.query_starts[s] for s in seqs], dtype=torch.int64, device=device)
    lens = [meta.context_lens[s] for s in seqs]
    keys = KeyPages.of([meta.page_tables[s] for s in seqs], lens, page_size)
    width = keys.width
    key_pos = torch.arange(width, device=device)
    visible = (key_pos[None, :] <= meta.positions[rows][:, None]).view(len(seqs), 1, 1, width)
    in_order = seqs == list(range(meta.num_seqs)) and meta.query_starts[-1] == len(seqs)
    seen = meta.positions[rows] + 1
    return AttentionGroup(rows, keys, fold(visible), seen, all_rows=in_order)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: AttentionPlan,
    *,
    kernels: bool = True,
) -> torch.Tensor:
    """Attend queries `q` ``[T, heads, head_dim]`` over the cache; returns ``[T, heads, head_dim]``.

    `k_cache`/`v_cache` are one layer's pool tensors ``[slots, kv_heads, head_dim]``
    that already hold this step's keys and values. Decode rows take the CPU's paged
    kernel where it fits and is built (`cpu_kernels`); `kernels=False` keeps every group
    on SDPA, the reference the kernel is tested against.
    """
    if len(plan.groups) == 1:  # the whole batch in one group (a decode step): no scatter
        return _attend(q, k_cache, v_cache, plan.groups[0], plan.scratch, kernels)
    out = torch.empty_like(q)
    # groups run one after another, so each may reuse the buffers the one before it filled
    for group in plan.groups:
        rows = (group.rows if isinstance(group, (AttentionGroup, FlexGroup))
                else slice(group.start, group.end))  # fmt: skip
        out[rows] = _attend(q, k_cache, v_cache, group, plan.scratch, kernels)
    return out


def _attend(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    group: AttentionGroup | CausalGroup | RunsGroup | FlexGroup,
    scratch: GatherScratch,
    kernels: bool,
) -> torch.Tensor:
    """One group's rows attended, in the group's row order."""
    if isinstance(group, FlexGroup):
        return attend_flex(q, k_cache, v_cache, group)
    if isinstance(group, CausalGroup):
        return attend_causal(q, k_cache, v_cache, group, scratch)
    if isinstance(group, RunsGroup):
        return attend_runs(q, k_cache, v_cache, group, scratch)
    if kernels and _kernel_fits(q, k_cache, group):
        return _attend_kernel(q, k_cache, v_cache, group)
    return _attend_group(q, k_cache, v_cache, group, scratch)


def _attend_group(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    group: AttentionGroup,
    scratch: GatherScratch | None = None,
) -> torch.Tensor:
    """Decode rows by SDPA over their gathered keys: ``[G, Hkv, ratio, D]`` queries."""
    num_seqs = group.keys.num_seqs
    heads, head_dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[1]
    ratio = heads // kv_heads
    # queries [G, H, D] -> [G, Hkv, R, D]; head h uses KV head h // R
    rows = q if group.all_rows else q.index_select(0, group.rows)
    qg = rows.view(num_seqs, kv_heads, ratio, head_dim)
    kg = group.keys.gather(k_cache, scratch, "k").transpose(1, 2)  # [G, Hkv, C, D]
    vg = group.keys.gather(v_cache, scratch, "v").transpose(1, 2)
    wide = group.mask.dtype  # the plan's compute dtype for this group (`widen`)
    if wide != q.dtype:
        qg, kg, vg = qg.to(wide), kg.to(wide), vg.to(wide)
    out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=group.mask).to(q.dtype)
    return out.reshape(num_seqs, heads, head_dim)


def _kernel_fits(q: torch.Tensor, k_cache: torch.Tensor, group: AttentionGroup) -> bool:
    # the kernel gives each thread whole sequences: with fewer sequences than threads,
    # SDPA (which also splits heads) keeps the cores busy
    return (
        torch.get_num_threads() <= group.keys.num_seqs
        and cpu_kernels.fits(q, k_cache, group.keys.page_size)
        and cpu_kernels.available()
    )


def _attend_kernel(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, group: AttentionGroup
) -> torch.Tensor:
    """One query per sequence, straight over the pool (`cpu_kernels.paged_decode`)."""
    rows = q if group.all_rows else q.index_select(0, group.rows)
    pages = group.keys.pages.view(group.keys.num_seqs, -1)
    return cpu_kernels.paged_decode(rows, k_cache, v_cache, pages, group.lens,
                                    group.keys.page_size)  # fmt: skip
