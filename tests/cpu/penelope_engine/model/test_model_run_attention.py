"""A sequence's queries attended in pieces, each over its own key prefix, equal one masked
call over the whole [Q, ctx] rectangle; pieces follow the runs of positions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from penelope_engine.model.attention import GatherScratch, build_metadata, context_slots
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention
from penelope_engine.model.run_attention import (
    CALL_COST,
    MaskFolder,
    RunsGroup,
    attend_runs,
    pieces_of,
    runs_group,
)

PAGE = 16
HEADS, KV_HEADS, DIM = 6, 2, 16
RATIO = HEADS // KV_HEADS


def _rectangle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: list[int],
               table: torch.Tensor, ctx: int) -> torch.Tensor:  # fmt: skip
    """One SDPA call over all `ctx` keys with the full mask: the path pieces replace."""
    slots = context_slots(table, ctx, PAGE)
    kg = k.index_select(0, slots).transpose(0, 1)[None].float()  # [1, Hkv, C, D]
    vg = v.index_select(0, slots).transpose(0, 1)[None].float()
    pos = torch.tensor(positions)
    visible = torch.arange(ctx)[None, :] <= pos[:, None]
    mask = torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))
    qg = q.transpose(0, 1)[None].float()  # [1, H, Q, D]
    out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, enable_gqa=True)
    return out[0].transpose(0, 1)


def test_runs_are_cut_at_gaps_and_every_max_rows_and_see_keys_to_their_end() -> None:
    positions = np.array([*range(40, 100), *range(300, 310)])
    assert pieces_of(positions, max_rows=32) == [(0, 32, 72), (32, 60, 100), (60, 70, 310)]


def test_neighbours_merge_when_one_call_costs_less_than_two() -> None:
    # two 4-row holes a few keys apart: one call over both beats two calls
    close = np.array([*range(100, 104), *range(110, 114)])
    assert pieces_of(close) == [(0, 8, 114)]
    # a long run far before a short one: merging would make the long run read every key
    far = np.array([*range(0, 200), *range(5000, 5004)])
    assert pieces_of(far) == [(0, 200, 200), (200, 204, 5004)]
    assert 200 * 5004 + CALL_COST > 200 * 200 + 4 * 5004 + 2 * CALL_COST


@pytest.mark.parametrize(
    "positions",
    [
        [*range(64, 640), *range(900, 940)],  # a hole after a shared prefix, then new tokens
        [*range(300, 940)],  # a later prefill chunk: one run after cached keys
        [*range(5, 9), *range(40, 44), *range(700, 720), *range(939, 940)],  # scattered
    ],
)
def test_pieces_equal_one_masked_call_over_the_whole_context(positions: list[int]) -> None:
    ctx = 940
    gen = torch.Generator().manual_seed(7)
    table = torch.randperm(80, generator=gen)[: -(-ctx // PAGE)]
    k = torch.randn(80 * PAGE, KV_HEADS, DIM, generator=gen)
    v = torch.randn(80 * PAGE, KV_HEADS, DIM, generator=gen)
    q = torch.randn(len(positions), HEADS, DIM, generator=gen)
    meta = build_metadata([positions], [table], [ctx], PAGE)
    group = runs_group(meta, 0, PAGE, MaskFolder(RATIO, torch.float32))
    assert group.pieces[-1].keys == ctx and all(p.keys <= ctx for p in group.pieces)
    got = attend_runs(q, k, v, group, GatherScratch())
    torch.testing.assert_close(got, _rectangle(q, k, v, positions, table, ctx), atol=2e-6, rtol=0)
    plan = AttentionPlan.build(meta, PAGE, RATIO, torch.float32)
    assert isinstance(plan.groups[0], RunsGroup) and len(plan.groups) == 1
    assert torch.equal(paged_attention(q, k, v, plan), got)


def test_a_hole_s_pieces_read_about_half_the_keys_of_the_rectangle() -> None:
    # issue 49's returning turn: a 2K hole at 2K of a 6K context, then 64 new tokens
    positions = np.array([*range(2048, 4096), *range(6144, 6208)])
    pieces = pieces_of(positions)
    work = sum((hi - lo) * keys for lo, hi, keys in pieces)
    assert work < 0.6 * len(positions) * 6208
