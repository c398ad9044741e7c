"""`widen`: a prefill's bf16 products run in float32 where the CPU only emulates bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from penelope_engine.model import widen
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.causal_attention import CausalGroup, attend_causal, causal_group
from penelope_engine.model.gemm import PackedLinear
from penelope_engine.model.paged_attention import AttentionGroup, AttentionPlan, paged_attention
from penelope_engine.model.run_attention import RunsGroup

PAGE = 4
HEADS, KV_HEADS, DIM = 6, 2, 16
EMULATED = widen.compute_dtype(torch.bfloat16) == torch.float32
needs_emulated = pytest.mark.skipif(not EMULATED, reason="this CPU has bf16 arithmetic")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_float32_is_never_widened() -> None:
    assert widen.compute_dtype(torch.float32) == torch.float32
    assert not widen.widens(torch.zeros(2, dtype=torch.float32))


@needs_emulated
def test_a_prefill_linear_is_the_float32_product_rounded_once() -> None:
    x = torch.randn(64, 96, generator=_gen(0)).bfloat16()
    w = (0.1 * torch.randn(80, 96, generator=_gen(1))).bfloat16()
    got = PackedLinear()(x, w, decode=False)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, F.linear(x.float(), w.float()).bfloat16())
    native = F.linear(x, w)  # the emulated kernel: float32 sums, one rounding, another order
    assert (got != native).float().mean() < 0.01
    torch.testing.assert_close(got.float(), native.float(), atol=2e-2, rtol=1e-2)


@needs_emulated
def test_decode_rows_and_tiny_chunks_keep_the_native_kernel() -> None:
    w = torch.randn(80, 96, generator=_gen(1)).bfloat16()
    for rows, decode in ((8, True), (1, True), (widen.WIDEN_ROWS - 1, False)):
        x = torch.randn(rows, 96, generator=_gen(rows)).bfloat16()
        assert torch.equal(PackedLinear()(x, w, decode), F.linear(x, w))


def _pool(slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = torch.randn(slots, KV_HEADS, DIM, generator=_gen(3))
    v = torch.randn(slots, KV_HEADS, DIM, generator=_gen(4))
    return k, v


@needs_emulated
@pytest.mark.parametrize("fresh", [True, False])
def test_chunk_attention_in_bf16_is_closer_to_float64_than_the_native_kernel(
    fresh: bool,
) -> None:
    # a fresh chunk (causal kernel) and a chunk after cached keys (masked group)
    table = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])
    positions = list(range(30)) if fresh else list(range(12, 30))
    meta = build_metadata([positions], [table], [30], PAGE)
    k32, v32 = _pool(8 * PAGE)
    q32 = torch.randn(len(positions), HEADS, DIM, generator=_gen(5))
    k, v, q = k32.bfloat16(), v32.bfloat16(), q32.bfloat16()
    plan = AttentionPlan.build(meta, PAGE, HEADS // KV_HEADS, torch.bfloat16)
    got = paged_attention(q, k, v, plan)
    assert got.dtype == torch.bfloat16
    ref = paged_attention(
        q.double(), k.double(), v.double(), AttentionPlan.build(meta, PAGE, 3, torch.float64)
    )
    err = (got.double() - ref).abs().max()
    assert err < 2e-2
    if fresh:  # the native causal kernel rounds its softmax weights to bf16
        group = causal_group(meta, 0, PAGE)
        assert group is not None and torch.equal(attend_causal(q, k, v, group), got)
        assert err <= (_native_causal(q, k, v, group).double() - ref).abs().max()
    else:  # the masked group is planned in float32
        (only,) = plan.groups
        assert isinstance(only, RunsGroup)
        assert all(piece.mask.dtype == torch.float32 for piece in only.pieces)


def _native_causal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: CausalGroup
) -> torch.Tensor:
    qg = q[group.start : group.end].transpose(0, 1)[None]
    kg = group.keys.gather(k).transpose(1, 2)
    vg = group.keys.gather(v).transpose(1, 2)
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)
    return out[0].transpose(0, 1)


@needs_emulated
def test_decode_attention_keeps_the_bf16_mask() -> None:
    tables = [torch.arange(4), torch.arange(4, 8)]
    meta = build_metadata([[9], [13]], tables, [10, 14], PAGE)
    (only,) = AttentionPlan.build(meta, PAGE, 3, torch.bfloat16).groups
    assert isinstance(only, AttentionGroup) and only.mask.dtype == torch.bfloat16
