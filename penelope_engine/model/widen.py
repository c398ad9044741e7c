"""Multi-row bf16 / fp16 products on a CPU without bf16 / fp16 arithmetic, in float32.

On such a CPU (AVX2; no AVX512-BF16, AMX or AVX-NE-CONVERT, so oneDNN says
`_is_mkldnn_bf16_supported()` is false) torch emulates a bfloat16 GEMM at
about 8 GFLOP/s where float32 runs at 60, and bfloat16 SDPA at 0.6x its
float32 speed. So a prefill chunk (or a fused recompute) widens its operands
to float32, multiplies there, and rounds the result to the model's dtype:

- linear layers: the native kernel accumulates in float32 and rounds once
  too, so the widened product differs from it by summation order only (one
  element in about 5,000 by one ulp, on SmolLM2's shapes);
- attention: the native kernel rounds the softmax weights to bf16 before
  multiplying them with V; the widened one keeps them in float32, so it is
  the closer of the two to a float64 forward.

Decode steps keep the native kernels: a batch of a few rows is bound by
reading the weights, which bf16 halves, and converting them each step would
cost more than it saves. A CPU with native bf16 (or fp16) arithmetic, and
any GPU, keep the native kernels everywhere.
"""

from __future__ import annotations

import torch

WIDEN_ROWS = 4  # below this many rows, widening the weight costs more than the product


def _native_support() -> dict[torch.dtype, bool]:
    mkldnn = torch.ops.mkldnn
    if not torch.backends.mkldnn.is_available():
        return {torch.bfloat16: False, torch.float16: False}
    return {
        torch.bfloat16: bool(mkldnn._is_mkldnn_bf16_supported()),  # noqa: SLF001 - torch: oneDNN's bf16 support
        torch.float16: bool(mkldnn._is_mkldnn_fp16_supported()),  # noqa: SLF001 - torch: oneDNN's fp16 support
    }


_NATIVE = _native_support()


def widens(tensor: torch.Tensor) -> bool:
    """Whether multi-row products over `tensor`'s dtype run widened to float32 here."""
    return tensor.device.type == "cpu" and not _NATIVE.get(tensor.dtype, True)


def compute_dtype(dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.dtype:
    """The dtype a multi-row product of `dtype` operands is computed in on `device`."""
    if torch.device(device).type == "cpu" and not _NATIVE.get(dtype, True):
        return torch.float32
    return dtype
