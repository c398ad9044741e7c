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


# The bound a path that rounds activations to 16 bits is held to instead of `passes`: a
# bfloat16 or float16 model everywhere, an int8- or int4-weight model in its decode rows (their
# inputs go to the kernel as bfloat16). Attention over a full prefill and over a fused
# pass's pieces differ in the last float32 bits (each kernel's own reduction order), and a
# 16-bit rounding can turn that into one bfloat16 step, which later layers carry on: the
# logits are close, not equal (docs/results.md, "Weights as CPU users run them").
HALF_TOP1 = 0.99  # the share of rows whose argmax agrees with the reference's, at least
HALF_KL = 0.01  # the largest KL(reference || ours) of any row, in nats, at most


def verdict(exact: bool, diff: float, tolerance: float, agree: int, rows: int, kl: float) -> dict:
    """One check's figures and its ok: within `tolerance` when `exact`, else within the
    stated bound (`HALF_TOP1`, `HALF_KL`); a NaN fails either way."""
    top1 = agree / rows if rows else 1.0
    out: dict = {"max_abs_diff": diff, "top1": top1, "max_kl": kl}
    if exact:
        return out | {"ok": passes(diff, tolerance)}
    bound = {"top1_at_least": HALF_TOP1, "kl_at_most": HALF_KL}
    ok = not math.isnan(diff) and top1 >= HALF_TOP1 and passes(kl, HALF_KL)
    return out | {"bound": bound, "ok": ok}


def agreement(fused: torch.Tensor, full: torch.Tensor) -> tuple[int, int, float]:
    """Over the rows of two ``[rows, vocab]`` logits: (rows whose argmax agree, rows, the
    largest KL(full || fused) in nats); NaN KL when either side holds a NaN."""
    if fused.shape != full.shape:
        return 0, int(full.shape[0]) if full.dim() else 0, math.nan
    if fused.numel() == 0:
        return 0, 0, 0.0
    a, b = fused.float(), full.float()
    agree = int((a.argmax(-1) == b.argmax(-1)).sum())
    log_p, log_q = torch.log_softmax(b, -1), torch.log_softmax(a, -1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    worst_kl = math.nan if bool(torch.isnan(kl).any()) else float(kl.max().clamp_min(0.0))
    return agree, int(b.shape[0]), worst_kl
