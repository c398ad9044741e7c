"""Attention of a prefill chunk that starts its sequence: no mask at all.

A chunk of Q queries at positions ``0 .. Q-1`` over keys ``0 .. Q-1``
(a fresh prompt, or the first chunk of one) is exactly SDPA's own causal
kernel (queries and keys aligned, so its top-left causal mask is the
``key_pos <= query_pos`` rule), with `enable_gqa` for grouped KV heads: no
mask is built or read, and the kernel skips the blocks above the diagonal.

A chunk with cached keys before it takes the masked path. Splitting it into
an unmasked prefix block and a causal diagonal block merged by their
log-sum-exps was tried: faster, but its rounding differs from the masked
path that fused recompute takes, by up to 6e-4 on SmolLM2's logits, past
`penelope verify`'s 1e-4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from penelope_engine.model.attention import AttentionMetadata, GatherScratch, KeyPages
from penelope_engine.model.widen import widens


@dataclass(frozen=True)
class CausalGroup:
    """One sequence's first chunk: rows ``[start, end)`` of the flat batch."""

    start: int
    end: int
    keys: KeyPages  # the pages of positions 0..Q-1


def causal_group(meta: AttentionMetadata, s: int, page_size: int) -> CausalGroup | None:
    """The chunk of sequence `s` as a `CausalGroup`, or None unless its queries are
    exactly the positions ``0 .. context_len-1``."""
    start, end = meta.query_starts[s], meta.query_starts[s + 1]
    ctx = meta.context_lens[s]
    if ctx != end - start:
        return None
    if not np.array_equal(meta.positions_on_host()[start:end], np.arange(ctx)):
        return None
    return CausalGroup(start, end, KeyPages.of([meta.page_tables[s]], [ctx], page_size))


def attend_causal(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    group: CausalGroup,
    scratch: GatherScratch | None = None,
) -> torch.Tensor:
    """Rows ``[start, end)`` of `q` ``[T, heads, D]`` attended; returns ``[Q, heads, D]``.
    Keys and values are gathered into `scratch` when given (`GatherScratch`)."""
    qg = q[group.start : group.end].transpose(0, 1)[None]  # [1, H, Q, D]
    kg = group.keys.gather(k_cache, scratch, "k").transpose(1, 2)  # [1, Hkv, Q, D]
    vg = group.keys.gather(v_cache, scratch, "v").transpose(1, 2)
    if widens(q):  # bf16 / fp16 that this CPU only emulates: float32 (`widen`)
        qg, kg, vg = qg.float(), kg.float(), vg.float()
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)
    return out[0].transpose(0, 1).to(q.dtype)
