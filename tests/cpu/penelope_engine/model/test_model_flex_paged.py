"""FlexAttention straight over the pool (`flex_paged`) answers every query as the SDPA
reference does: decode rows of ragged contexts that share prefix pages, holes plus new
tokens, later prefill chunks, and a step that mixes them with a first chunk. The kernel
is compiled (Inductor's CPU template here), the path CUDA runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from penelope_engine.config import EngineConfig
from penelope_engine.errors import UnknownNameError
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.backends import resolve_backend
from penelope_engine.model.flex_paged import FlexGroup, page_positions
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention

PAGE = 16
HEADS, KV_HEADS, DIM = 6, 2, 16
RATIO = HEADS // KV_HEADS
POOL_PAGES = 96


def _pool(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(POOL_PAGES * PAGE, KV_HEADS, DIM, generator=gen)
    v = torch.randn(POOL_PAGES * PAGE, KV_HEADS, DIM, generator=gen)
    return k, v, gen


def _both(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta) -> tuple[torch.Tensor, ...]:  # type: ignore[no-untyped-def]
    ref = paged_attention(q, k, v, AttentionPlan.build(meta, PAGE, RATIO, torch.float32),
                          kernels=False)  # fmt: skip
    plan = AttentionPlan.build(meta, PAGE, RATIO, torch.float32, "flex", POOL_PAGES)
    return paged_attention(q, k, v, plan), ref, plan  # type: ignore[return-value]


def test_decode_rows_of_ragged_contexts_sharing_prefix_pages() -> None:
    k, v, gen = _pool(1)
    shared = torch.tensor([40, 3, 77])  # a prefix of three pages every sequence holds
    tables = [
        torch.cat([shared, torch.tensor([5, 9, 60])]),
        torch.cat([shared, torch.tensor([11])]),
        torch.cat([shared, torch.tensor([12, 13, 14, 15, 16])]),
    ]
    ctx = [93, 50, 128]  # the last page part-full, exactly one page on, full
    meta = build_metadata([[c - 1] for c in ctx], tables, ctx, PAGE)
    q = torch.randn(3, HEADS, DIM, generator=gen)
    got, ref, plan = _both(q, k, v, meta)
    (group,) = plan.groups
    assert isinstance(group, FlexGroup) and group.batch == 4  # padded to a power of two
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=0)


@pytest.mark.parametrize(
    "positions",
    [
        [*range(48, 300), *range(400, 420)],  # a hole after a shared prefix, then new tokens
        [*range(160, 420)],  # a later prefill chunk over cached keys
        [*range(5, 9), *range(40, 44), *range(419, 420)],  # scattered holes, one new token
    ],
)
def test_holes_and_new_tokens_in_one_call(positions: list[int]) -> None:
    k, v, gen = _pool(2)
    ctx = 420
    table = torch.randperm(POOL_PAGES, generator=gen)[: -(-ctx // PAGE)]
    meta = build_metadata([positions], [table], [ctx], PAGE)
    q = torch.randn(len(positions), HEADS, DIM, generator=gen)
    got, ref, _ = _both(q, k, v, meta)
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=0)


def test_a_step_mixing_decode_holes_and_a_first_chunk() -> None:
    k, v, gen = _pool(3)
    perm = torch.randperm(POOL_PAGES, generator=gen)
    tables = [perm[0:8], perm[8:12], perm[12:16], perm[16:19]]
    positions = [[100], [*range(10, 30), 63], [*range(0, 50)], [40]]
    ctx = [101, 64, 50, 41]
    meta = build_metadata(positions, tables, ctx, PAGE)
    q = torch.randn(sum(map(len, positions)), HEADS, DIM, generator=gen)
    got, ref, plan = _both(q, k, v, meta)
    kinds = sorted(type(g).__name__ for g in plan.groups)
    assert kinds == ["CausalGroup", "FlexGroup", "FlexGroup"]
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=0)


def test_a_page_held_at_two_positions_is_refused() -> None:
    meta = build_metadata([[20], [20]], [torch.tensor([4, 5]), torch.tensor([5, 4])], [21, 21],
                          PAGE)  # fmt: skip
    with pytest.raises(ValueError, match="another position"):
        page_positions(meta, PAGE, 8)
    fine = build_metadata([[20], [30]], [torch.tensor([4, 5]), torch.tensor([4, 6])], [21, 31],
                          PAGE)  # fmt: skip
    pos = page_positions(fine, PAGE, 8)
    assert pos[[4, 5, 6]].tolist() == [0, 1, 1] and int(np.sum(pos < 8)) == 3


def test_backend_names_and_auto() -> None:
    assert resolve_backend("auto", "cuda:1") == "flex"
    assert resolve_backend("auto", "cpu") == "pieces"
    with pytest.raises(UnknownNameError, match="pieces, sdpa, flex"):
        EngineConfig(attention="paged")
