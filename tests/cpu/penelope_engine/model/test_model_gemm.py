"""`gemm.PackedLinear`: oneDNN's packed weight for decode batches, MKL everywhere else."""

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


def test_a_decode_batch_matches_mkl_to_float32_rounding() -> None:
    w, lin = _weight(), PackedLinear()
    for rows in (2, 8, gemm.SMALL_ROWS):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(lin(x, w, decode=True), F.linear(x, w), atol=1e-5, rtol=1e-5)
    assert lin._packed is not None  # the packed path ran


def test_prefill_one_row_and_large_batches_are_mkl_bit_for_bit() -> None:
    w, lin = _weight(), PackedLinear()
    for rows, decode in ((8, False), (1, True), (gemm.SMALL_ROWS + 1, True)):
        x = torch.randn(rows, 64)
        assert torch.equal(lin(x, w, decode), F.linear(x, w))
    assert lin._packed is None  # none of them packed the weight


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
