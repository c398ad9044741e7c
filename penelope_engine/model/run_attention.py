"""Attention of one sequence's queries over its cached keys, a piece of a run at a time.

A returning turn's queries are runs of consecutive positions: the holes it
recomputes, then its new tokens; a later prefill chunk is one run after its
cached keys. A query at position p sees keys ``0 .. p``, so a piece of a run
whose last position is e needs keys ``0 .. e`` only, never the rest of the
context. The group splits its queries into pieces (each run cut every
`PIECE_ROWS` rows, neighbours merged where one call costs less than two;
`pieces_of`), gathers the sequence's keys once, and attends each piece over
its own key prefix with its own mask, ``[ratio * rows, e + 1]``:

    keys   0 ............................................ ctx
    hole   |==== visible ====\\  (piece 1: keys up to its end)
    hole   |======= visible ======\\  (piece 2)
    new    |========================= visible ==========\\  (last piece)

Against one masked call over the whole ``[Q, ctx]`` rectangle this skips the
keys no query of a piece can see (a 2K hole at position 2K of a 6K context:
about half the work) and builds masks that small. The values are the same:
each query's visible keys, in the same order, and the keys a piece drops
were masked to weight zero (`tests/cpu/penelope_engine/model/
test_model_run_attention.py` holds it against the whole-rectangle path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from penelope_engine.model.attention import AttentionMetadata, GatherScratch, KeyPages

PIECE_ROWS = 256  # rows of one piece: longer pieces see more keys their first rows cannot
CALL_COST = 4096  # one SDPA call's overhead, in query-row x key products (~0.1 ms here)


@dataclass(frozen=True)
class MaskFolder:
    """Turns a boolean ``[G, 1, Q, C]`` visibility into the additive ``[G, 1, ratio * Q, C]``
    mask of the folded query heads, in `dtype`."""

    ratio: int
    dtype: torch.dtype

    def __call__(self, visible: torch.Tensor) -> torch.Tensor:
        num_seqs, _, num_queries, width = visible.shape
        folded = visible[:, :, None].expand(num_seqs, 1, self.ratio, num_queries, width)
        folded = folded.reshape(num_seqs, 1, self.ratio * num_queries, width)
        mask = torch.zeros(folded.shape, dtype=self.dtype, device=folded.device)
        return mask.masked_fill_(~folded, float("-inf"))


@dataclass(frozen=True)
class Piece:
    """Query rows ``[lo, hi)`` of the group, over keys ``0 .. keys-1``."""

    lo: int
    hi: int
    keys: int
    mask: torch.Tensor  # [1, 1, ratio * (hi - lo), keys] additive, in the compute dtype


@dataclass(frozen=True)
class RunsGroup:
    """One sequence's queries: rows ``[start, end)`` of the flat batch, in pieces."""

    start: int
    end: int
    keys: KeyPages  # the pages of positions 0 .. ctx-1, gathered once for every piece
    pieces: tuple[Piece, ...]


def pieces_of(positions: np.ndarray, max_rows: int = PIECE_ROWS) -> list[tuple[int, int, int]]:
    """``(lo, hi, keys)`` per piece of queries at `positions`: runs of consecutive positions
    cut every `max_rows` rows, then neighbours merged while one call costs no more than two
    (cost: rows x keys + `CALL_COST`)."""
    if len(positions) == 0:
        return []
    breaks = (np.flatnonzero(np.diff(positions) != 1) + 1).tolist()
    bounds = [0, *breaks, len(positions)]
    cut = [
        (lo, min(b, lo + max_rows))
        for a, b in zip(bounds[:-1], bounds[1:])
        for lo in range(a, b, max_rows)
    ]
    pieces = [(lo, hi, int(positions[lo:hi].max()) + 1) for lo, hi in cut]
    merged = [pieces[0]]
    for lo, hi, keys in pieces[1:]:
        plo, phi, pkeys = merged[-1]
        apart = (phi - plo) * pkeys + (hi - lo) * keys + 2 * CALL_COST
        together = (hi - plo) * max(pkeys, keys) + CALL_COST
        if together <= apart and hi - plo <= max_rows:
            merged[-1] = (plo, hi, max(pkeys, keys))
        else:
            merged.append((lo, hi, keys))
    return merged


def runs_group(meta: AttentionMetadata, s: int, page_size: int, fold: MaskFolder) -> RunsGroup:
    """Sequence `s`'s queries as a `RunsGroup` (masks in `fold`'s dtype)."""
    start, end = meta.query_starts[s], meta.query_starts[s + 1]
    positions = meta.positions[start:end]
    host = meta.positions_on_host()[start:end]
    pieces = []
    for lo, hi, width in pieces_of(host):
        key_pos = torch.arange(width, device=positions.device)
        visible = key_pos[None, :] <= positions[lo:hi, None]
        pieces.append(Piece(lo, hi, width, fold(visible.view(1, 1, hi - lo, width))))
    keys = KeyPages.of([meta.page_tables[s]], [meta.context_lens[s]], page_size)
    return RunsGroup(start, end, keys, tuple(pieces))


def attend_runs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    group: RunsGroup,
    scratch: GatherScratch | None = None,
) -> torch.Tensor:
    """Rows ``[start, end)`` of `q` ``[T, heads, D]`` attended; returns ``[Q, heads, D]``.
    Query head h uses KV head ``h // ratio``; each piece folds its heads into its rows."""
    heads, head_dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[1]
    ratio = heads // kv_heads
    kg = group.keys.gather(k_cache, scratch, "k").transpose(1, 2)  # [1, Hkv, C, D]
    vg = group.keys.gather(v_cache, scratch, "v").transpose(1, 2)
    wide = group.pieces[0].mask.dtype  # the plan's compute dtype for this group (`widen`)
    if wide != q.dtype:
        kg, vg = kg.to(wide), vg.to(wide)
    out = torch.empty((group.end - group.start, heads, head_dim), dtype=q.dtype, device=q.device)
    for piece in group.pieces:
        rows = piece.hi - piece.lo
        # [rows, H, D] -> [rows, Hkv, R, D] -> [1, Hkv, R * rows, D]
        qp = q[group.start + piece.lo : group.start + piece.hi].view(
            rows, kv_heads, ratio, head_dim
        )
        qp = qp.permute(1, 2, 0, 3).reshape(1, kv_heads, ratio * rows, head_dim).to(wide)
        att = F.scaled_dot_product_attention(
            qp, kg[:, :, : piece.keys], vg[:, :, : piece.keys], attn_mask=piece.mask
        )
        att = att.view(kv_heads, ratio, rows, head_dim).permute(2, 0, 1, 3)
        out[piece.lo : piece.hi] = att.reshape(rows, heads, head_dim).to(q.dtype)
    return out
