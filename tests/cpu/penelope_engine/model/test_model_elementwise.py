"""The trimmed elementwise ops (`apply_rope`, `RMSNorm`) against HF's formulas, bit for bit.

They compute the same roundings in the same order with fewer temporaries
(docs/results.md 3.5), so they must equal the textbook expressions exactly, in
every dtype the engine serves, on the strided views the decoder passes them.
"""

from __future__ import annotations

import pytest
import torch

from penelope_engine.model.layers import RMSNorm
from penelope_engine.model.rope import RotaryCache, apply_rope, rotate_half

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_is_hfs_rotate_half_formula_bit_for_bit(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    heads, dim = 12, 64
    qkv = torch.randn(300, (heads + 3) * dim, generator=gen).to(dtype)
    x = qkv[:, : heads * dim].view(300, heads, dim)  # a strided view, as the decoder has
    positions = torch.randint(0, 8192, (300,), generator=gen)
    cos, sin = RotaryCache(dim, 1e5, 8192).cos_sin(positions, dtype)
    assert torch.equal(apply_rope(x, cos, sin), x * cos + rotate_half(x) * sin)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_is_hfs_formula_bit_for_bit(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    norm = RMSNorm(96, 1e-6, dtype=dtype)
    norm.weight.data = torch.randn(96, generator=gen).to(dtype)
    x = (3 * torch.randn(50, 4, 96, generator=gen)).to(dtype)
    before = x.clone()
    x32 = x.float()
    ref = norm.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
    out = norm(x)
    assert out.dtype == dtype and torch.equal(out, ref)
    assert torch.equal(x, before)  # the input is left alone (float32's x32 is x itself)
