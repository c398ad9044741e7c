"""A fresh prompt's chunk attends without a mask, and equals the masked attention."""

from __future__ import annotations

import pytest
import torch

from penelope_engine.model.attention import build_metadata
from penelope_engine.model.causal_attention import CausalGroup, attend_causal, causal_group
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention
from penelope_engine.model.run_attention import MaskFolder, attend_runs, runs_group

PAGE = 4
HEADS, KV_HEADS, DIM = 6, 2, 16


def _pool(slots: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    k = torch.randn(slots, KV_HEADS, DIM, generator=gen).to(dtype)
    v = torch.randn(slots, KV_HEADS, DIM, generator=gen).to(dtype)
    return k, v


@pytest.mark.parametrize("queries", [2, 9, 30])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunk_attention_matches_the_masked_path(queries: int, dtype: torch.dtype) -> None:
    ctx = queries
    table = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])  # scattered pages
    meta = build_metadata([list(range(ctx))], [table], [ctx], PAGE)
    group = causal_group(meta, 0, PAGE)
    assert isinstance(group, CausalGroup)
    k, v = _pool(8 * PAGE, dtype)
    q = torch.randn(queries, HEADS, DIM, generator=torch.Generator().manual_seed(4)).to(dtype)
    masked = attend_runs(q, k, v, runs_group(meta, 0, PAGE, MaskFolder(3, dtype)))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(attend_causal(q, k, v, group), masked, atol=tol, rtol=0)


def test_queries_that_are_not_the_context_tail_take_the_masked_path() -> None:
    table = torch.arange(8)
    holes = build_metadata([[2, 3, 4, 10, 11]], [table], [12], PAGE)  # a hole, then new tokens
    assert causal_group(holes, 0, PAGE) is None
    short = build_metadata([[4, 5, 6]], [table], [10], PAGE)  # keys past the last query
    assert causal_group(short, 0, PAGE) is None
    tail = build_metadata([[6, 7, 8, 9]], [table], [10], PAGE)  # cached keys before the chunk
    assert causal_group(tail, 0, PAGE) is None
    plan = AttentionPlan.build(holes, PAGE, 3, torch.float32)
    assert not any(isinstance(g, CausalGroup) for g in plan.groups)


def test_a_plan_mixes_decode_rows_chunks_and_fused_recompute() -> None:
    tables = [torch.arange(4), torch.arange(4, 8), torch.arange(8, 12)]
    meta = build_metadata([[9], list(range(0, 6)), [1, 2, 7, 8]], tables, [10, 6, 9], PAGE)
    kinds = [type(g).__name__ for g in AttentionPlan.build(meta, PAGE, 3, torch.float32).groups]
    assert kinds == ["AttentionGroup", "CausalGroup", "RunsGroup"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_one_group_plan_skips_the_gather_and_matches_a_mixed_plan(dtype: torch.dtype) -> None:
    # decode rows alone (one group: queries used in place, no scatter) and the same rows
    # beside a fresh chunk (gathered and scattered back) give bit-identical outputs
    tables = [torch.arange(4), torch.arange(4, 8), torch.arange(8, 12)]
    k, v = _pool(12 * PAGE, dtype)
    q = torch.randn(8, HEADS, DIM, generator=torch.Generator().manual_seed(5)).to(dtype)
    alone = build_metadata([[9], [13]], tables[:2], [10, 14], PAGE)
    plan = AttentionPlan.build(alone, PAGE, 3, dtype)
    assert len(plan.groups) == 1 and plan.groups[0].all_rows  # type: ignore[union-attr]
    mixed = build_metadata([[9], [13], list(range(6))], tables, [10, 14, 6], PAGE)
    mixed_out = paged_attention(q, k, v, AttentionPlan.build(mixed, PAGE, 3, dtype))
    assert torch.equal(paged_attention(q[:2], k, v, plan), mixed_out[:2])
    chunk = build_metadata([list(range(6))], tables[2:], [6], PAGE)
    chunk_out = paged_attention(q[2:], k, v, AttentionPlan.build(chunk, PAGE, 3, dtype))
    assert torch.equal(chunk_out, mixed_out[2:])
