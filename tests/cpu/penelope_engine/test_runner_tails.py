"""`unwritten_tails`: the slots of a step's last page that hold no position yet are zeroed
before a whole-page kernel (flex) reads them; cached positions past the step are kept.
A NaN left in a freed page's tail would otherwise poison its next owner's attention."""

from __future__ import annotations

import numpy as np
import torch

from penelope_engine.model.attention import build_metadata
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import unwritten_tails
from penelope_engine.sched.sequence import BatchItem, Sequence

PAGE = 4


def _seq(n_tokens: int, table: list[int], todo: list[int]) -> Sequence:
    seq = Sequence(GenerateRequest("r", (1,)), np.empty(0, np.uint64), list(range(n_tokens)))
    seq.page_table = np.array(table, np.int32)
    seq.todo = np.array(todo, np.int64)
    return seq


def test_a_decode_steps_tail_past_its_tokens() -> None:
    seq = _seq(10, [7, 2, 5], [])  # positions 8, 9 in page 5; 10, 11 hold nothing
    item = BatchItem(seq, np.array([9]), True)
    assert unwritten_tails([item], PAGE).tolist() == [5 * PAGE + 2, 5 * PAGE + 3]
    full = BatchItem(_seq(12, [7, 2, 5], []), np.array([11]), True)
    assert unwritten_tails([full], PAGE).tolist() == []  # the page is full: nothing to zero


def test_a_chunk_zeroes_positions_a_later_chunk_computes_and_keeps_cached_ones() -> None:
    # a hole 4..9 recomputed in two chunks (4..5, then 6..9); positions 10, 11 cached
    seq = _seq(12, [0, 3, 6], [4, 5, 6, 7, 8, 9])
    first = BatchItem(seq, np.array([4, 5]), False)
    assert unwritten_tails([first], PAGE).tolist() == [3 * PAGE + 2, 3 * PAGE + 3]
    second = BatchItem(seq, np.array([6, 7, 8, 9]), False)
    assert unwritten_tails([second], PAGE).tolist() == []  # 10, 11 are cached: kept


def test_a_nan_in_a_freed_tail_poisons_flex_unless_zeroed() -> None:
    gen = torch.Generator().manual_seed(0)
    pages, heads, kv_heads, dim = 8, 4, 2, 8
    k = torch.randn(pages * PAGE, kv_heads, dim, generator=gen)
    v = torch.randn(pages * PAGE, kv_heads, dim, generator=gen)
    seq = _seq(10, [6, 1, 3], [])
    v[3 * PAGE + 2 : 4 * PAGE] = float("nan")  # the last page's tail, left by an earlier owner
    meta = build_metadata([[9]], [torch.tensor([6, 1, 3])], [10], PAGE)
    q = torch.randn(1, heads, dim, generator=gen)
    plan = AttentionPlan.build(meta, PAGE, 2, torch.float32, "flex", pages)
    assert torch.isnan(paged_attention(q, k, v, plan)).all()
    tails = torch.from_numpy(unwritten_tails([BatchItem(seq, np.array([9]), True)], PAGE))
    k.index_fill_(0, tails, 0)
    v.index_fill_(0, tails, 0)
    ref = paged_attention(q, k, v, AttentionPlan.build(meta, PAGE, 2, torch.float32, "sdpa"),
                          kernels=False)  # fmt: skip
    torch.testing.assert_close(paged_attention(q, k, v, plan), ref, atol=2e-6, rtol=0)
