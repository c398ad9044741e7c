"""Building blocks with uninitialized weights (filled by a loader or `tiny.init_random`).

Unlike `torch.nn.Linear`/`Embedding` they skip the random init, which for a
150K-token vocabulary costs seconds; names and layouts match HF's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from penelope_engine.model.gemm import PackedLinear
from penelope_engine.model.weight_formats import Gemm


class Linear(nn.Module):
    """``y = x @ weight.T`` without bias; `weight` is ``[out_features, in_features]``."""

    def __init__(self, in_features: int, out_features: int, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, **factory), requires_grad=False
        )
        self.gemm: Gemm = PackedLinear()

    def forward(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        """`decode`: the rows are a decode step's (`gemm.PackedLinear`)."""
        return self.gemm(x, self.weight, decode)

    @property
    def product_weight(self) -> torch.Tensor:
        """The weight this module's `gemm` multiplies by."""
        return self.weight


def fuse_rows(*linears: Linear) -> torch.Tensor:
    """One ``[sum of out_features, in_features]`` matrix of the weights of `linears`.

    Each Linear's weight becomes a view of its rows, so a loader that copies
    into the named weights (HF names) fills the fused matrix too; one matmul
    then replaces several. Call again after a move that builds new tensors.
    """
    fused = torch.cat([linear.weight.detach() for linear in linears])
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight.data = fused[row : row + rows]
        row += rows
    return fused


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim, **factory), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, scaled in the input dtype (as HF does)."""

    def __init__(self, size: int, eps: float, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, **factory), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # HF's ops and roundings, in place where the temporary is ours (half the passes)
        x32 = x.float()
        scale = x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
        y = (x32 * scale).to(x.dtype)
        return y.mul_(self.weight) if y.dtype == self.weight.dtype else self.weight * y


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``, gate and up as one matmul."""

    def __init__(self, hidden: int, intermediate: int, **factory: Any) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, **factory)
        self.up_proj = Linear(hidden, intermediate, **factory)
        self.down_proj = Linear(intermediate, hidden, **factory)
        self.intermediate = intermediate
        self.gemm: Gemm = PackedLinear()
        self.pack()

    def pack(self) -> None:
        self.gate_up = fuse_rows(self.gate_proj, self.up_proj)

    @property
    def product_weight(self) -> torch.Tensor:
        """The weight this module's `gemm` multiplies by (gate and up, fused)."""
        return self.gate_up

    def forward(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        gate, up = self.gemm(x, self.gate_up, decode).split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up), decode)
