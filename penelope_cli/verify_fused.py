"""The fused check of `penelope verify`: holes recomputed in one forward equal a full prefill.

Each case draws a session (a shared prefix, private history, new tokens) and a
pattern of holes in the cached history: several holes, holes on and off page
boundaries, a hole right after the shared prefix, or the whole private history
gone. The full prefill writes every position's KV into pool A, attending with
the reference backend (`sdpa`). The fused path starts pool B from A's KV on a
shuffled page table, fills every hole with NaN, then recomputes the holes and
the new tokens in one forward (or several position-ordered chunks) with the
backend under test. Logits of the new tokens and the KV of every position must
match; a NaN anywhere fails.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from penelope_cli.closeness import HALF_KL, agreement, max_abs_diff, passes, verdict, worst
from penelope_engine.model.backends import resolve_backend
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import step_inputs, unwritten_tails
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.kv_pool import DTYPES, KVPool
from penelope_engine.util import cdiv


@dataclass(frozen=True)
class Case:
    tokens: np.ndarray
    holes: np.ndarray  # bool per cached position: KV missing
    num_new: int
    chunks: int


def draw_case(
    rng: np.random.Generator,
    vocab: int,
    page_size: int,
    index: int,
    text: np.ndarray | None = None,
) -> Case:
    """A session and its holes; its tokens drawn at random from the vocabulary, or a window
    of `text` (token ids of real text, whose logits are as peaked as a served prompt's)."""
    prefix = int(rng.integers(page_size, 6 * page_size))
    private = int(rng.integers(2 * page_size, 24 * page_size))
    num_new = int(rng.integers(1, 3 * page_size))
    n = prefix + private + num_new
    holes = np.zeros(prefix + private, dtype=bool)
    kind = index % 4
    if kind == 0:  # several holes anywhere in the private history, any alignment
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(prefix, prefix + private))
            holes[a : a + int(rng.integers(1, 3 * page_size))] = True
    elif kind == 1:  # page-aligned holes
        pages = np.arange(prefix // page_size + 1, (prefix + private) // page_size)
        for p in rng.choice(pages, size=min(len(pages), 3), replace=False) if len(pages) else []:
            holes[p * page_size : (p + 1) * page_size] = True
    elif kind == 2:  # a hole right after the shared prefix
        holes[prefix : prefix + int(rng.integers(1, private))] = True
    else:  # the whole private history gone
        holes[prefix:] = True
    if text is None:
        tokens = rng.integers(0, vocab, size=n)
    else:
        if len(text) < n:
            raise ValueError(f"the text has {len(text)} tokens; a case needs up to {n}")
        start = int(rng.integers(0, len(text) - n + 1))
        tokens = text[start : start + n]
    return Case(tokens, holes, num_new, chunks=1 + index % 3)


def _seq(tokens: np.ndarray, table: np.ndarray) -> Sequence:
    seq = Sequence(GenerateRequest("verify", (0,)), np.empty(0, np.uint64), tokens.tolist())
    seq.page_table = table.astype(np.int32)
    return seq


def _forward(
    lm: LoadedModel,
    pool: KVPool,
    seq: Sequence,
    positions: np.ndarray,
    chunks: int,
    first: int,
    attention: str,
) -> torch.Tensor:
    """Logits of the queries at positions >= `first`, computing `positions` in `chunks`
    position-ordered passes (every pass writes the KV of its positions)."""
    rows = []
    seq.todo = positions  # what the passes compute, as the scheduler marks it
    for part in np.array_split(positions, chunks):
        if len(part) == 0:
            continue
        item = BatchItem(seq, part, True)
        ids, meta = step_inputs([item], pool.page_size, pool.device, attention)
        if attention == "flex":  # as `ModelRunner.run` does: flex reads whole pages
            pool.zero_slots(torch.from_numpy(unwritten_tails([item], pool.page_size)))
        wanted = torch.from_numpy(np.flatnonzero(part >= first)).to(pool.device)
        meta = replace(meta, logits_indices=wanted)
        rows.append(lm.model(ids, meta, pool))
    return torch.cat(rows)


def run_case(
    lm: LoadedModel,
    case: Case,
    page_size: int,
    rng: np.random.Generator,
    dtype: torch.dtype,
    device: str,
    attention: str = "sdpa",
) -> tuple[float, tuple[int, int, float]]:
    """max |fused - full| over the new tokens' logits and every position's K and V; NaN if
    either side holds a NaN (a hole the fused pass left unfilled reads NaN); and the new
    tokens' `agreement`. The fused pass attends with `attention` (resolved), the full
    prefill with the reference (`sdpa`)."""
    n = len(case.tokens)
    pages = cdiv(n, page_size)
    pool_a = KVPool(lm.config, pages, page_size, dtype, device)
    pool_b = KVPool(lm.config, pages, page_size, dtype, device)
    table_a = np.arange(pages)
    table_b = rng.permutation(pages)
    cached = n - case.num_new
    full = _forward(lm, pool_a, _seq(case.tokens, table_a), np.arange(n), 1, cached, "sdpa")
    slots_a = torch.from_numpy(
        table_a[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    ).to(pool_a.device)
    slots_b = torch.from_numpy(
        table_b[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    ).to(pool_b.device)
    missing = np.concatenate([case.holes, np.ones(case.num_new, dtype=bool)])
    keep = torch.from_numpy(~missing).to(pool_b.device)
    for layer in range(lm.config.num_layers):
        for a, b in ((pool_a.k[layer], pool_b.k[layer]), (pool_a.v[layer], pool_b.v[layer])):
            b.fill_(float("nan"))
            b[slots_b[keep]] = a[slots_a[keep]]
    queries = np.flatnonzero(missing)
    fused = _forward(
        lm, pool_b, _seq(case.tokens, table_b), queries, case.chunks, cached, attention
    )
    diffs = [max_abs_diff(fused, full)]
    for layer in range(lm.config.num_layers):
        diffs.append(max_abs_diff(pool_b.k[layer][slots_b], pool_a.k[layer][slots_a]))
        diffs.append(max_abs_diff(pool_b.v[layer][slots_b], pool_a.v[layer][slots_a]))
    return worst(diffs), agreement(fused, full)


def run_fused(
    lm: LoadedModel,
    cases: int,
    page_size: int,
    seed: int,
    dtype: str,
    device: str,
    tol: float,
    attention: str = "auto",
    text: np.ndarray | None = None,
) -> dict:
    """`cases` drawn cases (`draw_case`; over `text`'s token ids when given)."""
    rng = np.random.default_rng(seed)
    backend = resolve_backend(attention, device)
    diffs, agree, rows, kls = [], 0, 0, list[float]()
    for i in range(cases):
        case = draw_case(rng, lm.config.vocab_size, page_size, i, text)
        diff, (case_agree, case_rows, kl) = run_case(
            lm, case, page_size, rng, DTYPES[dtype], device, backend
        )
        diffs.append(diff)
        agree, rows, kls = agree + case_agree, rows + case_rows, [*kls, kl]
    # A float32 model recomputes to `tol` whatever its weights (int8 and int4 prefill in float32)
    exact = DTYPES[dtype] == torch.float32
    failed = (
        sum(not passes(d, tol) for d in diffs)
        if exact
        else sum(not passes(kl, HALF_KL) for kl in kls)
    )
    judged = verdict(exact, worst(diffs), tol, agree, rows, worst(kls))
    return {"cases": cases, "failed_cases": failed} | judged
