"""How close two results are, as `penelope verify` judges them: NaN always fails."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b|; NaN when either side holds a NaN anywhere (so the check fails)."""
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    d = (a.float() - b.float()).abs()
    return math.nan if bool(torch.isnan(d).any()) else float(d.max())


def worst(values: Iterable[float]) -> float:
    """The largest value, NaN if any is NaN (Python's `max` keeps or drops a NaN by position)."""
    out = 0.0
    for v in values:
        if math.isnan(v):
            return math.nan
        out = max(out, v)
    return out


def passes(diff: float, tolerance: float) -> bool:
    return not math.isnan(diff) and diff <= tolerance
