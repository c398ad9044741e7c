"""`gemm.PackedLinear`: oneDNN's packed weight for every float32 product of 2 rows or more,
MKL's matrix-vector product for one row."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from penelope_engine.model import gemm
from penelope_engine.model.gemm import PackedLinear

pytestmark = pytest.mark.skipif(not gemm.available(), reason="torch built without oneDNN")


def _weight(out: int = 96, inp: int = 64) -> torch.Tensor:
    return torch.randn(out, inp, generator=torch.Generator().manual_seed(0))


def test_decode_and_prefill_rows_match_mkl_to_float32_rounding() -> None:
    w, lin = _weight(), PackedLinear()
    for rows, decode in ((2, True), (8, True), (40, True), (8, False), (300, False)):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(lin(x, w, decode), F.linear(x, w), atol=1e-5, rtol=1e-5)
    assert lin._packed is not None  # the packed path ran


def test_a_row_is_the_same_whatever_the_rows_beside_it() -> None:
    """A recomputed hole and the full prefill round alike: from 2 rows, a row's value does not
    depend on how many rows share its product."""
    w, lin = _weight(160, 96), PackedLinear()
    x = torch.randn(4500, 96)  # more than two `MAX_ROWS` slices
    whole = lin(x, w, decode=False)
    torch.testing.assert_close(whole, F.linear(x, w), atol=1e-5, rtol=1e-5)
    for start, rows in ((0, 2), (3, 5), (9, 8), (20, 33), (100, 256), (199, 501), (7, 2100)):
        assert torch.equal(lin(x[start : start + rows], w, False), whole[start : start + rows])


def test_onednn_sees_a_bounded_set_of_row_counts() -> None:
    """oneDNN keeps a primitive per row count: every length maps onto 47 of them, and the
    slices cover the rows exactly once."""
    seen: set[int] = set()
    for rows in range(2, 3 * gemm.MAX_ROWS + 5):
        plan = gemm.packed_rows(rows)
        seen.update(plan)
        assert sum(min(p, rows - gemm.MAX_ROWS * i) for i, p in enumerate(plan)) == rows
        assert all(p <= gemm.MAX_ROWS for p in plan)
    assert len(seen) == gemm.EXACT_ROWS - 1 + gemm.MAX_ROWS // gemm.ROW_BUCKET


def test_one_row_is_mkl_bit_for_bit_and_packs_nothing() -> None:
    w, lin = _weight(), PackedLinear()
    for decode in (True, False):
        x = torch.randn(1, 64)
        assert torch.equal(lin(x, w, decode), F.linear(x, w))
    assert lin._packed is None


def test_the_packed_copy_follows_the_weight() -> None:
    w, lin = _weight(), PackedLinear()
    x = torch.randn(4, 64)
    before = lin(x, w, decode=True)
    w.mul_(2.0)  # a loader copying into the weight: its version moves
    torch.testing.assert_close(lin(x, w, decode=True), 2 * before, atol=1e-5, rtol=1e-5)
    other = _weight() + 1.0  # another tensor (a move, a cast)
    torch.testing.assert_close(lin(x, other, True), F.linear(x, other), atol=1e-5, rtol=1e-5)


def test_other_dtypes_and_a_disabled_linear_keep_f_linear() -> None:
    x, w = torch.randn(4, 64), _weight()
    assert torch.equal(PackedLinear(enabled=False)(x, w, True), F.linear(x, w))
    xb, wb = x.bfloat16(), w.bfloat16()
    assert torch.equal(PackedLinear()(xb, wb, True), F.linear(xb, wb))


def test_prepare_decode_makes_the_copies_of_the_layers_a_decode_step_calls(
    tiny_qwen3: Any,
) -> None:
    model = tiny_qwen3.model
    model.prepare_decode()
    layer = model.model.layers[0]
    called = [layer.self_attn.gemm, layer.self_attn.o_proj.gemm, layer.mlp.gemm,
              layer.mlp.down_proj.gemm, model.lm_head.gemm]  # fmt: skip
    assert all(g._packed is not None for g in called)
    unused = [layer.self_attn.q_proj.gemm, layer.mlp.up_proj.gemm]  # views inside fused weights
    assert all(g._packed is None for g in unused)


def test_prepare_primes_every_row_count_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN's primitives are made at start-up for every row count `packed_rows` can give, once
    per weight shape, so memory does not step up as new prompt lengths arrive."""
    seen: list[tuple[int, int]] = []
    real = gemm._onednn

    def spy(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return real(x, packed)

    monkeypatch.setattr(gemm, "_onednn", spy)
    monkeypatch.setattr(gemm, "_PRIMED", set())
    PackedLinear().prepare(_weight(48, 32))
    assert sorted({r for r, _ in seen}) == sorted(set(gemm.ROW_COUNTS))
    assert {r for rows in range(2, 5000) for r in gemm.packed_rows(rows)} == set(gemm.ROW_COUNTS)
    seen.clear()
    PackedLinear().prepare(_weight(48, 32))  # the same shape: nothing more to make
    assert seen == []
    monkeypatch.setattr(gemm, "VOCAB_OUT", 40)  # a vocabulary projection: logits rows only
    PackedLinear().prepare(_weight(64, 32))
    assert {r for r, _ in seen} == set(range(2, gemm.EXACT_ROWS + 1))
