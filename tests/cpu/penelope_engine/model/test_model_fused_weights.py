"""Fused q/k/v and gate/up weights stay the named HF weights, through loads and casts."""

from __future__ import annotations

import torch
from model_testkit import random_model, small_configs

from penelope_engine.model.layers import Linear, fuse_rows


def test_fused_weights_are_views_that_loading_fills() -> None:
    a, b = Linear(8, 3), Linear(8, 5)
    fused = fuse_rows(a, b)
    with torch.no_grad():
        a.weight.copy_(torch.ones(3, 8))
        b.weight.copy_(torch.full((5, 8), 2.0))
    assert fused.shape == (8, 8)
    assert torch.equal(fused[:3], torch.ones(3, 8)) and torch.equal(fused[3:], 2 * torch.ones(5, 8))


def test_a_dtype_cast_fuses_the_cast_weights_again() -> None:
    model = random_model(small_configs()[0]).to(torch.bfloat16)
    attn = model.model.layers[0].self_attn
    assert attn.qkv.dtype == torch.bfloat16
    assert attn.q_proj.weight.data_ptr() == attn.qkv.data_ptr()
    mlp = model.model.layers[0].mlp
    assert torch.equal(mlp.gate_up[: mlp.intermediate], mlp.gate_proj.weight)
